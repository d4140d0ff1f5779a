package llama

/*
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-cpu.h"

// confclip_quant_mat_mul: w (k x m F32 values, k a row) quantized to type,
// times x (k x n x planes, broadcast over the planes) as one product into
// whole (m x n x planes) and one column at a time into bycol. Returns 0, or
// -1 when memory runs out.
static int confclip_quant_mat_mul(int type, const float * w, const float * x, int k, int m, int n, int planes,
		int threads, float * whole, float * bycol) {
	const size_t qsize = ggml_row_size((enum ggml_type) type, k) * m;
	struct ggml_init_params ip = { qsize + sizeof(float)*((size_t) k*n*planes + 2*(size_t) m*n*planes) + (size_t) (n*planes + 8)*4096 + 1024*1024, NULL, false };
	struct ggml_context * ctx = ggml_init(ip);
	if (!ctx) {
		return -1;
	}
	struct ggml_tensor * wq = ggml_new_tensor_2d(ctx, (enum ggml_type) type, k, m);
	ggml_quantize_chunk((enum ggml_type) type, w, wq->data, 0, m, k, NULL);
	struct ggml_tensor * xt = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, n, planes);
	memcpy(xt->data, x, ggml_nbytes(xt));

	struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 2*n*planes + 8, false);
	struct ggml_tensor * y = ggml_mul_mat(ctx, wq, xt);
	ggml_build_forward_expand(gf, y);
	struct ggml_tensor ** cols = (struct ggml_tensor **) malloc(sizeof(struct ggml_tensor *) * n * planes);
	if (!cols) {
		ggml_free(ctx);
		return -1;
	}
	for (int p = 0; p < planes; p++) {
		for (int j = 0; j < n; j++) {
			struct ggml_tensor * xc = ggml_view_2d(ctx, xt, k, 1, xt->nb[1], p*xt->nb[2] + j*xt->nb[1]);
			cols[p*n + j] = ggml_mul_mat(ctx, wq, xc);
			ggml_build_forward_expand(gf, cols[p*n + j]);
		}
	}
	ggml_graph_compute_with_ctx(ctx, gf, threads);
	memcpy(whole, y->data, ggml_nbytes(y));
	for (int c = 0; c < n*planes; c++) {
		memcpy(bycol + (size_t) c*m, cols[c]->data, sizeof(float)*m);
	}
	free(cols);
	ggml_free(ctx);
	return 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// mulMatTypes are the weight types quantMatMul takes.
var mulMatTypes = map[string]C.int{
	"f32": C.GGML_TYPE_F32, "q4_0": C.GGML_TYPE_Q4_0, "q8_0": C.GGML_TYPE_Q8_0, "q4_K": C.GGML_TYPE_Q4_K,
	"q5_K": C.GGML_TYPE_Q5_K, "q6_K": C.GGML_TYPE_Q6_K,
}

// quantMatMul quantizes w (m rows of k values) to typ (f32: as it is) and
// multiplies it by x
// (planes matrices of n columns of k values) on ggml's CPU backend, once as
// one product and once a column at a time: whole and byColumn, m values a
// column, column j of plane p at (p*n + j)*m. For the tests of patches 0040
// and 0042.
func quantMatMul(typ string, w, x []float32, k, m, n, planes, threads int) (whole, byColumn []float32, err error) {
	t, ok := mulMatTypes[typ]
	if !ok {
		return nil, nil, fmt.Errorf("quantMatMul: type %q", typ)
	}
	if k <= 0 || m <= 0 || n <= 0 || planes <= 0 || len(w) != k*m || len(x) != k*n*planes {
		return nil, nil, fmt.Errorf("quantMatMul: %d weights and %d inputs for k %d, m %d, n %d, planes %d", len(w), len(x), k, m, n, planes)
	}
	whole = make([]float32, m*n*planes)
	byColumn = make([]float32, m*n*planes)
	if C.confclip_quant_mat_mul(t, (*C.float)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&x[0])), C.int(k), C.int(m), C.int(n),
		C.int(planes), C.int(threads), (*C.float)(unsafe.Pointer(&whole[0])), (*C.float)(unsafe.Pointer(&byColumn[0]))) != 0 {
		return nil, nil, fmt.Errorf("quantMatMul: out of memory")
	}
	return whole, byColumn, nil
}
