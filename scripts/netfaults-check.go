//go:build ignore

// netfaults-check checks a `confclip run` on rollout workers against a
// local run of the same config and seed (scripts/test-netfaults.sh): every
// step there, with every group whole (each prompt's samples 0..G-1, all
// from one worker); each step's workers.json accounts for every group
// (its groups, the sum of its workers' groups and the records' own count
// per worker agree) and for every retry (the retries equal the workers'
// failures); the last adapter's sha256 is the local run's. It prints one
// line: the steps completed, the records lost, the retries and failures
// by worker, the steps a worker was left out of, and whether the adapters
// are equal; it exits 1 when any check fails.
//
//	go run scripts/netfaults-check.go -run DIR -local DIR -steps 4 -prompts 12 -group 8 [-names A,B,C]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/confclip/confclip/dataset"
)

type record struct {
	PromptID string `json:"prompt_id"`
	Sample   int    `json:"sample"`
	Worker   string `json:"worker"`
}

type report struct {
	AdapterSHA256 string `json:"adapter_sha256"`
	Groups        int    `json:"groups"`
	Retries       int    `json:"retries"`
	Workers       []struct {
		Endpoint string `json:"endpoint"`
		Groups   int    `json:"groups"`
		Failures int    `json:"failures"`
		Refused  string `json:"refused"`
	} `json:"workers"`
}

// checker gathers the checks' failures and the run's counts.
type checker struct {
	prompts, group int
	names          []string
	bad            []string
	completed      int
	lost, retries  int
	failures       map[string]int
	order          []string            // the workers' names, as workers.json lists them
	leftOut        map[string][]string // the steps each worker was left out of
}

func (c *checker) fail(format string, a ...any) { c.bad = append(c.bad, fmt.Sprintf(format, a...)) }

func (c *checker) nameOf(i int, endpoint string) string {
	if i < len(c.names) && c.names[i] != "" {
		return c.names[i]
	}
	return endpoint
}

func main() {
	run := flag.String("run", "", "the run on workers (its --out)")
	local := flag.String("local", "", "the local run of the same config (its --out)")
	steps := flag.Int("steps", 4, "steps of the run")
	prompts := flag.Int("prompts", 0, "prompts per step")
	group := flag.Int("group", 0, "samples per prompt")
	names := flag.String("names", "", "the workers' names, in the order of the endpoints (A,B,C)")
	flag.Parse()
	if *run == "" || *local == "" || *prompts < 1 || *group < 1 {
		fmt.Fprintln(os.Stderr, "usage: netfaults-check -run DIR -local DIR -steps N -prompts P -group G [-names A,B,C]")
		os.Exit(2)
	}
	c := &checker{prompts: *prompts, group: *group, names: strings.Split(*names, ","),
		failures: map[string]int{}, leftOut: map[string][]string{}}
	for s := 1; s <= *steps; s++ {
		c.step(s, filepath.Join(*run, "steps", fmt.Sprintf("%04d", s)))
	}
	last := filepath.Join("checkpoints", fmt.Sprintf("step-%04d", *steps), "adapter.gguf")
	a, errA := dataset.FileSHA256(filepath.Join(*run, last))
	l, errL := dataset.FileSHA256(filepath.Join(*local, last))
	equal := "yes"
	switch {
	case errA != nil || errL != nil:
		c.fail("the last adapters: %v %v", errA, errL)
		equal = "no"
	case a != l:
		c.fail("the last adapter's sha256 is %s, the local run's %s", a, l)
		equal = "no"
	}
	var fs, lo []string
	for _, n := range c.order {
		fs = append(fs, fmt.Sprintf("%s %d", n, c.failures[n]))
		if len(c.leftOut[n]) > 0 {
			lo = append(lo, fmt.Sprintf("%s in step %s", n, strings.Join(c.leftOut[n], ",")))
		}
	}
	if len(lo) == 0 {
		lo = []string{"none"}
	}
	fmt.Printf("steps %d/%d; records lost %d; retries %d (failures: %s); left out: %s; adapter sha256 equal: %s (%.12s)\n",
		c.completed, *steps, c.lost, c.retries, strings.Join(fs, ", "), strings.Join(lo, "; "), equal, a)
	for _, m := range c.bad {
		fmt.Fprintln(os.Stderr, "netfaults-check:", m)
	}
	if len(c.bad) > 0 {
		os.Exit(1)
	}
}

// step checks step s's records and workers.json in dir.
func (c *checker) step(s int, dir string) {
	recs, err := readRecords(filepath.Join(dir, "rollouts.jsonl"))
	if err != nil {
		c.fail("step %d: %v", s, err)
		c.lost += c.prompts * c.group
		return
	}
	// Every group whole, from one worker.
	samples := map[string]map[int]bool{}
	workerOf := map[string]string{}
	groupsBy := map[string]int{}
	for _, r := range recs {
		if samples[r.PromptID] == nil {
			samples[r.PromptID] = map[int]bool{}
		}
		if samples[r.PromptID][r.Sample] {
			c.fail("step %d: prompt %s sample %d twice", s, r.PromptID, r.Sample)
		}
		samples[r.PromptID][r.Sample] = true
		if w, ok := workerOf[r.PromptID]; !ok {
			workerOf[r.PromptID] = r.Worker
			groupsBy[r.Worker]++
		} else if w != r.Worker {
			c.fail("step %d: prompt %s has samples from %s and %s", s, r.PromptID, w, r.Worker)
		}
	}
	whole := 0
	for id, ss := range samples {
		ok := len(ss) == c.group
		for k := range c.group {
			ok = ok && ss[k]
		}
		if !ok {
			c.fail("step %d: prompt %s has %d of %d samples", s, id, len(ss), c.group)
			continue
		}
		whole++
	}
	c.lost += c.prompts*c.group - whole*c.group
	if len(samples) != c.prompts {
		c.fail("step %d: %d prompts, want %d", s, len(samples), c.prompts)
	}
	if c.workersJSON(s, dir, groupsBy) && whole == c.prompts && len(samples) == c.prompts {
		c.completed++
	}
}

// workersJSON checks that step s's workers.json accounts for every group
// (groupsBy: the records' count per worker) and every retry.
func (c *checker) workersJSON(s int, dir string, groupsBy map[string]int) bool {
	var rep report
	b, err := os.ReadFile(filepath.Join(dir, "workers.json"))
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		c.fail("step %d: workers.json: %v", s, err)
		return false
	}
	ok := true
	sum, fails := 0, 0
	for i, w := range rep.Workers {
		n := c.nameOf(i, w.Endpoint)
		if s == 1 {
			c.order = append(c.order, n)
		}
		sum += w.Groups
		fails += w.Failures
		c.failures[n] += w.Failures
		if w.Groups != groupsBy[w.Endpoint] {
			c.fail("step %d: workers.json gives %s %d groups, its records %d", s, n, w.Groups, groupsBy[w.Endpoint])
			ok = false
		}
		if w.Refused != "" {
			c.leftOut[n] = append(c.leftOut[n], fmt.Sprint(s))
		}
	}
	if rep.Groups != c.prompts || sum != c.prompts {
		c.fail("step %d: workers.json counts %d groups (its workers %d), want %d", s, rep.Groups, sum, c.prompts)
		ok = false
	}
	if rep.Retries != fails {
		c.fail("step %d: workers.json counts %d retries and %d failures", s, rep.Retries, fails)
		ok = false
	}
	c.retries += rep.Retries
	return ok
}

func readRecords(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
