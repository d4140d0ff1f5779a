package llama

/*
// A CONFCLIP_CPU_VARIANTS build (make PORTABLE=1 on x86-64) carries ggml's
// CPU backend once per CPU generation and picks one at start
// (csrc/cpu-variants.c); other builds lack these functions, so the
// references are weak and read as NULL there.
extern const char *confclip_cpu_variant(void) __attribute__((weak));
extern const char *confclip_cpu_variants(void) __attribute__((weak));

static const char *confclip_cpu_variant_or_null(void) {
	return confclip_cpu_variant ? confclip_cpu_variant() : 0;
}
static const char *confclip_cpu_variants_or_null(void) {
	return confclip_cpu_variants ? confclip_cpu_variants() : 0;
}
*/
import "C"

import "strings"

// CPUVariant says which build of ggml's CPU kernels runs. A portable x86-64
// build (make PORTABLE=1) carries several, one per CPU generation, and picks
// the best this CPU can run at start (CONFCLIP_CPU_VARIANT=NAME forces one):
// Variant is its name (x64, haswell, skylakex, icelake) and Built
// lists them all. A build with one set of kernels (make: -march=native;
// CPU_VARIANTS=0; arm64) has Variant "" and Built nil.
func CPUVariant() (variant string, built []string) {
	v := C.confclip_cpu_variant_or_null()
	if v == nil {
		return "", nil
	}
	return C.GoString(v), strings.Fields(C.GoString(C.confclip_cpu_variants_or_null()))
}
