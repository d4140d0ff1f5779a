package opcheck

/*
#cgo CFLAGS: -std=c11 -I${SRCDIR}/../../third_party/llama.cpp/llama/include -I${SRCDIR}/../../third_party/llama.cpp/ggml/include
#include <string.h>
#include "ggml.h"
#include "ggml-cpu.h"

enum {
	OPG_TANH, OPG_GELU, OPG_GEGLU, OPG_SWIGLU, OPG_GEGLU_FUSED, OPG_SWIGLU_FUSED,
	OPG_GEGLU_FUSED_SWAPPED, OPG_SWIGLU_FUSED_SWAPPED, OPG_NORM, OPG_RMS_NORM, OPG_SOFTCAP, OPG_SIGMOID,
};

// loss = sum(r * op(x)) for x of n1 rows of n0 values, on the CPU backend;
// with backward, dloss/dx into grad. Returns 0, -1 (no memory) or -2 (the
// backward check refused the graph; *why says why).
static int confclip_op_grad(int op, const float * x, int n0, int n1, const float * r, int backward,
		double * loss, float * grad, const char ** why, const char ** bad_op) {
	struct ggml_init_params ip = { 64u*1024*1024, NULL, false };
	struct ggml_context * ctx = ggml_init(ip);
	if (!ctx) {
		return -1;
	}
	struct ggml_tensor * t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n0, n1);
	memcpy(t->data, x, ggml_nbytes(t));
	if (backward) {
		ggml_set_param(t);
	}
	const int h = n0/2;
	struct ggml_tensor * y = NULL;
	switch (op) {
		case OPG_TANH:   y = ggml_tanh(ctx, t); break;
		case OPG_GELU:   y = ggml_gelu(ctx, t); break;
		case OPG_GEGLU:
		case OPG_SWIGLU: {
			struct ggml_tensor * a = ggml_view_2d(ctx, t, h, n1, t->nb[1], 0);
			struct ggml_tensor * g = ggml_view_2d(ctx, t, h, n1, t->nb[1], h*sizeof(float));
			y = op == OPG_GEGLU ? ggml_geglu_split(ctx, a, g) : ggml_swiglu_split(ctx, a, g);
		} break;
		case OPG_GEGLU_FUSED:          y = ggml_geglu(ctx, t); break;
		case OPG_SWIGLU_FUSED:         y = ggml_swiglu(ctx, t); break;
		case OPG_GEGLU_FUSED_SWAPPED:  y = ggml_geglu_swapped(ctx, t); break;
		case OPG_SWIGLU_FUSED_SWAPPED: y = ggml_swiglu_swapped(ctx, t); break;
		case OPG_NORM:     y = ggml_norm(ctx, t, 1e-5f); break;
		case OPG_RMS_NORM: y = ggml_rms_norm(ctx, t, 1e-5f); break;
		case OPG_SOFTCAP:  y = ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, t, 1.0f/3.0f)), 3.0f); break;
		case OPG_SIGMOID:  y = ggml_sigmoid(ctx, t); break;
	}
	struct ggml_tensor * w = ggml_new_tensor(ctx, GGML_TYPE_F32, GGML_MAX_DIMS, y->ne);
	memcpy(w->data, r, ggml_nbytes(w));
	struct ggml_tensor * l = ggml_sum(ctx, ggml_mul(ctx, y, w));
	struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 1024, backward != 0);
	ggml_build_forward_expand(gf, l);
	if (backward) {
		ggml_set_loss(l);
		struct ggml_tensor * bad = ggml_graph_backward_check(gf, why);
		if (bad) {
			*bad_op = bad->op == GGML_OP_UNARY ? ggml_unary_op_name(ggml_get_unary_op(bad)) : ggml_op_name(bad->op);
			ggml_free(ctx);
			return -2;
		}
		ggml_build_backward_expand(ctx, gf, NULL);
		ggml_graph_reset(gf);
	}
	ggml_graph_compute_with_ctx(ctx, gf, 1);
	*loss = *(float *) l->data;
	if (backward) {
		memcpy(grad, ggml_graph_get_grad(gf, t)->data, ggml_nbytes(t));
	}
	ggml_free(ctx);
	return 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/confclip/confclip/llama"
)

// opCodes are the ops OpLossGrad evaluates: those whose backward pass the
// training families need (patch 0008), their split and fused gated forms,
// and sigmoid, which has no backward pass (for the coverage check).
var opCodes = map[string]C.int{
	"tanh": C.OPG_TANH, "gelu": C.OPG_GELU, "geglu": C.OPG_GEGLU, "swiglu": C.OPG_SWIGLU,
	"geglu_fused": C.OPG_GEGLU_FUSED, "swiglu_fused": C.OPG_SWIGLU_FUSED,
	"geglu_fused_swapped": C.OPG_GEGLU_FUSED_SWAPPED, "swiglu_fused_swapped": C.OPG_SWIGLU_FUSED_SWAPPED,
	"norm": C.OPG_NORM, "rms_norm": C.OPG_RMS_NORM, "softcap": C.OPG_SOFTCAP, "sigmoid": C.OPG_SIGMOID,
}

// OpOutputs is the number of values op gives for n inputs (the gated ops
// halve each row).
func OpOutputs(op string, n int) int {
	switch op {
	case "geglu", "swiglu", "geglu_fused", "swiglu_fused", "geglu_fused_swapped", "swiglu_fused_swapped":
		return n / 2
	}
	return n
}

// OpLossGrad evaluates loss = sum(r * op(x)) with ggml on the CPU, x being
// rows of n0 values, and with backward also dloss/dx through ggml's backward
// pass. It exists for the tests of the backward passes: each op alone,
// against finite differences of the loss. An op without a backward pass is
// an error from ggml's coverage check, not an abort.
func OpLossGrad(op string, x []float32, n0 int, r []float32, backward bool) (float64, []float32, error) {
	code, ok := opCodes[op]
	if !ok {
		return 0, nil, fmt.Errorf("llama: unknown op %q", op)
	}
	if len(x) == 0 {
		return 0, nil, fmt.Errorf("llama: op %s: no inputs", op)
	}
	if n0 < 2 || n0%2 != 0 || len(x)%n0 != 0 || len(r) != OpOutputs(op, len(x)) || len(r) == 0 {
		return 0, nil, fmt.Errorf("llama: op %s: %d inputs in rows of %d with %d output weights", op, len(x), n0, len(r))
	}
	llama.Init()
	grad := make([]float32, len(x))
	var loss C.double
	var why, badOp *C.char
	bw := C.int(0)
	if backward {
		bw = 1
	}
	rc := C.confclip_op_grad(code, (*C.float)(unsafe.Pointer(&x[0])), C.int(n0), C.int(len(x)/n0),
		(*C.float)(unsafe.Pointer(&r[0])), bw, &loss, (*C.float)(unsafe.Pointer(&grad[0])), &why, &badOp)
	switch rc {
	case 0:
		return float64(loss), grad, nil
	case -2:
		return 0, nil, fmt.Errorf("llama: ggml cannot differentiate %s: %s", C.GoString(badOp), C.GoString(why))
	}
	return 0, nil, fmt.Errorf("llama: op %s: out of memory", op)
}
