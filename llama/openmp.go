package llama

/*
unsigned long long confclip_gomp_spin_count(void);
*/
import "C"

// DefaultOpenMPSpin is how many times a CPU thread spins at one of ggml's
// barriers before it sleeps, unless GOMP_SPINCOUNT says otherwise; GNU
// OpenMP's own default is 300000 (about 3 ms). gomp.c sets it before the
// OpenMP runtime starts, and says why.
const DefaultOpenMPSpin = 3000

// OpenMPSpinCount is the spin count the OpenMP runtime started with:
// GOMP_SPINCOUNT when it was set, else DefaultOpenMPSpin.
func OpenMPSpinCount() uint64 { return uint64(C.confclip_gomp_spin_count()) }
