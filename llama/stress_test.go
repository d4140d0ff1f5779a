package llama_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

// stressRounds is how often the stress tests go round: CONFCLIP_STRESS_ROUNDS
// (`make test` runs them under GOGC=1 and GOEXPERIMENT=cgocheck2), else 2,
// so the ordinary test run exercises them too.
func stressRounds(t *testing.T) int {
	if s := os.Getenv("CONFCLIP_STRESS_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CONFCLIP_STRESS_ROUNDS=%q: want a positive integer", s)
		}
		return n
	}
	return 2
}

// TestStressBindings drives every kind of C call the package makes, over and
// over, while the collector runs: GGUF writes (SetStrings put C pointers in
// an array; it crashed with "found bad pointer in Go heap" when that array
// was uninitialised C memory), GGUF reads, decodes, the rows' sums written
// into Go memory by C (LogitRows), adapter swaps, training
// evaluations with gradients, and handles dropped without Close (freed by
// their cleanups, never mid-call). Under GOGC=1 a collection runs at almost
// every allocation, and cgocheck2 checks every pointer store into memory
// shared with C; `make test` runs it so.
func TestStressBindings(t *testing.T) {
	dir := t.TempDir()
	adPath := ""
	{
		m := loadTiny(t)
		adPath = writeTinyAdapter(t, m)
	}
	for round := range stressRounds(t) {
		// GGUF writes and reads.
		path := filepath.Join(dir, fmt.Sprintf("m%d.gguf", round%2))
		if err := modelgen.Write(path, modelgen.Tiny()); err != nil {
			t.Fatal(err)
		}
		g, err := llama.OpenGGUF(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Keys()) == 0 || len(g.Tensors()) == 0 {
			t.Fatal("a written GGUF reads back empty")
		}
		if round%2 == 0 {
			g.Close()
		} // else dropped: its cleanup frees it

		m, err := llama.LoadModel(path, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := llama.NewContext(m, llama.ContextParams{NCtx: 128, NUBatch: 128, TrainingGraphs: true, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		toks, err := m.Tokenize("12+7=19", true, false)
		if err != nil {
			t.Fatal(err)
		}
		base := decodeOne(t, c, toks, 0)[len(toks)-1]
		// The rows summarised in C on the decode's threads, into Go memory.
		idx := make([]int32, len(toks))
		for i := range idx {
			idx[i] = int32(i)
		}
		rows, err := c.LogitRows(idx, make([]float64, len(toks)*m.NVocab()))
		if err != nil {
			t.Fatal(err)
		}
		if r := rows[len(toks)-1]; r.Bad != -1 || r.Sum < 1 || r.Argmax < 0 {
			t.Fatalf("round %d: LogitRows %+v", round, r)
		}

		// Adapter swaps: each decode must see the adapter just set.
		for k := range 3 {
			a, err := llama.LoadAdapter(m, adPath)
			if err != nil {
				t.Fatal(err)
			}
			c.ClearAdapters()
			if err := c.SetAdapter(a, float32(k)); err != nil {
				t.Fatal(err)
			}
			c.ClearKV()
			got := decodeOne(t, c, toks, 0)[len(toks)-1]
			if d := maxDiff(got, base); (k == 0) != (d == 0) {
				t.Fatalf("round %d: adapter at scale %d changed the logits by %g", round, k, d)
			}
			// Training evaluation with gradients of the adapter's tensors.
			// llama.cpp leaves an adapter at scale 0 out of the graph
			// (llama_context::set_adapters_lora), so it has none.
			var ps []*llama.Param
			var grads [][]float32
			for _, name := range a.TensorNames() {
				p, err := a.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
				grads = append(grads, make([]float32, p.Len()))
			}
			seqs := []llama.PGSeq{{Tokens: toks, NPrompt: 3, Weight: 1}, {Tokens: toks, NPrompt: 4, TokenWeights: make([]float32, len(toks)-4)}}
			loss, lps, err := c.PGEval(seqs, ps, grads)
			if k == 0 {
				if err == nil || !strings.Contains(err.Error(), "part of the model's graph") {
					t.Fatalf("round %d: PGEval with the adapter at scale 0: %v, want its tensors refused as outside the graph", round, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(lps) != 2*len(toks)-7 || math.IsNaN(loss) {
				t.Fatalf("PGEval: loss %g, %d log-probs", loss, len(lps))
			}
			runtime.GC()
			// a is dropped: the context holds it until ClearAdapters.
		}
		c.ClearAdapters()
		runtime.GC()
		if round%2 == 0 {
			c.Close()
			m.Close()
		} else if round%4 == 1 {
			m.Close() // closes the context too
		} // else both dropped
		runtime.GC()
	}
}
