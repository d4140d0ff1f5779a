//go:build ignore

// slurm-compare checks that scored records merged from shards hold what one
// process scored: the same records (prompt id, sample), the same tokens,
// text and verdicts, log-probs and confidences within 1e-4; and that the
// two summaries count the same groups, records and right answers.
//
//	go run scripts/slurm-compare.go MERGED.jsonl ONE.jsonl MERGED-summary.json ONE-summary.json
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
)

type rec struct {
	PromptID       string    `json:"prompt_id"`
	Sample         int       `json:"sample"`
	Tokens         []int32   `json:"tokens"`
	Text           string    `json:"text"`
	Finish         string    `json:"finish"`
	Logprobs       []float64 `json:"logprobs"`
	Confidence     float64   `json:"confidence"`
	VerifierResult struct {
		Correct   bool    `json:"correct"`
		Score     float64 `json:"score"`
		Extracted string  `json:"extracted"`
	} `json:"verifier_result"`
}

const tol = 1e-4

func read(path string) (map[string]rec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]rec{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for line := 1; sc.Scan(); line++ {
		var r rec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		k := fmt.Sprintf("%s#%d", r.PromptID, r.Sample)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s:%d: record %s twice", path, line, k)
		}
		out[k] = r
	}
	return out, sc.Err()
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: slurm-compare MERGED.jsonl ONE.jsonl MERGED-summary.json ONE-summary.json")
		os.Exit(2)
	}
	var bad []string
	fail := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	merged, err := read(os.Args[1])
	if err == nil {
		var one map[string]rec
		if one, err = read(os.Args[2]); err == nil {
			compare(merged, one, fail)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	compareSummaries(os.Args[3], os.Args[4], fail)
	if len(bad) > 0 {
		for i, b := range bad {
			if i == 20 {
				fmt.Fprintf(os.Stderr, "... and %d more\n", len(bad)-20)
				break
			}
			fmt.Fprintln(os.Stderr, b)
		}
		os.Exit(1)
	}
	fmt.Printf("slurm-compare: %d records equal (tokens, text, verdicts exact; log-probs and confidences within %g)\n", len(merged), tol)
}

func compare(merged, one map[string]rec, fail func(string, ...any)) {
	if len(merged) == 0 {
		fail("the merged file holds no records")
	}
	keys := make([]string, 0, len(one))
	for k := range one {
		keys = append(keys, k)
		if _, ok := merged[k]; !ok {
			fail("record %s: in one process's output, not in the merged one", k)
		}
	}
	for k := range merged {
		if _, ok := one[k]; !ok {
			fail("record %s: in the merged output, not in one process's", k)
		}
	}
	slices.Sort(keys)
	maxLP, maxConf := 0.0, 0.0
	for _, k := range keys {
		a, ok := merged[k]
		if !ok {
			continue
		}
		b := one[k]
		switch {
		case !slices.Equal(a.Tokens, b.Tokens):
			fail("record %s: tokens differ", k)
		case a.Text != b.Text || a.Finish != b.Finish:
			fail("record %s: text or finish differ", k)
		case a.VerifierResult != b.VerifierResult:
			fail("record %s: verdict %+v merged, %+v in one process", k, a.VerifierResult, b.VerifierResult)
		case len(a.Logprobs) != len(b.Logprobs):
			fail("record %s: %d log-probs merged, %d in one process", k, len(a.Logprobs), len(b.Logprobs))
		}
		for i := range min(len(a.Logprobs), len(b.Logprobs)) {
			maxLP = max(maxLP, math.Abs(a.Logprobs[i]-b.Logprobs[i]))
		}
		maxConf = max(maxConf, math.Abs(a.Confidence-b.Confidence))
	}
	if maxLP > tol || math.IsNaN(maxLP) {
		fail("log-probs differ by up to %g (tolerance %g)", maxLP, tol)
	}
	if maxConf > tol || math.IsNaN(maxConf) {
		fail("confidences differ by up to %g (tolerance %g)", maxConf, tol)
	}
	fmt.Printf("slurm-compare: largest log-prob difference %.3g, confidence %.3g\n", maxLP, maxConf)
}

func compareSummaries(mergedPath, onePath string, fail func(string, ...any)) {
	type summary struct {
		Groups   int `json:"groups"`
		Records  int `json:"records"`
		Outcomes struct {
			Correct int `json:"correct"`
		} `json:"outcomes"`
	}
	var s [2]summary
	for i, p := range []string{mergedPath, onePath} {
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &s[i])
		}
		if err != nil {
			fail("%s: %v", p, err)
			return
		}
	}
	if s[0] != s[1] {
		fail("summaries differ: merged %+v, one process %+v", s[0], s[1])
	}
	fmt.Printf("slurm-compare: summaries agree: %d groups, %d records, %d right\n", s[1].Groups, s[1].Records, s[1].Outcomes.Correct)
}
