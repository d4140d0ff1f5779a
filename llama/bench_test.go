package llama_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/reference"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/testkit/testutil"
)

// goGreedy is the Go side of the comparison: the same llama.cpp calls as
// reference.BatchedGreedy with a group of one (prompt decode, then one
// decode per token, argmax over the logits row), made through the Go API.
// inDecode accumulates the time goGreedy spends inside llama_decode, so that
// the Go path's own cost (batch building, checks, logits access, argmax, cgo
// calls) can be measured apart from the machine's noise.
var inDecode time.Duration

func decode(b *testing.B, c *llama.Context, batch *llama.Batch) {
	t0 := time.Now()
	if err := c.Decode(batch); err != nil {
		b.Fatal(err)
	}
	inDecode += time.Since(t0)
}

func goGreedy(b *testing.B, c *llama.Context, batch *llama.Batch, prompt []llama.Token, maxTokens int) int {
	c.ClearKV()
	batch.Clear()
	for i, t := range prompt {
		batch.Add(t, i, []int{0}, i == len(prompt)-1)
	}
	decode(b, c, batch)
	m := c.Model()
	row := batch.Len() - 1
	n := 0
	for step, pos := 0, len(prompt); step < maxTokens; step, pos = step+1, pos+1 {
		l, err := c.Logits(row)
		if err != nil {
			b.Fatal(err)
		}
		best := 0
		for t := 1; t < len(l); t++ {
			if l[t] > l[best] {
				best = t
			}
		}
		n++
		if m.IsEOG(llama.Token(best)) || step == maxTokens-1 {
			break
		}
		batch.Clear()
		batch.Add(llama.Token(best), pos, []int{0}, true)
		row = 0
		decode(b, c, batch)
	}
	return n
}

// BenchmarkGoAgainstC times prefill and single-sequence decode through the Go
// API against a C loop making the same llama.cpp calls, in one run, on the
// generated ~100M-parameter model (written to build/models on first use).
func BenchmarkGoAgainstC(b *testing.B) {
	path := filepath.Join("..", modelgen.BenchPath)
	if err := modelgen.Cached(path, modelgen.Bench()); err != nil {
		b.Skipf("NOT RUN: generating %s: %v", path, err)
	}
	// Both sides call llama_decode from one OS thread, as the C loop does
	// within its call: OpenMP keeps its thread team per calling thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	// KV types and flash attention left empty: llama.cpp's defaults (F16
	// cache, flash attention auto), as a llama.cpp user gets them; the
	// rollout engine's own settings (F32 cache, no flash attention) are
	// compared with both in rollout's BenchmarkEngineVsReference.
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 512, NBatch: 512, Threads: runtime.NumCPU()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// A prompt of 128 tokens the vocabulary's synthetic pieces make up.
	prompt := make([]llama.Token, 128)
	prompt[0] = 1
	for i := 1; i < len(prompt); i++ {
		prompt[i] = llama.Token(300 + i*37%20000)
	}
	const gen = 32
	batch := llama.NewBatch(512, 1)
	defer batch.Close()

	var goPre, cPre, goAll, cAll time.Duration
	var goTok, cTok int
	var preRatios, decRatios []float64
	goRun := func() {
		t0 := time.Now()
		goGreedy(b, c, batch, prompt, 1)
		goPre += time.Since(t0)
		t0 = time.Now()
		goTok += goGreedy(b, c, batch, prompt, gen)
		goAll += time.Since(t0)
	}
	cRun := func() {
		t0 := time.Now()
		if _, err := reference.BatchedGreedy(c, prompt, 1, 1); err != nil {
			b.Fatal(err)
		}
		cPre += time.Since(t0)
		t0 = time.Now()
		n, err := reference.BatchedGreedy(c, prompt, 1, gen)
		if err != nil {
			b.Fatal(err)
		}
		cTok += n
		cAll += time.Since(t0)
	}
	goRun() // warm up caches and the thread pool, then reset
	cRun()
	goPre, cPre, goAll, cAll, goTok, cTok, inDecode = 0, 0, 0, 0, 0, 0, 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate which goes first, so that drift in the machine's speed
		// and cache effects hit both alike.
		gp, ga, cp, ca := goPre, goAll, cPre, cAll
		if i%2 == 0 {
			goRun()
			cRun()
		} else {
			cRun()
			goRun()
		}
		// This pair's ratios (time of C / time of Go = Go speed / C speed).
		preRatios = append(preRatios, (cPre-cp).Seconds()/(goPre-gp).Seconds())
		decRatios = append(decRatios, ((cAll-ca)-(cPre-cp)).Seconds()/((goAll-ga)-(goPre-gp)).Seconds())
	}
	if goTok != cTok {
		b.Fatalf("the Go loop generated %d tokens, the C loop %d", goTok, cTok)
	}
	nb := float64(b.N)
	goPrefill := float64(len(prompt)) * nb / goPre.Seconds()
	cPrefill := float64(len(prompt)) * nb / cPre.Seconds()
	// Decode: the tokens after the first, in the time beyond the prefill.
	dec := float64(goTok) - nb
	goDecode := dec / (goAll - goPre).Seconds()
	cDecode := dec / (cAll - cPre).Seconds()
	b.ReportMetric(goPrefill, "go-prefill-tok/s")
	b.ReportMetric(cPrefill, "c-prefill-tok/s")
	b.ReportMetric(testutil.Median(preRatios), "prefill-go/c")
	b.ReportMetric(goDecode, "go-decode-tok/s")
	b.ReportMetric(cDecode, "c-decode-tok/s")
	b.ReportMetric(testutil.Median(decRatios), "decode-go/c")
	overhead := (goPre + goAll - inDecode).Seconds() / (goPre + goAll).Seconds()
	b.ReportMetric(100*overhead, "go-own-%")
	fmt.Printf("the Go path's own work (outside llama_decode: batch, checks, logits, argmax, cgo): %.3f%% of its time, so Go/C >= %.4f but for noise\n", 100*overhead, 1-overhead)
	fmt.Printf("prefill: Go %.1f tokens/s, C %.1f tokens/s, median pair ratio Go/C %.3f; decode: Go %.1f tokens/s, C %.1f tokens/s, median pair ratio Go/C %.3f (%d pairs)\n",
		goPrefill, cPrefill, testutil.Median(preRatios), goDecode, cDecode, testutil.Median(decRatios), len(decRatios))
}

// BenchmarkAdapterSwap compares the two ways to make a context use a new
// adapter, in one run: in place (ClearAdapters and SetAdapter, which patch
// 0003 makes take effect by disabling the reuse of the previous graph) and
// rebuilt (Close the context and make a new one, what the rollout engine did
// before patch 0003). Each iteration swaps between two adapters and decodes a
// 16-token prompt on a context of 512 tokens x 8 sequences (a rollout
// engine's size), the decode that must see the new adapter. It reports
// both median times per swap and their ratio (rebuilt / in place).
func BenchmarkAdapterSwap(b *testing.B) {
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	var ads [2]*llama.Adapter
	for i := range ads {
		p := filepath.Join(b.TempDir(), "a.gguf")
		w := llama.NewGGUFWriter()
		// An adapter over every attention matrix of the tiny model, by
		// its own tensor names.
		w.SetString("general.type", "adapter")
		w.SetString("general.architecture", m.Architecture())
		w.SetString("adapter.type", "lora")
		w.SetFloat32("adapter.lora.alpha", 4)
		for l := 0; l < m.Info().Layers; l++ {
			for _, t := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
				name := fmt.Sprintf("blk.%d.%s.weight", l, t)
				shape, err := m.WeightShape(name)
				if err != nil {
					b.Fatal(err)
				}
				fill := func(n int64) []float32 {
					v := make([]float32, n)
					for k := range v {
						v[k] = float32((k+i)%7-3) * 0.01
					}
					return v
				}
				w.AddTensorF32(name+".lora_a", []int64{shape[0], 2}, fill(shape[0]*2))
				w.AddTensorF32(name+".lora_b", []int64{2, shape[1]}, fill(2*shape[1]))
			}
		}
		if err := w.WriteFile(p); err != nil {
			b.Fatal(err)
		}
		w.Close()
		if ads[i], err = llama.LoadAdapter(m, p); err != nil {
			b.Fatal(err)
		}
	}
	cp := llama.ContextParams{NCtx: 512, NSeqMax: 8, Threads: 2}
	toks := make([]llama.Token, 16)
	for i := range toks {
		toks[i] = llama.Token(3 + i)
	}
	batch := llama.NewBatch(len(toks), 1)
	defer batch.Close()
	for i, t := range toks {
		batch.Add(t, i, []int{0}, i == len(toks)-1)
	}
	swap := func(c *llama.Context, i int) {
		c.ClearAdapters()
		if err := c.SetAdapter(ads[i%2], 1); err != nil {
			b.Fatal(err)
		}
		c.ClearKV()
		if err := c.Decode(batch); err != nil {
			b.Fatal(err)
		}
	}
	var inPlace, rebuilt []float64 // seconds per swap
	c, err := llama.NewContext(m, cp)
	if err != nil {
		b.Fatal(err)
	}
	inPlaceSwap := func(i int) {
		t0 := time.Now()
		swap(c, i)
		inPlace = append(inPlace, time.Since(t0).Seconds())
	}
	rebuiltSwap := func(i int) {
		t0 := time.Now()
		c.Close()
		if c, err = llama.NewContext(m, cp); err != nil {
			b.Fatal(err)
		}
		swap(c, i)
		rebuilt = append(rebuilt, time.Since(t0).Seconds())
	}
	// Alternate which goes first, so that neither always follows the other.
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			inPlaceSwap(i)
			rebuiltSwap(i + 1)
		} else {
			rebuiltSwap(i)
			inPlaceSwap(i + 1)
		}
	}
	c.Close()
	// Medians: on a shared machine a few swaps take many times the rest.
	ip, rb := testutil.Median(inPlace), testutil.Median(rebuilt)
	b.ReportMetric(ip*1e6, "in-place_µs/swap")
	b.ReportMetric(rb*1e6, "rebuilt_µs/swap")
	b.ReportMetric(rb/ip, "ratio")
}
