package llama_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/testkit/testutil"
)

// decodeGoldenPaths hold the logits of normal decoding (with the KV cache)
// of every generated architecture. The first was recorded on AVX2 (the
// portable build's Haswell variant) with the patch set before the training
// attention went into llama.cpp's generic graph code (patch 0009), which
// only adds a path for graphs built without a memory context, so decoding
// must give the same bits. The second was recorded on AVX-512 (AMD EPYC
// Zen 4, GGML_NATIVE) with patches up to 0043, before patch 0044 changed
// how llamafile's F32 and F16 products sum their accumulators and order
// their tiles, meant to keep every bit. The test compares bits with the
// file recorded on this CPU's features, else samples with the first.
// Rerecord (CONFCLIP_RECORD_DECODE=1 for the first, or the file's path)
// only when an upstream or patch change is meant to change inference.
var decodeGoldenPaths = []string{"testdata/decode_logits.json", "testdata/decode_logits_avx512.json"}

type decodeGolden struct {
	// CPU is llama.SystemInfo() where the file was recorded: float results
	// are bit-for-bit comparable only on the same CPU features.
	CPU   string                          `json:"cpu"`
	Archs map[string]map[string]decodeRun `json:"archs"`
}

type decodeRun struct {
	SHA256 string    `json:"sha256"` // of every logit's float32 bits, positions in order
	Sample []float32 `json:"sample"` // a few logits per position, for other CPUs
}

// decodeConfigs are the two ways rollouts decode: llama.cpp's defaults (F16
// cache, flash attention auto) and an F32 cache without flash attention.
var decodeConfigs = map[string]llama.ContextParams{
	"default":      {NCtx: 256, Threads: 2},
	"f32-no-fattn": {NCtx: 256, Threads: 2, TypeK: llama.KVF32, TypeV: llama.KVF32, FlashAttn: llama.FlashAttnOff},
}

// crossCPUBound is how far a sampled logit may be from the recorded one
// (absolute, relative above 1) when the test runs on other CPU features than
// the recording's: other ggml kernels (AVX2, AVX-512, NEON) sum in other
// orders and round F16 differently, so only bits on the same CPU are promised.
// Measured against the file's AVX2 recording, largest difference over the 7
// architectures: the AVX-512 build (AMD EPYC Zen 4, GGML_NATIVE=ON) 8.3e-4
// with the F16 cache (qwen2, qwen3, gemma2, gemma3 all 4.7e-4 to 8.3e-4) and
// 1.4e-6 with the F32 cache; the arm64 build (NEON, ARMv8.2 with dot
// products and F16 arithmetic, make test-arm64's libraries, this test under
// qemu-aarch64) 6.4e-4 and 2.4e-6. TestCPUVariantsAgree compares every
// logit, not a sample, between the portable build's variants on that
// machine: up to 2.85e-3 (gemma3, AVX-512 against AVX2) and 1.3e-3 (llama,
// the SSE2 baseline against AVX2) with the F16 cache, 2.8e-6 with the F32
// cache. The bounds are about 3.5 times the largest (the tests log each
// architecture's largest difference).
var crossCPUBound = map[string]float64{"default": 1e-2, "f32-no-fattn": 1e-5}

// decodeLogits runs 12 tokens through the model, 7 in one batch then 5 one
// at a time (so the cache, the masks and the sliding windows of 4 are all
// exercised), and returns the logits of every position.
func decodeLogits(t *testing.T, m *llama.Model, p llama.ContextParams) [][]float32 {
	t.Helper()
	c, err := llama.NewContext(m, p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks := []llama.Token{1, 270, 281, 292, 303, 314, 325, 336, 347, 358, 369, 380}
	b := llama.NewBatch(len(toks), 1)
	defer b.Close()
	var out [][]float32
	run := func(from, to int) {
		b.Clear()
		for i := from; i < to; i++ {
			if _, err := b.Add(toks[i], i, []int{0}, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Decode(b); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < to-from; i++ {
			l, err := c.Logits(i)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]float32(nil), l...))
		}
	}
	run(0, 7)
	for i := 7; i < len(toks); i++ {
		run(i, i+1)
	}
	return out
}

func summarize(logits [][]float32) decodeRun {
	h := sha256.New()
	var r decodeRun
	var buf [4]byte
	for pos, l := range logits {
		for _, v := range l {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			h.Write(buf[:])
		}
		r.Sample = append(r.Sample, l[0], l[3], l[(pos*37+11)%len(l)], l[len(l)-1])
	}
	r.SHA256 = hex.EncodeToString(h.Sum(nil))
	return r
}

// unrecorded are the generated architectures that llama.cpp only has since
// 0c1e57098, long after the training attention patch: there is no decoding
// from before the patch to record. Their decoding is checked against the
// training graph instead (train's TestArchTrainingForwardMatchesDecode).
var unrecorded = map[string]bool{"gemma4": true, "nanbeige": true, "jais2": true, "maincoder": true}

// TestDecodeUnchanged compares normal decoding of every generated
// architecture with the logits recorded before the training attention patch:
// bit for bit on the CPU they were recorded on, within 1e-4 elsewhere.
func TestDecodeUnchanged(t *testing.T) {
	got := decodeGolden{CPU: llama.SystemInfo(), Archs: map[string]map[string]decodeRun{}}
	for _, arch := range modelgen.Archs {
		m, err := llama.LoadModel(testutil.ArchModel(t, arch), llama.ModelParams{})
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		got.Archs[arch] = map[string]decodeRun{}
		for name, p := range decodeConfigs {
			got.Archs[arch][name] = summarize(decodeLogits(t, m, p))
		}
		m.Close()
	}
	if rec := os.Getenv("CONFCLIP_RECORD_DECODE"); rec != "" {
		path := decodeGoldenPaths[0]
		if rec != "1" {
			path = rec
		}
		data, _ := json.MarshalIndent(got, "", " ")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %s", path)
		return
	}
	var want decodeGolden
	var wantPath string
	for i, path := range decodeGoldenPaths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var w decodeGolden
		if err := json.Unmarshal(data, &w); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if i == 0 || w.CPU == got.CPU {
			want, wantPath = w, path
		}
	}
	sameCPU := want.CPU == got.CPU
	if !sameCPU {
		t.Logf("recorded on %q, running on %q: comparing sampled logits within the cross-CPU bounds, not bits", want.CPU, got.CPU)
	}
	for _, arch := range modelgen.Archs {
		if unrecorded[arch] {
			if _, ok := want.Archs[arch]; ok {
				t.Errorf("%s is recorded in %s: take it out of unrecorded", arch, wantPath)
			}
			continue
		}
		for name := range decodeConfigs {
			w, ok := want.Archs[arch][name]
			if !ok {
				t.Errorf("%s %s: not in %s", arch, name, wantPath)
				continue
			}
			g := got.Archs[arch][name]
			if sameCPU {
				if g.SHA256 != w.SHA256 {
					t.Errorf("%s, %s decoding: logits changed (sha256 %s, recorded %s)", arch, name, g.SHA256[:12], w.SHA256[:12])
				}
				continue
			}
			if len(g.Sample) != len(w.Sample) {
				t.Errorf("%s, %s decoding: %d sampled logits, recorded %d", arch, name, len(g.Sample), len(w.Sample))
				continue
			}
			worst, at := 0.0, 0
			for k := range w.Sample {
				d := math.Abs(float64(g.Sample[k]-w.Sample[k])) / math.Max(1, math.Abs(float64(w.Sample[k])))
				if d > worst || math.IsNaN(d) {
					worst, at = d, k
				}
			}
			t.Logf("%s, %s decoding: largest difference %.3g (sampled logit %d: %g, recorded %g)", arch, name, worst, at, g.Sample[at], w.Sample[at])
			if bound := crossCPUBound[name]; worst > bound || math.IsNaN(worst) {
				t.Errorf("%s, %s decoding: sampled logit %d is %g, recorded %g: difference %.3g over the cross-CPU bound %g", arch, name, at, g.Sample[at], w.Sample[at], worst, bound)
			}
		}
	}
}
