package llama_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

// goGreedy is the Go side of the comparison: the same llama.cpp calls as
// llama.ReferenceBatchedGreedy with a group of one (prompt decode, then one
// decode per token, argmax over the logits row), made through the Go API.
func goGreedy(b *testing.B, c *llama.Context, batch *llama.Batch, prompt []llama.Token, maxTokens int) int {
	c.ClearKV()
	batch.Clear()
	for i, t := range prompt {
		batch.Add(t, i, []int{0}, i == len(prompt)-1)
	}
	if err := c.Decode(batch); err != nil {
		b.Fatal(err)
	}
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
		if err := c.Decode(batch); err != nil {
			b.Fatal(err)
		}
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
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
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
	defer batch.Free()

	var goPre, cPre, goAll, cAll time.Duration
	var goTok, cTok int
	for i := 0; i < b.N; i++ {
		// Alternate the two so that drift in the machine's speed hits both.
		t0 := time.Now()
		goGreedy(b, c, batch, prompt, 1)
		goPre += time.Since(t0)
		t0 = time.Now()
		if _, err := llama.ReferenceBatchedGreedy(c, prompt, 1, 1); err != nil {
			b.Fatal(err)
		}
		cPre += time.Since(t0)
		t0 = time.Now()
		goTok += goGreedy(b, c, batch, prompt, gen)
		goAll += time.Since(t0)
		t0 = time.Now()
		n, err := llama.ReferenceBatchedGreedy(c, prompt, 1, gen)
		if err != nil {
			b.Fatal(err)
		}
		cTok += n
		cAll += time.Since(t0)
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
	b.ReportMetric(goPrefill/cPrefill, "prefill-go/c")
	b.ReportMetric(goDecode, "go-decode-tok/s")
	b.ReportMetric(cDecode, "c-decode-tok/s")
	b.ReportMetric(goDecode/cDecode, "decode-go/c")
	fmt.Printf("prefill: Go %.1f tokens/s, C %.1f tokens/s, ratio %.3f; decode: Go %.1f tokens/s, C %.1f tokens/s, ratio %.3f\n",
		goPrefill, cPrefill, goPrefill/cPrefill, goDecode, cDecode, goDecode/cDecode)
}
