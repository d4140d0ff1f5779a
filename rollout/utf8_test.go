package rollout_test

import (
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
)

// TestInvalidUTF8PromptIsBad: a prompt whose text is not valid UTF-8 is a
// bad prompt, reported and skipped (it used to be tokenized with
// replacement characters); the other prompts are sampled.
func TestInvalidUTF8PromptIsBad(t *testing.T) {
	m := loadModel(t, tinyPath)
	prompts := []dataset.Prompt{
		{ID: "ok", Prompt: "1+1="},
		{ID: "raw", Prompt: "1+\xff1="},
		{ID: "read", Prompt: "1+\ufffd1=", BadText: "the line is not valid UTF-8 (byte 0xff at offset 20)"},
	}
	e := newEngine(t, m, rollout.Options{Group: 2, MaxTokens: 4, Parallel: 2, NCtx: 2 * 128, Seed: 1, Params: sampler.Params{Temperature: 1}})
	recs, st := generate(t, e, prompts)
	if len(recs) != 2 || st.Groups != 1 {
		t.Fatalf("%d records, %d groups; want the good prompt's 2 records", len(recs), st.Groups)
	}
	if len(st.Errors) != 2 {
		t.Fatalf("errors %+v, want raw and read", st.Errors)
	}
	for _, re := range st.Errors {
		if (re.ID != "raw" && re.ID != "read") || !strings.Contains(re.Reason, "not valid UTF-8") {
			t.Errorf("%s: %q", re.ID, re.Reason)
		}
	}
}
