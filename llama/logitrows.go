package llama

/*
#cgo CFLAGS: -fopenmp
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "llama.h"

typedef struct {
	double  max, sum, dot;
	int32_t argmax, support, bad, pad;
} confclip_logit_row;

// confclip_logit_rows summarises rows of logits of the last decode (batch
// indices idx) on the context's OpenMP team: for each row the largest logit
// and its token (lowest id on ties), S = sum exp(x - max), D = sum exp(x -
// max) (x - max) over the tokens where exp(x - max) > 0, how many those are,
// and the index of the first NaN or +Inf (bad, -1 when none; -2 when no
// logit is finite). With w != NULL, row r's exp(x - max) go to w[r*n_vocab
// ...]. Exponentials are libm's exp in double precision, as math.Exp is in
// Go. Returns the index into idx of a row llama.cpp has no logits for, -1
// when every row was summarised, or -2 when the row pointers could not be
// allocated.
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
		confclip_logit_row o = { .max = 0, .sum = 0, .dot = 0, .argmax = -1, .support = 0, .bad = -1 };
		float m = -INFINITY;
		for (int t = 0; t < n_vocab; t++) {
			if (!(x[t] <= 3.40282346638528859811704183484516925440e+38f)) { o.bad = t; break; }
			if (x[t] > m) { m = x[t]; o.argmax = t; }
		}
		if (o.bad < 0 && o.argmax < 0) o.bad = -2;
		if (o.bad == -1) {
			const double mf = m;
			double sum = 0, dot = 0;
			int support = 0;
			double * wr = w ? w + (size_t) r * n_vocab : NULL;
			for (int t = 0; t < n_vocab; t++) {
				const double d = (double) x[t] - mf;
				const double e = exp(d);
				if (wr) wr[t] = e;
				if (e > 0) { sum += e; dot += e * d; support++; }
			}
			o.max = mf; o.sum = sum; o.dot = dot; o.support = support;
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
// Support tokens whose e_t > 0. Bad is the index of the first NaN or +Inf
// logit (-1 when none, -2 when no logit is finite); the other fields are
// then unset.
type LogitRow struct {
	Max      float64
	Sum, Dot float64
	Argmax   int32
	Support  int32
	Bad      int32
}

// LogitRows summarises the logits rows of batch indices idx of the last
// Decode, in parallel on the context's threads (the OpenMP team its decode
// just ran on). With w not nil (len(idx) × NVocab values), row r's
// exp(x_t - Max) are written to w[r*NVocab:]. It computes what sampler.Scan
// does, with libm's exp for Go's: the two agree to the last bit or two of a
// float64.
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
		out[i] = LogitRow{Max: float64(r.max), Sum: float64(r.sum), Dot: float64(r.dot),
			Argmax: int32(r.argmax), Support: int32(r.support), Bad: int32(r.bad)}
	}
	return out, nil
}
