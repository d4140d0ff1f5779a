package rollout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/reference"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
)

func newEngine(t testing.TB, m *llama.Model, o rollout.Options) *rollout.Engine {
	t.Helper()
	e, err := rollout.NewEngine(m, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// generate runs the engine and returns every record, in emit order.
func generate(t testing.TB, e *rollout.Engine, prompts []dataset.Prompt) ([]dataset.Rollout, rollout.Stats) {
	t.Helper()
	var out []dataset.Rollout
	st, err := e.Generate(context.Background(), prompts, func(g []dataset.Rollout) error {
		if len(g) != e.Options().Group {
			t.Errorf("group of %d records, want %d", len(g), e.Options().Group)
		}
		for i, r := range g {
			if r.Sample != i || r.PromptID != g[0].PromptID {
				t.Errorf("group record %d: prompt %q sample %d", i, r.PromptID, r.Sample)
			}
		}
		out = append(out, g...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

var tinyPrompts = []dataset.Prompt{
	{ID: "p1", Prompt: "What is 12+7?", Answer: "19", Verifier: "math"},
	{ID: "p2", Prompt: "Count: 1, 2, 3, 4,", Answer: "5"},
	{ID: "p3", Prompt: "x = (3*4) - 5. So x is", Answer: "7"},
	{ID: "p4", Prompt: "a", Answer: "b"},
	{ID: "p5", Prompt: "The quick brown fox jumps over the lazy dog; and then?", Answer: "?"},
}

// checkRecord checks the invariants every record keeps.
func checkRecord(t *testing.T, m *llama.Model, r dataset.Rollout, maxTokens int) {
	t.Helper()
	n := len(r.Tokens)
	if n == 0 || n > maxTokens || len(r.Logprobs) != n || len(r.SamplingLogprobs) != n || len(r.Entropies) != n || len(r.SelfCertainties) != n || len(r.TokenOffsets) != n {
		t.Fatalf("%s/%d: %d tokens, %d logprobs, %d sampling, %d entropies, %d self-certainties, %d offsets", r.PromptID, r.Sample,
			n, len(r.Logprobs), len(r.SamplingLogprobs), len(r.Entropies), len(r.SelfCertainties), len(r.TokenOffsets))
	}
	if !utf8.ValidString(r.Text) {
		t.Fatalf("%s/%d: text is not valid UTF-8: %q", r.PromptID, r.Sample, r.Text)
	}
	for i, o := range r.TokenOffsets {
		if o < 0 || o > len(r.Text) || (i > 0 && o < r.TokenOffsets[i-1]) {
			t.Fatalf("%s/%d: offsets %v for text of %d bytes", r.PromptID, r.Sample, r.TokenOffsets, len(r.Text))
		}
	}
	for i, lp := range r.Logprobs {
		if !(lp <= 0) || !(r.Entropies[i] >= 0) || !(r.SelfCertainties[i] >= -1e-12) { // KL(U || p) >= 0
			t.Fatalf("%s/%d: token %d logprob %v entropy %v self-certainty %v", r.PromptID, r.Sample, i, lp, r.Entropies[i], r.SelfCertainties[i])
		}
	}
	last := r.Tokens[n-1]
	switch r.Finish {
	case dataset.FinishLength:
		if n != maxTokens {
			t.Fatalf("%s/%d: finish length after %d of %d tokens", r.PromptID, r.Sample, n, maxTokens)
		}
	case dataset.FinishStop:
	default:
		t.Fatalf("%s/%d: finish %q", r.PromptID, r.Sample, r.Finish)
	}
	if m.IsEOG(last) && (r.Finish != dataset.FinishStop || r.TokenOffsets[n-1] != len(r.Text)) {
		t.Fatalf("%s/%d: ends with EOG token %d: finish %q, offset %d of %d", r.PromptID, r.Sample, last, r.Finish, r.TokenOffsets[n-1], len(r.Text))
	}
	if r.Schema != dataset.SchemaRollout || len(r.PromptTokens) == 0 {
		t.Fatalf("%s/%d: schema %q, %d prompt tokens", r.PromptID, r.Sample, r.Schema, len(r.PromptTokens))
	}
}

// forceCopies teacher-forces copies of the records that keep only the prompt
// and completion tokens, and returns the largest log-prob and entropy (or
// self-certainty) differences from the recorded ones.
func forceCopies(t *testing.T, e *rollout.Engine, recs []dataset.Rollout) (dlp, dent float64) {
	t.Helper()
	cp := make([]*dataset.Rollout, len(recs))
	for i, r := range recs {
		cp[i] = &dataset.Rollout{PromptID: r.PromptID, Sample: r.Sample, Prompt: r.Prompt, Text: r.Text,
			PromptTokens: r.PromptTokens, Tokens: r.Tokens}
	}
	if err := e.TeacherForce(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		f := cp[i]
		if len(f.Logprobs) != len(r.Logprobs) || len(f.Entropies) != len(r.Tokens) || len(f.SelfCertainties) != len(r.Tokens) {
			t.Fatalf("%s/%d: %d forced log-probs for %d tokens", r.PromptID, r.Sample, len(f.Logprobs), len(r.Tokens))
		}
		for k := range r.Logprobs {
			dlp = math.Max(dlp, math.Abs(f.Logprobs[k]-r.Logprobs[k]))
			dent = math.Max(dent, math.Abs(f.Entropies[k]-r.Entropies[k]))
			dent = math.Max(dent, math.Abs(f.SelfCertainties[k]-r.SelfCertainties[k]))
		}
		if f.Text != r.Text {
			t.Fatalf("%s/%d: text changed by teacher forcing: %q -> %q", r.PromptID, r.Sample, r.Text, f.Text)
		}
		for k := range r.TokenOffsets {
			if f.TokenOffsets[k] != r.TokenOffsets[k] {
				t.Fatalf("%s/%d: offsets %v, forced %v", r.PromptID, r.Sample, r.TokenOffsets, f.TokenOffsets)
			}
		}
	}
	return dlp, dent
}

func TestRolloutLogprobsMatchTeacherForcing(t *testing.T) {
	m := loadModel(t, tinyPath)
	// Parallel 6 with groups of 4: groups are split across admissions and
	// share batches with other groups, the hard case for batch composition.
	e := newEngine(t, m, rollout.Options{Group: 4, MaxTokens: 24, Parallel: 6, Seed: 3,
		Params: sampler.Params{Temperature: 1}})
	matchForcing(t, m, e, tinyPrompts, 24, "tiny")
}

// matchForcing generates the prompts, checks every record, teacher-forces
// copies of them and fails when a log-prob differs by more than 1e-4.
func matchForcing(t *testing.T, m *llama.Model, e *rollout.Engine, prompts []dataset.Prompt, maxTokens int, name string) {
	t.Helper()
	recs, st := generate(t, e, prompts)
	if len(recs) != e.Options().Group*len(prompts) || st.Groups != len(prompts) || len(st.Errors) != 0 {
		t.Fatalf("%d records, stats %+v", len(recs), st)
	}
	for _, r := range recs {
		checkRecord(t, m, r, maxTokens)
	}
	dlp, dent := forceCopies(t, e, recs)
	t.Logf("%s: max |rollout - teacher-forced| log-prob %.3g, entropy %.3g over %d tokens", name, dlp, dent, st.Tokens)
	if dlp > 1e-4 {
		t.Fatalf("log-probs differ by %g", dlp)
	}
}

func TestRolloutLogprobsMatchTeacherForcingStories(t *testing.T) {
	m := loadStories(t)
	prompts := []dataset.Prompt{
		{ID: "s1", Prompt: "Once upon a time"},
		{ID: "s2", Prompt: "Tom and his dog went to the park. They"},
		{ID: "s3", Prompt: "The little bird was sad because"},
	}
	e := newEngine(t, m, rollout.Options{Group: 8, MaxTokens: 64, Parallel: 12, Seed: 11,
		Params: sampler.Params{Temperature: 1}})
	matchForcing(t, m, e, prompts, 64, "stories260K")
}

// TestManySequencesMatchTeacherForcing decodes 72 sequences of different
// prompts together, so that every decode step puts 72 queries into one
// flash-attention call over a KV cache they share, each query seeing only its
// own cells (its prompt's and, interleaved with the others', its own
// tokens). From 64 queries the CPU kernel works on tiles of 64; patch 0059
// sends such a tile, whose queries see few of the cells they span together,
// to the one-query kernel (a greedy evaluation of 64 prompts spent 57% of its
// time multiplying every query by every cell). The log-probs still equal
// teacher forcing's, which computes each record's attention in its own
// dense tiles.
func TestManySequencesMatchTeacherForcing(t *testing.T) {
	m := loadStories(t)
	words := []string{"Tom", "Lily", "The cat", "A bird", "Sue", "The dog", "Ben", "Mia", "The boy"}
	verbs := []string{"went to the park", "found a ball", "was sad", "saw a big tree", "wanted to play", "ran home", "had a red hat", "met a friend"}
	var prompts []dataset.Prompt
	for i := 0; len(prompts) < 72; i++ {
		prompts = append(prompts, dataset.Prompt{ID: fmt.Sprintf("p%d", i),
			Prompt: words[i%len(words)] + " " + verbs[(i/len(words))%len(verbs)] + "."})
	}
	e := newEngine(t, m, rollout.Options{Group: 1, MaxTokens: 24, Parallel: 72, Seed: 13, FlashAttn: "on",
		Params: sampler.Params{Temperature: 1}})
	matchForcing(t, m, e, prompts, 24, "stories260K, 72 sequences decoding together")
}

// TestReleaseThenGenerate: an engine released between calls (the RL loop
// frees its KV cache while it trains) makes its context again and samples
// what it sampled before, bit for bit.
func TestReleaseThenGenerate(t *testing.T) {
	m := loadModel(t, tinyPath)
	e := newEngine(t, m, rollout.Options{Group: 4, MaxTokens: 16, Parallel: 8, Seed: 7, NoTiming: true,
		Params: sampler.Params{Temperature: 1}})
	first, _ := generate(t, e, tinyPrompts)
	for range 2 {
		if err := e.Release(); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := generate(t, e, tinyPrompts)
	if len(first) != len(again) {
		t.Fatalf("%d records, then %d after Release", len(first), len(again))
	}
	for i := range first {
		if !equalInts(first[i].Tokens, again[i].Tokens) || !slices.Equal(first[i].Logprobs, again[i].Logprobs) {
			t.Fatalf("record %d: %v %v, after Release %v %v", i, first[i].Tokens, first[i].Logprobs, again[i].Tokens, again[i].Logprobs)
		}
	}
}

func TestGreedyStories(t *testing.T) {
	m := loadStories(t)
	e := newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 40, Params: sampler.Params{Temperature: 0}})
	recs, _ := generate(t, e, []dataset.Prompt{{ID: "once", Prompt: "Once upon a time"}})
	want := ", there was a little girl named Lily. She loved to play outside in the park."
	for _, r := range recs {
		if !strings.HasPrefix(r.Text, want) {
			t.Fatalf("sample %d: greedy continuation %q, want it to start with %q", r.Sample, r.Text, want)
		}
		if got := []int32{1, 403, 407, 261, 378}; !equalInts(r.PromptTokens, got) {
			t.Fatalf("prompt tokens %v, want %v", r.PromptTokens, got)
		}
		for _, s := range r.SamplingLogprobs {
			if s != 0 {
				t.Fatalf("greedy sampling log-prob %v, want 0", s)
			}
		}
	}
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// jsonl is the records as the rollout command writes them.
func jsonl(t *testing.T, recs []dataset.Rollout) []byte {
	var b bytes.Buffer
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestReproducible(t *testing.T) {
	m := loadModel(t, tinyPath)
	o := rollout.Options{Group: 4, MaxTokens: 32, Parallel: 8, Seed: 42, NoTiming: true,
		Params: sampler.Params{Temperature: 0.9, TopP: 0.95, TopK: 50}}
	run := func(o rollout.Options) []dataset.Rollout {
		recs, _ := generate(t, newEngine(t, m, o), tinyPrompts)
		return recs
	}
	a, b := run(o), run(o)
	if !bytes.Equal(jsonl(t, a), jsonl(t, b)) {
		t.Fatal("two runs with the same options wrote different bytes")
	}
	// Another thread count: same bytes.
	o2 := o
	o2.Threads = 1
	if !bytes.Equal(jsonl(t, a), jsonl(t, run(o2))) {
		t.Error("one thread instead of the default gave different bytes")
	}

	// Only Parallel changes: the RNG streams are the same, the logits may
	// round differently in other batches.
	byKey := func(recs []dataset.Rollout) map[string]dataset.Rollout {
		out := map[string]dataset.Rollout{}
		for _, r := range recs {
			out[r.PromptID+"/"+string(rune('0'+r.Sample))] = r
		}
		return out
	}
	ref := byKey(a)
	for _, parallel := range []int{1, 3, 16} {
		o3 := o
		o3.Parallel = parallel
		other := byKey(run(o3))
		same, worst := 0, 0.0
		for k, r := range ref {
			q := other[k]
			n := 0
			for n < len(r.Tokens) && n < len(q.Tokens) && r.Tokens[n] == q.Tokens[n] {
				n++
			}
			if n == len(r.Tokens) && n == len(q.Tokens) {
				same++
			}
			for i := 0; i < n; i++ {
				worst = math.Max(worst, math.Abs(r.Logprobs[i]-q.Logprobs[i]))
			}
		}
		t.Logf("parallel %d instead of 8: %d of %d completions token-identical; max log-prob change on shared tokens %.3g", parallel, same, len(ref), worst)
		if same < len(ref)*3/4 || worst > 1e-4 {
			t.Errorf("parallel %d: only %d of %d completions identical", parallel, same, len(ref))
		}
	}
}

func TestStopStringSplitAcrossTokens(t *testing.T) {
	m := loadModel(t, tinyPath)
	o := rollout.Options{Group: 1, MaxTokens: 40, Parallel: 1, Seed: 7, NoTiming: true, Params: sampler.Params{Temperature: 1}}
	prompt := []dataset.Prompt{{ID: "q", Prompt: "What is 12+7?"}}
	base, _ := generate(t, newEngine(t, m, o), prompt)
	r := base[0]
	// A stop string made of the last byte of token k's piece and the first
	// byte of token k+1's: it spans a token boundary.
	k := -1
	for i := 4; i+2 < len(r.TokenOffsets); i++ {
		a, b, c := r.TokenOffsets[i], r.TokenOffsets[i+1], r.TokenOffsets[i+2]
		if b > a && c > b && r.Text[b-1] < 0x80 && r.Text[b] < 0x80 {
			k = i
			break
		}
	}
	if k < 0 {
		t.Fatalf("no token boundary to test in %q", r.Text)
	}
	b := r.TokenOffsets[k+1]
	stop := r.Text[b-1 : b+1]
	cut := strings.Index(r.Text, stop)
	o.Stop = []string{"never appears \x01", stop}
	got, _ := generate(t, newEngine(t, m, o), prompt)
	s := got[0]
	// The token where the stop string begins is kept, the text ends before it.
	keep := 0
	for keep < len(r.Tokens) && r.TokenOffsets[keep] <= cut {
		keep++
	}
	if s.Finish != dataset.FinishStop || s.Text != r.Text[:cut] || len(s.Tokens) != keep {
		t.Fatalf("stop %q: finish %q, text %q (%d tokens); want stop, %q (%d tokens)", stop, s.Finish, s.Text, len(s.Tokens), r.Text[:cut], keep)
	}
	if !equalInts(s.Tokens, r.Tokens[:keep]) {
		t.Fatalf("tokens %v, want %v", s.Tokens, r.Tokens[:keep])
	}
	checkRecord(t, m, s, 40)
	// Teacher forcing the stopped record gives its log-probs back.
	e := newEngine(t, m, o)
	if dlp, _ := forceCopies(t, e, got); dlp > 1e-4 {
		t.Fatalf("stopped record: teacher-forced log-probs differ by %g", dlp)
	}
}

func TestMaxTokensGivesLength(t *testing.T) {
	m := loadModel(t, tinyPath)
	e := newEngine(t, m, rollout.Options{Group: 3, MaxTokens: 5, Seed: 1, Params: sampler.Params{Temperature: 1}})
	recs, st := generate(t, e, tinyPrompts[:2])
	for _, r := range recs {
		if r.Finish == dataset.FinishLength && len(r.Tokens) != 5 {
			t.Fatalf("finish length with %d tokens", len(r.Tokens))
		}
		if r.Finish != dataset.FinishLength && !m.IsEOG(r.Tokens[len(r.Tokens)-1]) {
			t.Fatalf("finish %q without EOG: %v", r.Finish, r.Tokens)
		}
		checkRecord(t, m, r, 5)
		if r.Timing == nil || r.Timing.PromptMS <= 0 {
			t.Fatalf("timing %+v", r.Timing)
		}
	}
	if st.Tokens == 0 || st.TokensPerSecond() <= 0 {
		t.Fatalf("stats %+v", st)
	}
}

// eosModel is the tiny model with an output layer that gives every token a
// zero logit but EOS, whose logit is large whenever the hidden state points
// its way: sampled completions soon end with EOS.
func eosModel(t *testing.T) string {
	s := modelgen.Tiny()
	tokens, _, _ := modelgen.Vocab(s)
	s.Weights = func(name string, n int) []float32 {
		if name != "output.weight" {
			return nil
		}
		w := make([]float32, n)
		for i := 0; i < s.Embd; i++ {
			w[2*s.Embd+i] = 50 // row of token 2, EOS
		}
		_ = tokens
		return w
	}
	path := filepath.Join(t.TempDir(), "eos.gguf")
	if err := modelgen.Write(path, s); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEOGGivesStop(t *testing.T) {
	m := loadModel(t, eosModel(t))
	e := newEngine(t, m, rollout.Options{Group: 8, MaxTokens: 64, Seed: 5, Params: sampler.Params{Temperature: 1}})
	recs, _ := generate(t, e, tinyPrompts[:2])
	stopped := 0
	for _, r := range recs {
		checkRecord(t, m, r, 64)
		if r.Finish == dataset.FinishStop {
			stopped++
			if last := r.Tokens[len(r.Tokens)-1]; !m.IsEOG(last) {
				t.Fatalf("finish stop but last token %d", last)
			}
			if strings.Contains(r.Text, "</s>") {
				t.Fatalf("EOG piece in the text: %q", r.Text)
			}
		}
	}
	if stopped < len(recs)/2 {
		t.Fatalf("only %d of %d completions ended with EOS", stopped, len(recs))
	}
}

func TestBadPromptsReported(t *testing.T) {
	m := loadModel(t, tinyPath)
	long := strings.Repeat("1+", 200)
	prompts := []dataset.Prompt{
		{ID: "ok1", Prompt: "1+1="},
		{ID: "empty"},
		{ID: "long", Prompt: long},
		{ID: "ok2", Prompt: "2+2="},
		{ID: "badchat", Messages: []dataset.Message{{Role: "user", Content: "bad \xff"}}},
	}
	e := newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 8, Parallel: 4, NCtx: 4 * 128, Seed: 1, Params: sampler.Params{Temperature: 1}})
	recs, st := generate(t, e, prompts)
	if len(recs) != 4 || st.Groups != 2 {
		t.Fatalf("%d records, %d groups; want the two good prompts' 4 records", len(recs), st.Groups)
	}
	want := map[string]string{"empty": "empty prompt", "long": "does not fit", "badchat": "UTF-8"}
	if len(st.Errors) != len(want) {
		t.Fatalf("errors %+v", st.Errors)
	}
	for _, re := range st.Errors {
		if !strings.Contains(re.Reason, want[re.ID]) {
			t.Errorf("%s: reason %q, want it to say %q", re.ID, re.Reason, want[re.ID])
		}
	}
}

func TestPromptDecodedOncePerGroup(t *testing.T) {
	m := loadModel(t, tinyPath)
	var n int
	for _, p := range tinyPrompts {
		toks, _ := m.Tokenize(p.Prompt, true, false)
		n += len(toks)
	}
	// NBatch 8: prompts longer than the batch are spread over decodes.
	for _, tc := range []struct{ parallel, nbatch, want int }{{8, 512, n}, {4, 8, n}, {2, 512, 2 * n}, {1, 512, 4 * n}} {
		e := newEngine(t, m, rollout.Options{Group: 4, MaxTokens: 6, Parallel: tc.parallel, NBatch: tc.nbatch, Seed: 1, Params: sampler.Params{Temperature: 1}})
		recs, st := generate(t, e, tinyPrompts)
		if st.PromptTokens != tc.want || len(recs) != 4*len(tinyPrompts) {
			t.Errorf("parallel %d: %d prompt tokens decoded, %d records; want %d", tc.parallel, st.PromptTokens, len(recs), tc.want)
		}
		for _, r := range recs {
			checkRecord(t, m, r, 6)
		}
	}
}

func TestChatPrompts(t *testing.T) {
	m := loadModel(t, tinyPath)
	e := newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 4, Seed: 1, Params: sampler.Params{Temperature: 1}})
	recs, _ := generate(t, e, []dataset.Prompt{{ID: "c", Messages: []dataset.Message{{Role: "user", Content: "1+1?"}}}})
	want := "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
	if recs[0].Prompt != want || recs[0].PromptTokens[1] != 3 {
		t.Fatalf("rendered %q tokens %v", recs[0].Prompt, recs[0].PromptTokens)
	}
	// Options.Chat renders a plain prompt as one user message.
	e = newEngine(t, m, rollout.Options{Group: 1, MaxTokens: 4, Chat: true, Params: sampler.Params{Temperature: 1}})
	recs, _ = generate(t, e, []dataset.Prompt{{ID: "c", Prompt: "1+1?"}})
	if recs[0].Prompt != want {
		t.Fatalf("rendered %q", recs[0].Prompt)
	}
}

// A chat prompt for a model without a chat template (stories260K has none)
// is one error before anything is generated, not a bad record per prompt;
// a named template makes the same prompts work.
func TestChatWithoutTemplateRefused(t *testing.T) {
	m := loadStories(t)
	if m.ChatTemplate() != "" {
		t.Fatalf("stories260K has a chat template now: %q", m.ChatTemplate())
	}
	prompts := []dataset.Prompt{{ID: "plain", Prompt: "Once"}, {ID: "c", Messages: []dataset.Message{{Role: "user", Content: "Hi"}}}}
	e := newEngine(t, m, rollout.Options{Group: 1, MaxTokens: 2, Params: sampler.Params{Temperature: 1}})
	n := 0
	_, err := e.Generate(context.Background(), prompts, func([]dataset.Rollout) error { n++; return nil })
	if err == nil || !strings.Contains(err.Error(), `prompt "c" is a chat`) || !strings.Contains(err.Error(), "stories260K.gguf has no chat template") {
		t.Fatalf("err %v", err)
	}
	if n != 0 {
		t.Fatalf("%d groups emitted before the refusal", n)
	}
	e = newEngine(t, m, rollout.Options{Group: 1, MaxTokens: 2, ChatTemplate: "chatml", Params: sampler.Params{Temperature: 1}})
	if recs, st := generate(t, e, prompts); len(recs) != 2 || len(st.Errors) != 0 {
		t.Fatalf("with chatml: %d records, errors %+v", len(recs), st.Errors)
	}
}

func TestCancel(t *testing.T) {
	m := loadModel(t, tinyPath)
	e := newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 16, Parallel: 2, Seed: 1, Params: sampler.Params{Temperature: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	groups := 0
	st, err := e.Generate(ctx, tinyPrompts, func(g []dataset.Rollout) error {
		groups++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || groups != 1 || st.Groups != 1 {
		t.Fatalf("err %v, %d groups emitted, stats %+v", err, groups, st)
	}
	// The engine is usable again afterwards.
	recs, _ := generate(t, e, tinyPrompts[:1])
	if len(recs) != 2 {
		t.Fatalf("%d records after a cancelled call", len(recs))
	}
}

func TestTeacherForceFromText(t *testing.T) {
	m := loadModel(t, tinyPath)
	e := newEngine(t, m, rollout.Options{Group: 1})
	recs := []*dataset.Rollout{
		{PromptID: "a", Prompt: "What is 12+7?", Text: " The answer is 19."},
		{PromptID: "b", Prompt: "Count: 1, 2,", Text: " 3, 4"},
		{PromptID: "c", Prompt: "empty completion"},
	}
	if err := e.TeacherForce(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[:2] {
		if len(r.Tokens) == 0 || len(r.Logprobs) != len(r.Tokens) || len(r.TokenOffsets) != len(r.Tokens) {
			t.Fatalf("%s: %d tokens, %d logprobs, %d offsets", r.PromptID, len(r.Tokens), len(r.Logprobs), len(r.TokenOffsets))
		}
		var got []byte
		for _, tok := range r.Tokens {
			p, _ := m.TokenPiece(tok, false)
			got = append(got, p...)
		}
		if string(got) != r.Text {
			t.Fatalf("%s: completion tokens %v are %q, want %q", r.PromptID, r.Tokens, got, r.Text)
		}
	}
	// Forcing one record alone gives the same numbers as in a packed batch.
	one := &dataset.Rollout{PromptID: "b", Prompt: "Count: 1, 2,", Text: " 3, 4"}
	if err := e.TeacherForce(context.Background(), []*dataset.Rollout{one}); err != nil {
		t.Fatal(err)
	}
	for i := range one.Logprobs {
		if d := math.Abs(one.Logprobs[i] - recs[1].Logprobs[i]); d > 1e-4 {
			t.Fatalf("alone vs packed: token %d differs by %g", i, d)
		}
	}
	bad := []*dataset.Rollout{{PromptID: "x", Prompt: "p", Tokens: []int32{99999}}}
	if err := e.TeacherForce(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("bad token: err = %v", err)
	}
}

// TestRoundedKVCacheAgreement measures how far rollout and teacher-forced
// log-probs drift apart with the settings that round activations to f16
// (docs/rollout.md quotes these numbers): the exact settings (f32 KV, with
// or without flash attention: on the CPU an f32 cache is not rounded for it,
// patch 0032) agree to 1e-4; the rounded ones stay within 5e-2, an
// order of magnitude above the drift documented for them, so that a broken
// cache (a wrong cell, a stale graph) fails.
func TestRoundedKVCacheAgreement(t *testing.T) {
	m := loadModel(t, tinyPath)
	for _, c := range []struct {
		kv, fa string
		bound  float64
	}{{"f32", "off", 1e-4}, {"f16", "off", 5e-2}, {"f32", "on", 1e-4}, {"f16", "on", 5e-2}} {
		e := newEngine(t, m, rollout.Options{Group: 4, MaxTokens: 24, Parallel: 6, Seed: 3, KVType: c.kv, FlashAttn: c.fa,
			Params: sampler.Params{Temperature: 1}})
		recs, _ := generate(t, e, tinyPrompts)
		dlp, _ := forceCopies(t, e, recs)
		t.Logf("KV %s, flash attention %s: max |rollout - teacher-forced| log-prob %.3g", c.kv, c.fa, dlp)
		if !(dlp <= c.bound) {
			t.Errorf("KV %s, flash attention %s: rollout and teacher-forced log-probs differ by %.3g, want at most %g", c.kv, c.fa, dlp, c.bound)
		}
	}
}

// TestReferenceLoop checks that the benchmarks' C reference loop does the
// same work as the engine: greedy, the same group, the same token count.
func TestReferenceLoop(t *testing.T) {
	m := loadModel(t, tinyPath)
	e := newEngine(t, m, rollout.Options{Group: 4, MaxTokens: 20, Parallel: 4, NCtx: 4 * 64, Params: sampler.Params{Temperature: 0}})
	prompt := "What is 12+7?"
	recs, st := generate(t, e, []dataset.Prompt{{ID: "r", Prompt: prompt}})
	ref, err := llama.NewContext(m, llama.ContextParams{NCtx: 4 * 64, NSeqMax: 4, FlashAttn: llama.FlashAttnOff, TypeK: llama.KVF32, TypeV: llama.KVF32})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	n, err := reference.BatchedGreedy(ref, recs[0].PromptTokens, 4, 20)
	if err != nil {
		t.Fatal(err)
	}
	if n != st.Tokens {
		t.Fatalf("reference loop generated %d tokens, engine %d", n, st.Tokens)
	}
}

// writeAdapter writes a LoRA adapter for the tiny model that changes
// blk.0.attn_q (A and B both nonzero).
func writeAdapter(t *testing.T) string {
	s := modelgen.Tiny()
	w := llama.NewGGUFWriter()
	defer w.Close()
	w.SetString("general.type", "adapter")
	w.SetString("general.architecture", "llama")
	w.SetString("adapter.type", "lora")
	w.SetFloat32("adapter.lora.alpha", 4)
	const r = 4
	a, b := make([]float32, s.Embd*r), make([]float32, r*s.Embd)
	for i := range a {
		a[i] = float32(i%7) * 0.05
	}
	for i := range b {
		b[i] = float32(i%5) * 0.05
	}
	w.AddTensorF32("blk.0.attn_q.weight.lora_a", []int64{int64(s.Embd), r}, a)
	w.AddTensorF32("blk.0.attn_q.weight.lora_b", []int64{r, int64(s.Embd)}, b)
	path := filepath.Join(t.TempDir(), "adapter.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAdapter(t *testing.T) {
	m := loadModel(t, tinyPath)
	a, err := llama.LoadAdapter(m, writeAdapter(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 16, Seed: 1, Params: sampler.Params{Temperature: 1}})
	force := func() []float64 {
		r := &dataset.Rollout{PromptID: "a", Prompt: "What is 12+7?", Text: " The answer is 19."}
		if err := e.TeacherForce(context.Background(), []*dataset.Rollout{r}); err != nil {
			t.Fatal(err)
		}
		return r.Logprobs
	}
	base := force()
	if err := e.SetAdapter(a, 1); err != nil {
		t.Fatal(err)
	}
	adapted := force()
	// Generation runs with the adapter too, and agrees with teacher forcing.
	recs, _ := generate(t, e, tinyPrompts[:2])
	if dlp, _ := forceCopies(t, e, recs); dlp > 1e-4 {
		t.Fatalf("with the adapter, rollout and teacher-forced log-probs differ by %g", dlp)
	}
	if err := e.SetAdapter(nil, 0); err != nil {
		t.Fatal(err)
	}
	again := force()
	changed := 0.0
	for i := range base {
		changed = math.Max(changed, math.Abs(adapted[i]-base[i]))
		if again[i] != base[i] {
			t.Fatalf("token %d: %v after removing the adapter, %v before adding it", i, again[i], base[i])
		}
	}
	if changed < 1e-3 {
		t.Fatalf("the adapter changed the log-probs by only %g", changed)
	}
	t.Logf("adapter moved log-probs by up to %.3g", changed)
}

// The engine's default thread count follows the model's size; a thread
// count given in the options wins.
func TestThreadsDefaultAndOverride(t *testing.T) {
	m := loadModel(t, tinyPath)
	e := newEngine(t, m, rollout.Options{Group: 1, MaxTokens: 1})
	if got, want := e.Options().Threads, rollout.DefaultThreads(m); got != want || got != 1 {
		t.Errorf("tiny model: default threads %d, want DefaultThreads %d = 1", got, want)
	}
	e = newEngine(t, m, rollout.Options{Group: 1, MaxTokens: 1, Threads: 3})
	if got := e.Options().Threads; got != 3 {
		t.Errorf("Threads 3 given: the engine uses %d", got)
	}
}

// TestHugePromptRefusedBeforeTokenizing: issue 23's 50 MB prompt for a
// 128-token context took 2 GB before its rejection. A prompt longer than
// the context can hold at the vocabulary's longest token is refused
// without tokenizing: the memory it costs is a small part of its size.
func TestHugePromptRefusedBeforeTokenizing(t *testing.T) {
	m := loadModel(t, tinyPath)
	huge := strings.Repeat("1+", 10<<20) // 20 MB
	e := newEngine(t, m, rollout.Options{Group: 1, MaxTokens: 8, Parallel: 1, SeqCtx: 128, NCtx: 128, Seed: 1, Params: sampler.Params{Temperature: 1}})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	recs, st := generate(t, e, []dataset.Prompt{{ID: "huge", Prompt: huge}, {ID: "ok", Prompt: "1+1="}})
	runtime.ReadMemStats(&after)
	if len(recs) != 1 || len(st.Errors) != 1 || !strings.Contains(st.Errors[0].Reason, "cannot fit the 128-token context") {
		t.Fatalf("%d records, errors %+v; want the huge prompt refused and the other served", len(recs), st.Errors)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > uint64(len(huge)) {
		t.Fatalf("refusing a %d-byte prompt allocated %d bytes", len(huge), grown)
	}
}

// TestTopLogprobs: with Options.TopLogprobs each token comes with the k most
// likely tokens of its row, best first, the sampled token's log-prob among
// them or below the last; the samples are those of an engine without the
// option, which records none.
func TestTopLogprobs(t *testing.T) {
	m := loadModel(t, tinyPath)
	o := rollout.Options{Group: 3, MaxTokens: 24, Parallel: 6, Seed: 5, NoTiming: true,
		Params: sampler.Params{Temperature: 1.2, TopP: 0.95}}
	plain, _ := generate(t, newEngine(t, m, o), tinyPrompts)
	o.TopLogprobs = 5
	withTop, _ := generate(t, newEngine(t, m, o), tinyPrompts)
	if len(plain) != len(withTop) {
		t.Fatalf("%d records with top log-probs, %d without", len(withTop), len(plain))
	}
	among := 0
	for i, r := range withTop {
		if plain[i].TopLogprobs != nil {
			t.Fatal("an engine without the option recorded top log-probs")
		}
		if !equalInts(r.Tokens, plain[i].Tokens) {
			t.Fatalf("record %d: tokens %v with top log-probs, %v without", i, r.Tokens, plain[i].Tokens)
		}
		if len(r.TopLogprobs) != len(r.Tokens) {
			t.Fatalf("record %d: %d top lists for %d tokens", i, len(r.TopLogprobs), len(r.Tokens))
		}
		for j, top := range r.TopLogprobs {
			if len(top) != 5 {
				t.Fatalf("record %d token %d: %d alternatives, want 5", i, j, len(top))
			}
			found := false
			for k, a := range top {
				if k > 0 && a.Logprob > top[k-1].Logprob {
					t.Fatalf("record %d token %d: alternatives not sorted: %+v", i, j, top)
				}
				if a.Token == r.Tokens[j] {
					found = true
					if a.Logprob != r.Logprobs[j] {
						t.Fatalf("record %d token %d: alternative log-prob %v, token's %v", i, j, a.Logprob, r.Logprobs[j])
					}
				}
				want, err := m.TokenPiece(a.Token, m.IsEOG(a.Token))
				if err != nil || a.Piece != string(want) {
					t.Fatalf("token %d: piece %q, want %q (%v)", a.Token, a.Piece, want, err)
				}
			}
			if found {
				among++
			} else if r.Logprobs[j] > top[4].Logprob {
				t.Fatalf("record %d token %d: sampled log-prob %v above the 5th alternative's %v, yet not listed", i, j, r.Logprobs[j], top[4].Logprob)
			}
		}
	}
	if among == 0 {
		t.Fatal("no sampled token among its row's top 5")
	}
	o.TopLogprobs = 21
	if _, err := rollout.NewEngine(m, o); err == nil {
		t.Fatal("TopLogprobs 21 accepted")
	}
}

// TestCacheSettingsParsedOnce: NewEngine parses the KV cache type and flash
// attention names once (the defaults f32 and, for a model on the CPU alone,
// on; or the names given) and refuses an unknown one at creation, naming it,
// before any context exists.
func TestCacheSettingsParsedOnce(t *testing.T) {
	m := loadModel(t, tinyPath)
	o := newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 4}).Options()
	if o.KVCacheType() != llama.KVF32 || o.FlashAttnMode() != llama.FlashAttnOn {
		t.Errorf("defaults: KV %v, flash attention %v; want f32, on", o.KVCacheType(), o.FlashAttnMode())
	}
	o = newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 4, KVType: "q8_0", FlashAttn: "auto"}).Options()
	if o.KVCacheType() != llama.KVQ8_0 || o.FlashAttnMode() != llama.FlashAttnAuto {
		t.Errorf("q8_0, auto: KV %v, flash attention %v", o.KVCacheType(), o.FlashAttnMode())
	}
	for _, bad := range []rollout.Options{{KVType: "q3_k"}, {FlashAttn: "yes"}} {
		e, err := rollout.NewEngine(m, bad)
		if err == nil {
			e.Close()
			t.Errorf("%+v: accepted", bad)
			continue
		}
		if name := bad.KVType + bad.FlashAttn; !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: error %q does not name %q", bad, err, name)
		}
	}
}
