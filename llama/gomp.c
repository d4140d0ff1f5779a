// OpenMP's wait at a barrier, set before the runtime reads it.
//
// ggml's CPU backend (built with OpenMP) meets its threads at a barrier after
// every node of the graph: about 600 times per decoded token on a 30-layer
// model. GNU OpenMP spins about 3 ms (GOMP_SPINCOUNT 300000) before it sleeps
// at one. On a quiet machine every thread arrives within microseconds and the
// spin is never long. When other processes share the cores, a thread that
// reaches the barrier spins while the thread it waits for is not running, and
// burns the time it waits for: SmolLM2-135M at 2 threads on 2 cores decoded
// 11 times slower beside one busy process and 58 times beside six; with the
// spin set here, 4 times beside one (docs/speed.md, "A busy machine").
//
// libgomp reads GOMP_SPINCOUNT once, in its own constructor. It is linked
// statically (-l:libgomp.a, llama.go), so its constructor is one of this
// binary's and runs after this one, whose priority comes first. A value the
// user set is kept.
#define _POSIX_C_SOURCE 200809L // setenv under -std=c11
#include <stdlib.h>

#define CONFCLIP_GOMP_SPINCOUNT "3000" // llama.DefaultOpenMPSpin

__attribute__((constructor(101))) static void confclip_gomp_spin(void) {
	setenv("GOMP_SPINCOUNT", CONFCLIP_GOMP_SPINCOUNT, 0);
}

// The spin count libgomp runs with (OpenMPSpinCount): gomp_spin_count_var is
// libgomp's own variable (GCC 4.4 on), hidden in its shared library and
// reachable in its static one.
extern unsigned long long gomp_spin_count_var;

unsigned long long confclip_gomp_spin_count(void) {
	return gomp_spin_count_var;
}
