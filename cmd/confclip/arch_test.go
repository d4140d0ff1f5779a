package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/tools"
)

// TestEveryArchEndToEnd: for every architecture gen-model writes, the
// command line's loop (gen-model, rollout, score, export, train, logprobs
// with the adapter) runs, and the trained adapter raises the log-prob of
// every scored completion with a positive advantage and lowers it for every
// one with a negative advantage.
func TestEveryArchEndToEnd(t *testing.T) {
	prompts := `{"id":"p1","prompt":"Say a letter:","answer":"x"}
{"id":"p2","prompt":"12+7=","answer":"x"}
{"id":"p3","prompt":"What is 3*4?","answer":"x"}
`
	for _, arch := range tools.ModelArchs() {
		t.Run(arch, func(t *testing.T) {
			dir := t.TempDir()
			p := func(name string) string { return filepath.Join(dir, name) }
			if err := os.WriteFile(p("prompts.jsonl"), []byte(prompts), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"gen-model", "--arch", arch, "--out", p("m.gguf")},
				{"rollout", "-m", p("m.gguf"), "--data", p("prompts.jsonl"), "--out", p("r.jsonl"), "-G", "4", "-n", "6", "-s", "1", "-t", "2"},
				// a pattern random models meet about as often as not
				{"score", "--data", p("r.jsonl"), "--out", p("s.jsonl"), "--verifier", "format", "--pattern", "[a-m]"},
				{"export", "--data", p("s.jsonl"), "--out", p("t.jsonl")},
				{"train", "-m", p("m.gguf"), "--data", p("t.jsonl"), "--adapter-out", p("a.gguf"), "--steps", "2", "--lr", "2e-2", "-t", "2"},
				{"logprobs", "-m", p("m.gguf"), "--data", p("s.jsonl"), "--out", p("lp0.jsonl"), "-t", "2"},
				{"logprobs", "-m", p("m.gguf"), "--data", p("s.jsonl"), "--out", p("lp1.jsonl"), "--adapter", p("a.gguf"), "-t", "2"},
			} {
				if code, out := runOut(t, args...); code != 0 {
					t.Fatalf("confclip %v: exit %d: %s", args, code, out)
				}
			}
			scored, base, tuned := readRecords(t, p("s.jsonl")), readRecords(t, p("lp0.jsonl")), readRecords(t, p("lp1.jsonl"))
			if len(base) != len(scored) || len(tuned) != len(scored) {
				t.Fatalf("%d scored records, %d and %d with log-probs", len(scored), len(base), len(tuned))
			}
			pos, neg := 0, 0
			for i, s := range scored {
				d := sum(tuned[i].Logprobs) - sum(base[i].Logprobs)
				switch {
				case s.Advantage > 0:
					pos++
					if d <= 0 {
						t.Errorf("completion %d, advantage %+g: log-prob changed by %g", i, s.Advantage, d)
					}
				case s.Advantage < 0:
					neg++
					if d >= 0 {
						t.Errorf("completion %d, advantage %+g: log-prob changed by %g", i, s.Advantage, d)
					}
				}
			}
			if pos == 0 || neg == 0 {
				t.Fatalf("%d completions with a positive advantage, %d with a negative one: no reward spread", pos, neg)
			}
			t.Logf("ARCH %s end to end: %d completions, %d with a positive advantage (log-prob up), %d with a negative one (down)", arch, len(scored), pos, neg)
		})
	}
}

type archRecord struct {
	Logprobs  []float64 `json:"logprobs"`
	Advantage float64   `json:"advantage"`
}

func readRecords(t *testing.T, path string) []archRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []archRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r archRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}
