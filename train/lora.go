// Package train runs the policy-gradient step of METHOD.md on a LoRA adapter
// (or, for small F32 models, on every weight) through llama.cpp's own graph
// and ggml's backward pass, so that the log-probs it trains on are computed by
// the same engine that sampled the rollouts. It also creates, saves and loads
// adapters in llama.cpp's GGUF LoRA format.
package train

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/confclip/confclip/internal/settings"
	"github.com/confclip/confclip/llama"
)

// Targets are the weight matrices a LoRA adapter can adapt, by their GGUF
// names within a block. A family has the ones its blocks hold: phi3 fuses Q,
// K and V into attn_qkv (a target of its own, adapted as one matrix) and the
// gate with the up projection into ffn_up (so it has no ffn_gate); the
// others have attn_q, attn_k and attn_v.
var Targets = []string{"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}

// loraTensor names one adapted weight's A and B.
func loraNames(weight string) (a, b string) { return weight + ".lora_a", weight + ".lora_b" }

// CreateLoRA writes a new adapter for the model to path. As PEFT initialises
// LoRA, A is drawn from U(-1/sqrt(n_in), 1/sqrt(n_in)) (kaiming-uniform with
// a = sqrt(5)) with the seed, and B is zero, so a new adapter changes nothing.
// The file is llama.cpp's GGUF LoRA format, loadable with its tools' --lora.
func CreateLoRA(m *llama.Model, path string, cfg Config) error {
	if len(cfg.Targets) == 0 {
		cfg.Targets = Targets
	}
	if err := settings.Run(cfg, loraChecks()); err != nil {
		return err
	}
	targets := cfg.Targets
	if err := m.CanTrain(); err != nil {
		return err
	}
	arch := m.Architecture()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c6f7261))
	w := newAdapterWriter(arch, cfg.LoraAlpha)
	defer w.Close()
	n := 0
	for l := 0; l < m.Info().Layers; l++ {
		for _, t := range targets {
			name := fmt.Sprintf("blk.%d.%s.weight", l, t)
			shape, err := m.WeightShape(name)
			if err != nil {
				continue // the block has no such weight
			}
			nIn, nOut, r := shape[0], shape[1], int64(cfg.LoraRank)
			a := make([]float32, nIn*r)
			bound := 1 / math.Sqrt(float64(nIn))
			for i := range a {
				a[i] = float32((2*rng.Float64() - 1) * bound)
			}
			an, bn := loraNames(name)
			w.AddTensorF32(an, []int64{nIn, r}, a)
			w.AddTensorF32(bn, []int64{r, nOut}, make([]float32, r*nOut))
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("%s: none of the targets %v found in the model", m.Path(), targets)
	}
	return w.WriteFile(path)
}

func newAdapterWriter(arch string, alpha float64) *llama.GGUFWriter {
	w := llama.NewGGUFWriter()
	w.SetString("general.type", "adapter")
	w.SetString("general.architecture", arch)
	w.SetString("adapter.type", "lora")
	w.SetFloat32("adapter.lora.alpha", float32(alpha))
	return w
}

// AdapterParams returns the adapter's A and B matrices in file order, for the
// trainer, and its alpha. The adapter must have been loaded for the model.
func AdapterParams(a *llama.Adapter) ([]*llama.Param, float64, error) {
	var ps []*llama.Param
	for _, name := range a.TensorNames() {
		p, err := a.Tensor(name)
		if err != nil {
			return nil, 0, err
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, 0, fmt.Errorf("%s: the adapter has no tensors", a.Path())
	}
	return ps, a.Alpha(), nil
}

// SaveLoRA writes the adapter's current values (as trained in memory) to
// path, in the same format, through a temporary file and a rename.
func SaveLoRA(a *llama.Adapter, arch, path string) error {
	ps, alpha, err := AdapterParams(a)
	if err != nil {
		return err
	}
	w := newAdapterWriter(arch, alpha)
	defer w.Close()
	for _, p := range ps {
		v := make([]float32, p.Len())
		if err := p.Get(v); err != nil {
			return err
		}
		w.AddTensorF32(p.Name, p.Shape, v)
	}
	return w.WriteFile(path)
}
