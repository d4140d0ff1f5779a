package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

// groupExamples are groups of g completions (lengths drawn from 4 to
// 4+spread) of prompts of the given lengths, a group's examples one after
// another and sharing their prompt, as a rollout writes them.
func groupExamples(m *llama.Model, prompts []int, g, spread int, seed uint64) []Example {
	rng := rand.New(rand.NewPCG(seed, 3))
	tok := func() llama.Token { return llama.Token(3 + rng.IntN(m.NVocab()-3)) }
	var exs []Example
	for _, pl := range prompts {
		p := make([]llama.Token, pl)
		for j := range p {
			p[j] = tok()
		}
		for range g {
			c := make([]llama.Token, 4+rng.IntN(spread+1))
			for j := range c {
				c[j] = tok()
			}
			exs = append(exs, Example{Prompt: p, Completion: c, Advantage: rng.Float64() - 0.5})
		}
	}
	return exs
}

// promptTrainer is microBatchTrainer with or without shared prompts.
func promptTrainer(t *testing.T, m *llama.Model, a *llama.Adapter, microBatch int, unshared bool) *Trainer {
	t.Helper()
	tr := microBatchTrainer(t, m, a, microBatch)
	tr.cfg.UnsharedPrompts = unshared
	return tr
}

// stepGrads is promptTrainer's gradient of exs: the step's stats and the
// gradient.
func stepGrads(t *testing.T, m *llama.Model, a *llama.Adapter, exs []Example, microBatch int, unshared bool) (StepStats, [][]float32) {
	t.Helper()
	tr := promptTrainer(t, m, a, microBatch, unshared)
	st, err := tr.Gradient(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	return st, snapshotGrads(tr)
}

// gradsClose holds got to want within gradientsAgree's bounds: every
// entry within 1e-5 + 1e-3 of its size.
func gradsClose(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	for j := range want {
		for k := range want[j] {
			if d := math.Abs(float64(got[j][k] - want[j][k])); d > 1e-5+1e-3*math.Abs(float64(want[j][k])) {
				t.Fatalf("%s: param %d[%d]: gradient %g, want %g", what, j, k, got[j][k], want[j][k])
			}
		}
	}
}

// TestSharedPrompts: a group's completions packed into one pass share
// their prompt (llama.PGSeq.Shared: its tokens once in the micro-batch,
// every sequence attending to them, in gathered streams, patch 0057). On
// every architecture, a pass of two groups of three (prompts of 9 and 7
// tokens, longer than the gemma models' window of 4; completions of 4-12)
// gives the loss, the gradient and the log-probs of each sequence alone
// (gradientsAgree's bounds; log-probs within 1e-5), and it computes
// 2 x 2 x (prompt - 1) tokens fewer (so does a group with one long
// completion, which one mask serves better than padded streams): the followers' prompts but their last
// token, whose logits predict their first completion token. The same pass
// without sharing (Config.UnsharedPrompts, the finding: every prompt G
// times) shares nothing and agrees too.
func TestSharedPrompts(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, _ := loadArch(t, arch, false)
			a := newAdapter(t, m, true)
			exs := groupExamples(m, []int{9, 7}, 3, 8, 1)
			shared, alone := microBatchTrainer(t, m, a, 256), microBatchTrainer(t, m, a, 1)
			st, worst := gradientsAgree(t, shared, alone, exs)
			if want := 2 * (9 - 1 + 7 - 1); st.SharedTokens != want {
				t.Errorf("%d prompt tokens shared, want %d", st.SharedTokens, want)
			}
			logProbsAgree(t, shared, alone, exs, 1e-5)

			// one long completion: gathered streams would pad every
			// sequence to it (4 x 61 x 69 scores), so the pass takes one
			// mask over tokens of several sequences
			skewed := groupExamples(m, []int{9}, 3, 0, 3)
			skewed[0].Completion = lengthExamples(m, 4, []int{64}, 4)[0].Completion // 60 tokens
			sk, worstSk := gradientsAgree(t, microBatchTrainer(t, m, a, 256), alone, skewed)
			if sk.SharedTokens != 2*(9-1) {
				t.Errorf("one long completion: %d prompt tokens shared, want %d", sk.SharedTokens, 2*(9-1))
			}
			logProbsAgree(t, microBatchTrainer(t, m, a, 256), alone, skewed, 1e-5)
			worst = max(worst, worstSk)

			su, worstU := gradientsAgree(t, promptTrainer(t, m, a, 256, true), alone, exs)
			if su.SharedTokens != 0 {
				t.Errorf("UnsharedPrompts: %d prompt tokens shared", su.SharedTokens)
			}
			t.Logf("ARCH %s shared prompts: gradient within %.1e of each sequence alone (%.1e unshared), %d of %d tokens shared",
				arch, worst, worstU, st.SharedTokens, st.AllTokens)
		})
	}
}

// TestSharedPromptsMixed: sharing follows the packing, not the groups: a
// sequence shares the leading prompt tokens it has in common with the one
// before it in its pass (a common template prefix of two prompts too), a
// pass's first sequence none; a zero-weight sequence left out is skipped
// over; the step's gradient is the one with nothing shared, micro-batch by
// micro-batch (passes of 48 tokens: groups split across passes).
func TestSharedPromptsMixed(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	exs := groupExamples(m, []int{12, 5, 12}, 4, 10, 2)
	exs[5].Advantage = 0 // left out: the next one shares with exs[4]
	// the third group's prompt begins with the second's (a template):
	// exs[8] shares those 5 tokens with exs[7]
	copy(exs[8].Prompt[:5], exs[4].Prompt)
	for _, mb := range []int{48, 512} {
		ss, gs := stepGrads(t, m, a, exs, mb, false)
		su, gu := stepGrads(t, m, a, exs, mb, true)
		if ss.SharedTokens == 0 || su.SharedTokens != 0 || ss.AllTokens != su.AllTokens {
			t.Fatalf("micro-batch %d: %d and %d tokens shared (shared / unshared), %d and %d tokens", mb, ss.SharedTokens, su.SharedTokens, ss.AllTokens, su.AllTokens)
		}
		if mb == 512 {
			// one pass: every follower shares its group's prompt but the
			// last token; exs[6] with exs[4] (exs[5] left out); exs[8]
			// the 5 tokens of exs[7]'s prompt
			if want := 3*(12-1) + 2*(5-1) + 5 + 3*(12-1); ss.SharedTokens != want || ss.MicroBatches != 1 {
				t.Errorf("%d tokens shared in %d passes, want %d in 1", ss.SharedTokens, ss.MicroBatches, want)
			}
		}
		if math.Abs(ss.Loss-su.Loss) > 1e-5 {
			t.Errorf("micro-batch %d: loss %g shared, %g not", mb, ss.Loss, su.Loss)
		}
		gradsClose(t, fmt.Sprintf("micro-batch %d, shared against not", mb), gs, gu)
		t.Logf("micro-batch %d: %d passes, %d of %d tokens shared", mb, ss.MicroBatches, ss.SharedTokens, ss.AllTokens)
	}
}

// TestLargeSharedPass: on every architecture a pass of 4 groups of 8
// (prompts of 100 tokens, completions of 4-104: 4,964 tokens, 2,772 of
// them shared) runs in one micro-batch of 4,096 tokens, the largest default
// one, with the gradient of the same step without sharing (two passes).
// Before patch 0057 capped a training context's node budget, nanbeige's
// context of 4,096 tokens aborted the process (ggml_init: the scheduler's
// headers asked for 29 GB).
func TestLargeSharedPass(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, _ := loadArch(t, arch, false)
			a := newAdapter(t, m, true)
			exs := groupExamples(m, []int{100, 100, 100, 100}, 8, 100, 1)
			ss, gs := stepGrads(t, m, a, exs, MaxAutoMicroBatch, false)
			su, gu := stepGrads(t, m, a, exs, MaxAutoMicroBatch, true)
			if ss.MicroBatches != 1 || ss.SharedTokens != 4*7*99 || su.MicroBatches != 2 {
				t.Fatalf("%d passes, %d tokens shared; unshared %d passes", ss.MicroBatches, ss.SharedTokens, su.MicroBatches)
			}
			if math.Abs(ss.Loss-su.Loss) > 1e-4 {
				t.Errorf("loss %g shared, %g not", ss.Loss, su.Loss)
			}
			gradsClose(t, "shared against not", gs, gu)
		})
	}
}

// TestManyShortSequences: a pass holds at most 256 sequences (llama.cpp's
// LLAMA_MAX_SEQ, the ids of one batch): 300 sequences of 8 tokens, 2,400
// tokens, fit the micro-batch of 4,096 but go in two passes, with the
// gradient of a sequence a pass.
func TestManyShortSequences(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	exs := groupExamples(m, slices.Repeat([]int{4}, 60), 5, 0, 5)
	st, g := stepGrads(t, m, a, exs, MaxAutoMicroBatch, false)
	if st.MicroBatches != 2 || st.Sequences != 300 {
		t.Fatalf("%d sequences in %d passes, want 300 in 2", st.Sequences, st.MicroBatches)
	}
	_, ga := stepGrads(t, m, a, exs, 1, false)
	gradsClose(t, "2 passes against a sequence a pass", g, ga)
}
