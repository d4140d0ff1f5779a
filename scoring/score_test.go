package scoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/scoring"
	"github.com/confclip/confclip/verifiers"
)

// testVerifier is a stand-in verifier owned by these tests, so that they do
// not depend on the real verifiers' extraction rules: the answer is the text
// after the last "= " (or the whole trimmed text), right when it equals the
// reference.
const testVerifier = "scoring-test"

func init() {
	verifiers.Register(testVerifier, func(verifiers.Options) (verifiers.Verifier, error) { return answerAfterEquals{}, nil })
}

type answerAfterEquals struct{}

func (answerAfterEquals) Verify(_ context.Context, completion, reference string) (verifiers.Result, error) {
	start := 0
	if i := strings.LastIndex(completion, "= "); i >= 0 {
		start = i + 2
	}
	ans := strings.TrimSpace(completion[start:])
	if ans == "" {
		return verifiers.Result{Start: -1, End: -1, Reason: "nothing extracted"}, nil
	}
	start += strings.Index(completion[start:], ans)
	ok := ans == reference
	score := 0.0
	if ok {
		score = 1
	}
	return verifiers.Result{Score: score, Correct: ok, Extracted: ans, Start: start, End: start + len(ans)}, nil
}

func testOptions(in, out string) scoring.Options {
	o := pipeline.NewScoreOptions(pipeline.DefaultConfig(), in, out).Options
	o.Verifier.Name = testVerifier
	return o
}

func readScored(t *testing.T, path string) []dataset.Scored {
	t.Helper()
	recs, _, _, err := dataset.ReadFile[dataset.Scored](path, false)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

const tol = 1e-5

// want is the expected scoring of one record of testdata/examples.jsonl.
type want struct {
	v, c, r, a float64
}

// exampleWants are METHOD.md's worked examples 1 and 2 plus an all-wrong
// group, by prompt id and sample, under confclip absolute + grpo.
var exampleWants = map[string][]want{
	"ex1": {{1, 0.8, 0.8, 1.00401}, {1, 0.5, 0.5, 0.61536}, {0, 0.9, -0.9, -1.19834}, {0, 0.3, -0.3, -0.42104}},
	"ex2": {{1, 0.97, 0.95, 0.75377}, {1, 0.6, 0.6, -1.35679}, {1, 0.8, 0.8, -0.15075}, {1, 0.99, 0.95, 0.75377}},
	// w = clip(c) = [0.2, 0.5, 0.9, 0.95], r = -w: the most confident wrong
	// answers are pushed hardest.
	"wrong": {{0, 0.1, -0.2, 1.234351}, {0, 0.5, -0.5, 0.387939}, {0, 0.9, -0.9, -0.740611}, {0, 0.99, -0.95, -0.88168}},
}

func TestScoreWorkedExamples(t *testing.T) {
	in := filepath.Join("testdata", "examples.jsonl")
	out := filepath.Join(t.TempDir(), "scored.jsonl")
	sum, err := scoring.Score(context.Background(), testOptions(in, out))
	if err != nil {
		t.Fatal(err)
	}
	input, _, _, err := dataset.ReadFile[dataset.Rollout](in, false)
	if err != nil {
		t.Fatal(err)
	}
	got := readScored(t, out)
	if len(got) != len(input) {
		t.Fatalf("%d scored records, want %d", len(got), len(input))
	}
	for i, sc := range got {
		if sc.PromptID != input[i].PromptID || sc.Sample != input[i].Sample {
			t.Fatalf("record %d is %s/%d, want input order %s/%d", i, sc.PromptID, sc.Sample, input[i].PromptID, input[i].Sample)
		}
		w := exampleWants[sc.PromptID][sc.Sample]
		id := fmt.Sprintf("%s/%d", sc.PromptID, sc.Sample)
		for _, f := range []struct {
			name      string
			got, want float64
		}{{"score", sc.VerifierResult.Score, w.v}, {"confidence", sc.Confidence, w.c}, {"reward", sc.Reward, w.r}, {"advantage", sc.Advantage, w.a}} {
			if math.Abs(f.got-f.want) > tol {
				t.Errorf("%s %s = %.6f, want %.6f", id, f.name, f.got, f.want)
			}
		}
		if sc.VerifierResult.Correct != (w.v == 1) || sc.VerifierResult.Name != testVerifier {
			t.Errorf("%s verifier result = %+v", id, sc.VerifierResult)
		}
		if sc.Schema != dataset.SchemaScored || sc.ConfidenceScope != "completion" || sc.Text != input[i].Text || len(sc.Logprobs) != 1 {
			t.Errorf("%s: schema %q, scope %q, text %q, logprobs %v", id, sc.Schema, sc.ConfidenceScope, sc.Text, sc.Logprobs)
		}
	}

	if sum.Groups != 3 || sum.Records != 12 || sum.Skipped.Records != 0 {
		t.Errorf("summary: %d groups, %d records, %d skipped", sum.Groups, sum.Records, sum.Skipped.Records)
	}
	// Binary leaves ex2 (all right) and the all-wrong group without spread;
	// ConfClip leaves none.
	if sum.Binary.ZeroStdGroups != 2 || sum.Reward.ZeroStdGroups != 0 || sum.Reward.Method != "confclip" {
		t.Errorf("zero-std groups: binary %d, %s %d; want 2 and 0", sum.Binary.ZeroStdGroups, sum.Reward.Method, sum.Reward.ZeroStdGroups)
	}
	o := sum.Outcomes
	if o.Accuracy != 0.5 || o.PassAt1 != 0.5 || math.Abs(o.PassAtG-2.0/3) > 1e-12 || o.G != 4 || o.MeanTokensRight != 1 {
		t.Errorf("outcomes = %+v", o)
	}
	if sum.Calibration == nil || sum.Calibration.N != 12 || !sum.Calibration.AUROCDefined {
		t.Errorf("calibration = %+v", sum.Calibration)
	}
	if _, err := json.Marshal(sum); err != nil {
		t.Errorf("summary does not encode: %v", err)
	}
}

// TestScoreEstimators checks the other advantage estimators and the binary
// reward through Score on the worked example 1 group.
func TestScoreEstimators(t *testing.T) {
	tests := []struct {
		reward, adv string
		ex1, ex2    []float64
	}{
		{"confclip", "dr_grpo", []float64{0.775, 0.475, -0.925, -0.325}, nil},
		{"confclip", "rloo", []float64{1.03333, 0.63333, -1.23333, -0.43333}, nil},
		{"binary", "grpo", []float64{0.86602, 0.86602, -0.86602, -0.86602}, []float64{0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.reward+"/"+tt.adv, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "scored.jsonl")
			o := testOptions(filepath.Join("testdata", "examples.jsonl"), out)
			o.Reward.Method, o.Advantage.Estimator = tt.reward, tt.adv
			if _, err := scoring.Score(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			for _, sc := range readScored(t, out) {
				var want []float64
				switch sc.PromptID {
				case "ex1":
					want = tt.ex1
				case "ex2":
					want = tt.ex2
				}
				if want != nil && math.Abs(sc.Advantage-want[sc.Sample]) > tol {
					t.Errorf("%s/%d: A = %.6f, want %.6f", sc.PromptID, sc.Sample, sc.Advantage, want[sc.Sample])
				}
			}
		})
	}
}

// writeJSONL writes records (or raw strings, written as they are) one a line.
func writeJSONL(t *testing.T, path string, lines ...any) {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		if s, ok := l.(string); ok {
			b.WriteString(s)
		} else {
			j, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// textOnly is a completion produced elsewhere: no tokens, no log-probs.
func textOnly(pid string, sample int, text, answer string) dataset.Rollout {
	return dataset.Rollout{PromptID: pid, Prompt: "Q", Answer: answer, Sample: sample, Text: text}
}

func TestScoreTextOnly(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONL(t, in, textOnly("a", 0, "x = 4", "4"), textOnly("a", 1, "x = 5", "4"))

	// Binary needs no log-probs.
	o := testOptions(in, filepath.Join(dir, "binary.jsonl"))
	o.Reward.Method = "binary"
	sum, err := scoring.Score(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Calibration != nil || sum.Outcomes.Accuracy != 0.5 {
		t.Errorf("summary: calibration %+v, accuracy %v", sum.Calibration, sum.Outcomes.Accuracy)
	}
	if got := readScored(t, o.Out); got[0].ConfidenceScope != "none (no log-probs)" || got[0].Advantage <= 0 {
		t.Errorf("scored = %+v", got[0])
	}
	// No tokens are counted (reporting.ScoreTable then says so).
	if o := sum.Outcomes; o.MeanTokensRight != 0 || o.MeanTokensWrong != 0 {
		t.Errorf("text-only records: token means right %v, wrong %v", o.MeanTokensRight, o.MeanTokensWrong)
	}

	// ConfClip without a model names the first record.
	o = testOptions(in, filepath.Join(dir, "confclip.jsonl"))
	_, err = scoring.Score(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), in+":1:") || !strings.Contains(err.Error(), "no log-probs") {
		t.Errorf("confclip without log-probs: err = %v, want %s:1: ... no log-probs", err, in)
	}
	assertNoOutput(t, o.Out)

	// With a teacher-forcing hook, the hook supplies them.
	var forced int
	o.TeacherForce = func(_ context.Context, recs []*dataset.Rollout) error {
		for _, r := range recs {
			forced++
			r.Tokens = []int32{1, 2, 3}
			r.TokenOffsets = []int{0, 2, 4}
			r.Logprobs = []float64{-3, -3, math.Log(0.9)} // the answer token is 0.9
		}
		return nil
	}
	o.Confidence.Scope = "answer"
	sum, err = scoring.Score(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if forced != 2 || sum.TeacherForced != 2 {
		t.Errorf("teacher forced %d (summary %d), want 2", forced, sum.TeacherForced)
	}
	for _, sc := range readScored(t, o.Out) {
		if sc.ConfidenceScope != "answer" || math.Abs(sc.Confidence-0.9) > 1e-12 || len(sc.VerifierResult.AnswerSpan) != 2 {
			t.Errorf("%d: scope %q, confidence %v, span %v; want answer, 0.9", sc.Sample, sc.ConfidenceScope, sc.Confidence, sc.VerifierResult.AnswerSpan)
		}
	}
}

func TestScoreAnswerScopeFallback(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	rec := func(sample int, text string, offsets []int) dataset.Rollout {
		r := textOnly("a", sample, text, "4")
		r.Tokens, r.Logprobs, r.TokenOffsets = []int32{1, 2}, []float64{math.Log(0.5), math.Log(0.5)}, offsets
		return r
	}
	writeJSONL(t, in, rec(0, "  ", []int{0, 1}), rec(1, "x = 4", nil), rec(2, "x = 4", []int{0, 2}))
	o := testOptions(in, filepath.Join(dir, "out.jsonl"))
	o.Confidence.Scope = "answer"
	sum, err := scoring.Score(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	wantScope := []string{"completion (fallback: nothing extracted)", "completion (fallback: no token offsets)", "answer"}
	for i, sc := range readScored(t, o.Out) {
		if sc.ConfidenceScope != wantScope[i] || math.Abs(sc.Confidence-0.5) > 1e-12 {
			t.Errorf("%d: scope %q, confidence %v; want %q, 0.5", i, sc.ConfidenceScope, sc.Confidence, wantScope[i])
		}
	}
	if sum.ScopeFallbacks != 2 {
		t.Errorf("scope fallbacks = %d, want 2", sum.ScopeFallbacks)
	}
}

func TestScoreMaskTruncatedAndOverlong(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	rec := func(sample, tokens int, text, finish string) dataset.Rollout {
		r := textOnly("a", sample, text, "4")
		r.Tokens, r.Finish = make([]int32, tokens), finish
		return r
	}
	writeJSONL(t, in, rec(0, 5, "x = 4", "stop"), rec(1, 9, "x = 4", "length"), rec(2, 5, "x = 5", "stop"))
	o := testOptions(in, filepath.Join(dir, "out.jsonl"))
	o.Reward.Method, o.Advantage.Estimator = "binary", "none"
	o.Advantage.MaskTruncated = true
	o.Reward.Overlong, o.Reward.MaxLen, o.Reward.CacheLen = true, 10, 4 // 9 tokens: (6-9)/4 = -0.75
	sum, err := scoring.Score(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := readScored(t, o.Out)
	for i, w := range []struct{ r, a float64 }{{1, 1}, {0.25, 0}, {0, 0}} {
		if math.Abs(got[i].Reward-w.r) > 1e-12 || math.Abs(got[i].Advantage-w.a) > 1e-12 {
			t.Errorf("%d: r %v, A %v; want %v, %v", i, got[i].Reward, got[i].Advantage, w.r, w.a)
		}
	}
	if sum.MaskedTruncated != 1 {
		t.Errorf("masked %d, want 1", sum.MaskedTruncated)
	}
}

func TestScoreBadInput(t *testing.T) {
	good := func(pid string, sample int) dataset.Rollout {
		r := textOnly(pid, sample, "x = 4", "4")
		r.Tokens, r.Logprobs = []int32{1}, []float64{-0.1}
		return r
	}
	noAnswer := good("b", 1)
	noAnswer.Answer = ""
	mismatch := good("b", 1)
	mismatch.Logprobs = []float64{-0.1, -0.2}
	unknown := good("b", 0)
	unknown.Verifier = "no-such"
	tests := []struct {
		name    string
		lines   []any
		line    int
		errHas  string
		skipped int // records skipped with SkipBad
		reason  string
	}{
		{"malformed line", []any{good("a", 0), `{"prompt_id": "a", "sample": `, good("a", 1)}, 2, "malformed JSON", 1, scoring.BadJSON},
		{"unequal group", []any{good("a", 0), good("a", 1), good("b", 0), good("c", 0), good("c", 1)}, 3, `prompt "b" has 1 completions, want 2`, 1, scoring.BadGroupSize},
		{"missing answer", []any{good("a", 0), good("a", 1), good("b", 0), noAnswer}, 4, "missing reference answer", 2, scoring.BadGroupSize},
		{"length mismatch", []any{good("a", 0), good("a", 1), good("b", 0), mismatch}, 4, "logprobs has 2 entries but the completion has 1 tokens", 2, scoring.BadGroupSize},
		{"unknown verifier", []any{good("a", 0), good("a", 1), unknown}, 3, `unknown verifier "no-such"`, 1, scoring.BadRecord},
		// a group's sample indices must be 0..G-1, each once (-1, 1e9 and a
		// repeated index used to be accepted)
		{"negative sample", []any{good("a", 0), good("a", 1), good("b", 0), good("b", -1)}, 4, `prompt "b": sample -1 outside 0..1`, 2, scoring.BadRecord},
		{"huge sample", []any{good("a", 0), good("a", 1), good("b", 1e9), good("b", 0)}, 3, `prompt "b": sample 1000000000 outside 0..1`, 2, scoring.BadRecord},
		{"duplicate sample", []any{good("a", 0), good("a", 1), good("b", 1), good("b", 1)}, 4, `prompt "b": sample 1 appears twice (also on line 3)`, 2, scoring.BadRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.jsonl")
			writeJSONL(t, in, tt.lines...)
			o := testOptions(in, filepath.Join(dir, "out.jsonl"))
			_, err := scoring.Score(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d:", in, tt.line)) || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("err = %v, want %s:%d: ...%s", err, in, tt.line, tt.errHas)
			}
			assertNoOutput(t, o.Out)

			o.SkipBad = true
			sum, err := scoring.Score(context.Background(), o)
			if err != nil {
				t.Fatalf("with SkipBad: %v", err)
			}
			if sum.Skipped.Records != tt.skipped || sum.Records+tt.skipped != len(tt.lines) {
				t.Errorf("skipped %d, kept %d; want %d skipped of %d (%+v)", sum.Skipped.Records, sum.Records, tt.skipped, len(tt.lines), sum.Skipped)
			}
			if sum.Skipped.Reasons[tt.reason] == 0 || len(sum.Skipped.Examples) == 0 {
				t.Errorf("skip reasons %v, want %q", sum.Skipped.Reasons, tt.reason)
			}
			if n := len(readScored(t, o.Out)); n != sum.Records {
				t.Errorf("%d records written, summary says %d", n, sum.Records)
			}
		})
	}
}

// assertNoOutput checks that a failed run left neither the output file nor
// a temporary beside it.
func assertNoOutput(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("failed run left %s (stat: %v)", out, err)
	}
	tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*"))
	if len(tmps) > 0 {
		t.Errorf("failed run left temporary files %v", tmps)
	}
}

func TestScoreOptionsErrors(t *testing.T) {
	in := filepath.Join("testdata", "examples.jsonl")
	for _, tt := range []struct {
		name   string
		change func(*scoring.Options)
		errHas string
	}{
		{"reward", func(o *scoring.Options) { o.Reward.Method = "nope" }, "unknown reward method"},
		{"weight", func(o *scoring.Options) { o.Reward.Weight = "nope" }, "unknown reward weight"},
		{"clip", func(o *scoring.Options) { o.Reward.Lo = 2 }, "reward.lo"},
		{"estimator", func(o *scoring.Options) { o.Confidence.Estimator = "nope" }, "unknown confidence estimator"},
		{"vocab", func(o *scoring.Options) { o.Confidence.Estimator = "neg_entropy" }, "confidence.vocab"},
		{"scope", func(o *scoring.Options) { o.Confidence.Scope = "nope" }, "unknown confidence scope"},
		{"advantage", func(o *scoring.Options) { o.Advantage.Estimator = "nope" }, "unknown advantage estimator"},
		{"overlong", func(o *scoring.Options) { o.Reward.Overlong = true }, "reward.max_len"},
		{"missing file", func(o *scoring.Options) { o.In = "testdata/nope.jsonl" }, "nope.jsonl"},
	} {
		o := testOptions(in, filepath.Join(t.TempDir(), "out.jsonl"))
		tt.change(&o)
		if _, err := scoring.Score(context.Background(), o); err == nil || !strings.Contains(err.Error(), tt.errHas) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.errHas)
		}
	}
}

// TestScoreWithExact runs the examples through the real exact verifier once
// it is registered.
func TestScoreWithExact(t *testing.T) {
	if _, err := verifiers.New("exact", pipeline.DefaultConfig().Verifier.Options); err != nil {
		t.Skip("exact verifier not registered yet:", err)
	}
	o := testOptions(filepath.Join("testdata", "examples.jsonl"), filepath.Join(t.TempDir(), "out.jsonl"))
	o.Verifier.Name = "exact"
	sum, err := scoring.Score(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Outcomes.Accuracy != 0.5 || sum.Binary.ZeroStdGroups != 2 || sum.Reward.ZeroStdGroups != 0 {
		t.Errorf("with exact: accuracy %v, zero-std binary %d confclip %d", sum.Outcomes.Accuracy, sum.Binary.ZeroStdGroups, sum.Reward.ZeroStdGroups)
	}
}

// TestScoreTruncatedIsStrict: a completion the length limit cut off gets no
// credit from the last-number fallback (the text stopped on the number), but
// does for a final answer given before the cut; a finished one keeps the
// fallback unless verifier.strict.
func TestScoreTruncatedIsStrict(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	cut := func(r dataset.Rollout) dataset.Rollout { r.Finish = dataset.FinishLength; return r }
	writeJSONL(t, in,
		cut(textOnly("a", 0, "itxy apple … a+8 =", "8")),
		cut(textOnly("a", 1, " #### 8\nQ: Sam has 3 pens and", "8")),
		textOnly("a", 2, "Tom has 3 apples and gets 8", "8"))
	for _, strict := range []bool{false, true} {
		o := pipeline.NewScoreOptions(pipeline.DefaultConfig(), in, filepath.Join(dir, fmt.Sprintf("out-%v.jsonl", strict))).Options
		o.Reward.Method = "binary" // the config's verifier: math
		o.Verifier.Strict = &strict
		if _, err := scoring.Score(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		got := readScored(t, o.Out)
		want := []bool{false, true, !strict}
		for i, sc := range got {
			if sc.VerifierResult.Correct != want[i] {
				t.Errorf("strict %v, sample %d (%q): correct %v, want %v", strict, i, sc.Text, sc.VerifierResult.Correct, want[i])
			}
		}
	}
}

// TestScoreRLCR: reward rlcr reads each completion's stated confidence (no
// log-probs needed), gives RLCR's rewards (confclip's worked example),
// records the stated confidence, and counts the completions that state
// none.
func TestScoreRLCR(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONL(t, in,
		textOnly("g", 0, "<confidence>0.9</confidence> so x = 4", "4"),
		textOnly("g", 1, "<confidence>0.8</confidence> so x = 5", "4"),
		textOnly("g", 2, "<confidence>1.5</confidence> so x = 4", "4"),
		textOnly("g", 3, "<confidence>0.1</confidence> <confidence> 0.25 </confidence> so x = 4", "4"))
	o := testOptions(in, filepath.Join(dir, "out.jsonl"))
	o.Reward.Method = "rlcr"
	sum, err := scoring.Score(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.StatedMissing != 1 || sum.StatedCalibration == nil || sum.StatedCalibration.N != 3 {
		t.Errorf("summary: %d stated none, stated calibration %+v; want 1 and 3 records", sum.StatedMissing, sum.StatedCalibration)
	}
	for i, sc := range readScored(t, o.Out) {
		wantR := []float64{0.99, -0.64, -2, 0.4375}[i]
		wantQ := []float64{0.9, 0.8, -1, 0.25}[i]
		gotQ := -1.0
		if sc.StatedConfidence != nil {
			gotQ = *sc.StatedConfidence
		}
		if math.Abs(sc.Reward-wantR) > 1e-12 || gotQ != wantQ {
			t.Errorf("sample %d: reward %v, stated %v; want %v and %v", i, sc.Reward, gotQ, wantR, wantQ)
		}
	}
}

// TestScoreSelfCertainty: reward self_certainty is each completion's mean
// recorded self-certainty, whatever the verdict; a weight adds it to
// another reward; a record without self-certainties is refused, naming its
// line, unless teacher forcing fills them in.
func TestScoreSelfCertainty(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	rec := func(sample int, text string, sc ...float64) dataset.Rollout {
		r := textOnly("g", sample, text, "4")
		r.Tokens, r.Logprobs, r.SelfCertainties = make([]int32, len(sc)), make([]float64, len(sc)), sc
		for i := range r.Logprobs {
			r.Logprobs[i] = math.Log(0.5)
		}
		return r
	}
	writeJSONL(t, in, rec(0, "x = 4", 0.5, 1.5), rec(1, "x = 5", 3))

	o := testOptions(in, filepath.Join(dir, "sc.jsonl"))
	o.Reward.Method = "self_certainty"
	if _, err := scoring.Score(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	for i, sc := range readScored(t, o.Out) {
		want := []float64{1, 3}[i] // the wrong answer is the more certain
		if sc.Reward != want || sc.SelfCertainty == nil || *sc.SelfCertainty != want {
			t.Errorf("sample %d: reward %v, self-certainty %v; want %v", i, sc.Reward, sc.SelfCertainty, want)
		}
	}

	// ConfClip plus 0.1 x self-certainty: confidence 0.5 (absolute clip
	// [0.2, 0.95]), r = 0.5 + 0.1 and -0.5 + 0.3.
	o = testOptions(in, filepath.Join(dir, "cc.jsonl"))
	o.Reward.SelfCertaintyWeight = 0.1
	if _, err := scoring.Score(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	for i, sc := range readScored(t, o.Out) {
		if want := []float64{0.6, -0.2}[i]; math.Abs(sc.Reward-want) > 1e-12 {
			t.Errorf("confclip + self-certainty, sample %d: reward %v, want %v", i, sc.Reward, want)
		}
	}

	bare := filepath.Join(dir, "bare.jsonl")
	writeJSONL(t, bare, rec(0, "x = 4", 0.5), textOnly("g", 1, "x = 5", "4"))
	o = testOptions(bare, filepath.Join(dir, "bare-out.jsonl"))
	o.Reward.Method = "self_certainty"
	_, err := scoring.Score(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), bare+":2:") || !strings.Contains(err.Error(), "no self-certainties") {
		t.Errorf("a record without self-certainties: err = %v, want %s:2: ... no self-certainties", err, bare)
	}
	assertNoOutput(t, o.Out)
	o.TeacherForce = func(_ context.Context, recs []*dataset.Rollout) error {
		for _, r := range recs {
			r.Tokens, r.PromptTokens = []int32{7}, []int32{1}
			r.TokenOffsets, r.Logprobs, r.Entropies, r.SelfCertainties = []int{0}, []float64{-1}, []float64{1}, []float64{2}
		}
		return nil
	}
	if _, err := scoring.Score(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if got := readScored(t, o.Out); got[1].Reward != 2 {
		t.Errorf("teacher-forced record: reward %v, want its self-certainty 2", got[1].Reward)
	}
}

// TestScoreAnswerProb: reward answer_prob teacher-forces the reference
// answer after each completion's reasoning (its text before the extracted
// answer) and straight after the prompt, and rewards the mean probability
// of the answer's tokens less the prompt's, cut at 0; a completion that
// states no answer earns 0, however likely the reference is after it;
// without a model it is refused.
func TestScoreAnswerProb(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONL(t, in, textOnly("g", 0, "so x = 4", "4"), textOnly("g", 1, "x = 5", "4"), textOnly("g", 2, "no idea", "4"),
		textOnly("g", 3, "so x = ", "4"))
	// (a reasoning that lowers the answer's probability below the base's
	// earns 0: confclip's TestAnswerProbWorkedExample)
	o := testOptions(in, filepath.Join(dir, "out.jsonl"))
	o.Reward.Method = "answer_prob"
	if _, err := scoring.Score(context.Background(), o); err == nil || !strings.Contains(err.Error(), "needs the model") {
		t.Errorf("answer_prob without a model: err = %v", err)
	}
	// A stand-in model: one token a byte; the answer's bytes are likely
	// after "x = " (0.8), less after anything else (0.1), and 0.3 straight
	// after the prompt.
	var texts []string
	o.TeacherForce = func(_ context.Context, recs []*dataset.Rollout) error {
		for _, r := range recs {
			texts = append(texts, r.Text)
			n := len(r.Text)
			r.Tokens, r.TokenOffsets, r.Logprobs = make([]int32, n), make([]int, n), make([]float64, n)
			reasoning := strings.TrimSuffix(r.Text, r.Answer)
			for k := range n {
				r.TokenOffsets[k] = k
				p := 0.5
				if k >= len(reasoning) {
					switch {
					case reasoning == "":
						p = 0.3
					case strings.HasSuffix(reasoning, "x = "):
						p = 0.8
					default:
						p = 0.1
					}
				}
				r.Logprobs[k] = math.Log(p)
			}
		}
		return nil
	}
	if _, err := scoring.Score(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	// The text-only records are forced first (for their tokens); then the
	// reasoning keeps the text before the extracted answer: "so x = " and
	// "x = " (the wrong answer 5 replaced by the reference), none of
	// "no idea" (the test verifier extracts all of it), and all of "so
	// x = ", which states no answer; the prompt's base is forced once.
	wantTexts := []string{"so x = 4", "x = 5", "no idea", "so x = ", "so x = 4", "4", "x = 4", "4", "so x = 4"}
	if strings.Join(texts, "|") != strings.Join(wantTexts, "|") {
		t.Errorf("forced texts %q, want %q", texts, wantTexts)
	}
	for i, sc := range readScored(t, o.Out) {
		// 0.8 - 0.3, 0.8 - 0.3, 0.3 - 0.3; and 0 for "so x = ", whose
		// forced answer's 0.8 is recorded but not rewarded
		want := []float64{0.5, 0.5, 0, 0}[i]
		if math.Abs(sc.Reward-want) > 1e-12 || sc.AnswerProbBase == nil || math.Abs(*sc.AnswerProbBase-0.3) > 1e-12 {
			t.Errorf("sample %d: reward %v (answer %v, base %v), want %v", i, sc.Reward, sc.AnswerProb, sc.AnswerProbBase, want)
		}
	}
}
