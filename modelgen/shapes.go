package modelgen

import (
	"fmt"
	"slices"
	"strings"
)

// A shape is a real model's layout: its config's dimensions, vocabulary
// size, head layout and tied embeddings (every model here ties its output
// to the token embedding), with Write's random weights.
type shape struct {
	name, arch                       string
	embd, layers, heads, headsKV, ff int
	headDim, vocab, ctx              int
	ropeBase, eps                    float32
	window                           int // sliding window (gemma3)
	llama3                           *Llama3Rope
	params                           int64 // the published parameter count (the checkpoint's safetensors)
}

// shapes are the configs (config.json) of the models users run, with the
// parameter counts their checkpoints publish; TestShapeParams checks that
// Tensors adds up to each, and TestShapeMatchesRealFile the two that
// make real-models downloads against the files, tensor by tensor.
var shapes = []shape{
	{name: "smollm2-135m", arch: "llama", embd: 576, layers: 30, heads: 9, headsKV: 3, ff: 1536, vocab: 49152, ctx: 8192, ropeBase: 100000, eps: 1e-5, params: 134_515_008},
	{name: "smollm2-360m", arch: "llama", embd: 960, layers: 32, heads: 15, headsKV: 5, ff: 2560, vocab: 49152, ctx: 8192, ropeBase: 100000, eps: 1e-5, params: 361_821_120},
	{name: "smollm2-1.7b", arch: "llama", embd: 2048, layers: 24, heads: 32, headsKV: 32, ff: 8192, vocab: 49152, ctx: 8192, ropeBase: 130000, eps: 1e-5, params: 1_711_376_384},
	{name: "qwen2.5-0.5b", arch: "qwen2", embd: 896, layers: 24, heads: 14, headsKV: 2, ff: 4864, vocab: 151936, ctx: 32768, ropeBase: 1e6, eps: 1e-6, params: 494_032_768},
	{name: "qwen2.5-1.5b", arch: "qwen2", embd: 1536, layers: 28, heads: 12, headsKV: 2, ff: 8960, vocab: 151936, ctx: 32768, ropeBase: 1e6, eps: 1e-6, params: 1_543_714_304},
	{name: "qwen3-0.6b", arch: "qwen3", embd: 1024, layers: 28, heads: 16, headsKV: 8, headDim: 128, ff: 3072, vocab: 151936, ctx: 40960, ropeBase: 1e6, eps: 1e-6, params: 596_049_920},
	{name: "llama-3.2-1b", arch: "llama", embd: 2048, layers: 16, heads: 32, headsKV: 8, ff: 8192, vocab: 128256, ctx: 131072, ropeBase: 500000, eps: 1e-5,
		llama3: &Llama3Rope{Factor: 32, LowFreq: 1, HighFreq: 4, OrigCtx: 8192}, params: 1_235_814_400},
	{name: "gemma-3-270m", arch: "gemma3", embd: 640, layers: 18, heads: 4, headsKV: 1, headDim: 256, ff: 2048, vocab: 262144, ctx: 32768, ropeBase: 1e6, eps: 1e-6, window: 512, params: 268_098_176},
	{name: "gemma-3-1b", arch: "gemma3", embd: 1152, layers: 26, heads: 4, headsKV: 1, headDim: 256, ff: 6912, vocab: 262144, ctx: 32768, ropeBase: 1e6, eps: 1e-6, window: 512, params: 999_885_952},
}

// Shapes are the names Shape takes.
func Shapes() []string {
	names := make([]string, len(shapes))
	for i, s := range shapes {
		names[i] = s.name
	}
	return names
}

// Shape is the spec of a real model's layout with random weights: the
// dimensions, vocabulary size, head layout, RoPE base, norm epsilon and
// tied embeddings of its config. The vocabulary is the tiny model's pieces
// padded with synthetic ones to the real size (a SentencePiece vocabulary,
// whatever tokenizer the model has: the size is what costs), so the file
// costs what the real model costs per token, at every stage.
func Shape(name string) (Spec, error) {
	i := slices.IndexFunc(shapes, func(s shape) bool { return s.name == strings.ToLower(name) })
	if i < 0 {
		return Spec{}, fmt.Errorf("modelgen: unknown shape %q (want one of %s)", name, strings.Join(Shapes(), ", "))
	}
	sh := shapes[i]
	s := Tiny()
	s.Arch, s.Name = sh.arch, "confclip-shape-"+sh.name
	s.Embd, s.Layers, s.Heads, s.HeadsKV, s.FF, s.Ctx = sh.embd, sh.layers, sh.heads, sh.headsKV, sh.ff, sh.ctx
	s.HeadDim, s.ExtraVocab, s.Tied = sh.headDim, sh.vocab, true
	s.RopeBase, s.NormEps, s.SlidingWindow, s.Llama3Rope = sh.ropeBase, sh.eps, sh.window, sh.llama3
	return s, nil
}
