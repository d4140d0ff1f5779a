package llama_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/sampler"
)

// TestLogitRows: the rows' sums computed in C on the decode's threads equal
// sampler.Scan's on the same rows (Max, Argmax and Support exactly; Sum,
// Dot and the exponentials to 1e-14 relative, LogitRows' exp against Go's) at
// one and two threads; a row the decode has no logits for is an error that
// names its batch index, and a short w is refused before C.
func TestLogitRows(t *testing.T) {
	m := loadTiny(t)
	toks := []llama.Token{1, 270, 281, 292, 303, 314, 325, 336}
	for _, threads := range []int{1, 2} {
		c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64, Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		b := llama.NewBatch(len(toks), 1)
		idx := []int32{}
		for i, tok := range toks {
			if _, err := b.Add(tok, i, []int{0}, i%2 == 1); err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				idx = append(idx, int32(i))
			}
		}
		if err := c.Decode(b); err != nil {
			t.Fatal(err)
		}
		nv := m.NVocab()
		w := make([]float64, len(idx)*nv)
		rows, err := c.LogitRows(idx, w)
		if err != nil {
			t.Fatal(err)
		}
		rel := func(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-300) }
		for r, i := range idx {
			logits, err := c.Logits(int(i))
			if err != nil {
				t.Fatal(err)
			}
			gw := make([]float64, nv)
			st, err := sampler.Scan(logits, gw)
			if err != nil {
				t.Fatal(err)
			}
			got := rows[r]
			if got.Bad != -1 || got.Max != st.Max || got.Argmax != st.Argmax || int(got.Support) != st.Support {
				t.Fatalf("threads %d, row %d: %+v, Scan %+v", threads, i, got, st)
			}
			if rel(got.Sum, st.Sum) > 1e-14 || rel(got.Dot, st.Dot) > 1e-14 || got.Mean != st.Mean {
				t.Fatalf("threads %d, row %d: sums %v %v, mean %v; Scan %v %v, %v", threads, i, got.Sum, got.Dot, got.Mean, st.Sum, st.Dot, st.Mean)
			}
			for k, e := range w[r*nv : (r+1)*nv] {
				if rel(e, gw[k]) > 1e-15 {
					t.Fatalf("threads %d, row %d, token %d: exp %v, Go %v", threads, i, k, e, gw[k])
				}
			}
		}
		if _, err := c.LogitRows([]int32{0}, nil); err == nil || !strings.Contains(err.Error(), "batch index 0") {
			t.Errorf("a row without logits: err = %v", err)
		}
		if _, err := c.LogitRows(idx, w[:nv]); err == nil {
			t.Error("a w shorter than the rows accepted")
		}
		b.Close()
		c.Close()
		if _, err := c.LogitRows(idx, nil); err == nil {
			t.Error("LogitRows on a closed context: no error")
		}
	}
}

// TestExpValues: the SIMD exponential LogitRows computes every row's
// softmax with is within two ulps of Go's math.Exp (each is within one of
// the exact value) and zero exactly where it is, over the whole range a
// logit minus its row's maximum takes: [-708, 0] on a dense grid and at
// random, the interval ends, ln 2 / 2 where the reduction turns, the
// subnormal results below -708 (handed to libm), and -Inf.
func TestExpValues(t *testing.T) {
	var d []float64
	for x := 0.0; x >= -720; x -= 1.0 / 64 {
		d = append(d, x)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		d = append(d, -rng.Float64()*40, -rng.Float64()*750)
	}
	d = append(d, -0.34657359027997264, -0.3465735902799727, -708, math.Nextafter(-708, 0), math.Nextafter(-708, -1000),
		-744.4, -745.2, -746, -1e-300, math.Copysign(0, -1), math.Inf(-1))
	e := llama.ExpValues(d)
	worst := 0
	for i, x := range d {
		want := math.Exp(x)
		ulps := math.Float64bits(e[i]) - math.Float64bits(want)
		if int64(ulps) < 0 {
			ulps = -ulps
		}
		if ulps > 2 || (want == 0) != (e[i] == 0) {
			t.Fatalf("exp(%v) = %v, Go %v (%d ulps)", x, e[i], want, int64(ulps))
		}
		worst = max(worst, int(ulps))
	}
	t.Logf("%d values, worst %d ulp from math.Exp", len(d), worst)
}
