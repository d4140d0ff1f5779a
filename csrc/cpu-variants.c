// The CPU backend of a CONFCLIP_CPU_VARIANTS build (cmake/cpu-variants.cmake):
// ggml's CPU backend compiled once per x86-64 generation, each copy's global
// symbols prefixed with its name (scripts/cpu-variants.sh). ggml's registry
// calls ggml_backend_cpu_reg() once; this one asks every variant's
// ggml_backend_score() (ggml's cpu-feats.cpp: 0 when this CPU lacks a feature
// the variant was compiled for, else higher for more features) and returns the
// best variant's registration. CONFCLIP_CPU_VARIANT=NAME picks a variant by
// name instead (when this CPU can run it), to test one on a machine that
// would choose another.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-variants.h" // CONFCLIP_CPU_VARIANTS(X): X(x64) X(haswell) ..., written by cmake
#include "ggml-backend.h"
#include "ggml-cpu.h"

#define DECLARE(name)                                                                        \
    ggml_backend_reg_t name##_ggml_backend_cpu_reg(void);                                    \
    int                name##_ggml_backend_score(void);                                      \
    enum ggml_status   name##_ggml_graph_compute_with_ctx(struct ggml_context *, struct ggml_cgraph *, int); \
    const struct ggml_type_traits_cpu * name##_ggml_get_type_traits_cpu(enum ggml_type);
CONFCLIP_CPU_VARIANTS(DECLARE)

struct variant {
    const char * name;
    ggml_backend_reg_t (*reg)(void);
    int (*score)(void);
    enum ggml_status (*compute_with_ctx)(struct ggml_context *, struct ggml_cgraph *, int);
    const struct ggml_type_traits_cpu * (*type_traits)(enum ggml_type);
};

#define ENTRY(name) {#name, name##_ggml_backend_cpu_reg, name##_ggml_backend_score, name##_ggml_graph_compute_with_ctx, name##_ggml_get_type_traits_cpu},
static const struct variant variants[] = {CONFCLIP_CPU_VARIANTS(ENTRY)};
static const int n_variants = (int) (sizeof(variants) / sizeof(variants[0]));

static int chosen = 0;
static char names[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
    int best = -1, best_score = 0;
    for (int i = 0; i < n_variants; i++) {
        int s = variants[i].score();
        if (s > best_score) {
            best       = i;
            best_score = s;
        }
        size_t n = strlen(names);
        snprintf(names + n, sizeof(names) - n, "%s%s", n ? " " : "", variants[i].name);
    }
    if (best < 0) {
        best = 0; // x64, the baseline
    }
    const char * want = getenv("CONFCLIP_CPU_VARIANT");
    if (want != NULL && *want != '\0') {
        int found = -1;
        for (int i = 0; i < n_variants; i++) {
            if (strcmp(variants[i].name, want) == 0) {
                found = i;
            }
        }
        if (found < 0) {
            fprintf(stderr, "confclip: CONFCLIP_CPU_VARIANT=%s: no such CPU variant (built: %s); using %s\n", want, names, variants[best].name);
        } else if (variants[found].score() <= 0) {
            fprintf(stderr, "confclip: CONFCLIP_CPU_VARIANT=%s: this CPU lacks its instructions; using %s\n", want, variants[best].name);
        } else {
            best = found;
        }
    }
    chosen = best;
}

ggml_backend_reg_t ggml_backend_cpu_reg(void) {
    pthread_once(&once, choose);
    return variants[chosen].reg();
}

// The functions of ggml-cpu.h that confclip calls directly (outside the
// registry) go to the chosen variant; a program that calls another one fails
// to link, naming it.
enum ggml_status ggml_graph_compute_with_ctx(struct ggml_context * ctx, struct ggml_cgraph * cgraph, int n_threads) {
    ggml_backend_cpu_reg(); // the variant's ggml_cpu_init
    return variants[chosen].compute_with_ctx(ctx, cgraph, n_threads);
}

// The pre-check (llama/precheck.go) asks which types have a dot product.
const struct ggml_type_traits_cpu * ggml_get_type_traits_cpu(enum ggml_type type) {
    ggml_backend_cpu_reg();
    return variants[chosen].type_traits(type);
}

// confclip_cpu_variant is the chosen variant's name; llama/cpuvariant.go
// reads it (a weak reference: builds without variants lack it).
const char * confclip_cpu_variant(void) {
    pthread_once(&once, choose);
    return variants[chosen].name;
}

// confclip_cpu_variants lists every variant built, space-separated.
const char * confclip_cpu_variants(void) {
    pthread_once(&once, choose);
    return names;
}
