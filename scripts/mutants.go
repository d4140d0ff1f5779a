//go:build ignore

// mutants writes N corrupted copies of a GGUF model and runs each through
// `confclip inspect` and `confclip rollout`, counting the runs that died
// from a signal, hit a llama.cpp assert, or hung. A clean run exits 0 or
// with a Go error. The mutants that did not run clean are kept in -keep.
//
//	go run scripts/mutants.go -model ../shared/models/stories260K.gguf -n 1000 -bin bin/confclip
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
	model   = flag.String("model", "../shared/models/stories260K.gguf", "GGUF model to mutate")
	n       = flag.Int("n", 1000, "mutants")
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

// layout lists the fields of a well-formed GGUF header and where the data
// section starts.
func layout(b []byte) (fields []field, tokens []int, dataStart int) {
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
		_, key := str()
		typ := u32("type")
		switch typ {
		case 8:
			str()
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
	return fields, tokens, off
}

var interesting32 = []uint32{0, 1, 2, 3, 7, 8, 9, 12, 13, 0xff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff,
	math.Float32bits(float32(math.NaN())), math.Float32bits(float32(math.Inf(1))), math.Float32bits(-1), math.Float32bits(1e30)}
var interesting64 = []uint64{0, 1, 2, 1 << 31, 1 << 32, 1 << 40, 1 << 62, 1<<63 - 1, 1 << 63, math.MaxUint64,
	math.Float64bits(math.NaN()), math.Float64bits(math.Inf(-1))}

// mutate returns a corrupted copy of b and says what was done.
func mutate(r *rand.Rand, orig []byte, fields []field, tokens []int, dataStart int) ([]byte, string) {
	b := bytes.Clone(orig)
	switch k := r.IntN(100); {
	case k < 25: // random bytes of the header
		m := 1 + r.IntN(4)
		for range m {
			b[r.IntN(dataStart)] = byte(r.IntN(256))
		}
		return b, fmt.Sprintf("%d random header bytes", m)
	case k < 80: // a field set to a value on an edge
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
	case k < 90 && len(tokens) > 1: // two tokens with the same text
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

func main() {
	flag.Parse()
	orig, err := os.ReadFile(*model)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fields, tokens, dataStart := layout(orig)
	dir, err := os.MkdirTemp("", "confclip-mutants-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer os.RemoveAll(dir)
	prompts := filepath.Join(dir, "prompts.jsonl")
	os.WriteFile(prompts, []byte(`{"id":"p1","prompt":"Once upon a time","answer":"x"}`+"\n"), 0o644)
	os.MkdirAll(*keep, 0o755)
	r := rand.New(rand.NewPCG(*seed, 13))
	var signals, asserts, hangs, loaded, rolled int
	start := time.Now()
	for i := 0; i < *n; i++ {
		b, what := mutate(r, orig, fields, tokens, dataStart)
		path := filepath.Join(dir, fmt.Sprintf("m%04d.gguf", i))
		os.WriteFile(path, b, 0o644)
		out := filepath.Join(dir, "out.jsonl")
		os.Remove(out)
		ins := run("inspect", path)
		ro := run("rollout", "-m", path, "--data", prompts, "-o", out, "-G", "2", "--max-tokens", "4", "-t", "1", "--ctx", "64", "--no-timing")
		if ins.code == 0 && !ins.signal && !ins.hang {
			loaded++
		}
		if ro.code == 0 && !ro.signal && !ro.hang {
			rolled++
		}
		bad := false
		for cmd, o := range map[string]outcome{"inspect": ins, "rollout": ro} {
			if o.signal || o.assert || o.hang {
				bad = true
				fmt.Printf("mutant %d (%s): %s signal=%v assert=%v hang=%v: %s\n", i, what, cmd, o.signal, o.assert, o.hang, o.tail)
			}
			if o.signal {
				signals++
			}
			if o.assert {
				asserts++
			}
			if o.hang {
				hangs++
			}
		}
		if bad {
			os.WriteFile(filepath.Join(*keep, fmt.Sprintf("m%04d.gguf", i)), b, 0o644)
		}
		os.Remove(path)
		if (i+1)%100 == 0 {
			fmt.Printf("%d mutants, %v: signals %d, asserts %d, hangs %d; inspect ok %d, rollout ok %d\n",
				i+1, time.Since(start).Round(time.Second), signals, asserts, hangs, loaded, rolled)
		}
	}
	fmt.Printf("done: %d mutants of %s in %v: signals %d, asserts %d, hangs %d (runs of inspect and rollout); inspect ok %d, rollout ok %d\n",
		*n, *model, time.Since(start).Round(time.Second), signals, asserts, hangs, loaded, rolled)
	if signals+asserts+hangs > 0 {
		os.Exit(1)
	}
}
