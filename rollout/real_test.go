package rollout_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/testkit/testutil"
)

// realChat are chat prompts for the real models: a system prompt that asks
// for a final answer, and word problems.
var realChat = []dataset.Prompt{
	{ID: "r1", Messages: []dataset.Message{
		{Role: "system", Content: "Solve the problem. End with: The answer is N."},
		{Role: "user", Content: "Tom has 3 apples and gets 4 more. How many apples?"}}},
	{ID: "r2", Messages: []dataset.Message{{Role: "user", Content: "What is 12 plus 5?"}}},
}

// TestRealModelsRolloutChatMatchesTeacherForcing samples chat prompts on the
// real models, rendered through each model's chat template as llama.cpp
// renders it (SmolLM2's GGUF carries a ChatML template; Gemma 3's file
// carries none, so the built-in "gemma" is named), and teacher-forces every
// completion.
//
// On SmolLM2's exact F32 dequantization the rollout's log-probs equal
// teacher forcing's within 1e-4 (measured 7.6e-6), as on every F32 model.
// On the quantized files as shipped they do not (a finding, measured
// 2 December 2026: max 0.23 on SmolLM2's Q4_1, 0.36 on Gemma's Q4_K_M): a
// quantized product quantizes its input rows to 8 bits, and the 1e-6
// differences between a decode step and a whole-sequence pass (attention's
// order of sums) move some inputs across a rounding boundary, a jump of one
// 8-bit step that the following layers carry on. Equality there needs
// kernels that compute a row the same way in either pass. On llama.cpp
// 0c1e57098 the two passes part further (measured 4 December 2026: 0.745 on
// SmolLM2's Q4_1, 0.433 on Gemma's Q4_K_M), its quantized products taking
// different kernels for a decode step's few rows and a whole sequence's
// many (the tiled K-quant product, patch 0048; repacked layouts). Until
// then the quantized files are held to the measured spread with room
// (1.5), which a wrong template, token or position still breaks: those
// move most tokens by several nats.
func TestRealModelsRolloutChatMatchesTeacherForcing(t *testing.T) {
	for _, c := range []struct {
		name, tmpl, turn string
		f32              bool // compare the exact F32 dequantization
		bound            float64
	}{
		{"smollm2-135m-instruct", "", "<|im_start|>assistant\n", true, 1e-4},
		{"smollm2-135m-instruct", "", "<|im_start|>assistant\n", false, 1.5},
		{"gemma3-270m", "gemma", "<start_of_turn>model\n", false, 1.5},
	} {
		name := c.name
		if c.f32 {
			name += "-f32"
		}
		t.Run(name, func(t *testing.T) {
			path := testutil.RealModel(t, c.name)
			if c.f32 {
				f32 := filepath.Join(t.TempDir(), "f32.gguf")
				if err := llama.Quantize(path, f32, "f32", 0); err != nil {
					t.Fatal(err)
				}
				path = f32
			}
			m := loadModel(t, path)
			e := newEngine(t, m, rollout.Options{Group: 4, MaxTokens: 32, Parallel: 6, Seed: 5, ChatTemplate: c.tmpl,
				Params: sampler.Params{Temperature: 1}})
			recs, st := generate(t, e, realChat)
			if len(recs) != 4*len(realChat) || len(st.Errors) != 0 {
				t.Fatalf("%d records, stats %+v", len(recs), st)
			}
			for _, r := range recs {
				if !strings.HasSuffix(r.Prompt, c.turn) {
					t.Fatalf("%s: prompt %q does not open the assistant's turn %q", r.PromptID, r.Prompt, c.turn)
				}
				checkRecord(t, m, r, 32)
			}
			dlp, dent := forceCopies(t, e, recs)
			t.Logf("%s: max |rollout - teacher-forced| log-prob %.3g, entropy %.3g over %d tokens", name, dlp, dent, st.Tokens)
			if !(dlp <= c.bound) {
				t.Fatalf("log-probs differ by %g, bound %g", dlp, c.bound)
			}
		})
	}
}
