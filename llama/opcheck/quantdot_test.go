package opcheck_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/confclip/confclip/llama/opcheck"
)

// TestQuantMatMulColumns: a product of quantized weights by many columns
// against the same product a column at a time. Patch 0040 multiplies Q4_K,
// Q5_K and Q6_K rows by 4 (or 8) columns a call on AVX2 and AVX-512, each
// row unpacked once for them, bit for bit the one-column kernels. From 16
// columns on (32 for Q6_K, patch 0048), llama.cpp 0c1e57098's own tiled
// K-quant kernel (ggml-cpu/tiled, x86) takes Q2_K-Q6_K products, summing in
// another order: there the two agree to float rounding (measured at most
// 7.1e-8 of the row's scale, the sum of its products' magnitudes, on
// AVX-512; the bound is 1e-6). 7 columns (4 + 1 + 1 + 1) take 0040 for
// every type, 21 (8 + 8 + 4 + 1 in the first block of 16) take it for Q6_K
// and the tiled kernel for Q4_K and Q5_K. Other types and other CPUs take
// ggml's one-column kernels. Over 2 super-blocks a row, 37 rows (blocks of
// 16 and a tail), 3 planes broadcast over one weight matrix, at 1 and 2
// threads. The result is also within the quantization's error of the F32
// product, so the comparison is of real numbers.
func TestQuantMatMulColumns(t *testing.T) {
	const k, m, planes = 512, 37, 3
	for _, n := range []int{7, 21} {
		rng := rand.New(rand.NewPCG(40, 41))
		w, x := normals(rng, k*m), normals(rng, k*n*planes)
		for _, typ := range []string{"q5_K", "q6_K", "q4_K", "q8_0"} {
			for _, threads := range []int{1, 2} {
				whole, byColumn, err := opcheck.QuantMatMul(typ, w, x, k, m, n, planes, 1, threads)
				if err != nil {
					t.Fatal(err)
				}
				var d2, r2, worst float64
				for c := 0; c < n*planes; c++ {
					for r := 0; r < m; r++ {
						got, one := whole[c*m+r], byColumn[c*m+r]
						ref, scale := 0.0, 0.0
						for i := 0; i < k; i++ {
							ref += float64(w[r*k+i]) * float64(x[c*k+i])
							scale += math.Abs(float64(w[r*k+i]) * float64(x[c*k+i]))
						}
						if exact := n < 16 || typ == "q6_K" || typ == "q8_0"; exact && math.Float32bits(got) != math.Float32bits(one) {
							t.Fatalf("%s, %d columns, %d threads, column %d, row %d: %g in the product, %g a column at a time", typ, n, threads, c, r, got, one)
						}
						worst = max(worst, math.Abs(float64(got)-float64(one))/scale)
						d2 += (float64(got) - ref) * (float64(got) - ref)
						r2 += ref * ref
					}
				}
				if worst > 1e-6 || math.IsNaN(worst) {
					t.Errorf("%s, %d columns, %d threads: the product differs from a column at a time by %.3g of a row's scale", typ, n, threads, worst)
				}
				// the quantization's error, relative: 0.07 for 4-bit weights
				// of normal values, 0.01-0.04 for 5 to 8 bits; zeros or
				// misread blocks would be 1 or more
				rel := math.Sqrt(d2 / r2)
				if rel > 0.2 {
					t.Errorf("%s, %d columns, %d threads: %.3g from the F32 product (relative RMS)", typ, n, threads, rel)
				}
				t.Logf("%s, %d columns, %d threads: %.3g of a row's scale from a column at a time; %.3g from the F32 product (relative RMS)", typ, n, threads, worst, rel)
			}
		}
	}
}

// TestLargeF32MatMulColumns: patch 0044 gives llamafile's F32 product
// wider column panels where W is 4 MiB or more, and sums a tile's
// accumulators four at a time. A 2048 x 512 product over 200 columns (one
// panel, against three before) equals the same product 7 columns at a time
// (parts too narrow for a second panel; one column would take ggml's
// matrix-vector kernel, which sums in another order) bit for bit, and the
// float64 product to F32's rounding, at 1 and 2 threads.
func TestLargeF32MatMulColumns(t *testing.T) {
	const k, m, n, part = 512, 2048, 200, 7
	rng := rand.New(rand.NewPCG(46, 47))
	w, x := normals(rng, k*m), normals(rng, k*n)
	for _, threads := range []int{1, 2} {
		whole, byParts, err := opcheck.QuantMatMul("f32", w, x, k, m, n, 1, part, threads)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for c := 0; c < n; c++ {
			for r := 0; r < m; r++ {
				got, one := whole[c*m+r], byParts[c*m+r]
				if math.Float32bits(got) != math.Float32bits(one) {
					t.Fatalf("%d threads, column %d, row %d: %g in the product, %g %d columns at a time", threads, c, r, got, one, part)
				}
				e, ref := roundingsOff(got, k, func(i int) float64 { return float64(w[r*k+i]) * float64(x[c*k+i]) })
				worst = max(worst, e)
				if e > 1 {
					t.Fatalf("%d threads, column %d, row %d: %g, float64 %g", threads, c, r, got, ref)
				}
			}
		}
		t.Logf("%d threads: equal %d columns at a time; within %.2g of k F32 roundings of the float64 product", threads, part, worst)
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
			whole, byColumn, err := opcheck.QuantMatMul("f32", w, x, k, m, n, planes, 1, threads)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for c := 0; c < n*planes; c++ {
				for r := 0; r < m; r++ {
					for _, got := range []float32{whole[c*m+r], byColumn[c*m+r]} {
						e, ref := roundingsOff(got, k, func(i int) float64 { return float64(w[r*k+i]) * float64(x[c*k+i]) })
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

// TestOutProdLayouts: the input gradient of a frozen weight, out_prod(W,
// transpose(G)), is the same bit for bit whichever of patch 0044's paths
// computes it: G's rows copied from the transposed view, G gathered across
// the rows of a contiguous copy (a LoRA B's gradient), W's panel copied
// into a buffer (many rows; 2048 values a row put the panel's rows in a few
// L1 sets) or read in place (one row at a time). And it is the float64
// product to F32's rounding. 2048 x 130 (three blocks of 64 rows of W, the
// last partial) and 100 x 67 (columns in vectors and a tail), 70 and 37
// rows (past one gather block of 64, not a multiple of 4), 1 and 2 threads.
func TestOutProdLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(44, 45))
	for _, s := range []struct{ k, m, n int }{{2048, 130, 70}, {100, 67, 37}} {
		w, g := normals(rng, s.k*s.m), normals(rng, s.m*s.n)
		for _, threads := range []int{1, 2} {
			whole, copied, byRow, err := opcheck.OutProdLayouts(w, g, s.k, s.m, s.n, threads)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for j := 0; j < s.n; j++ {
				for i := 0; i < s.k; i++ {
					got := whole[j*s.k+i]
					for name, o := range map[string]float32{"from a contiguous copy of G's transpose": copied[j*s.k+i], "a row at a time": byRow[j*s.k+i]} {
						if math.Float32bits(o) != math.Float32bits(got) {
							t.Fatalf("%d x %d x %d, %d threads, row %d, value %d: %g, %s %g", s.k, s.m, s.n, threads, j, i, got, name, o)
						}
					}
					e, ref := roundingsOff(got, s.m, func(c int) float64 { return float64(w[c*s.k+i]) * float64(g[j*s.m+c]) })
					worst = max(worst, e)
					if e > 1 {
						t.Fatalf("%d x %d x %d, %d threads, row %d, value %d: %g, float64 %g", s.k, s.m, s.n, threads, j, i, got, ref)
					}
				}
			}
			t.Logf("%d x %d x %d, %d threads: the three paths agree bit for bit, within %.2f of m F32 roundings of the float64 product", s.k, s.m, s.n, threads, worst)
		}
	}
}

// TestOutProdTileRows: patch 0062 gives the backward product (OUT_PROD)
// tiles of 8 rows where the CPU has AVX-512 (32 vector registers), 4
// elsewhere. Each value is still the same sum (FMAs in order over a block
// of 64 rows of W, added to the result after each block), so the product
// equals that sum done one value at a time (OutProdFMA, C's fmaf) bit for
// bit, at 1 and 2 threads: rows of 120 values (3-vector runs, then one
// vector, then 8 values on AVX-512), 130 rows of W (blocks of 64, 64, 2),
// 37 and 8 result rows (tiles of 8 and a tail of 5; one whole tile).
func TestOutProdTileRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(62, 63))
	for _, s := range []struct{ k, m, n int }{{120, 130, 37}, {120, 130, 8}, {2048, 70, 21}} {
		w, g := normals(rng, s.k*s.m), normals(rng, s.m*s.n)
		ref, err := opcheck.OutProdFMA(w, g, s.k, s.m, s.n, 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			whole, _, _, err := opcheck.OutProdLayouts(w, g, s.k, s.m, s.n, threads)
			if err != nil {
				t.Fatal(err)
			}
			for x := range whole {
				if math.Float32bits(whole[x]) != math.Float32bits(ref[x]) {
					t.Fatalf("%d x %d x %d, %d threads, row %d, value %d: %g, one value at a time %g", s.k, s.m, s.n, threads, x/s.k, x%s.k, whole[x], ref[x])
				}
			}
		}
		t.Logf("%d x %d x %d: bit for bit the block sums of FMAs, at 1 and 2 threads", s.k, s.m, s.n)
	}
}

// TestQ8KQuantizer: patch 0046 quantizes a K-quant product's input to Q8_K
// in AVX2 registers; every byte must be the reference quantizer's (what
// every CPU got before, and what other CPUs still run). Blocks of normal
// values at scales from 1e-30 to 1e30, blocks whose largest |x| comes twice
// with both signs (the first one sets the scale's sign), a block of zeros,
// blocks with a single value, values on rounding's ties.
func TestQ8KQuantizer(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 49))
	var x []float32
	block := func(f func(j int) float32) {
		for j := range 256 {
			x = append(x, f(j))
		}
	}
	for _, scale := range []float64{1e-30, 1e-3, 1, 7, 1e3, 1e30} {
		for range 20 {
			block(func(int) float32 { return float32(rng.NormFloat64() * scale) })
		}
	}
	for _, at := range [][2]int{{3, 200}, {200, 3}, {0, 255}, {255, 0}, {8, 9}, {17, 16}} {
		block(func(j int) float32 {
			switch j {
			case at[0]:
				return 4
			case at[1]:
				return -4
			}
			return float32(rng.Float64()*6 - 3)
		})
	}
	block(func(int) float32 { return 0 })
	for _, at := range []int{0, 77, 255} {
		block(func(j int) float32 {
			if j == at {
				return -2.5
			}
			return 0
		})
	}
	// x * (-127 / 127) lands on k + 0.5: ties go to even
	block(func(j int) float32 {
		if j == 0 {
			return 127
		}
		return float32(j%64) - 31.5
	})
	bad, err := opcheck.Q8KFirstDifference(x)
	if err != nil {
		t.Fatal(err)
	}
	if bad >= 0 {
		t.Fatalf("block %d of %d: the CPU backend's Q8_K quantization differs from the reference (%v...)", bad, len(x)/256, x[bad*256:bad*256+8])
	}
	t.Logf("%d blocks: byte for byte the reference's", len(x)/256)
}

// roundingsOff sums n products term(i) in float64 and returns how far got
// is from that sum, in units of n F32 roundings of the sum of their
// magnitudes (what a float32 sum of n terms may be off by, in any order),
// and the sum.
func roundingsOff(got float32, n int, term func(i int) float64) (e, ref float64) {
	abs := 0.0
	for i := 0; i < n; i++ {
		p := term(i)
		ref += p
		abs += math.Abs(p)
	}
	return math.Abs(float64(got)-ref) / (abs * float64(n) * 0x1p-24), ref
}

// normals are n standard normal values.
func normals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestQ0MatMulTiles: patch 0061 multiplies Q4_0, Q5_0, Q8_0 and IQ4_NL
// weights (llamafile's tinyBLAS_Q0_AVX) by 8 columns a tile in 512-bit
// VNNI where the CPU has AVX-512 VNNI, two columns a register, and by 4
// or 2 where fewer are left. Each result is summed as the 256-bit tiles
// sum it, so the product equals the same product 3 columns at a time
// (the kernel before the patch: a tile of 3 columns is not taken, and one
// column would take ggml's matrix-vector kernel) bit for bit, at 1 and 2
// threads: over 13 blocks a row, 37 rows (tiles of 4 and a tail), 9, 21
// and 39 columns (8-column tiles, then 4, then 3 or 1) and 2 planes. And
// it is within the quantization's error of the F32 product.
func TestQ0MatMulTiles(t *testing.T) {
	const k, m, planes, part = 13 * 32, 37, 2, 3
	for _, n := range []int{9, 21, 39} {
		rng := rand.New(rand.NewPCG(61, uint64(n)))
		w, x := normals(rng, k*m), normals(rng, k*n*planes)
		for _, typ := range []string{"q4_0", "q5_0", "q8_0", "iq4_nl"} {
			for _, threads := range []int{1, 2} {
				whole, byParts, err := opcheck.QuantMatMul(typ, w, x, k, m, n, planes, part, threads)
				if err != nil {
					t.Fatal(err)
				}
				var d2, r2 float64
				for c := 0; c < n*planes; c++ {
					for r := 0; r < m; r++ {
						got := whole[c*m+r]
						if math.Float32bits(got) != math.Float32bits(byParts[c*m+r]) {
							t.Fatalf("%s, %d columns, %d threads, column %d, row %d: %g in the product, %g %d columns at a time", typ, n, threads, c, r, got, byParts[c*m+r], part)
						}
						ref := 0.0
						for i := 0; i < k; i++ {
							ref += float64(w[r*k+i]) * float64(x[c*k+i])
						}
						d2 += (float64(got) - ref) * (float64(got) - ref)
						r2 += ref * ref
					}
				}
				// 4-bit weights of normal values are 0.07-0.1 off (relative
				// RMS), 8-bit ones 0.01; misread blocks would be 1 or more
				if rel := math.Sqrt(d2 / r2); rel > 0.2 || math.IsNaN(rel) {
					t.Errorf("%s, %d columns, %d threads: %.3g from the F32 product (relative RMS)", typ, n, threads, rel)
				} else {
					t.Logf("%s, %d columns, %d threads: bit for bit %d columns at a time; %.3g from the F32 product (relative RMS)", typ, n, threads, part, rel)
				}
			}
		}
	}
}
