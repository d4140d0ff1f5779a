package llama

/*
#cgo CFLAGS: -fopenmp
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

typedef struct {
	double  max, sum, dot, mean;
	int32_t argmax, support, bad, pad;
} confclip_logit_row;

// confclip_exp sets e[j] = exp(d[j]) for d[j] in [-708, 0] and returns
// whether some d[j] < -708 (whose e[j] the caller must set: they are left at
// exp(-708)). Within one ulp of the exact value there (against long double
// expl on 4M values: 94% correctly rounded, the rest one ulp off; glibc's exp
// is correctly rounded on all but 0.1%), so within two of Go's math.Exp; in
// SIMD registers: round(d/ln 2) = k by the 1.5 * 2^52 trick, r = d - k ln 2
// in two parts (|r| <= ln 2 / 2), e^r by its Taylor series to the 13th power
// (the first term left out is below 4e-18 of it), times 2^k built from its
// bits. libm's exp is a scalar call (about 9 ns a value here) and was 7% of
// a teacher-forcing pass; this loop runs in AVX2 or AVX-512 vectors on x86
// (the clone is chosen when the program starts, also in PORTABLE=1 builds)
// and NEON's on arm64, in about 1 ns a value.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4"), optimize("O3")))
#elif defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
static int confclip_exp(const double * restrict d, double * restrict e, int n) {
	int tiny = 0;
	for (int j = 0; j < n; j++) {
		double x = d[j];
		tiny += x < -708.0;
#if defined(__aarch64__)
		x = __builtin_fmax(x, -708.0); // gcc vectorizes the select on x86 only
#else
		x = x < -708.0 ? -708.0 : x; // and fmax there not at all
#endif
		double kd = x * 1.44269504088896338700e+00 + 0x1.8p52;
		uint64_t ki;
		memcpy(&ki, &kd, sizeof ki);
		kd -= 0x1.8p52;
		const double r = (x - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
		double p = 1.0/6227020800.0;
		p = p*r + 1.0/479001600.0;
		p = p*r + 1.0/39916800.0;
		p = p*r + 1.0/3628800.0;
		p = p*r + 1.0/362880.0;
		p = p*r + 1.0/40320.0;
		p = p*r + 1.0/5040.0;
		p = p*r + 1.0/720.0;
		p = p*r + 1.0/120.0;
		p = p*r + 1.0/24.0;
		p = p*r + 1.0/6.0;
		p = p*r + 0.5;
		p = p*r + 1.0;
		p = p*r + 1.0;
		// ki's low bits hold k (the 1.5 * 2^52 added): 2^k's exponent field
		const uint64_t bits = (ki + 1023) << 52;
		double s;
		memcpy(&s, &bits, sizeof s);
		e[j] = p * s;
	}
	return tiny;
}

// confclip_exp_all is confclip_exp with the values below -708 set by libm.
static void confclip_exp_all(const double * d, double * e, int n) {
	if (confclip_exp(d, e, n)) {
		for (int j = 0; j < n; j++) {
			if (d[j] < -708.0) e[j] = exp(d[j]);
		}
	}
}

// confclip_logit_rows summarises rows of logits of the last decode (batch
// indices idx) on the context's OpenMP team: for each row the largest logit
// and its token (lowest id on ties), S = sum exp(x - max), D = sum exp(x -
// max) (x - max) over the tokens where exp(x - max) > 0, how many those are,
// the mean of x - max over every token (-Inf when a logit is -Inf), and the
// index of the first NaN or +Inf (bad, -1 when none; -2 when no
// logit is finite). With w != NULL, row r's exp(x - max) go to w[r*n_vocab
// ...]. Exponentials are confclip_exp's, in double precision, within two
// ulps of Go's math.Exp. Returns the index into idx of a row llama.cpp
// has no logits for, -1 when every row was summarised, or -2 when the row
// pointers could not be allocated.
//
// It runs with num_threads = the context's threads from the thread that
// decodes, so the workers are the ones ggml's graph just ran on: they are
// spinning in OpenMP's wait for the next region, and a row summarised here
// takes them from spinning to work where a Go goroutine would have had to
// share a core with one of them.
static int confclip_logit_rows(struct llama_context * ctx, const int32_t * idx, int n, int n_vocab,
                               confclip_logit_row * out, double * w) {
	const float ** rows = malloc(sizeof(float *) * (n > 0 ? n : 1));
	if (rows == NULL) return -2;
	for (int r = 0; r < n; r++) {
		rows[r] = llama_get_logits_ith(ctx, idx[r]);
		if (rows[r] == NULL) { free(rows); return r; }
	}
	int nth = llama_n_threads(ctx);
	if (nth > n) nth = n;
	if (nth < 1) nth = 1;
	#pragma omp parallel for num_threads(nth) schedule(static)
	for (int r = 0; r < n; r++) {
		const float * x = rows[r];
		confclip_logit_row o = { .max = 0, .sum = 0, .dot = 0, .mean = 0, .argmax = -1, .support = 0, .bad = -1 };
		float m = -INFINITY;
		for (int t = 0; t < n_vocab; t++) {
			if (!(x[t] <= 3.40282346638528859811704183484516925440e+38f)) { o.bad = t; break; }
			if (x[t] > m) { m = x[t]; o.argmax = t; }
		}
		if (o.bad < 0 && o.argmax < 0) o.bad = -2;
		if (o.bad == -1) {
			const double mf = m;
			double sum = 0, dot = 0, all = 0;
			int support = 0;
			double * wr = w ? w + (size_t) r * n_vocab : NULL;
			double d[512], eb[512];
			for (int t0 = 0; t0 < n_vocab; t0 += 512) {
				const int nn = n_vocab - t0 < 512 ? n_vocab - t0 : 512;
				for (int j = 0; j < nn; j++) d[j] = (double) x[t0 + j] - mf;
				double * e = wr ? wr + t0 : eb;
				confclip_exp_all(d, e, nn);
				// in token order, as sampler.Scan adds them
				for (int j = 0; j < nn; j++) {
					all += d[j];
					if (e[j] > 0) { sum += e[j]; dot += e[j] * d[j]; support++; }
				}
			}
			o.max = mf; o.sum = sum; o.dot = dot; o.mean = all / n_vocab; o.support = support;
		}
		out[r] = o;
	}
	free(rows);
	return -1;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// LogitRow summarises one row of logits for sampling and scoring: with
// e_t = exp(x_t - Max), Sum = Σ e_t and Dot = Σ e_t (x_t - Max) over the
// Support tokens whose e_t > 0, and Mean = (1/V) Σ (x_t - Max) over all V
// tokens (-Inf when a logit is -Inf). Bad is the index of the first NaN or
// +Inf logit (-1 when none, -2 when no logit is finite); the other fields
// are then unset.
type LogitRow struct {
	Max      float64
	Sum, Dot float64
	Mean     float64
	Argmax   int32
	Support  int32
	Bad      int32
}

// LogitRows summarises the logits rows of batch indices idx of the last
// Decode, in parallel on the context's threads (the OpenMP team its decode
// just ran on). With w not nil (len(idx) × NVocab values), row r's
// exp(x_t - Max) are written to w[r*NVocab:]. It computes what sampler.Scan
// does, in the same order, with an exp within two ulps of Go's math.Exp:
// the two agree to the last bit or two of a float64.
func (c *Context) LogitRows(idx []int32, w []float64) ([]LogitRow, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	nv := c.model.nv
	if w != nil && len(w) < len(idx)*nv {
		return nil, fmt.Errorf("llama: LogitRows: %d values for %d rows of %d logits", len(w), len(idx), nv)
	}
	rows := make([]C.confclip_logit_row, len(idx))
	var wp *C.double
	if w != nil {
		wp = (*C.double)(unsafe.Pointer(&w[0]))
	}
	var bad C.int
	var msg string
	if err := c.with(func(cc *C.struct_llama_context) {
		msg = call(func() {
			bad = C.confclip_logit_rows(cc, (*C.int32_t)(unsafe.Pointer(&idx[0])), C.int(len(idx)), C.int(nv),
				&rows[0], wp)
		})
	}); err != nil {
		return nil, err
	}
	switch {
	case bad == -2:
		return nil, fmt.Errorf("llama: LogitRows: out of memory")
	case bad >= 0:
		return nil, fmt.Errorf("llama: %s", because(fmt.Sprintf("no logits for batch index %d", idx[bad]), msg))
	}
	out := make([]LogitRow, len(rows))
	for i, r := range rows {
		out[i] = LogitRow{Max: float64(r.max), Sum: float64(r.sum), Dot: float64(r.dot), Mean: float64(r.mean),
			Argmax: int32(r.argmax), Support: int32(r.support), Bad: int32(r.bad)}
	}
	return out, nil
}

// expValues returns exp(d) for each d <= 0 as LogitRows computes it
// (confclip_exp, libm below -708), for tests.
func expValues(d []float64) []float64 {
	e := make([]float64, len(d))
	if len(d) > 0 {
		C.confclip_exp_all((*C.double)(unsafe.Pointer(&d[0])), (*C.double)(unsafe.Pointer(&e[0])), C.int(len(d)))
	}
	return e
}
