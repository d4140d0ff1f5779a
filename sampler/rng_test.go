package sampler

import (
	"slices"
	"testing"
)

func stream(r *RNG, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.Uint64()
	}
	return out
}

func TestRNGKey(t *testing.T) {
	base := stream(NewRNG(7, "gsm8k/12", 3), 64)
	if again := stream(NewRNG(7, "gsm8k/12", 3), 64); !slices.Equal(base, again) {
		t.Fatal("the same (seed, prompt id, sample) gave two different streams")
	}
	others := map[string]*RNG{
		"sample":    NewRNG(7, "gsm8k/12", 4),
		"prompt id": NewRNG(7, "gsm8k/13", 3),
		"seed":      NewRNG(8, "gsm8k/12", 3),
		"empty id":  NewRNG(7, "", 3),
	}
	for what, r := range others {
		s := stream(r, 64)
		same := 0
		for i := range s {
			if s[i] == base[i] {
				same++
			}
		}
		if same > 0 {
			t.Errorf("changing the %s left %d of 64 outputs equal", what, same)
		}
	}
}

func TestRNGFloat64Range(t *testing.T) {
	r := NewRNG(1, "f", 0)
	sum := 0.0
	const n = 100_000
	for range n {
		u := r.Float64()
		if u < 0 || u >= 1 {
			t.Fatalf("Float64 gave %v", u)
		}
		sum += u
	}
	// The mean of n uniforms has standard deviation sqrt(1/12n) ≈ 0.0009.
	if mean := sum / n; mean < 0.495 || mean > 0.505 {
		t.Errorf("mean of %d draws %v, want about 0.5", n, mean)
	}
}

// TestRNGCheckpoint saves a stream mid-way, restores it into a fresh RNG and
// checks that both go on with the same numbers.
func TestRNGCheckpoint(t *testing.T) {
	r := NewRNG(11, "ckpt", 2)
	stream(r, 17)
	state, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var restored RNG
	if err := restored.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	if a, b := stream(r, 32), stream(&restored, 32); !slices.Equal(a, b) {
		t.Error("the restored stream differs from the original")
	}
	if err := restored.UnmarshalBinary([]byte("junk")); err == nil {
		t.Error("UnmarshalBinary accepted junk")
	}
}
