// Package tools holds what the commands do beside the stages of pipeline:
// build information, inspecting a GGUF file, tokenizing, generating models
// and task data, and pre-training a small model from scratch.
package tools

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/tasks"
)

// BuildInfo describes the llama.cpp this program is linked with.
type BuildInfo struct {
	GoVersion   string   `json:"go_version"`
	Platform    string   `json:"platform"`
	LlamaCommit string   `json:"llama_commit"` // the libraries' (llama.LibraryCommit)
	LlamaPin    string   `json:"llama_pin"`    // the project's (llama.LlamaCommit)
	BuildStamp  string   `json:"build_stamp"`
	Backends    []string `json:"backends"` // ggml devices, the names model.device takes
	System      string   `json:"system"`   // compiled backends and CPU features
	// Devices are the devices the compiled backends found, with their memory.
	Devices []llama.Device `json:"devices"`
}

// Build returns what the program is linked with.
func Build() BuildInfo {
	return BuildInfo{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		LlamaCommit: llama.LibraryCommit(), LlamaPin: llama.LlamaCommit, BuildStamp: llama.BuildStamp, Backends: llama.Backends(), System: llama.SystemInfo(),
		Devices: llama.Devices()}
}

// FileInfo is what Inspect reads from a GGUF file: a model's metadata, or
// an adapter's when the file is a LoRA adapter.
type FileInfo struct {
	Path     string `json:"path"`
	FileSize int64  `json:"file_size"`
	Tensors  int    `json:"tensors"`
	// Adapter is set for LoRA adapter files (no model is loaded then).
	Adapter *AdapterInfo `json:"adapter,omitempty"`
	llama.Info
}

// AdapterInfo is a LoRA adapter's metadata.
type AdapterInfo struct {
	Architecture string `json:"architecture"`
	AdapterType  string `json:"adapter_type"`
	Alpha        any    `json:"alpha"`
}

// Inspect reads a GGUF file's metadata: a model's (vocab-only files too) or
// a LoRA adapter's.
func Inspect(path string, vocabOnly bool) (FileInfo, error) {
	g, err := llama.OpenGGUF(path)
	if err != nil {
		return FileInfo{}, err
	}
	fi := FileInfo{Path: path, FileSize: g.FileSize(), Tensors: len(g.Tensors())}
	if g.String("general.type") == "adapter" {
		alpha, _ := g.Get("adapter.lora.alpha")
		fi.Adapter = &AdapterInfo{Architecture: g.String("general.architecture"), AdapterType: g.String("adapter.type"), Alpha: alpha}
		fi.Info.Architecture = fi.Adapter.Architecture
		g.Close()
		return fi, nil
	}
	g.Close()
	m, err := llama.LoadModel(path, llama.ModelParams{VocabOnly: vocabOnly || fi.Tensors == 0})
	if err != nil {
		return fi, err
	}
	defer m.Close()
	fi.Info = m.Info()
	return fi, nil
}

// TokenPiece is a token id and its text.
type TokenPiece struct {
	ID    int32  `json:"id"`
	Piece string `json:"piece"`
}

// Tokenize splits text into the model's tokens (only the tokenizer is
// loaded). addSpecial adds BOS/EOS as the model does; parseSpecial turns
// special-token text such as <|im_start|> into its id.
func Tokenize(modelPath, text string, addSpecial, parseSpecial bool) ([]TokenPiece, error) {
	if modelPath == "" {
		return nil, pipeline.ErrNoModel
	}
	m, err := llama.LoadModel(modelPath, llama.ModelParams{VocabOnly: true})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	toks, err := m.Tokenize(text, addSpecial, parseSpecial)
	if err != nil {
		return nil, err
	}
	out := make([]TokenPiece, len(toks))
	for i, t := range toks {
		p, err := m.TokenPiece(t, true)
		if err != nil {
			return nil, err
		}
		out[i] = TokenPiece{ID: t, Piece: string(p)}
	}
	return out, nil
}

// GenModelOptions say which test model GenModel writes.
type GenModelOptions struct {
	Out  string
	Size string // tiny (about 100K parameters) or bench (about 100M)
	Arch string // a tiny model's architecture, one of modelgen.Archs ("" = llama)
	// Shape, when set, is a real model's layout (one of ModelShapes) with
	// random weights, instead of Size and Arch.
	Shape    string
	Seed     uint64
	Quantize string // "" keeps F32; else one of QuantTypes
}

// ModelShapes are the real models' layouts GenModelOptions.Shape takes.
func ModelShapes() []string { return modelgen.Shapes() }

// ModelArchs are the architectures GenModelOptions.Arch takes that confclip
// trains.
func ModelArchs() []string { return modelgen.Archs }

// UntrainedModelArchs are the architectures GenModel also writes but
// training refuses (recurrent layers: qwen35); they load and decode.
func UntrainedModelArchs() []string { return modelgen.RecurrentArchs }

// QuantTypes are the types GenModelOptions.Quantize and Quantize take.
func QuantTypes() []string { return llama.QuantTypes() }

// Quantize writes a copy of the model at in, quantized to typ, to out
// (llama.cpp's quantizer; threads 0 = every core).
func Quantize(in, out, typ string, threads int) error { return llama.Quantize(in, out, typ, threads) }

// GenModel writes a deterministic model with random weights (for tests and
// benchmarks): a tiny one of any of modelgen.Archs, the llama benchmark
// model, or a real model's layout (Shape).
func GenModel(o GenModelOptions) error {
	var s modelgen.Spec
	arch := o.Arch
	if arch == "" {
		arch = "llama"
	}
	switch {
	case o.Shape != "":
		if (o.Size != "" && o.Size != "tiny") || arch != "llama" {
			return fmt.Errorf("a shape sets the size and architecture: give --shape alone, or --size and --arch")
		}
		var err error
		if s, err = modelgen.Shape(o.Shape); err != nil {
			return err
		}
	case o.Size == "tiny" || o.Size == "":
		var err error
		if s, err = modelgen.TinyArch(arch); err != nil {
			return err
		}
	case o.Size == "bench":
		if arch != "llama" {
			return fmt.Errorf("size bench is a llama model; architecture %q needs size tiny", arch)
		}
		s = modelgen.Bench()
	default:
		return fmt.Errorf("size %q: want tiny or bench", o.Size)
	}
	s.Seed = o.Seed
	if o.Quantize == "" {
		return modelgen.Write(o.Out, s)
	}
	f32 := o.Out + ".f32.tmp"
	defer os.Remove(f32)
	if err := modelgen.Write(f32, s); err != nil {
		return err
	}
	return llama.Quantize(f32, o.Out, o.Quantize, 0)
}

// Defaults of GenTaskOptions.
const (
	DefaultMaxOperand     = tasks.DefaultMaxOperand
	DefaultMaxWordOperand = tasks.DefaultMaxWordOperand
)

// GenTaskOptions say what synthetic arithmetic task GenTask writes.
type GenTaskOptions struct {
	Dir            string
	N              int    // problems in all
	HeldOut        int    // problems kept for eval.jsonl
	RL             int    // problems kept out of the corpus for RL (train.jsonl gets only these)
	Seed           uint64 // the same seed gives the same files
	MaxOperand     int
	MaxWordOperand int
	Ops            string // kinds of problem, comma-separated: add, sub, mul, word
	// System, when set, makes train.jsonl and eval.jsonl chats for an
	// instruct model: this system message and the question as the user's.
	System string
}

// GenTaskResult names the files GenTask wrote.
type GenTaskResult struct {
	Train, Eval, Corpus       string
	TrainN, EvalN, CorpusN, N int
}

// GenTask writes Dir/train.jsonl and Dir/eval.jsonl (prompt records, math
// verifier) and Dir/corpus.txt (one prompt+solution a line, for
// pre-training a small model).
func GenTask(o GenTaskOptions) (GenTaskResult, error) {
	var res GenTaskResult
	ops, err := tasks.ParseOps(o.Ops)
	if err != nil {
		return res, err
	}
	opts := tasks.Options{MaxOperand: o.MaxOperand, MaxWordOperand: o.MaxWordOperand, Ops: ops}
	if err := opts.Validate(); err != nil {
		return res, err
	}
	if o.HeldOut+o.RL >= o.N || o.RL < 0 || o.HeldOut < 0 {
		return res, fmt.Errorf("held-out %d and rl %d leave no corpus problems out of n %d", o.HeldOut, o.RL, o.N)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return res, err
	}
	ps := tasks.Generate(o.Seed, o.N, opts)
	res.N = len(ps)
	trainPs, evalPs := tasks.Split(ps, o.HeldOut, o.Seed)
	pre := trainPs
	if o.RL > 0 {
		// RL prompts the pre-trained model has not seen: its training
		// accuracy then starts where its held-out accuracy does.
		pre, trainPs = trainPs[o.RL:], trainPs[:o.RL]
	}
	res.Train, res.Eval, res.Corpus = filepath.Join(o.Dir, "train.jsonl"), filepath.Join(o.Dir, "eval.jsonl"), filepath.Join(o.Dir, "corpus.txt")
	if err := tasks.WritePrompts(res.Train, trainPs, o.System); err != nil {
		return res, err
	}
	if err := tasks.WritePrompts(res.Eval, evalPs, o.System); err != nil {
		return res, err
	}
	// The corpus holds neither the held-out problems (so that the held-out
	// accuracy measures problems the model has not seen) nor, with RL, the
	// RL prompts.
	corpus := tasks.Corpus(pre, o.Seed)
	if err := atomicfile.Write(res.Corpus, func(w io.Writer) error { return tasks.WriteCorpus(w, corpus) }); err != nil {
		return res, err
	}
	res.TrainN, res.EvalN, res.CorpusN = len(trainPs), len(evalPs), len(corpus)
	return res, nil
}

// ReadCorpus reads training texts, one a line.
func ReadCorpus(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	corpus, err := tasks.ReadCorpus(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(corpus) == 0 {
		return nil, fmt.Errorf("%s: %w", path, errors.New("no texts"))
	}
	return corpus, nil
}

// PretrainSpec is the architecture Pretrain gives a small llama model: the
// tiny model's tokenizer with the given sizes.
func PretrainSpec(embd, layers, heads int, seed uint64) modelgen.Spec {
	s := modelgen.Tiny()
	s.Name = "confclip-pretrained"
	s.Embd, s.Layers, s.Heads, s.HeadsKV = embd, layers, heads, heads
	s.FF, s.Ctx, s.Seed = 4*embd, 512, seed
	return s
}
