package rollout

import "testing"

func TestThreadsFor(t *testing.T) {
	for _, c := range []struct {
		params uint64
		cores  int
		want   int
	}{
		{100_000, 2, 1},                                // the tiny test model
		{260_000, 16, 1},                               // stories260K: one thread however many cores
		{ParamsPerThread - 1, 2, 1},                    // just below the crossover
		{2 * ParamsPerThread, 2, 2},                    // two threads' worth
		{5_200_000, 2, 1},                              // ladder-256-4: one thread won
		{100_000_000, 2, 2},                            // bench-100m on this machine
		{20_000_000, 16, 20_000_000 / ParamsPerThread}, // capped by the model, not the cores
		{7_000_000_000, 8, 8},                          // capped by the cores
	} {
		if got := threadsFor(c.params, c.cores); got != c.want {
			t.Errorf("threadsFor(%d params, %d cores) = %d, want %d", c.params, c.cores, got, c.want)
		}
	}
}
