package llama_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/confclip/confclip/llama"
)

// TestQuantMatMulColumns: a product of quantized weights by many columns
// equals, bit for bit, the same product a column at a time. Patch 0040
// multiplies Q4_K, Q5_K and Q6_K rows by 8 or 4 columns a call on AVX2 and
// AVX-512 (each row unpacked once for them); a single column, other types
// and other CPUs take ggml's one-column kernels, so this holds the
// many-column kernels to them: over 2 super-blocks a row, 37 rows (blocks of
// 16 and a tail), 21 columns (8 + 8 in the first block of 16, then 4 + 1),
// 3 planes broadcast over one weight matrix, at 1 and 2 threads. The result is also within the
// quantization's error of the F32 product, so the comparison is of real
// numbers.
func TestQuantMatMulColumns(t *testing.T) {
	const k, m, n, planes = 512, 37, 21, 3
	rng := rand.New(rand.NewPCG(40, 41))
	w, x := normals(rng, k*m), normals(rng, k*n*planes)
	for _, typ := range []string{"q5_K", "q6_K", "q4_K", "q8_0"} {
		for _, threads := range []int{1, 2} {
			whole, byColumn, err := llama.QuantMatMul(typ, w, x, k, m, n, planes, threads)
			if err != nil {
				t.Fatal(err)
			}
			var d2, r2 float64
			for c := 0; c < n*planes; c++ {
				for r := 0; r < m; r++ {
					got, one := whole[c*m+r], byColumn[c*m+r]
					if math.Float32bits(got) != math.Float32bits(one) {
						t.Fatalf("%s, %d threads, column %d, row %d: %g in the product, %g a column at a time", typ, threads, c, r, got, one)
					}
					ref := 0.0
					for i := 0; i < k; i++ {
						ref += float64(w[r*k+i]) * float64(x[c*k+i])
					}
					d2 += (float64(got) - ref) * (float64(got) - ref)
					r2 += ref * ref
				}
			}
			// the quantization's error, relative: 0.07 for 4-bit weights
			// of normal values, 0.01-0.04 for 5 to 8 bits; zeros or
			// misread blocks would be 1 or more
			rel := math.Sqrt(d2 / r2)
			if rel > 0.2 {
				t.Errorf("%s, %d threads: %.3g from the F32 product (relative RMS)", typ, threads, rel)
			}
			t.Logf("%s, %d threads: equal a column at a time; %.3g from the F32 product (relative RMS)", typ, threads, rel)
		}
	}
}

// TestShortRowMatMul: patch 0042 multiplies F32 rows of 16 values or fewer
// (a rank-16-or-less LoRA's B) by broadcasting, 8 rows at a time, instead
// of llamafile's dot products. Every output is the sum of its k products by
// fused multiply-adds in k's order, so it equals a float64 reference to
// F32's rounding, one column at a time or many (8 + 8 + 4 + 1 columns, 37
// rows: four blocks of 8 and a tail of 5, 3 planes), at 1 and 2 threads;
// 17 values a row (llamafile's path) is the control.
func TestShortRowMatMul(t *testing.T) {
	const m, n, planes = 37, 21, 3
	rng := rand.New(rand.NewPCG(42, 43))
	for _, k := range []int{1, 4, 5, 8, 16, 17} {
		w, x := normals(rng, k*m), normals(rng, k*n*planes)
		for _, threads := range []int{1, 2} {
			whole, byColumn, err := llama.QuantMatMul("f32", w, x, k, m, n, planes, threads)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for c := 0; c < n*planes; c++ {
				for r := 0; r < m; r++ {
					ref, abs := 0.0, 0.0
					for i := 0; i < k; i++ {
						p := float64(w[r*k+i]) * float64(x[c*k+i])
						ref += p
						abs += math.Abs(p)
					}
					for _, got := range []float32{whole[c*m+r], byColumn[c*m+r]} {
						// k roundings of a sum whose terms add to abs
						e := math.Abs(float64(got)-ref) / (abs * float64(k) * 0x1p-24)
						worst = max(worst, e)
						if e > 1 {
							t.Fatalf("k %d, %d threads, column %d, row %d: %g, float64 %g", k, threads, c, r, got, ref)
						}
					}
				}
			}
			t.Logf("k %d, %d threads: within %.2f of k F32 roundings of the float64 product", k, threads, worst)
		}
	}
}

// normals are n standard normal values.
func normals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}
