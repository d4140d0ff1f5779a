package opcheck_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama/opcheck"
)

// TestOpBackward checks the backward pass of each op the training families
// need (patch 0008 adds tanh, gelu, geglu, the fused gated units and norm;
// swiglu and rms_norm were there) against central finite differences of
// loss = sum(r * op(x)), the op alone, on every input.
func TestOpBackward(t *testing.T) {
	const n0, n1 = 8, 3
	rng := rand.New(rand.NewPCG(11, 12))
	for _, op := range []string{"tanh", "softcap", "gelu", "geglu", "swiglu", "geglu_fused", "swiglu_fused",
		"geglu_fused_swapped", "swiglu_fused_swapped", "norm", "rms_norm"} {
		t.Run(op, func(t *testing.T) {
			x := make([]float32, n0*n1)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 1.5)
			}
			r := make([]float32, opcheck.OpOutputs(op, len(x)))
			for i := range r {
				r[i] = float32(rng.NormFloat64())
			}
			_, grad, err := opcheck.OpLossGrad(op, x, n0, r, true)
			if err != nil {
				t.Fatal(err)
			}
			const h = 1e-2
			lossAt := func(i int, v float32) float64 {
				old := x[i]
				x[i] = v
				l, _, err := opcheck.OpLossGrad(op, x, n0, r, false)
				x[i] = old
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			worst, scale := 0.0, 0.0
			for _, g := range grad {
				scale = math.Max(scale, math.Abs(float64(g)))
			}
			for i := range x {
				// five-point stencil: float32 losses need a step whose O(h^4)
				// truncation error stays below the rounding noise
				fd := (-lossAt(i, x[i]+2*h) + 8*lossAt(i, x[i]+h) - 8*lossAt(i, x[i]-h) + lossAt(i, x[i]-2*h)) / (12 * h)
				// relative to the largest gradient entry: entries near zero
				// carry the same absolute rounding noise
				e := math.Abs(fd-float64(grad[i])) / scale
				worst = math.Max(worst, e)
				if e > 1e-3 {
					t.Errorf("x[%d]: backward %g, finite difference %g", i, grad[i], fd)
				}
			}
			t.Logf("%s: worst error %.2g of the largest gradient (%.3g)", op, worst, scale)
		})
	}
}

// TestOpBackwardMissing: an op without a backward pass is reported by the
// coverage check, by name, where ggml's backward pass would abort.
func TestOpBackwardMissing(t *testing.T) {
	x := []float32{0.1, -0.2, 0.3, 0.4}
	_, _, err := opcheck.OpLossGrad("sigmoid", x, 2, []float32{1, 1, 1, 1}, true)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "sigmoid") {
		t.Fatalf("want an error naming sigmoid, got %v", err)
	}
	// the forward pass alone still runs
	if _, _, err := opcheck.OpLossGrad("sigmoid", x, 2, []float32{1, 1, 1, 1}, false); err != nil {
		t.Fatal(err)
	}
}

// TestOpLossGradEmpty: no inputs is an error, not an index panic.
func TestOpLossGradEmpty(t *testing.T) {
	if _, _, err := opcheck.OpLossGrad("tanh", nil, 2, nil, true); err == nil {
		t.Fatal("OpLossGrad of no inputs: no error")
	}
}
