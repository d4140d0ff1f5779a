package llama

/*
#define _POSIX_C_SOURCE 199309L // clock_gettime under -std=c11
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llama.h"
#include "ggml.h"

// One slot per ggml op, unary op and GLU op: the CPU kernels differ by
// them, and "UNARY" alone would lump SiLU with everything else.
#define CONFCLIP_PROF_KEYS (GGML_OP_COUNT + GGML_UNARY_OP_COUNT + GGML_GLU_OP_COUNT)

typedef struct {
	int64_t t0;       // when the scheduler was about to compute the node
	int     backward; // past the loss node of a training graph
	int64_t ns[2][CONFCLIP_PROF_KEYS];
	int64_t count[2][CONFCLIP_PROF_KEYS];
	double  bytes[2][CONFCLIP_PROF_KEYS];
	double  flops[2][CONFCLIP_PROF_KEYS];
} confclip_prof;

static int64_t confclip_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec*1000000000 + ts.tv_nsec;
}

static int confclip_prof_key(const struct ggml_tensor * t) {
	if (t->op == GGML_OP_UNARY) {
		return GGML_OP_COUNT + (int) ggml_get_unary_op(t);
	}
	if (t->op == GGML_OP_GLU) {
		return GGML_OP_COUNT + GGML_UNARY_OP_COUNT + (int) ggml_get_glu_op(t);
	}
	return (int) t->op;
}

static const char * confclip_prof_name(int key) {
	if (key < GGML_OP_COUNT) {
		return ggml_op_name((enum ggml_op) key);
	}
	if (key < GGML_OP_COUNT + GGML_UNARY_OP_COUNT) {
		return ggml_unary_op_name((enum ggml_unary_op) (key - GGML_OP_COUNT));
	}
	return ggml_glu_op_name((enum ggml_glu_op) (key - GGML_OP_COUNT - GGML_UNARY_OP_COUNT));
}

// Ops that only describe memory (no kernel runs for them).
static bool confclip_prof_empty(const struct ggml_tensor * t) {
	switch (t->op) {
	case GGML_OP_NONE: case GGML_OP_VIEW: case GGML_OP_RESHAPE:
	case GGML_OP_PERMUTE: case GGML_OP_TRANSPOSE:
		return true;
	default:
		return false;
	}
}

// The scheduler's eval callback. Asked about every node that runs a kernel,
// it says yes, so the scheduler computes that node on its own and calls
// back when it is done: the time between the two calls is the node's.
static bool confclip_prof_cb(struct ggml_tensor * t, bool ask, void * ud) {
	confclip_prof * p = (confclip_prof *) ud;
	if (ask) {
		if (confclip_prof_empty(t)) {
			// The nodes after the loss are the backward pass. llama_pg_eval
			// makes its loss a GGML_OP_NONE node that no kernel computes
			// (patch 0045): it is noted here, never being done (the split
			// was all forward).
			if (t->flags & GGML_TENSOR_FLAG_LOSS) {
				p->backward = 1;
			}
			return false; // computed with the next node, at no cost
		}
		p->t0 = confclip_now_ns();
		return true;
	}
	const int64_t dt = confclip_now_ns() - p->t0;
	const int k  = confclip_prof_key(t);
	const int ph = p->backward;
	// bytes: the node's output and inputs, a floor on its memory traffic
	double bytes = (double) ggml_nbytes(t);
	for (int i = 0; i < GGML_MAX_SRC && t->src[i]; ++i) {
		bytes += (double) ggml_nbytes(t->src[i]);
	}
	double flops = 0;
	if (t->op == GGML_OP_MUL_MAT) {
		flops = 2.0*(double) t->src[0]->ne[0]*(double) ggml_nelements(t);
	} else if (t->op == GGML_OP_OUT_PROD) {
		flops = 2.0*(double) t->src[0]->ne[1]*(double) ggml_nelements(t);
	}
	p->ns[ph][k]    += dt;
	p->count[ph][k] += 1;
	p->bytes[ph][k] += bytes;
	p->flops[ph][k] += flops;
	if (t->flags & GGML_TENSOR_FLAG_LOSS) {
		p->backward = 1;
	}
	return true;
}

static void confclip_prof_install(struct llama_context_params * cp, confclip_prof * p) {
	cp->cb_eval = confclip_prof_cb;
	cp->cb_eval_user_data = p;
}
*/
import "C"

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"unsafe"
)

// OpStat is the time and memory traffic of one ggml op in one phase of the
// graphs a profiling context computed.
type OpStat struct {
	Op       string  // ggml's name: MUL_MAT, OUT_PROD, SILU, ...
	Backward bool    // computed after the loss (a training graph's backward pass)
	Count    int     // nodes
	Seconds  float64 // wall time
	Bytes    float64 // output plus inputs, summed over the nodes
	Flops    float64 // MUL_MAT and OUT_PROD only
}

// profState is the C side's totals, written by the eval callback.
type profState = C.confclip_prof

func newProfile(cp *C.struct_llama_context_params) *profState {
	p := (*C.confclip_prof)(C.calloc(1, C.sizeof_confclip_prof))
	C.confclip_prof_install(cp, p)
	return p
}

// profStart marks the start of a graph: its nodes are forward ones until
// the loss.
func (c *Context) profStart() {
	if !c.enter() {
		return
	}
	defer c.exit()
	if c.r.prof != nil {
		c.r.prof.backward = 0
	}
}

// Profile returns the op-by-op totals since the context was created or
// last reset, slowest first; nil unless the context was created with
// ContextParams.Profile.
func (c *Context) Profile() []OpStat {
	if !c.enter() {
		return nil
	}
	defer c.exit() // Close and the cleanup free the totals
	prof := c.r.prof
	if prof == nil {
		return nil
	}
	var out []OpStat
	for ph := 0; ph < 2; ph++ {
		for k := 0; k < int(C.CONFCLIP_PROF_KEYS); k++ {
			n := int(prof.count[ph][k])
			if n == 0 {
				continue
			}
			out = append(out, OpStat{
				Op: C.GoString(C.confclip_prof_name(C.int(k))), Backward: ph == 1, Count: n,
				Seconds: float64(prof.ns[ph][k]) / 1e9, Bytes: float64(prof.bytes[ph][k]), Flops: float64(prof.flops[ph][k]),
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seconds > out[j].Seconds })
	return out
}

// ResetProfile clears the totals.
func (c *Context) ResetProfile() {
	if !c.enter() {
		return
	}
	defer c.exit()
	if c.r.prof != nil {
		C.memset(unsafe.Pointer(c.r.prof), 0, C.sizeof_confclip_prof)
	}
}

// WriteProfile prints stats as a Markdown table: per op and phase the nodes,
// the time and its share, the bytes and the achieved bandwidth (and GFLOP/s
// for matrix products), then the forward and backward totals.
func WriteProfile(w io.Writer, stats []OpStat) error {
	var total, phase [2]float64
	var bytes [2]float64
	for _, s := range stats {
		ph := 0
		if s.Backward {
			ph = 1
		}
		phase[ph] += s.Seconds
		bytes[ph] += s.Bytes
		total[0] += s.Seconds
	}
	var b strings.Builder
	b.WriteString("| phase | op | nodes | ms | share | MiB | GB/s | GFLOP/s |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	row := func(ph, op string, n int, sec, by, fl float64) {
		share := 0.0
		if total[0] > 0 {
			share = 100 * sec / total[0]
		}
		gbs, gfs := "", ""
		if sec > 0 {
			gbs = fmt.Sprintf("%.1f", by/sec/1e9)
			if fl > 0 {
				gfs = fmt.Sprintf("%.1f", fl/sec/1e9)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %.1f%% | %.0f | %s | %s |\n", ph, op, n, sec*1e3, share, by/(1<<20), gbs, gfs)
	}
	for _, s := range stats {
		ph := "forward"
		if s.Backward {
			ph = "backward"
		}
		row(ph, s.Op, s.Count, s.Seconds, s.Bytes, s.Flops)
	}
	for ph, name := range []string{"forward", "backward"} {
		n := 0
		for _, s := range stats {
			if s.Backward == (ph == 1) {
				n += s.Count
			}
		}
		row("**"+name+"**", "all", n, phase[ph], bytes[ph], 0)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
