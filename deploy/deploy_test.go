// Package deploy holds the container builds and the Kubernetes and Slurm
// examples (docs/scale.md); its test checks their structure, since no
// cluster is at hand: the manifests parse, the Indexed Job's shard count
// agrees with every --shard-count, the merge joins what the shards write,
// volumes are mounted, and the container builds are multi-stage with a
// runtime stage that takes only the binary.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The parts of Kubernetes objects the check reads.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		CompletionMode        string `yaml:"completionMode"`
		Completions           *int   `yaml:"completions"`
		Parallelism           *int   `yaml:"parallelism"`
		BackoffLimitPerIndex  *int   `yaml:"backoffLimitPerIndex"`
		ActiveDeadlineSeconds *int   `yaml:"activeDeadlineSeconds"`
		Template              struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		AccessModes []string `yaml:"accessModes"`
	} `yaml:"spec"`
}

type podSpec struct {
	RestartPolicy  string      `yaml:"restartPolicy"`
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
	Volumes        []struct {
		Name                  string `yaml:"name"`
		PersistentVolumeClaim *struct {
			ClaimName string `yaml:"claimName"`
		} `yaml:"persistentVolumeClaim"`
	} `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

func (c container) script() string {
	return strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
}

// readObjects parses every document of a YAML file, strictly: an unknown
// structure is an error of the decoder, not silently skipped (KnownFields
// is off only because the check declares the fields it reads).
func readObjects(t *testing.T, path string) []object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []object
	for i := 1; ; i++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		var o object
		if err := node.Decode(&o); err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Fatalf("%s: document %d lacks apiVersion, kind or metadata.name", path, i)
		}
		out = append(out, o)
	}
}

var shardCountRe = regexp.MustCompile(`--shard-count[ =](\d+)`)

func TestKubernetesIndexedJob(t *testing.T) {
	objs := readObjects(t, "k8s/score-job.yaml")
	claims := map[string]bool{}
	var shards, merge *object
	for i := range objs {
		o := &objs[i]
		switch {
		case o.Kind == "PersistentVolumeClaim":
			claims[o.Metadata.Name] = true
			if len(o.Spec.AccessModes) != 1 || o.Spec.AccessModes[0] != "ReadWriteMany" {
				t.Errorf("claim %s: access modes %v: the shards on several nodes need ReadWriteMany", o.Metadata.Name, o.Spec.AccessModes)
			}
		case o.Kind == "Job" && o.Spec.CompletionMode == "Indexed":
			shards = o
		case o.Kind == "Job":
			merge = o
		default:
			t.Errorf("unexpected %s %s", o.Kind, o.Metadata.Name)
		}
	}
	if shards == nil || merge == nil {
		t.Fatal("want an Indexed Job for the shards and a Job for the merge")
	}
	for _, o := range []*object{shards, merge} {
		if o.APIVersion != "batch/v1" {
			t.Errorf("job %s: apiVersion %s", o.Metadata.Name, o.APIVersion)
		}
		checkPod(t, o.Metadata.Name, o.Spec.Template.Spec, claims)
	}
	n := shards.Spec.Completions
	if n == nil || *n < 1 || shards.Spec.Parallelism == nil || *shards.Spec.Parallelism > *n {
		t.Fatalf("indexed job: want completions >= 1 and parallelism <= completions (%s)", "deploy/k8s/score-job.yaml")
	}
	if shards.Spec.BackoffLimitPerIndex == nil {
		t.Error("indexed job: no backoffLimitPerIndex (a failed shard would fail them all)")
	}
	if rp := shards.Spec.Template.Spec.RestartPolicy; rp != "Never" {
		t.Errorf("indexed job: restartPolicy %q, want Never (backoffLimitPerIndex needs it)", rp)
	}
	script := shards.Spec.Template.Spec.Containers[0].script()
	counts := shardCountRe.FindAllStringSubmatch(script, -1)
	if len(counts) != 2 {
		t.Fatalf("indexed job: want --shard-count on rollout and score, found %d in %q", len(counts), script)
	}
	for _, c := range counts {
		if c[1] != strconv.Itoa(*n) {
			t.Errorf("indexed job: --shard-count %s but completions %d", c[1], *n)
		}
	}
	for _, want := range []string{"confclip rollout", "confclip score", "JOB_COMPLETION_INDEX", "rollouts-$K.jsonl", "summary-$K.json"} {
		if !strings.Contains(script, want) {
			t.Errorf("indexed job's script lacks %q", want)
		}
	}
	// The merge waits for n summaries and joins what the shards write.
	ms := merge.Spec.Template.Spec
	if len(ms.InitContainers) != 1 {
		t.Fatal("merge job: want an init container that waits for the shards")
	}
	wait := ms.InitContainers[0]
	found := false
	for _, e := range wait.Env {
		if e.Name == "SHARDS" {
			found = true
			if e.Value != strconv.Itoa(*n) {
				t.Errorf("merge job waits for SHARDS=%s summaries, the indexed job makes %d", e.Value, *n)
			}
		}
	}
	if !found || !strings.Contains(wait.script(), "summary-*.json") {
		t.Errorf("merge job's wait %q does not count the shards' summaries", wait.script())
	}
	mscript := ms.Containers[0].script()
	for _, want := range []string{"confclip merge rollouts", "rollouts-*.jsonl", "confclip merge scores", "summary-*.json"} {
		if !strings.Contains(mscript, want) {
			t.Errorf("merge job's script lacks %q", want)
		}
	}
	if merge.Spec.ActiveDeadlineSeconds == nil {
		t.Error("merge job: no activeDeadlineSeconds (it would wait for ever on a failed shard)")
	}
	if shards.Spec.Template.Spec.Containers[0].Image != ms.Containers[0].Image {
		t.Error("the shards and the merge run different images")
	}
}

// checkPod: every container mounts volumes the pod has, and every volume's
// claim is defined in the file.
func checkPod(t *testing.T, job string, p podSpec, claims map[string]bool) {
	t.Helper()
	if len(p.Containers) == 0 {
		t.Fatalf("job %s: no containers", job)
	}
	vols := map[string]bool{}
	for _, v := range p.Volumes {
		vols[v.Name] = true
		if v.PersistentVolumeClaim != nil && !claims[v.PersistentVolumeClaim.ClaimName] {
			t.Errorf("job %s: volume %s uses claim %q, not defined in the file", job, v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, c := range append(append([]container{}, p.InitContainers...), p.Containers...) {
		if c.Image == "" || len(c.Command) == 0 {
			t.Errorf("job %s container %s: no image or command", job, c.Name)
		}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				t.Errorf("job %s container %s mounts %q, which the pod does not have", job, c.Name, m.Name)
			}
		}
	}
}

func TestSlurmArray(t *testing.T) {
	b, err := os.ReadFile("slurm/score-array.sh")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	m := regexp.MustCompile(`(?m)^#SBATCH --array=(\d+)-(\d+)$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatal("no #SBATCH --array=LO-HI line")
	}
	lo, _ := strconv.Atoi(m[1])
	hi, _ := strconv.Atoi(m[2])
	if hi < lo {
		t.Fatalf("array %d-%d", lo, hi)
	}
	// The shards come from Slurm's variables; nothing in the script may
	// repeat the count by hand.
	if n := len(regexp.MustCompile(`(?m)^[^#].*--shard env`).FindAllString(s, -1)); n != 2 {
		t.Errorf("want --shard env on rollout and score, found %d", n)
	}
	if shardCountRe.MatchString(s) {
		t.Error("the script gives --shard-count; the array's size is the count")
	}
	for _, want := range []string{"--dependency=\"afterok:${SLURM_ARRAY_JOB_ID}\"", "merge rollouts", "merge scores", "summary-$K.json", "rollouts-$K.jsonl", "set -euo pipefail"} {
		if !strings.Contains(s, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
}

// TestDockerfiles: multi-stage builds whose last stage copies the binary
// from the build stage and nothing else from the source tree.
func TestDockerfiles(t *testing.T) {
	for _, path := range []string{"Dockerfile", "Dockerfile.cuda"} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		type stage struct {
			from   string
			copies []string
			runs   []string
		}
		var stages []stage
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			word, rest, _ := strings.Cut(line, " ")
			switch strings.ToUpper(word) {
			case "FROM":
				stages = append(stages, stage{from: rest})
			case "COPY":
				if len(stages) == 0 {
					t.Fatalf("%s: COPY before FROM", path)
				}
				stages[len(stages)-1].copies = append(stages[len(stages)-1].copies, rest)
			case "RUN":
				if len(stages) > 0 {
					stages[len(stages)-1].runs = append(stages[len(stages)-1].runs, rest)
				}
			}
		}
		f.Close()
		if len(stages) < 2 {
			t.Fatalf("%s: %d stages, want a build stage and a runtime stage", path, len(stages))
		}
		// A build stage installs cmake and runs make bin/confclip.
		build := false
		for _, s := range stages[:len(stages)-1] {
			runs := strings.Join(s.runs, "\n")
			build = build || strings.Contains(runs, "install") && strings.Contains(runs, "cmake") && strings.Contains(runs, "make ") && strings.Contains(runs, "bin/confclip")
		}
		if !build {
			t.Errorf("%s: no build stage installs cmake and runs make bin/confclip", path)
		}
		last := stages[len(stages)-1]
		if len(last.copies) != 2 || !strings.HasPrefix(last.copies[0], "--from=build ") || !strings.Contains(last.copies[0], "/bin/confclip ") ||
			last.copies[1] != "--from=build /src/LICENSE /src/THIRD_PARTY_NOTICES /usr/share/doc/confclip/" {
			t.Errorf("%s: the runtime stage copies %q, want the binary and the licences (LICENSE, THIRD_PARTY_NOTICES) from the build stage only", path, last.copies)
		}
		if strings.Contains(strings.Join(last.runs, " "), "cmake") || strings.Contains(last.from, "golang") || strings.Contains(last.from, "devel") {
			t.Errorf("%s: the runtime stage (FROM %s) carries build tools", path, last.from)
		}
	}
}
