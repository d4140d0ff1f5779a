package llama

/*
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#define CONFCLIP_OPC_MAX 32

typedef struct {
	int    n;
	char   name[CONFCLIP_OPC_MAX][64];
	char   op[CONFCLIP_OPC_MAX][32];
	double rel[CONFCLIP_OPC_MAX];
} confclip_opc;

// A node's values in index order, through its strides (both backends lay
// a node out alike).
static float * confclip_opc_get(struct ggml_tensor * t) {
	const size_t nb = ggml_nbytes(t);
	char * raw = (char *) malloc(nb);
	float * out = (float *) malloc(sizeof(float) * ggml_nelements(t));
	if (!raw || !out) {
		free(raw);
		free(out);
		return NULL;
	}
	ggml_backend_tensor_get(t, raw, 0, nb);
	int64_t k = 0;
	for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
	for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
	for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
	for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
		memcpy(&out[k++], raw + i0*t->nb[0] + i1*t->nb[1] + i2*t->nb[2] + i3*t->nb[3], sizeof(float));
	}
	free(raw);
	return out;
}

// ggml_backend_compare_graph_backend's callback: t1 on the CPU, t2 on the
// device; ‖t2 − t1‖ / ‖t1‖ for every named F32 node.
static bool confclip_opc_cb(int i, struct ggml_tensor * t1, struct ggml_tensor * t2, void * ud) {
	confclip_opc * r = (confclip_opc *) ud;
	if (t1->type != GGML_TYPE_F32 || strncmp(t1->name, "chk_", 4) != 0 || r->n >= CONFCLIP_OPC_MAX) {
		return true;
	}
	float * a = confclip_opc_get(t1);
	float * b = confclip_opc_get(t2);
	double d = 0, n = 0;
	if (a && b) {
		for (int64_t k = 0; k < ggml_nelements(t1); k++) {
			d += ((double) a[k] - b[k]) * ((double) a[k] - b[k]);
			n += (double) a[k] * a[k];
		}
	}
	free(a);
	free(b);
	snprintf(r->name[r->n], sizeof r->name[0], "%s", t1->name + 4);
	snprintf(r->op[r->n], sizeof r->op[0], "%s", ggml_op_desc(t1));
	r->rel[r->n] = (a && b && n > 0) ? sqrt(d / n) : NAN;
	r->n++;
	return true;
}

// Builds a graph of the ops a training graph's backward pass runs on a GPU,
// with the operand layouts it gives them (permuted views above all), and
// computes it node by node on the CPU and on the device. Returns 0, or -1
// (no memory), -2 (no such device), -3 (the device did not start).
static int confclip_opc_run(const char * device, confclip_opc * r) {
	struct ggml_init_params ip = { 1024*1024, NULL, true };
	struct ggml_context * ctx = ggml_init(ip);
	if (!ctx) {
		return -1;
	}
	struct ggml_tensor * in[32];
	int nin = 0;
#define IN(a, b, c, d) (in[nin] = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a, b, c, d), in[nin++])
#define PERM(t) ggml_permute(ctx, t, 0, 2, 1, 3)
	struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 128, false);
#define OUT(t, name) do { struct ggml_tensor * o_ = (t); ggml_set_name(o_, "chk_" name); ggml_build_forward_expand(gf, o_); } while (0)

	// ACC: a VIEW's gradient, permuted, added into zeros (the query's), a
	// block at an offset, and a 4-d permuted one
	struct ggml_tensor * z = ggml_scale(ctx, IN(16, 4, 30, 1), 0.0f);
	OUT(ggml_acc(ctx, z, PERM(IN(16, 30, 4, 1)), z->nb[1], z->nb[2], z->nb[3], 0), "acc of a permuted tensor");
	struct ggml_tensor * big = IN(32, 10, 1, 1);
	OUT(ggml_acc(ctx, big, IN(16, 5, 1, 1), big->nb[1], big->nb[2], big->nb[3], 8*4 + 2*big->nb[1]), "acc of a block at an offset");
	struct ggml_tensor * z4 = ggml_scale(ctx, IN(8, 4, 3, 2), 0.0f);
	OUT(ggml_acc(ctx, z4, PERM(IN(8, 3, 4, 2)), z4->nb[1], z4->nb[2], z4->nb[3], 0), "acc of a permuted 4-d tensor");
	// ROPE_BACK of a permuted gradient, positions 0..29
	struct ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 30);
	OUT(ggml_rope_ext_back(ctx, PERM(IN(16, 30, 4, 1)), pos, NULL, 16, 0, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f), "rope_back of a permuted tensor");
	// SOFT_MAX_BACK with a scale, RMS_NORM_BACK, SILU_BACK, REPEAT_BACK (GQA)
	OUT(ggml_soft_max_ext_back(ctx, IN(30, 30, 4, 1), ggml_soft_max(ctx, IN(30, 30, 4, 1)), 0.25f, 0.0f), "soft_max_back");
	struct ggml_tensor * x = IN(64, 30, 1, 1);
	OUT(ggml_rms_norm_back(ctx, IN(64, 30, 1, 1), x, 1e-5f), "rms_norm_back");
	OUT(ggml_silu_back(ctx, IN(64, 30, 1, 1), x), "silu_back");
	OUT(ggml_repeat_back(ctx, IN(16, 30, 4, 1), ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 16, 30, 2)), "repeat_back");
	// CONT of a permuted tensor; products of permuted operands (K x Q) and
	// of contiguous ones
	struct ggml_tensor * q = IN(16, 4, 30, 1);
	OUT(ggml_cont(ctx, PERM(q)), "cont of a permuted tensor");
	OUT(ggml_mul_mat(ctx, PERM(IN(16, 2, 30, 1)), PERM(q)), "mul_mat of permuted operands");
	OUT(ggml_mul_mat(ctx, IN(64, 30, 1, 1), x), "mul_mat");
#undef IN
#undef PERM
#undef OUT

	ggml_backend_dev_t dd = ggml_backend_dev_by_name(device);
	ggml_backend_dev_t cd = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	if (!dd || !cd) {
		ggml_free(ctx);
		return -2;
	}
	ggml_backend_t db = ggml_backend_dev_init(dd, NULL);
	ggml_backend_t cb = ggml_backend_dev_init(cd, NULL);
	if (!db || !cb) {
		if (db) ggml_backend_free(db);
		if (cb) ggml_backend_free(cb);
		ggml_free(ctx);
		return -3;
	}
	ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cb);
	if (!buf) {
		ggml_backend_free(db);
		ggml_backend_free(cb);
		ggml_free(ctx);
		return -1;
	}
	// inputs: a fixed pseudo-random sequence in (-1, 1)
	uint32_t s = 1;
	for (int i = 0; i < nin; i++) {
		const int64_t ne = ggml_nelements(in[i]);
		float * v = (float *) malloc(sizeof(float) * ne);
		for (int64_t k = 0; k < ne; k++) {
			s = s*1664525u + 1013904223u;
			v[k] = (float) ((double) (s >> 8) / (double) (1u << 23) - 1.0);
		}
		ggml_backend_tensor_set(in[i], v, 0, ggml_nbytes(in[i]));
		free(v);
	}
	int32_t p[30];
	for (int i = 0; i < 30; i++) {
		p[i] = i;
	}
	ggml_backend_tensor_set(pos, p, 0, sizeof p);
	ggml_backend_compare_graph_backend(cb, db, gf, confclip_opc_cb, r, NULL);
	ggml_backend_buffer_free(buf);
	ggml_backend_free(db);
	ggml_backend_free(cb);
	ggml_free(ctx);
	return 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// OpDiff is one op's result on a device against the CPU's.
type OpDiff struct {
	What   string  // the case: "acc of a permuted tensor", ...
	Op     string  // ggml's name for the op
	RelErr float64 // ‖device − CPU‖ / ‖CPU‖
}

// CompareBackwardOps computes, on the named device and on the CPU, the ops a
// training graph's backward pass runs on a GPU, with the operand layouts it
// gives them (ACC of a permuted gradient, ROPE_BACK of a permuted one,
// SOFT_MAX_BACK, RMS_NORM_BACK, SILU_BACK, REPEAT_BACK, CONT of a permuted
// tensor, and matrix products of permuted and of contiguous operands), and
// returns each op's relative difference. It names the op when a backend
// computes one wrongly, which a whole training step's gradients do not.
func CompareBackwardOps(device string) ([]OpDiff, error) {
	Init()
	r := (*C.confclip_opc)(C.calloc(1, C.sizeof_confclip_opc))
	if r == nil {
		return nil, fmt.Errorf("llama: comparing ops on %s: out of memory", device)
	}
	defer C.free(unsafe.Pointer(r))
	cs := C.CString(device)
	defer C.free(unsafe.Pointer(cs))
	var rc C.int
	msg := call(func() { rc = C.confclip_opc_run(cs, r) })
	switch rc {
	case 0:
	case -2:
		return nil, fmt.Errorf("llama: comparing ops: no device %q", device)
	default:
		return nil, fmt.Errorf("llama: %s", because(fmt.Sprintf("comparing ops on %s failed (%d)", device, int(rc)), msg))
	}
	out := make([]OpDiff, int(r.n))
	for i := range out {
		out[i] = OpDiff{
			What:   C.GoString(&r.name[i][0]),
			Op:     C.GoString(&r.op[i][0]),
			RelErr: float64(r.rel[i]),
		}
	}
	return out, nil
}
