//go:build ignore

// mutants writes N corrupted copies of each GGUF model and runs each through
// `confclip inspect` and `confclip rollout` (with a prompt holding
// characters outside any small vocabulary), counting the runs that died
// from a signal, hit a llama.cpp assert, hung, or were lost (an exit status
// that is neither 0, an error, nor a crash). A clean run exits 0 or with a
// Go error. The mutants that did not run clean are kept in -keep. Besides
// byte and field edits, the mutations are the ones llama.cpp reads
// differently from a plain reader or asserts on: keys shadowed by a copy
// with a NUL, strings cut by a NUL, other tokenizers, missing byte tokens,
// and hyper-parameter keys with values on an edge.
//
//	go run scripts/mutants.go -model ../shared/models/stories260K.gguf,qwen2.gguf -n 1000 -bin bin/confclip
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

var (
	model   = flag.String("model", "../shared/models/stories260K.gguf", "GGUF models to mutate, comma-separated")
	n       = flag.Int("n", 1000, "mutants of each model")
	bin     = flag.String("bin", "bin/confclip", "confclip binary")
	seed    = flag.Uint64("seed", 1, "random seed")
	keep    = flag.String("keep", "build/mutants", "folder for the mutants that did not run clean")
	timeout = flag.Duration("timeout", 60*time.Second, "a run longer than this is a hang")
)

// field is a header field's offset and size (4 or 8 bytes), and what it is.
type field struct {
	off, size int
	kind      string // "type", "count", "len", "value", "dim", "ttype", "offset", "ndims"
}

// kv is where a metadata pair starts (its key's length) and its key.
type kv struct {
	off  int
	key  string
	typ  int
	sval int // a string value's offset (its length), else -1
}

// layout lists the fields of a well-formed GGUF header, its pairs, and
// where the data section starts.
func layout(b []byte) (fields []field, tokens []int, kvs []kv, dataStart int) {
	off := 8
	u32 := func(kind string) int {
		fields = append(fields, field{off, 4, kind})
		v := int(binary.LittleEndian.Uint32(b[off:]))
		off += 4
		return v
	}
	u64 := func(kind string) int {
		fields = append(fields, field{off, 8, kind})
		v := int(binary.LittleEndian.Uint64(b[off:]))
		off += 8
		return v
	}
	str := func() (int, string) {
		start := off
		n := u64("len")
		s := string(b[off : off+n])
		off += n
		return start, s
	}
	size := map[int]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
	nt, nkv := u64("count"), u64("count")
	for i := 0; i < nkv; i++ {
		at, key := str()
		typ := u32("type")
		kvs = append(kvs, kv{off: at, key: key, typ: typ, sval: -1})
		switch typ {
		case 8:
			kvs[len(kvs)-1].sval, _ = str()
		case 9:
			et, cnt := u32("type"), u64("count")
			for j := 0; j < cnt; j++ {
				if et == 8 {
					at, _ := str()
					if key == "tokenizer.ggml.tokens" {
						tokens = append(tokens, at)
					}
				} else {
					if size[et] >= 4 {
						fields = append(fields, field{off, size[et], "value"})
					}
					off += size[et]
				}
			}
		default:
			if size[typ] >= 4 {
				fields = append(fields, field{off, size[typ], "value"})
			}
			off += size[typ]
		}
	}
	for i := 0; i < nt; i++ {
		str()
		nd := u32("ndims")
		for j := 0; j < nd; j++ {
			u64("dim")
		}
		u32("ttype")
		u64("offset")
	}
	return fields, tokens, kvs, off
}

// pair is one metadata pair's bytes.
func pair(key string, typ uint32, val []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(key)))
	out = append(out, key...)
	out = binary.LittleEndian.AppendUint32(out, typ)
	return append(out, val...)
}

func u32le(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func strVal(s string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(s))), s...)
}

// insert puts p before the pair at off and counts it; a zero tail keeps
// the moved tensor data inside the file.
func insert(b []byte, off int, p []byte) []byte {
	out := append(append(append([]byte{}, b[:off]...), p...), b[off:]...)
	binary.LittleEndian.PutUint64(out[16:], binary.LittleEndian.Uint64(out[16:])+1)
	return append(out, make([]byte, 64)...)
}

var tokenizers = []string{"llama", "gpt2", "bert", "t5", "rwkv", "plamo2", "none", "no_vocab", "", "llama\x00x", "gpt"}

var hparamKeys = []string{"expert_count", "expert_used_count", "expert_group_count", "expert_group_used_count",
	"attention.key_length", "attention.value_length", "rope.dimension_count", "attention.head_count",
	"attention.head_count_kv", "block_count", "vocab_size", "context_length", "embedding_length", "feed_forward_length",
	"rope.scaling.original_context_length", "attention.sliding_window"}

// mutateLlama makes one of the changes llama.cpp reads differently from a
// plain reader, or asserts on.
func mutateLlama(r *rand.Rand, b []byte, kvs []kv, tokens []int) ([]byte, string) {
	arch := "llama"
	for _, p := range kvs {
		if p.key == "general.architecture" {
			n := int(binary.LittleEndian.Uint64(b[p.sval:]))
			arch = string(b[p.sval+8 : p.sval+8+n])
		}
	}
	first := kvs[0].off
	switch k := r.IntN(7); k {
	case 0: // a copy of a key with a NUL and another type, before the real one
		p := kvs[r.IntN(len(kvs))]
		typ := uint32(r.IntN(8))
		val := map[uint32][]byte{0: {7}, 1: {7}, 2: {7, 0}, 3: {7, 0}, 4: u32le(7), 5: u32le(7), 6: u32le(7), 7: {1}}[typ]
		return insert(b, p.off, pair(p.key+"\x00x", typ, val)), fmt.Sprintf("key %q shadowed by a NUL copy of type %d", p.key, typ)
	case 1: // the tokenizer model
		for _, p := range kvs {
			if p.key == "tokenizer.ggml.model" {
				n := int(binary.LittleEndian.Uint64(b[p.sval:]))
				t := tokenizers[r.IntN(len(tokenizers))]
				out := append(append([]byte{}, b[:p.sval]...), strVal(t)...)
				out = append(append(out, b[p.sval+8+n:]...), make([]byte, 64)...)
				return out, fmt.Sprintf("tokenizer %q", t)
			}
		}
	case 2: // a NUL inside a token
		at := tokens[r.IntN(len(tokens))]
		if n := int(binary.LittleEndian.Uint64(b[at:])); n > 0 {
			b[at+8+r.IntN(n)] = 0
			return b, fmt.Sprintf("NUL in the token at %d", at)
		}
	case 3: // a byte token renamed
		if i := bytes.Index(b, []byte(fmt.Sprintf("<0x%02X>", 0x80+r.IntN(0x80)))); i >= 0 {
			b[i+1] = 'y'
			return b, fmt.Sprintf("byte token at %d renamed", i)
		}
	case 4: // a hyper-parameter key added with an edge value
		key := arch + "." + hparamKeys[r.IntN(len(hparamKeys))]
		v := interesting32[r.IntN(len(interesting32))]
		if r.IntN(2) == 0 {
			v = uint32(r.IntN(20))
		}
		return insert(b, first, pair(key, 4, u32le(v))), fmt.Sprintf("%s = %d added", key, v)
	case 5: // rope scaling type
		t := []string{"", "cubic", "yarn", "none", "longrope", "linear\x00x"}[r.IntN(6)]
		return insert(b, first, pair(arch+".rope.scaling.type", 8, strVal(t))), fmt.Sprintf("rope.scaling.type %q", t)
	case 6: // alignment
		v := []uint32{1, 2, 4, 8, 16, 64, 3, 0}[r.IntN(8)]
		return insert(b, first, pair("general.alignment", 4, u32le(v))), fmt.Sprintf("general.alignment %d", v)
	}
	b[r.IntN(first)+8] ^= 0xff
	return b, "one header byte inverted"
}

var interesting32 = []uint32{0, 1, 2, 3, 7, 8, 9, 12, 13, 0xff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff,
	math.Float32bits(float32(math.NaN())), math.Float32bits(float32(math.Inf(1))), math.Float32bits(-1), math.Float32bits(1e30)}
var interesting64 = []uint64{0, 1, 2, 1 << 31, 1 << 32, 1 << 40, 1 << 62, 1<<63 - 1, 1 << 63, math.MaxUint64,
	math.Float64bits(math.NaN()), math.Float64bits(math.Inf(-1))}

// mutate returns a corrupted copy of b and says what was done.
func mutate(r *rand.Rand, orig []byte, fields []field, tokens []int, kvs []kv, dataStart int) ([]byte, string) {
	b := bytes.Clone(orig)
	switch k := r.IntN(100); {
	case k < 35:
		return mutateLlama(r, b, kvs, tokens)
	case k < 50: // random bytes of the header
		m := 1 + r.IntN(4)
		for range m {
			b[r.IntN(dataStart)] = byte(r.IntN(256))
		}
		return b, fmt.Sprintf("%d random header bytes", m)
	case k < 85: // a field set to a value on an edge
		f := fields[r.IntN(len(fields))]
		if f.size == 4 {
			v := interesting32[r.IntN(len(interesting32))]
			if r.IntN(3) == 0 {
				v = uint32(r.IntN(48))
			}
			binary.LittleEndian.PutUint32(b[f.off:], v)
			return b, fmt.Sprintf("%s at %d = %#x", f.kind, f.off, v)
		}
		v := interesting64[r.IntN(len(interesting64))]
		if r.IntN(3) == 0 {
			v = uint64(r.IntN(1 << 16))
		}
		binary.LittleEndian.PutUint64(b[f.off:], v)
		return b, fmt.Sprintf("%s at %d = %#x", f.kind, f.off, v)
	case k < 93 && len(tokens) > 1: // two tokens with the same text
		i, j := tokens[r.IntN(len(tokens))], tokens[r.IntN(len(tokens))]
		ni, nj := int(binary.LittleEndian.Uint64(b[i:])), int(binary.LittleEndian.Uint64(b[j:]))
		if i != j && ni == nj {
			copy(b[j+8:j+8+nj], b[i+8:i+8+ni])
			return b, fmt.Sprintf("token at %d copied to %d", i, j)
		}
		b[r.IntN(dataStart)] ^= 0xff
		return b, "one header byte inverted"
	default: // cut short
		at := r.IntN(len(b))
		return b[:at], fmt.Sprintf("truncated at %d", at)
	}
}

var crashSignal = regexp.MustCompile(`\bSIG(SEGV|FPE|BUS|ILL|TRAP|ABRT|SYS): `)

type outcome struct {
	signal, assert, hang bool
	code                 int
	tail                 string
}

func run(args ...string) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, *bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	o := outcome{tail: lastLines(out.String(), 3)}
	if ctx.Err() != nil {
		o.hang = true
		return o
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		o.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			o.signal = true
			o.assert = ws.Signal() == syscall.SIGABRT
		}
	}
	s := out.String()
	// A signal in C code (llama.cpp) reaches the Go runtime, which prints
	// it and exits 2 rather than dying from it.
	if crashSignal.MatchString(s) {
		o.signal = true
	}
	if strings.Contains(s, "GGML_ASSERT") || strings.Contains(s, "terminate called") || strings.Contains(s, "SIGABRT") ||
		strings.Contains(s, "fatal error:") || strings.Contains(s, "panic:") {
		o.assert = true
	}
	return o
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// tally counts one model's mutants: clean mutants (both runs clean), and
// crashed (signal or assert), hung and lost runs.
type tally struct {
	model                           string
	tried, clean, crash, hang, lost int
}

func main() {
	flag.Parse()
	dir, err := os.MkdirTemp("", "confclip-mutants-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer os.RemoveAll(dir)
	prompts := filepath.Join(dir, "prompts.jsonl")
	// Characters outside a small vocabulary: SentencePiece spells them in
	// byte tokens.
	os.WriteFile(prompts, []byte(`{"id":"p1","prompt":"Once upon a time 😀 é ∑","answer":"x"}`+"\n"), 0o644)
	os.MkdirAll(*keep, 0o755)
	var table []tally
	bad := 0
	for mi, m := range strings.Split(*model, ",") {
		t := runModel(m, mi, dir, prompts)
		table = append(table, t)
		bad += t.crash + t.hang + t.lost
	}
	fmt.Printf("\n| trial | tried | clean | crash | hang | lost |\n|---|---|---|---|---|---|\n")
	var sum tally
	for _, t := range table {
		fmt.Printf("| %s | %d | %d | %d | %d | %d |\n", filepath.Base(t.model), t.tried, t.clean, t.crash, t.hang, t.lost)
		sum.tried, sum.clean, sum.crash, sum.hang, sum.lost = sum.tried+t.tried, sum.clean+t.clean, sum.crash+t.crash, sum.hang+t.hang, sum.lost+t.lost
	}
	fmt.Printf("| all | %d | %d | %d | %d | %d |\n", sum.tried, sum.clean, sum.crash, sum.hang, sum.lost)
	if bad > 0 {
		os.Exit(1)
	}
}

// runModel runs -n mutants of one model.
func runModel(model string, mi int, dir, prompts string) tally {
	t := tally{model: model}
	orig, err := os.ReadFile(model)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fields, tokens, kvs, dataStart := layout(orig)
	r := rand.New(rand.NewPCG(*seed, uint64(13+mi)))
	start := time.Now()
	for i := 0; i < *n; i++ {
		b, what := mutate(r, orig, fields, tokens, kvs, dataStart)
		path := filepath.Join(dir, fmt.Sprintf("m%d-%05d.gguf", mi, i))
		os.WriteFile(path, b, 0o644)
		out := filepath.Join(dir, "out.jsonl")
		os.Remove(out)
		ins := run("inspect", path)
		ro := run("rollout", "-m", path, "--data", prompts, "-o", out, "-G", "2", "--max-tokens", "4", "-t", "1", "--ctx", "64", "--no-timing")
		t.tried++
		clean := true
		for _, c := range []struct {
			cmd string
			o   outcome
		}{{"inspect", ins}, {"rollout", ro}} {
			o := c.o
			lost := !o.signal && !o.assert && !o.hang && o.code != 0 && o.code != 1 && o.code != 2
			if o.signal || o.assert || o.hang || lost {
				clean = false
				fmt.Printf("%s mutant %d (%s): %s signal=%v assert=%v hang=%v exit=%d: %s\n", filepath.Base(model), i, what, c.cmd, o.signal, o.assert, o.hang, o.code, o.tail)
			}
			switch {
			case o.signal || o.assert:
				t.crash++
			case o.hang:
				t.hang++
			case lost:
				t.lost++
			}
		}
		if clean {
			t.clean++
		} else {
			os.WriteFile(filepath.Join(*keep, fmt.Sprintf("m%d-%05d.gguf", mi, i)), b, 0o644)
		}
		os.Remove(path)
		if (i+1)%500 == 0 {
			fmt.Printf("%s: %d mutants, %v: %d clean, crashed runs %d, hung %d, lost %d\n",
				filepath.Base(model), i+1, time.Since(start).Round(time.Second), t.clean, t.crash, t.hang, t.lost)
		}
	}
	return t
}
