package llama

import (
	"os"
	"strconv"
	"testing"
)

// TestOpenMPSpinCount checks that gomp.c's constructor ran before the OpenMP
// runtime read its environment: the runtime spins DefaultOpenMPSpin times,
// or what GOMP_SPINCOUNT says when it is set.
func TestOpenMPSpinCount(t *testing.T) {
	want := uint64(DefaultOpenMPSpin)
	if v, ok := os.LookupEnv("GOMP_SPINCOUNT"); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Skipf("NOT RUN: GOMP_SPINCOUNT=%q is not a plain number", v)
		}
		want = n
	}
	if got := OpenMPSpinCount(); got != want {
		t.Fatalf("OpenMP spins %d times at a barrier; want %d (gomp.c's constructor did not run first, or libgomp is not linked statically)", got, want)
	}
}
