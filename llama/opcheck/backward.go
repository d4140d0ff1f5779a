// Package opcheck checks ggml's ops, the ones training runs, against
// references, in C on ggml's API: the backward pass's ops on a device
// against the CPU (CompareBackwardOps), an op's gradient for finite
// differences (OpLossGrad), and quantized matrix products whole against in
// parts (QuantMatMul, OutProdLayouts, Q8KFirstDifference: the tests of our
// patches to ggml's CPU kernels). The tests and the GPU check use it; it
// is not meant for use.
package opcheck

/*
#cgo CFLAGS: -std=c11 -I${SRCDIR}/../../third_party/llama.cpp/llama/include -I${SRCDIR}/../../third_party/llama.cpp/ggml/include
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#define CONFCLIP_OPC_MAX 16

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
// device; ‖t2 − t1‖ / ‖t1‖ of the case's result (the node named "chk_").
static bool confclip_opc_cb(int i, struct ggml_tensor * t1, struct ggml_tensor * t2, void * ud) {
	confclip_opc * r = (confclip_opc *) ud;
	if (strcmp(t1->name, "chk_") != 0 || t1->type != GGML_TYPE_F32) {
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
	r->rel[r->n] = (a && b && n > 0) ? sqrt(d / n) : NAN;
	return true;
}

#define CONFCLIP_OPC_CASES 11

// Case i of the ops a training graph's backward pass runs on a GPU, with
// the operand layouts it gives them (permuted views above all); its
// inputs are in[0..*nin).
static struct ggml_tensor * confclip_opc_case(struct ggml_context * ctx, int i, struct ggml_tensor ** in, int * nin, const char ** what) {
#define IN(a, b, c, d) (in[*nin] = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a, b, c, d), in[(*nin)++])
#define PERM(t) ggml_permute(ctx, t, 0, 2, 1, 3)
	struct ggml_tensor * z;
	switch (i) {
	case 0: // a VIEW's gradient, permuted, added into zeros (the query's)
		*what = "acc of a permuted tensor";
		z = ggml_scale(ctx, IN(16, 4, 30, 1), 0.0f);
		return ggml_acc(ctx, z, PERM(IN(16, 30, 4, 1)), z->nb[1], z->nb[2], z->nb[3], 0);
	case 1:
		*what = "acc of a block at an offset";
		z = IN(32, 10, 1, 1);
		return ggml_acc(ctx, z, IN(16, 5, 1, 1), z->nb[1], z->nb[2], z->nb[3], 8*4 + 2*z->nb[1]);
	case 2:
		*what = "acc of a permuted 4-d tensor";
		z = ggml_scale(ctx, IN(8, 4, 3, 2), 0.0f);
		return ggml_acc(ctx, z, PERM(IN(8, 3, 4, 2)), z->nb[1], z->nb[2], z->nb[3], 0);
	case 3: // positions 0..29, in[0] after the gradient
		*what = "rope_back of a permuted tensor";
		z = PERM(IN(16, 30, 4, 1));
		in[*nin] = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 30);
		return ggml_rope_ext_back(ctx, z, in[(*nin)++], NULL, 16, 0, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
	case 4:
		*what = "soft_max_back";
		z = IN(30, 30, 4, 1);
		return ggml_soft_max_ext_back(ctx, z, ggml_soft_max(ctx, IN(30, 30, 4, 1)), 0.25f, 0.0f);
	case 5:
		*what = "rms_norm_back";
		z = IN(64, 30, 1, 1);
		return ggml_rms_norm_back(ctx, z, IN(64, 30, 1, 1), 1e-5f);
	case 6:
		*what = "silu_back";
		z = IN(64, 30, 1, 1);
		return ggml_silu_back(ctx, z, IN(64, 30, 1, 1));
	case 7: // GQA: 4 query heads' gradients onto 2 KV heads
		*what = "repeat_back";
		return ggml_repeat_back(ctx, IN(16, 30, 4, 1), ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 16, 30, 2));
	case 8:
		*what = "cont of a permuted tensor";
		return ggml_cont(ctx, PERM(IN(16, 4, 30, 1)));
	case 9: // K x Q
		*what = "mul_mat of permuted operands";
		z = PERM(IN(16, 2, 30, 1));
		return ggml_mul_mat(ctx, z, PERM(IN(16, 4, 30, 1)));
	default:
		*what = "mul_mat";
		z = IN(64, 30, 1, 1);
		return ggml_mul_mat(ctx, z, IN(64, 30, 1, 1));
	}
#undef IN
#undef PERM
}

// Computes each case on the CPU and on the device, node by node
// (ggml_backend_compare_graph_backend), and records the case's last node;
// a case with a node the device does not support is recorded as such
// (rel -1) and not computed: the scheduler would run that node on the CPU.
// Returns 0, or -1 (no memory), -2 (no such device), -3 (the device did
// not start).
static int confclip_opc_run(const char * device, confclip_opc * r) {
	ggml_backend_dev_t dd = ggml_backend_dev_by_name(device);
	ggml_backend_dev_t cd = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	if (!dd || !cd) {
		return -2;
	}
	ggml_backend_t db = ggml_backend_dev_init(dd, NULL);
	ggml_backend_t cb = ggml_backend_dev_init(cd, NULL);
	int rc = (db && cb) ? 0 : -3;
	uint32_t s = 1;
	for (int c = 0; rc == 0 && c < CONFCLIP_OPC_CASES; c++) {
		struct ggml_init_params ip = { 256*1024, NULL, true };
		struct ggml_context * ctx = ggml_init(ip);
		if (!ctx) {
			rc = -1;
			break;
		}
		struct ggml_tensor * in[8];
		int nin = 0;
		const char * what = "";
		struct ggml_tensor * t = confclip_opc_case(ctx, c, in, &nin, &what);
		ggml_set_name(t, "chk_");
		struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 64, false);
		ggml_build_forward_expand(gf, t);
		bool ok = true;
		for (int i = 0; i < ggml_graph_n_nodes(gf); i++) {
			ok = ok && ggml_backend_dev_supports_op(dd, ggml_graph_node(gf, i));
		}
		const int k = r->n;
		snprintf(r->name[k], sizeof r->name[0], "%s", what);
		snprintf(r->op[k], sizeof r->op[0], "%s", ggml_op_desc(t));
		r->rel[k] = -1;
		ggml_backend_buffer_t buf = ok ? ggml_backend_alloc_ctx_tensors(ctx, cb) : NULL;
		if (ok && !buf) {
			rc = -1;
		} else if (ok) {
			// inputs: a fixed pseudo-random sequence in (-1, 1); positions 0, 1, ...
			for (int i = 0; i < nin; i++) {
				const int64_t ne = ggml_nelements(in[i]);
				if (in[i]->type == GGML_TYPE_I32) {
					int32_t * p = (int32_t *) malloc(sizeof(int32_t) * ne);
					for (int64_t j = 0; j < ne; j++) {
						p[j] = (int32_t) j;
					}
					ggml_backend_tensor_set(in[i], p, 0, ggml_nbytes(in[i]));
					free(p);
					continue;
				}
				float * v = (float *) malloc(sizeof(float) * ne);
				for (int64_t j = 0; j < ne; j++) {
					s = s*1664525u + 1013904223u;
					v[j] = (float) ((double) (s >> 8) / (double) (1u << 23) - 1.0);
				}
				ggml_backend_tensor_set(in[i], v, 0, ggml_nbytes(in[i]));
				free(v);
			}
			ggml_backend_compare_graph_backend(cb, db, gf, confclip_opc_cb, r, NULL, 0);
			ggml_backend_buffer_free(buf);
		}
		r->n = k + 1;
		ggml_free(ctx);
	}
	if (db) ggml_backend_free(db);
	if (cb) ggml_backend_free(cb);
	return rc;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/internal/handle"
)

// OpDiff is one op's result on a device against the CPU's.
type OpDiff struct {
	What      string  // the case: "acc of a permuted tensor", ...
	Op        string  // ggml's name for the op
	Supported bool    // false: the device's backend declines the case (ggml's scheduler runs it on the CPU), and it was not computed
	RelErr    float64 // ‖device − CPU‖ / ‖CPU‖, when Supported
}

// CompareBackwardOps computes, on the named device and on the CPU, the ops a
// training graph's backward pass runs on a GPU, with the operand layouts it
// gives them (ACC of a permuted gradient, ROPE_BACK of a permuted one,
// SOFT_MAX_BACK, RMS_NORM_BACK, SILU_BACK, REPEAT_BACK, CONT of a permuted
// tensor, and matrix products of permuted and of contiguous operands), and
// returns each op's relative difference, or that the device's backend
// declines it. It names the op when a backend computes one wrongly, which a
// whole training step's gradients do not.
func CompareBackwardOps(device string) ([]OpDiff, error) {
	llama.Init()
	r := (*C.confclip_opc)(C.calloc(1, C.sizeof_confclip_opc))
	if r == nil {
		return nil, fmt.Errorf("llama: comparing ops on %s: out of memory", device)
	}
	defer C.free(unsafe.Pointer(r))
	cs := C.CString(device)
	defer C.free(unsafe.Pointer(cs))
	var rc C.int
	msg := handle.Call(func() { rc = C.confclip_opc_run(cs, r) })
	switch rc {
	case 0:
	case -2:
		return nil, fmt.Errorf("llama: comparing ops: no device %q", device)
	default:
		return nil, fmt.Errorf("llama: %s", handle.Because(fmt.Sprintf("comparing ops on %s failed (%d)", device, int(rc)), msg))
	}
	out := make([]OpDiff, int(r.n))
	for i := range out {
		rel := float64(r.rel[i])
		out[i] = OpDiff{What: C.GoString(&r.name[i][0]), Op: C.GoString(&r.op[i][0]), Supported: rel != -1, RelErr: max(rel, 0)}
	}
	return out, nil
}
