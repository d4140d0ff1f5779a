//go:build ignore

// trl-compare reads what make bench-trl's two runs left, confclip's run
// folder and TRL's JSON lines (scripts/trl_grpo.py), each with the peak RSS
// and wall seconds /usr/bin/time measured for its whole process, and prints
// the comparison: seconds per step (generation and training apart), peak
// RSS, held-out accuracy before and after, and McNemar's paired test of the
// two tools' final adapters on the same held-out prompts.
//
//	go run scripts/trl-compare.go RUN_DIR RUN.time TRL.jsonl TRL.time TRL-verdicts.jsonl [DOC.md]
//
// With DOC.md (make bench-trl: docs/speed.md) the table, the machine and
// both sides' versions replace what lies between the file's
// "<!-- trl table -->" and "<!-- end trl table -->" lines.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/reporting"
	"github.com/confclip/confclip/testkit/testutil"
)

func main() {
	if len(os.Args) != 6 && len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/trl-compare.go RUN_DIR RUN.time TRL.jsonl TRL.time TRL-verdicts.jsonl [DOC.md]")
		os.Exit(2)
	}
	var buf bytes.Buffer
	err := run(io.MultiWriter(os.Stdout, &buf), os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5])
	if err == nil && len(os.Args) == 7 {
		err = testutil.RewriteMarked(os.Args[6], "trl table", buf.String())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "trl-compare:", err)
		os.Exit(1)
	}
}

// side is one tool's measurements.
type side struct {
	steps               int
	sGen, sTrain, sStep float64 // mean seconds per step
	rssMiB, wallS       float64 // the whole process's (/usr/bin/time)
	accBefore, accAfter float64
	after               map[string]bool
	version             string
}

// readTime reads /usr/bin/time -f '%M %e': peak RSS in KiB, wall seconds.
func readTime(path string) (rssMiB, wallS float64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("%s: want \"KIB SECONDS\" on its last line, got %q", path, lines[len(lines)-1])
	}
	kib, err1 := strconv.ParseFloat(f[0], 64)
	s, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%s: %q is not \"KIB SECONDS\"", path, lines[len(lines)-1])
	}
	return kib / 1024, s, nil
}

func ours(dir, timeFile string) (side, error) {
	var s side
	rows, err := metrics.Read(dir + "/metrics.jsonl")
	if err != nil {
		return s, err
	}
	last := 0
	for _, r := range rows {
		if r.Step == 0 {
			if r.EvalAccuracy != nil {
				s.accBefore = *r.EvalAccuracy
			}
			continue
		}
		s.steps++
		s.sGen += r.RolloutS
		s.sTrain += r.TrainS
		s.sStep += r.StepS
		last = r.Step
		if r.EvalAccuracy != nil {
			s.accAfter = *r.EvalAccuracy
		}
	}
	if s.steps == 0 {
		return s, fmt.Errorf("%s: no training step in metrics.jsonl", dir)
	}
	n := float64(s.steps)
	s.sGen, s.sTrain, s.sStep = s.sGen/n, s.sTrain/n, s.sStep/n
	if s.after, err = pipeline.EvalVerdicts(dir, last); err != nil {
		return s, err
	}
	s.rssMiB, s.wallS, err = readTime(timeFile)
	return s, err
}

func trl(jsonl, timeFile, verdicts string) (side, error) {
	var s side
	f, err := os.Open(jsonl)
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Event    string   `json:"event"`
			When     string   `json:"when"`
			Accuracy *float64 `json:"accuracy"`
		}
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			return s, fmt.Errorf("%s: %v", jsonl, err)
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return s, fmt.Errorf("%s: %v", jsonl, err)
		}
		num := func(k string) float64 { v, _ := raw[k].(float64); return v }
		switch ev.Event {
		case "step":
			s.steps++
			s.sStep += num("s")
			s.sGen += num("s_prepare") // generation, rewards and advantages
			s.sTrain += num("s_train")
		case "eval":
			if ev.Accuracy != nil && ev.When == "before" {
				s.accBefore = *ev.Accuracy
			} else if ev.Accuracy != nil {
				s.accAfter = *ev.Accuracy
			}
		case "end":
			s.version = fmt.Sprintf("trl %v, torch %v, transformers %v, peft %v", raw["trl"], raw["torch"], raw["transformers"], raw["peft"])
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if s.steps == 0 {
		return s, fmt.Errorf("%s: no step", jsonl)
	}
	n := float64(s.steps)
	s.sGen, s.sTrain, s.sStep = s.sGen/n, s.sTrain/n, s.sStep/n
	b, err := os.ReadFile(verdicts)
	if err != nil {
		return s, err
	}
	s.after = map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var v struct {
			ID      string `json:"id"`
			Correct bool   `json:"correct"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			return s, fmt.Errorf("%s: %v", verdicts, err)
		}
		s.after[v.ID] = v.Correct
	}
	s.rssMiB, s.wallS, err = readTime(timeFile)
	return s, err
}

// machine names this CPU and its cores, from /proc/cpuinfo.
func machine() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	name := runtime.GOARCH
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			name = strings.TrimSpace(v)
			break
		}
	}
	return fmt.Sprintf("%s, %d cores", name, runtime.NumCPU())
}

// confclipVersion is the first line of `bin/confclip version`.
func confclipVersion() string {
	out, err := exec.Command("./bin/confclip", "version").Output()
	if err != nil {
		return "confclip (version unknown: " + err.Error() + ")"
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

func run(w io.Writer, dir, runTime, trlOut, trlTime, trlVerdicts string) error {
	a, err := ours(dir, runTime)
	if err != nil {
		return err
	}
	b, err := trl(trlOut, trlTime, trlVerdicts)
	if err != nil {
		return err
	}
	// TRL's final adapter against ours on the same prompts: "fixed" counts
	// the prompts only confclip's got right, "broken" those only TRL's did.
	common := 0
	for id := range a.after {
		if _, ok := b.after[id]; ok {
			common++
		}
	}
	onlyOurs, onlyTRL, p := reporting.McNemar(b.after, a.after)
	fmt.Fprintf(w, "%s, %s. %s; TRL side: %s.\n\n", time.Now().Format("2 January 2006"), machine(), confclipVersion(), b.version)
	fmt.Fprintf(w, "| | confclip | TRL |\n|---|---:|---:|\n")
	fmt.Fprintf(w, "| steps | %d | %d |\n", a.steps, b.steps)
	fmt.Fprintf(w, "| s/step (mean) | %.1f | %.1f |\n", a.sStep, b.sStep)
	fmt.Fprintf(w, "| of which generation (TRL: generation, rewards, advantages) | %.1f | %.1f |\n", a.sGen, b.sGen)
	fmt.Fprintf(w, "| of which training (forward, backward, optimizer) | %.1f | %.1f |\n", a.sTrain, b.sTrain)
	fmt.Fprintf(w, "| peak RSS, whole process (MiB) | %.0f | %.0f |\n", a.rssMiB, b.rssMiB)
	fmt.Fprintf(w, "| wall, whole process with both evaluations (s) | %.0f | %.0f |\n", a.wallS, b.wallS)
	fmt.Fprintf(w, "| held-out accuracy before | %.3f | %.3f |\n", a.accBefore, b.accBefore)
	fmt.Fprintf(w, "| held-out accuracy after | %.3f | %.3f |\n", a.accAfter, b.accAfter)
	fmt.Fprintf(w, "\nMcNemar between the final adapters on %d held-out prompts: right only with confclip's %d, only with TRL's %d, p = %.3g.\n\n",
		common, onlyOurs, onlyTRL, p)
	fmt.Fprintf(w, "Goals: steps per hour %.2f x TRL's (at least 3); peak RSS %.2f x TRL's (at most 0.5); held-out accuracy after, confclip against TRL, McNemar p = %.3g (not worse: confclip ahead, or p > 0.05).\n\n",
		b.sStep/a.sStep, a.rssMiB/b.rssMiB, p)
	fmt.Fprintf(w, "trl: confclip %.1f s/step, TRL %.1f s/step (B/A = %.2f); RSS confclip %.0f MiB, TRL %.0f MiB; held-out confclip %.3f, TRL %.3f\n",
		a.sStep, b.sStep, b.sStep/a.sStep, a.rssMiB, b.rssMiB, a.accAfter, b.accAfter)
	return nil
}
