package merge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/shard"
	"github.com/confclip/confclip/teacherforce"
	"github.com/confclip/confclip/testkit/pipelinetest"
	"github.com/confclip/confclip/verify"
)

// TestShardUnion: for N = 1, 3 and 7, rollout, score, logprobs, verify and
// eval run shard by shard and merged give what one process gives, record for
// record (no timing in the records), and the merged score and eval
// summaries equal the single run's.
func TestShardUnion(t *testing.T) {
	var lines []string
	for i := range 24 {
		lines = append(lines, fmt.Sprintf(`{"id":"q%d","prompt":"Say %d then %d:","answer":"%d"}`, i, i, i+1, i%3))
	}
	cfg, data := pipelinetest.Fixture(t, lines...)
	cfg.Rollout.Group = 3
	cfg.Rollout.MaxTokens = 6
	cfg.Rollout.Parallel = 5 // groups of shards and of the whole share batches differently
	cfg.Verifier.Pattern = `[02468]`
	m := pipelinetest.Open(t, cfg)
	ctx := context.Background()
	dir := t.TempDir()

	whole := filepath.Join(dir, "whole.jsonl")
	if _, err := pipeline.Rollout(ctx, m, pipeline.RolloutOptions{Config: cfg, In: data, Out: whole, NoTiming: true}); err != nil {
		t.Fatal(err)
	}
	wholeSum, err := pipeline.Score(ctx, pipeline.NewScoreOptions(cfg, whole, filepath.Join(dir, "whole.scored.jsonl")))
	if err != nil {
		t.Fatal(err)
	}
	wholeEval, err := pipeline.Evaluate(ctx, m, pipeline.EvalOptions{Config: cfg, Data: data, Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	verifyIn := verifyInputFile(t, whole)
	var wholeVerify bytes.Buffer
	if _, err := verify.File(ctx, verify.FileOptions{Verifier: cfg.Verifier, In: verifyIn, W: &wholeVerify}); err != nil {
		t.Fatal(err)
	}
	wholeResults := strings.Split(strings.TrimSpace(wholeVerify.String()), "\n")
	wholeTF := filepath.Join(dir, "whole.tf.jsonl")
	if _, err := teacherforce.File(ctx, m, teacherforce.Options{Config: cfg, In: whole, Out: wholeTF}); err != nil {
		t.Fatal(err)
	}

	for _, n := range []int{1, 3, 7} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			sd := filepath.Join(dir, fmt.Sprint(n))
			os.MkdirAll(sd, 0o755)
			var rolls, sums, evals, tfs []string
			verified := map[int]bool{}
			for k := range n {
				sh := shard.Shard{K: k, N: n}
				out := filepath.Join(sd, fmt.Sprintf("rollouts-%d.jsonl", k))
				if _, err := pipeline.Rollout(ctx, m, pipeline.RolloutOptions{Config: cfg, In: data, Out: out, NoTiming: true, Shard: sh}); err != nil {
					t.Fatal(err)
				}
				rolls = append(rolls, out)
				so := pipeline.NewScoreOptions(cfg, whole, filepath.Join(sd, fmt.Sprintf("scored-%d.jsonl", k)))
				so.Shard = sh
				sum, err := pipeline.Score(ctx, so)
				if err != nil {
					t.Fatal(err)
				}
				sp := filepath.Join(sd, fmt.Sprintf("summary-%d.json", k))
				if err := atomicfile.WriteJSON(sp, sum); err != nil {
					t.Fatal(err)
				}
				sums = append(sums, sp)
				ev, err := pipeline.Evaluate(ctx, m, pipeline.EvalOptions{Config: cfg, Data: data, Samples: 2, Shard: sh})
				if err != nil {
					t.Fatal(err)
				}
				ep := filepath.Join(sd, fmt.Sprintf("eval-%d.json", k))
				if err := atomicfile.WriteJSON(ep, ev); err != nil {
					t.Fatal(err)
				}
				evals = append(evals, ep)
				tf := filepath.Join(sd, fmt.Sprintf("tf-%d.jsonl", k))
				if _, err := teacherforce.File(ctx, m, teacherforce.Options{Config: cfg, In: whole, Out: tf, Shard: sh}); err != nil {
					t.Fatal(err)
				}
				tfs = append(tfs, tf)
				var vout bytes.Buffer
				if _, err := verify.File(ctx, verify.FileOptions{Verifier: cfg.Verifier, In: verifyIn, Shard: sh, W: &vout}); err != nil {
					t.Fatal(err)
				}
				for _, l := range strings.Split(strings.TrimSpace(vout.String()), "\n") {
					if l == "" {
						continue
					}
					var r struct { // a shard's line of verify.File's output
						Line int    `json:"line"`
						ID   string `json:"prompt_id,omitempty"`
						verify.Result
					}
					if err := json.Unmarshal([]byte(l), &r); err != nil || r.Line < 1 || r.Line > len(wholeResults) || verified[r.Line] || !sh.Has(r.ID) {
						t.Fatalf("shard %s: result %s (%v)", sh, l, err)
					}
					verified[r.Line] = true
					b, _ := json.Marshal(r.Result)
					if string(b) != wholeResults[r.Line-1] {
						t.Fatalf("line %d: %s in shard %s, %s in one process", r.Line, b, sh, wholeResults[r.Line-1])
					}
				}
			}
			// Shards given in any order merge the same.
			rolls[0], rolls[n-1] = rolls[n-1], rolls[0]
			merged := filepath.Join(sd, "merged.jsonl")
			mr, err := Rollouts(rolls, merged)
			if err != nil {
				t.Fatal(err)
			}
			if mr.Groups != 24 || mr.Records != 72 || mr.Shards != n {
				t.Fatalf("merged %+v, want 24 groups, 72 records, %d shards", mr, n)
			}
			sameRecords(t, whole, merged)
			sameRecords(t, wholeTF, concat(t, sd, "tf.jsonl", tfs))
			if len(verified) != 72 {
				t.Fatalf("the shards verified %d lines, want 72", len(verified))
			}

			ms, err := Scores(sums, filepath.Join(sd, "scored.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, filepath.Join(dir, "whole.scored.jsonl"), filepath.Join(sd, "scored.jsonl"))
			a, b := wholeSum, ms.Summary
			a.In, a.Out, a.Seconds, b.In, b.Out, b.Seconds = "", "", 0, "", "", 0
			sameJSON(t, "score summary", a, b)

			me, err := Eval(evals)
			if err != nil {
				t.Fatal(err)
			}
			we := wholeEval
			we.Seconds, me.Seconds = 0, 0
			sameJSON(t, "eval result", we, me)
		})
	}
}

// TestMergeRefuses: a missing shard, a duplicated one, one made with other
// options and one holding another shard's prompts are each refused, naming
// the file.
func TestMergeRefuses(t *testing.T) {
	var lines []string
	for i := range 9 {
		lines = append(lines, fmt.Sprintf(`{"id":"q%d","prompt":"Say %d:","answer":"1"}`, i, i))
	}
	cfg, data := pipelinetest.Fixture(t, lines...)
	cfg.Rollout.Group = 2
	cfg.Rollout.MaxTokens = 3
	m := pipelinetest.Open(t, cfg)
	ctx := context.Background()
	dir := t.TempDir()
	var files []string
	for k := range 4 {
		out := filepath.Join(dir, fmt.Sprintf("r%d.jsonl", k))
		c := cfg
		if k == 3 { // shard 2 again, with another seed
			c.Rollout.Seed++
		}
		if _, err := pipeline.Rollout(ctx, m, pipeline.RolloutOptions{Config: c, In: data, Out: out, NoTiming: true, Shard: shard.Shard{K: min(k, 2), N: 3}}); err != nil {
			t.Fatal(err)
		}
		files = append(files, out)
	}
	out := filepath.Join(dir, "m.jsonl")
	for _, c := range []struct {
		in   []string
		want string
	}{
		{files[:2], "shard 2/3 missing"},
		{[]string{files[0], files[1], files[1]}, "given twice"},
		{[]string{files[0], files[1], files[3]}, "seed: 1 in the file, 0 now"},
		{[]string{data}, "provenance"},
	} {
		_, err := Rollouts(c.in, out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Rollouts(%v): %v, want an error with %q", c.in, err, c.want)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Fatalf("a refused merge left %s", out)
		}
	}
	// A file whose provenance says shard 1 but holds shard 0's prompts.
	b, _ := os.ReadFile(files[0])
	os.WriteFile(files[1], b, 0o644)
	if _, err := Rollouts(files[:3], out); err == nil || !strings.Contains(err.Error(), "belongs to shard") {
		t.Errorf("mislabelled shard: %v", err)
	}
}

// verifyInputFile writes the answer and completion of each rollout as
// verify.File's input lines.
func verifyInputFile(t *testing.T, rollouts string) string {
	t.Helper()
	recs, _, _, err := dataset.ReadFile[dataset.Rollout](rollouts, false)
	if err != nil {
		t.Fatal(err)
	}
	path := rollouts + ".verify.jsonl"
	var sb strings.Builder
	for _, r := range recs {
		b, _ := json.Marshal(map[string]string{"prompt_id": r.PromptID, "answer": r.Answer, "completion": r.Text})
		sb.Write(append(b, '\n'))
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// concat joins files into dir/name.
func concat(t *testing.T, dir, name string, files []string) string {
	t.Helper()
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, all, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// recordTol bounds how far a log-prob (or entropy, confidence, reward) of a
// sequence may move with the other sequences of its batch: llama.cpp's CPU
// kernels sum in another order for another batch shape (rollout/engine.go),
// about 1e-7 on the tiny model. Every token, text and count must be equal.
const recordTol = 1e-5

// sameRecords checks that two JSONL files hold the same records, in any
// order: equal but for floating-point values within recordTol.
func sameRecords(t *testing.T, a, b string) {
	t.Helper()
	la, lb := sortedLines(t, a), sortedLines(t, b)
	if len(la) != len(lb) {
		t.Fatalf("%s has %d records, %s %d", a, len(la), b, len(lb))
	}
	key := func(l string) string {
		var r struct {
			ID     string `json:"prompt_id"`
			Sample int    `json:"sample"`
		}
		json.Unmarshal([]byte(l), &r)
		return fmt.Sprintf("%s/%d", r.ID, r.Sample)
	}
	sort.Slice(la, func(i, j int) bool { return key(la[i]) < key(la[j]) })
	sort.Slice(lb, func(i, j int) bool { return key(lb[i]) < key(lb[j]) })
	for i := range la {
		var x, y any
		if err := json.Unmarshal([]byte(la[i]), &x); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal([]byte(lb[i]), &y)
		if !closeJSON(x, y, recordTol) {
			t.Fatalf("%s and %s differ:\n%.400s\n%.400s", a, b, la[i], lb[i])
		}
	}
}

func sortedLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	sort.Strings(ls)
	return ls
}

// sameJSON compares two values through their JSON, floats to recordTol.
func sameJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	var x, y any
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	json.Unmarshal(ja, &x)
	json.Unmarshal(jb, &y)
	if !closeJSON(x, y, recordTol) {
		t.Fatalf("%s differs:\none process: %s\nmerged:      %s", what, ja, jb)
	}
}

// closeJSON compares decoded JSON: whole numbers (tokens, counts) exactly,
// other numbers to tol.
func closeJSON(x, y any, tol float64) bool {
	switch a := x.(type) {
	case float64:
		b, ok := y.(float64)
		if !ok {
			return false
		}
		if a == math.Trunc(a) && b == math.Trunc(b) {
			return a == b
		}
		return math.Abs(a-b) <= tol*math.Max(1, math.Abs(a))
	case map[string]any:
		b, ok := y.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k := range a {
			if !closeJSON(a[k], b[k], tol) {
				return false
			}
		}
		return true
	case []any:
		b, ok := y.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !closeJSON(a[i], b[i], tol) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(x, y)
}

// TestMergeOutputIsNotInput: merge --out IN is refused, the input intact
// (pipeline's TestOutputIsNotInput for the other commands).
func TestMergeOutputIsNotInput(t *testing.T) {
	data := filepath.Join(t.TempDir(), "S.jsonl")
	const content = `{"prompt_id":"p","text":"x"}` + "\n"
	os.WriteFile(data, []byte(content), 0o644)
	_, err := Rollouts([]string{data}, data)
	if err == nil || !strings.Contains(err.Error(), "the output is the input") {
		t.Errorf("got %v, want the output refused", err)
	}
	if b, _ := os.ReadFile(data); string(b) != content {
		t.Fatalf("the input now holds %q", b)
	}
}
