package tools

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/train"
)

// PretrainOptions says how to train a small model from scratch on a text
// corpus: the full-parameter mode of the trainer, with the supervised loss
// (every token after BOS, advantage 1, token_mean).
type PretrainOptions struct {
	Out       string        // the trained model (GGUF)
	Spec      modelgen.Spec // architecture and initial weights
	Corpus    []string      // training texts; EOS is appended to each
	Steps     int
	BatchSeqs int // texts per step
	LR        float64
	Seed      uint64
	Threads   int
	// Progress, when set, is called after each step.
	Progress func(step int, st train.StepStats)
}

// Pretrain generates a model from Spec, trains it on the corpus and writes it.
func Pretrain(ctx context.Context, o PretrainOptions) error {
	if len(o.Corpus) == 0 {
		return errors.New("pretrain: empty corpus")
	}
	if o.Steps <= 0 || o.BatchSeqs <= 0 {
		return fmt.Errorf("pretrain: %d steps of %d texts", o.Steps, o.BatchSeqs)
	}
	dir := filepath.Dir(o.Out)
	tmp, err := os.CreateTemp(dir, ".pretrain-init-*.gguf")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := modelgen.Write(tmp.Name(), o.Spec); err != nil {
		return err
	}
	m, err := llama.LoadModel(tmp.Name(), llama.ModelParams{NoMmap: true})
	if err != nil {
		return err
	}
	defer m.Close()
	exs, maxLen, err := corpusExamples(m, o.Corpus)
	if err != nil {
		return err
	}
	names, err := train.F32Weights(tmp.Name())
	if err != nil {
		return err
	}
	cfg := train.DefaultConfig()
	cfg.LR = o.LR
	cfg.Threads = o.Threads
	cfg.MicroBatch = max(512, maxLen)
	tr, err := train.NewFullTrainer(m, names, cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	rng := rand.New(rand.NewPCG(o.Seed, 0x70726574))
	order := rng.Perm(len(exs))
	next := 0
	batch := make([]train.Example, o.BatchSeqs)
	for step := 1; step <= o.Steps; step++ {
		for i := range batch {
			if next == len(order) {
				order, next = rng.Perm(len(exs)), 0
			}
			batch[i] = exs[order[next]]
			next++
		}
		st, err := tr.Step(ctx, batch)
		if err != nil {
			return err
		}
		if o.Progress != nil {
			o.Progress(step, st)
		}
	}
	// Write the trained weights into a model file of the same spec.
	spec, err := trainedSpec(o.Spec, tr)
	if err != nil {
		return err
	}
	return modelgen.Write(o.Out, spec)
}

// corpusExamples tokenizes the corpus into training examples (a text's
// first token is its prompt, the rest and an end token its completion),
// leaving out texts of fewer than two tokens; maxLen is the longest.
func corpusExamples(m *llama.Model, corpus []string) (exs []train.Example, maxLen int, err error) {
	for i, text := range corpus {
		toks, err := m.Tokenize(text, true, false)
		if err != nil {
			return nil, 0, fmt.Errorf("corpus text %d: %w", i+1, err)
		}
		if len(toks) < 2 {
			continue
		}
		toks = append(toks, m.Info().EOS)
		exs = append(exs, train.Example{Prompt: toks[:1], Completion: toks[1:], Advantage: 1})
		maxLen = max(maxLen, len(toks))
	}
	return exs, maxLen, nil
}

// trainedSpec is spec with the trainer's weights.
func trainedSpec(spec modelgen.Spec, tr *train.Trainer) (modelgen.Spec, error) {
	values := map[string][]float32{}
	for _, p := range tr.Params() {
		v := make([]float32, p.Len())
		if err := p.Get(v); err != nil {
			return spec, err
		}
		values[p.Name] = v
	}
	spec.Weights = func(name string, n int) []float32 { return values[name] }
	return spec, nil
}
