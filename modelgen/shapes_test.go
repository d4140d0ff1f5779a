package modelgen

import (
	"math"
	"testing"
)

// TestShapeParams: each shape's tensors add up to the parameter count its
// checkpoint publishes, and its vocabulary to the config's size. A wrong
// dimension, head size, bias or untied output changes the sum.
func TestShapeParams(t *testing.T) {
	for _, sh := range shapes {
		s, err := Shape(sh.name)
		if err != nil {
			t.Fatal(err)
		}
		tokens, _, _ := Vocab(s)
		if len(tokens) != sh.vocab {
			t.Errorf("%s: vocabulary %d, config %d", sh.name, len(tokens), sh.vocab)
		}
		var n int64
		for _, ts := range Tensors(s, len(tokens)) {
			if ts.Name == "rope_freqs.weight" { // factors, not weights: no checkpoint counts them
				continue
			}
			p := int64(1)
			for _, d := range ts.Shape {
				p *= d
			}
			n += p
		}
		if n != sh.params {
			t.Errorf("%s: %d parameters, the checkpoint has %d", sh.name, n, sh.params)
		}
	}
	if _, err := Shape("qwen9-7b"); err == nil {
		t.Error("an unknown shape was accepted")
	}
}

// TestLlama3RopeFactors: Llama 3.2 1B's factors (64-wide heads, base
// 500,000, factor 32 between wavelengths 2,048 and 8,192), worked by hand:
// pair 0 turns once in 2π positions (kept, 1); pair 31's wavelength is
// 2π·500000^(62/64) ≈ 2.1e6 (stretched, 32); pair 16's is
// 2π·500000^(32/64) = 4,442.9, between the bounds: smooth =
// (8192/4442.9 − 1)/3 = 0.28128, factor 1/((1 − 0.28128)/32 + 0.28128) =
// 3.2923.
func TestLlama3RopeFactors(t *testing.T) {
	f := (&Llama3Rope{Factor: 32, LowFreq: 1, HighFreq: 4, OrigCtx: 8192}).factors(64, 500000)
	if len(f) != 32 || f[0] != 1 || f[31] != 32 {
		t.Fatalf("factors %v: want 32 of them, 1 first and 32 last", f)
	}
	if math.Abs(float64(f[16])-3.2923) > 1e-3 {
		t.Errorf("pair 16's factor %.4f, by hand 3.2923", f[16])
	}
	for i := 1; i < len(f); i++ {
		if f[i] < f[i-1] {
			t.Errorf("factors fall at pair %d: %v", i, f)
		}
	}
}
