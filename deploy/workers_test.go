package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestKubernetesRunWorkers: deploy/k8s/run-workers.yaml's Job runs `run`
// with one --endpoint per worker of the StatefulSet, each by its stable
// name through the headless Service, on the port the workers serve; the
// workers take uploads (--adapter-dir on a mounted volume) and are ready
// when /health answers; the volumes are mounted and the claim is the one
// score-job.yaml defines.
func TestKubernetesRunWorkers(t *testing.T) {
	objs := readObjects(t, "k8s/run-workers.yaml")
	claims := map[string]bool{}
	for _, o := range readObjects(t, "k8s/score-job.yaml") {
		if o.Kind == "PersistentVolumeClaim" {
			claims[o.Metadata.Name] = true
		}
	}
	b, err := os.ReadFile("k8s/run-workers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var extra []extraObject
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	for {
		var o extraObject
		if dec.Decode(&o) != nil {
			break
		}
		extra = append(extra, o)
	}
	if len(extra) != len(objs) {
		t.Fatalf("%d documents, %d decoded", len(extra), len(objs))
	}
	var svcName, stsName, job string
	var port, replicas int
	var endpoints []string
	for i, o := range objs {
		switch o.Kind {
		case "Service":
			svcName = o.Metadata.Name
			if extra[i].Spec.ClusterIP != "None" || len(extra[i].Spec.Ports) != 1 {
				t.Errorf("service %s: clusterIP %q, ports %v: want a headless service of one port, so that each worker has a name", svcName, extra[i].Spec.ClusterIP, extra[i].Spec.Ports)
			} else {
				port = extra[i].Spec.Ports[0].Port
			}
		case "StatefulSet":
			stsName, replicas = o.Metadata.Name, extra[i].Spec.Replicas
			if extra[i].Spec.ServiceName == "" {
				t.Errorf("statefulset %s: no serviceName", stsName)
			}
			checkPod(t, stsName, o.Spec.Template.Spec, claims)
			c := o.Spec.Template.Spec.Containers[0]
			s := c.script()
			if !strings.Contains(s, "serve") || !strings.Contains(s, "--adapter-dir") || !strings.Contains(s, "0.0.0.0") {
				t.Errorf("statefulset %s: the worker runs %q: want serve on 0.0.0.0 with --adapter-dir", stsName, s)
			}
			m := regexp.MustCompile(`--adapter-dir (\S+)`).FindStringSubmatch(s)
			if m == nil || !slices.ContainsFunc(c.VolumeMounts, func(v struct {
				Name      string `yaml:"name"`
				MountPath string `yaml:"mountPath"`
			}) bool {
				return v.MountPath == m[1]
			}) {
				t.Errorf("statefulset %s: the adapter folder is not a mounted volume", stsName)
			}
			if p := extra[i].Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet; p.Path != "/health" || !strings.Contains(s, "--port "+strconv.Itoa(p.Port)) {
				t.Errorf("statefulset %s: readiness probe %+v, want /health on the served port", stsName, p)
			}
		case "Job":
			job = o.Metadata.Name
			checkPod(t, job, o.Spec.Template.Spec, claims)
			s := o.Spec.Template.Spec.Containers[0].script()
			if !strings.Contains(s, "confclip run ") || !strings.Contains(s, "--resume") {
				t.Errorf("job %s runs %q: want confclip run, resuming a retried pod", job, s)
			}
			for _, m := range regexp.MustCompile(`--endpoint (\S+)`).FindAllStringSubmatch(s, -1) {
				endpoints = append(endpoints, m[1])
			}
		}
	}
	if svcName == "" || stsName == "" || job == "" {
		t.Fatalf("want a Service, a StatefulSet and a Job; found %q %q %q", svcName, stsName, job)
	}
	var want []string
	for k := range replicas {
		want = append(want, fmt.Sprintf("http://%s-%d.%s:%d/v1", stsName, k, svcName, port))
	}
	if !slices.Equal(endpoints, want) {
		t.Errorf("the run's endpoints %v, want one per replica: %v", endpoints, want)
	}
}

// extraObject is the fields of run-workers.yaml the common check does not
// read.
type extraObject struct {
	Spec struct {
		ClusterIP   string `yaml:"clusterIP"`
		Replicas    int    `yaml:"replicas"`
		ServiceName string `yaml:"serviceName"`
		Ports       []struct {
			Port int `yaml:"port"`
		} `yaml:"ports"`
		Template struct {
			Spec struct {
				Containers []struct {
					ReadinessProbe struct {
						HTTPGet struct {
							Path string `yaml:"path"`
							Port int    `yaml:"port"`
						} `yaml:"httpGet"`
					} `yaml:"readinessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestSlurmRunWorkers: deploy/slurm/run-workers.sh is valid bash, starts
// the workers as job steps (srun) with --adapter-dir, one --endpoint each,
// and runs `run` against them, resuming when the run folder has a
// checkpoint.
func TestSlurmRunWorkers(t *testing.T) {
	b, err := os.ReadFile("slurm/run-workers.sh")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if out, err := exec.Command("bash", "-n", "slurm/run-workers.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	n := regexp.MustCompile(`(?m)^#SBATCH --ntasks=(\d+)$`).FindStringSubmatch(s)
	if n == nil {
		t.Fatal("no #SBATCH --ntasks=N line")
	}
	if k, _ := strconv.Atoi(n[1]); k < 2 {
		t.Errorf("--ntasks=%d: want run and at least one worker", k)
	}
	for _, want := range []string{"set -euo pipefail", "srun ", "serve -m", "--adapter-dir", `endpoints+=(--endpoint "http://$node:$port/v1")`,
		`"$CONFCLIP" run "$CONFIG"`, `"${endpoints[@]}"`, "--resume", "WORKERS=$((SLURM_NTASKS - 1))", "trap "} {
		if !strings.Contains(s, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
}
