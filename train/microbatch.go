package train

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/confclip/confclip/llama"
)

// A training pass keeps every layer's activations for the backward pass, so
// its compute buffer grows with the tokens packed into it: about 0.62 MiB a
// token on the 100M-parameter benchmark model (768 wide, 8 layers, 32,000
// tokens of vocabulary), and about 4 MiB at Qwen2.5-0.5B's shape, whose
// 151,936-wide vocabulary rows dominate. The default micro-batch is
// therefore sized from the memory the pass may take (Config.MemoryBytes;
// by default MemoryShare of the memory free where the pass runs, at least
// MinActivationBudget): at most the tokens whose activations but the
// attention's fit it (AutoMicroBatch, at most MaxAutoMicroBatch), and each
// pass's sequences while its whole estimate, the attention of its layout
// included (PassBytes), fits it. A sequence longer than the micro-batch is
// never refused: it runs alone, in a context grown to hold it.
const (
	MemoryShare         = 0.25
	MinActivationBudget = 48 << 20
	MaxAutoMicroBatch   = 4096
)

// Shape is what the activation estimate needs of a model.
type Shape struct {
	Embd, FF, Layers, Heads, Vocab int
	SoftCap                        bool // attention scores soft-capped (gemma2)
	// Entropy: the pass carries the entropy term (train.entropy_coef),
	// whose graph keeps more vocabulary-wide rows per completion row.
	Entropy bool
	// Temperature: the pass scales its logits by 1/T (train.temperature not
	// 1), one more vocabulary-wide row per completion row and its gradient.
	Temperature bool
}

// ModelShape reads a model's shape: its width, feed-forward width (the
// largest layer's, or 4x the width when the file does not say), layers,
// heads and vocabulary.
func ModelShape(m *llama.Model) Shape {
	info := m.Info()
	s := Shape{Embd: info.Embd, Layers: info.Layers, Heads: info.Heads, Vocab: m.NVocab(),
		SoftCap: m.Meta(info.Architecture+".attn_logit_softcapping") != ""}
	// one number, or an array of one per layer: "[2048, 2048, ...]"
	for _, f := range strings.FieldsFunc(m.Meta(info.Architecture+".feed_forward_length"), func(r rune) bool {
		return r == '[' || r == ']' || r == ',' || r == ' '
	}) {
		if n, err := strconv.Atoi(f); err == nil {
			s.FF = max(s.FF, n)
		}
	}
	if s.FF == 0 {
		s.FF = 4 * s.Embd
	}
	return s
}

// ActivationBytes estimates, from above, the compute buffer of a LoRA or
// full training pass over `tokens` packed tokens of which `rows` are
// completion tokens. The terms, in float32: per layer and token 12 vectors
// of the width (norms, Q/K/V, the attention's output, residuals, copies of
// K and V in streams; gemma4's per-layer inputs needed 11) and 3.2 of
// the feed-forward width (gate, up, their product); per layer two
// heads x tokens x tokens score matrices (the packed attention's softmax
// and a gradient; three with soft-capped scores) and the masks; per completion row three vocabulary-wide
// rows (logits, labels, their gradient), two more at a temperature other
// than 1 (the scaled logits and their gradient), and with the entropy term four
// more (its softmax, log and product and their gradients, the allocator
// reusing some: 3.0 rows measured on bench-100m, 32,000 wide); 512 KiB for
// the rest. It is the worst case of a pass of that many tokens (one
// n x n attention product); PassBytes is a given pass's.
// TestActivationEstimate holds both above the measured buffer, and
// PassBytes within 2.5x of it, on every generated architecture and
// stories260K.
func ActivationBytes(s Shape, tokens, rows int) int64 {
	t := int64(tokens)
	return activationBytes(s, tokens, rows, attention{scores: t * t})
}

// attention is a pass's attention layout as patch 0057 chooses it
// (llm_graph_no_memory_layout): the score cells a head, and the query and
// key rows its gathered streams copy (0 without gathering).
type attention struct {
	scores, gathered int64
}

func activationBytes(s Shape, tokens, rows int, a attention) int64 {
	t, r := int64(tokens), int64(rows)
	scores := int64(2)
	if s.SoftCap {
		scores = 3
	}
	// gathered streams copy the queries, keys and values, and the output
	// before it is gathered back, each with a gradient: at most 2 vectors
	// of the width a row
	perLayer := 4*t*(12*int64(s.Embd)+int64(16*s.FF)/5) + 4*scores*int64(s.Heads)*a.scores + 4*2*2*a.gathered*int64(s.Embd)
	vocabRows := int64(3)
	if s.Entropy {
		vocabRows += 4
	}
	if s.Temperature {
		vocabRows += 2
	}
	return int64(s.Layers)*perLayer + 4*vocabRows*r*int64(s.Vocab) + 8*a.scores + 512<<10
}

// PassBytes estimates, from above, the compute buffer of a pass over seqs:
// ActivationBytes with the attention the pass's layout takes (patch 0057:
// one n x n product, streams of sequences of one length, or gathered
// streams, one a set of sequences, their rows padded to the longest),
// instead of one n x n product.
func PassBytes(s Shape, seqs []llama.PGSeq) int64 {
	tokens, rows := 0, 0
	for _, q := range seqs {
		tokens += len(q.Tokens) - q.Shared
		rows += len(q.Tokens) - q.NPrompt
	}
	return activationBytes(s, tokens, rows, passAttention(seqs))
}

// passAttention mirrors llm_graph_no_memory_layout (patch 0057) for a
// pass. A token belongs to the sequences that share it: its owner i and
// those after it whose shared prefixes reach it, a span [i, j]. The tokens
// of one span are a class; a class's queries see the keys of the classes
// whose spans contain its own. Equal-length sequences without sharing
// attend in S streams of L x L; else gathered streams (S x n_q x n_kv: the
// most queries and keys a class has) when fewer than n^2; else n^2.
func passAttention(seqs []llama.PGSeq) attention {
	type span struct{ lo, hi int }
	count := map[span]int64{}
	var spans []span
	n := int64(0)
	for i, q := range seqs {
		for t := q.Shared; t < len(q.Tokens); t++ {
			hi := i
			for hi+1 < len(seqs) && seqs[hi+1].Shared > t {
				hi++
			}
			c := span{i, hi}
			if count[c] == 0 {
				spans = append(spans, c)
			}
			count[c]++
			n++
		}
	}
	one := attention{scores: n * n}
	if len(spans) < 2 {
		return one
	}
	equal := true
	for _, c := range spans {
		equal = equal && c.lo == c.hi && count[c] == count[spans[0]]
	}
	if equal {
		return attention{scores: int64(len(spans)) * count[spans[0]] * count[spans[0]]}
	}
	var nq, nkv int64
	for _, c := range spans {
		kv := int64(0)
		for _, k := range spans {
			if k.lo <= c.lo && c.hi <= k.hi {
				kv += count[k]
			}
		}
		nq, nkv = max(nq, count[c]), max(nkv, kv)
	}
	S := int64(len(spans))
	if float64(S)*float64(nq)*float64(nkv) >= float64(n)*float64(n) {
		return one
	}
	return attention{scores: S * nq * nkv, gathered: S * (nq + nkv)}
}

// Budget is the memory a training pass's activations may take, and where
// the number came from.
type Budget struct {
	Bytes  int64
	Source string // "train.memory", or the share of what was free, and where
}

// MemoryBudget is the activations' budget: bytes when positive (the user's
// train.memory); else MemoryShare of the memory free where the training
// pass runs, the first GPU the model offloads to or this machine's RAM
// (/proc/meminfo's MemAvailable); at least MinActivationBudget. Where the
// free memory cannot be read, MinActivationBudget.
func MemoryBudget(m *llama.Model, bytes int64) Budget {
	if bytes > 0 {
		return Budget{Bytes: bytes, Source: "train.memory"}
	}
	free, where := int64(0), ""
	if d, ok := m.OffloadDevice(); ok {
		free, where = int64(d.MemFree), "free on "+d.Name
	} else if avail, err := memAvailable(); err == nil {
		free, where = avail, "free RAM"
	}
	if free <= 0 {
		return Budget{Bytes: MinActivationBudget, Source: fmt.Sprintf("the %s floor (free memory unknown)", FormatBytes(MinActivationBudget))}
	}
	b := int64(MemoryShare * float64(free))
	if b < MinActivationBudget {
		return Budget{Bytes: MinActivationBudget, Source: fmt.Sprintf("the %s floor (%.0f%% of %s %s is less)", FormatBytes(MinActivationBudget), 100*MemoryShare, FormatBytes(free), where)}
	}
	return Budget{Bytes: b, Source: fmt.Sprintf("%.0f%% of %s %s", 100*MemoryShare, FormatBytes(free), where)}
}

// memAvailable is /proc/meminfo's MemAvailable: the memory a new
// allocation can take without swapping.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest) // "21954420 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10, nil
				}
			}
		}
	}
	return 0, errors.New("/proc/meminfo: no MemAvailable")
}

// FormatBytes writes n in the largest binary unit that keeps it at least
// 1: "512 MiB", "1.5 GiB".
func FormatBytes(n int64) string {
	v, units := float64(n), []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 || v >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f %s", v, units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// ParseBytes reads a memory size: a number and a unit, B, KiB, MiB, GiB or
// TiB (K, M, G, T and KB, MB, GB, TB are taken as the binary units too),
// "2GiB", "1500 MiB", "0.5G". An empty string or "auto" is 0.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" || t == "auto" {
		return 0, nil
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("memory size %q: want a number and a unit, as 2GiB or 512MiB", s)
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("memory size %q: want a number and a unit, as 2GiB or 512MiB", s)
	}
	shift := map[string]uint{"b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20, "g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}
	sh, ok := shift[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("memory size %q: unknown unit %q (want B, KiB, MiB, GiB or TiB)", s, strings.TrimSpace(t[i:]))
	}
	n := v * float64(uint64(1)<<sh)
	if n > math.MaxInt64/2 {
		return 0, fmt.Errorf("memory size %q is too large", s)
	}
	return int64(n), nil
}

// AutoMicroBatch is the default micro-batch of a model's shape for an
// activations' budget: the most tokens (at most MaxAutoMicroBatch, at least
// 1) whose activations but the attention's, every token a completion row,
// fit it. Each pass then holds the sequences whose PassBytes, attention
// included, fit it too.
func AutoMicroBatch(s Shape, budget int64) int {
	lo, hi := 1, MaxAutoMicroBatch // the answer is in [lo, hi]
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if activationBytes(s, mid, mid, attention{}) <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// maxPassSequences is the most sequences llama_pg_eval takes in one pass:
// llama.cpp's LLAMA_MAX_SEQ (llama-cparams.h), the sequence ids of one
// batch. Short sequences fill a pass of thousands of tokens past it.
const maxPassSequences = 256

// initialCapacity bounds the training context a trainer starts with: a
// context is sized for its largest pass (its graph's node budget and the
// compute buffer llama.cpp reserves for an inference pass grow with it), so
// it starts at the micro-batch or this, and grows to the passes' sizes.
const initialCapacity = 512

// contextTokens is the training context's capacity for a micro-batch of n
// tokens: rounded up to 64, so that a run of slightly longer sequences does
// not make a new context each time.
func contextTokens(n int) int { return (max(n, 1) + 63) / 64 * 64 }

// grow gives the trainer a context that holds n tokens in one pass (a
// pass larger than the context so far, or a sequence longer than the
// micro-batch, which runs alone): a new context, with the adapter set on
// it and the profile's totals carried over.
func (t *Trainer) grow(n int) error {
	if n <= t.capacity {
		return nil
	}
	// after Release, the context comes back at its size before (one new
	// context, not one for each sequence packed)
	if err := t.replaceContext(contextTokens(max(n, t.released))); err != nil {
		return fmt.Errorf("a context for a sequence of %d tokens: %w", n, err)
	}
	t.released = 0
	return nil
}

// releasedCapacity is the context a released trainer keeps: the smallest.
const releasedCapacity = 64

// Release frees the training context's buffers (the compute buffer of the
// largest pass so far, the largest part of the real-model demo's peak at
// 1,024 tokens a pass) until the next pass, which grows a context again.
// The RL loop releases its trainer while it samples and evaluates.
func (t *Trainer) Release() error {
	if t.capacity <= releasedCapacity {
		return nil
	}
	c := t.capacity
	if err := t.replaceContext(releasedCapacity); err != nil {
		return err
	}
	t.released = c
	return nil
}

// replaceContext gives the trainer a new context of c tokens, with the
// adapter set on it and the profile's totals carried over.
func (t *Trainer) replaceContext(c int) error {
	nctx, err := t.newContext(c)
	if err != nil {
		return err
	}
	if t.adapter != nil {
		if err := nctx.SetAdapter(t.adapter, 1); err != nil {
			nctx.Close()
			return err
		}
	}
	t.profPrev = mergeProfiles(t.profPrev, t.ctx.Profile())
	t.ctx.Close()
	t.ctx, t.capacity = nctx, c
	return nil
}

// newContext is a training context for micro-batches of up to n tokens.
func (t *Trainer) newContext(n int) (*llama.Context, error) {
	nctx := (n + 255) / 256 * 256 // llama.cpp pads n_ctx to 256
	c, err := llama.NewContext(t.model, llama.ContextParams{NCtx: nctx, NBatch: n, NUBatch: n, NSeqMax: 1,
		Threads: t.cfg.Threads, FlashAttn: llama.FlashAttnOff, TrainingGraphs: true, Profile: t.cfg.Profile})
	if err == nil && t.cfg.QuantizedBackward {
		c.SetQuantizedBackward(true)
	}
	return c, err
}

// quantizedBackwardBytes bounds the Q8_0 copies of the transposed weights
// that train.quantized_backward makes (34 bytes for 32 weights, every
// weight counted): 0 when it is off, the weights are not quantized or the
// model offloads to a GPU.
func quantizedBackwardBytes(m *llama.Model, cfg Config) int64 {
	if !cfg.QuantizedBackward {
		return 0
	}
	if _, gpu := m.OffloadDevice(); gpu {
		return 0
	}
	info := m.Info()
	switch info.FileType {
	case "F32", "F16", "BF16", "unknown":
		return 0
	}
	return int64(info.Params) * 34 / 32
}

// ComputeBufferBytes is the training context's compute buffer: the
// activations and gradients of the largest pass so far.
func (t *Trainer) ComputeBufferBytes() int64 { return t.ctx.ComputeBufferBytes() }
