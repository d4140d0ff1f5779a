package train

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/testkit/testutil"
)

// The per-architecture checks of every generated family (modelgen.Archs):
// gradient checks in LoRA and full-parameter mode, the training forward
// against decoding, the direction of a step, and the adapter's round trip
// through llama.cpp's own LoRA loader. docs/architectures.md reports their
// numbers (go test ./train -run TestArch -v).

func loadArch(t *testing.T, arch string, noMmap bool) (*llama.Model, string) {
	t.Helper()
	path := testutil.ArchModel(t, arch)
	m, err := llama.LoadModel(path, llama.ModelParams{NoMmap: noMmap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, path
}

// archExamples are longer than the gemma models' sliding window of 4, so
// that the windowed mask matters.
func archExamples(t *testing.T, m *llama.Model) []Example {
	t.Helper()
	return tokenizedExamples(t, m, [][2]string{{"12+7=", "19 ok"}, {"What is 3*4?", " 12 yes"}, {"abc", "defgh"}})
}

// archStep is the finite-difference step of an architecture's LoRA
// gradient check. jais2's squared ReLU has a kink in its second derivative
// at 0: a step of 2e-2 that crosses it leaves the five-point stencil an
// O(h^2) error, 2.9e-3 at 2e-2, 1.4e-3 at 1e-2 and 4.6e-4 at 5e-3 (the
// analytic gradient is the same at each), so jais2 takes the smaller step.
func archStep(arch string) float32 {
	if arch == "jais2" {
		return 5e-3
	}
	return 2e-2
}

func TestArchLoRAGradientCheck(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, _ := loadArch(t, arch, false)
			a := newAdapter(t, m, true)
			tr, err := NewLoRATrainer(m, a, testConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			worst := gradCheck(t, tr, archExamples(t, m), 1, archStep(arch))
			t.Logf("ARCH %s lora-gradcheck worst-rel-err %.2e over %d tensors", arch, worst, len(tr.params))
		})
	}
}

func TestArchFullGradientCheck(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, path := loadArch(t, arch, true)
			names, err := F32Weights(path)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := NewFullTrainer(m, names, testConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			worst := gradCheck(t, tr, archExamples(t, m), 1, archFullStep(arch))
			t.Logf("ARCH %s full-gradcheck worst-rel-err %.2e over %d tensors", arch, worst, len(tr.params))
		})
	}
}

// TestArchTrainingForwardMatchesDecode: the training graph (no KV cache,
// three packed sequences) gives the log-probs decoding gives (F32 cache, no
// flash attention) within 1e-5.
func TestArchTrainingForwardMatchesDecode(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, _ := loadArch(t, arch, false)
			a := newAdapter(t, m, true)
			tr, err := NewLoRATrainer(m, a, testConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			exs := archExamples(t, m)
			got, err := tr.LogProbs(exs)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for i, e := range exs {
				want := decodeLogProbs(t, m, a, e)
				for k := range want {
					worst = math.Max(worst, math.Abs(float64(got[i][k])-want[k]))
				}
			}
			t.Logf("ARCH %s forward-vs-decode max-abs-logprob-diff %.2e", arch, worst)
			if worst > 1e-5 {
				t.Fatalf("training forward log-probs differ from decode by %g", worst)
			}
		})
	}
}

// TestArchStepDirection: two LoRA steps on one example with advantage +1
// raise its log-prob; with -1 they lower it.
func TestArchStepDirection(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, _ := loadArch(t, arch, false)
			for _, adv := range []float64{1, -1} {
				a := newAdapter(t, m, false)
				tr, err := NewLoRATrainer(m, a, testConfig())
				if err != nil {
					t.Fatal(err)
				}
				e := archExamples(t, m)[0]
				e.Advantage = adv
				before := meanLogProb(t, tr, e)
				for i := 0; i < 2; i++ {
					if _, err := tr.Step(context.Background(), []Example{e}); err != nil {
						t.Fatal(err)
					}
				}
				after := meanLogProb(t, tr, e)
				tr.Close()
				t.Logf("ARCH %s advantage %+g mean-logprob %.5f -> %.5f", arch, adv, before, after)
				if (adv > 0 && after <= before) || (adv < 0 && after >= before) {
					t.Fatalf("advantage %+g moved the mean log-prob from %g to %g", adv, before, after)
				}
			}
		})
	}
}

// TestArchAdapterRoundTrip: a trained adapter saved and loaded back by
// llama.cpp's LoRA loader decodes exactly as the one trained in memory, and
// differs from the base model.
func TestArchAdapterRoundTrip(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, _ := loadArch(t, arch, false)
			a := newAdapter(t, m, false)
			tr, err := NewLoRATrainer(m, a, testConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			exs := archExamples(t, m)
			for i := 0; i < 2; i++ {
				if _, err := tr.Step(context.Background(), exs); err != nil {
					t.Fatal(err)
				}
			}
			out := filepath.Join(t.TempDir(), "trained.gguf")
			if err := SaveLoRA(a, m.Architecture(), out); err != nil {
				t.Fatal(err)
			}
			b, err := llama.LoadAdapter(m, out)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if arch == "phi3" && !hasTensor(b, "blk.0.attn_qkv.weight.lora_a") {
				t.Fatalf("phi3 adapter without the fused attn_qkv target: %v", b.TensorNames())
			}
			moved := false
			for _, e := range exs {
				want := decodeLogProbs(t, m, a, e)
				got := decodeLogProbs(t, m, b, e)
				base := decodeLogProbs(t, m, nil, e)
				for k := range want {
					if got[k] != want[k] {
						t.Fatalf("log-prob %d: %v with the loaded adapter, %v with the trained one", k, got[k], want[k])
					}
					moved = moved || got[k] != base[k]
				}
			}
			if !moved {
				t.Fatal("the trained adapter did not change any log-prob")
			}
		})
	}
}

func hasTensor(a *llama.Adapter, name string) bool {
	for _, n := range a.TensorNames() {
		if n == name {
			return true
		}
	}
	return false
}

// TestArchCanTrain: llama.cpp's check (llama_model_training_unsupported)
// passes every generated family.
func TestArchCanTrain(t *testing.T) {
	for _, arch := range modelgen.Archs {
		m, _ := loadArch(t, arch, false)
		if err := m.CanTrain(); err != nil {
			t.Errorf("%s: %v", arch, err)
		}
	}
}

// writeMamba writes a one-layer mamba model (a recurrent state instead of a
// KV cache) with the tiny vocabulary.
func writeMamba(t *testing.T) string {
	t.Helper()
	tokens, scores, types := modelgen.Vocab(modelgen.Tiny())
	const e, inner, conv, state, dtRank = 16, 32, 4, 4, 2
	w := llama.NewGGUFWriter()
	defer w.Close()
	w.SetString("general.architecture", "mamba")
	w.SetString("general.name", "confclip-tiny-mamba")
	w.SetUint32("mamba.context_length", 256)
	w.SetUint32("mamba.embedding_length", e)
	w.SetUint32("mamba.block_count", 1)
	w.SetUint32("mamba.feed_forward_length", 0)
	w.SetUint32("mamba.attention.head_count", 1) // unused by mamba
	w.SetUint32("mamba.ssm.conv_kernel", conv)
	w.SetUint32("mamba.ssm.inner_size", inner)
	w.SetUint32("mamba.ssm.state_size", state)
	w.SetUint32("mamba.ssm.time_step_rank", dtRank)
	w.SetFloat32("mamba.attention.layer_norm_rms_epsilon", 1e-5)
	w.SetString("tokenizer.ggml.model", "llama")
	w.SetStrings("tokenizer.ggml.tokens", tokens)
	w.SetFloat32s("tokenizer.ggml.scores", scores)
	w.SetInt32s("tokenizer.ggml.token_type", types)
	w.SetUint32("tokenizer.ggml.bos_token_id", 1)
	w.SetUint32("tokenizer.ggml.eos_token_id", 2)
	v := int64(len(tokens))
	for _, ts := range []struct {
		name  string
		shape []int64
	}{
		{"token_embd.weight", []int64{e, v}}, {"output_norm.weight", []int64{e}}, {"output.weight", []int64{e, v}},
		{"blk.0.attn_norm.weight", []int64{e}}, {"blk.0.ssm_in.weight", []int64{e, 2 * inner}},
		{"blk.0.ssm_conv1d.weight", []int64{conv, inner}}, {"blk.0.ssm_conv1d.bias", []int64{inner}},
		{"blk.0.ssm_x.weight", []int64{inner, dtRank + 2*state}}, {"blk.0.ssm_dt.weight", []int64{dtRank, inner}},
		{"blk.0.ssm_dt.bias", []int64{inner}}, {"blk.0.ssm_a", []int64{state, inner}}, {"blk.0.ssm_d", []int64{inner}},
		{"blk.0.ssm_out.weight", []int64{inner, e}},
	} {
		n := int64(1)
		for _, d := range ts.shape {
			n *= d
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(i%7-3) * 0.05
		}
		w.AddTensorF32(ts.name, ts.shape, data)
	}
	path := filepath.Join(t.TempDir(), "mamba.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestArchRecurrentRefused: a recurrent model (mamba) loads and decodes, but
// training it is refused with the reason, by CreateLoRA and by the full
// trainer, before any graph is built.
func TestArchRecurrentRefused(t *testing.T) {
	path := writeMamba(t)
	m, err := llama.LoadModel(path, llama.ModelParams{NoMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = m.CanTrain()
	if err == nil || !strings.Contains(err.Error(), "mamba") || !strings.Contains(err.Error(), "recurrent") {
		t.Fatalf("want a refusal naming mamba and its recurrent state, got %v", err)
	}
	if err := CreateLoRA(m, filepath.Join(t.TempDir(), "a.gguf"), Config{LoraRank: 2, LoraAlpha: 4}); err == nil || !strings.Contains(err.Error(), "recurrent") {
		t.Fatalf("CreateLoRA: %v", err)
	}
	if _, err := NewFullTrainer(m, []string{"blk.0.ssm_in.weight"}, testConfig()); err == nil || !strings.Contains(err.Error(), "recurrent") {
		t.Fatalf("NewFullTrainer: %v", err)
	}
}

// TestArchHybridRefused: every architecture modelgen writes but confclip
// does not train (qwen35: gated delta-net layers between its attention
// layers) loads and decodes, and training it is refused with the reason,
// by CanTrain, CreateLoRA and the full trainer, before any graph is built.
func TestArchHybridRefused(t *testing.T) {
	if len(modelgen.RecurrentArchs) == 0 {
		t.Fatal("modelgen.RecurrentArchs is empty")
	}
	for _, arch := range modelgen.RecurrentArchs {
		t.Run(arch, func(t *testing.T) {
			m, path := loadArch(t, arch, true)
			if got := m.Architecture(); got != arch {
				t.Fatalf("loaded as %q", got)
			}
			// It decodes: log-probs of a sequence are finite.
			for k, lp := range decodeLogProbs(t, m, nil, archExamples(t, m)[0]) {
				if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 0 {
					t.Fatalf("decoded log-prob %d is %v", k, lp)
				}
			}
			err := m.CanTrain()
			if err == nil || !strings.Contains(err.Error(), arch) || !strings.Contains(err.Error(), "recurrent") {
				t.Fatalf("want a refusal naming %s and its recurrent layers, got %v", arch, err)
			}
			if err := CreateLoRA(m, filepath.Join(t.TempDir(), "a.gguf"), Config{LoraRank: 2, LoraAlpha: 4}); err == nil || !strings.Contains(err.Error(), "recurrent") {
				t.Fatalf("CreateLoRA: %v", err)
			}
			names, err := F32Weights(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := NewFullTrainer(m, names, testConfig()); err == nil || !strings.Contains(err.Error(), "recurrent") {
				t.Fatalf("NewFullTrainer: %v", err)
			}
		})
	}
}

// TestAttentionStreams: a micro-batch of sequences of one length attends in
// streams, one L x L product a sequence (patch 0039); sequences of varied
// lengths in gathered streams (patch 0057: each sequence's rows gathered
// and padded to the longest) when their scores, S x L_max^2, are fewer
// than one n_tokens x n_tokens product's, else in that one product and a
// mask. For every architecture: the loss, the gradient and the log-probs
// of each layout's micro-batch equal those of each sequence alone
// (gradientsAgree, logProbsAgree), and of three passes of 128 tokens (112
// completion rows each), 4 x 32 (streams) and 24 + 40 + 24 + 40 (gathered
// streams) need a smaller compute buffer than 113 + 5 + 5 + 5 (one mask:
// its gathered streams would be 4 x 113^2 scores): the streams are taken.
func TestAttentionStreams(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			m, _ := loadArch(t, arch, false)
			a := newAdapter(t, m, true)
			alone := microBatchTrainer(t, m, a, 1)
			worst := 0.0
			for _, lengths := range [][]int{{12, 12, 12}, {10, 16, 12}, {30, 5, 5}} {
				exs := lengthExamples(m, 4, lengths, 1)
				one := microBatchTrainer(t, m, a, 256)
				_, w := gradientsAgree(t, one, alone, exs)
				logProbsAgree(t, one, alone, exs, 1e-5)
				worst = max(worst, w)
			}

			bytes := func(lengths []int) int64 {
				tr := microBatchTrainer(t, m, a, 128)
				st, err := tr.Gradient(context.Background(), lengthExamples(m, 4, lengths, 2))
				if err != nil {
					t.Fatal(err)
				}
				if st.MicroBatches != 1 {
					t.Fatalf("%v: %d micro-batches", lengths, st.MicroBatches)
				}
				return tr.ComputeBufferBytes()
			}
			streams, gathered, mask := bytes([]int{32, 32, 32, 32}), bytes([]int{24, 40, 24, 40}), bytes([]int{113, 5, 5, 5})
			t.Logf("ARCH %s streams: gradient within %.1e of each sequence alone; compute buffer %.2f MiB in streams, %.2f MiB in gathered streams, %.2f MiB with one mask",
				arch, worst, float64(streams)/(1<<20), float64(gathered)/(1<<20), float64(mask)/(1<<20))
			if streams >= mask || gathered >= mask {
				t.Errorf("compute buffer %d bytes for 4 x 32 tokens, %d for 24 + 40 + 24 + 40, %d for 113 + 5 + 5 + 5: no streams", streams, gathered, mask)
			}
		})
	}
}

// archFullStep is the finite-difference step of an architecture's
// full-parameter gradient check. gemma4 multiplies its token embeddings by
// sqrt(n_embd) (8) into the first layer and projects them into every
// layer's per-layer inputs, so a step of 2e-2 on one entry moves the first
// layer's input by 0.16 against a size of 1: the stencil's truncation error
// reaches 2.6e-3 on token_embd at 2e-2 and 5.7e-4 at 1e-2 (the analytic
// gradient is the same at each), so gemma4 takes the smaller step.
func archFullStep(arch string) float32 {
	if arch == "gemma4" {
		return 1e-2
	}
	return 2e-2
}
