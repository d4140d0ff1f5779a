package opcheck

/*
#cgo CFLAGS: -std=c11 -I${SRCDIR}/../../third_party/llama.cpp/llama/include -I${SRCDIR}/../../third_party/llama.cpp/ggml/include
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-cpu.h"

// confclip_quant_mat_mul: w (k x m F32 values, k a row) quantized to type,
// times x (k x n x planes, broadcast over the planes) as one product into
// whole (m x n x planes) and in parts of `part` columns (the last part of a
// plane may have fewer) into byparts. Returns 0, or -1 when memory runs
// out.
static int confclip_quant_mat_mul(int type, const float * w, const float * x, int k, int m, int n, int planes, int part,
		int threads, float * whole, float * byparts) {
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
	struct ggml_tensor ** parts = (struct ggml_tensor **) malloc(sizeof(struct ggml_tensor *) * n * planes);
	if (!parts) {
		ggml_free(ctx);
		return -1;
	}
	int nparts = 0;
	for (int p = 0; p < planes; p++) {
		for (int j = 0; j < n; j += part) {
			const int cols = j + part <= n ? part : n - j;
			struct ggml_tensor * xc = ggml_view_2d(ctx, xt, k, cols, xt->nb[1], p*xt->nb[2] + j*xt->nb[1]);
			parts[nparts] = ggml_mul_mat(ctx, wq, xc);
			ggml_build_forward_expand(gf, parts[nparts++]);
		}
	}
	ggml_graph_compute_with_ctx(ctx, gf, threads);
	memcpy(whole, y->data, ggml_nbytes(y));
	// the parts' results are m values a column, in the order of whole's
	size_t off = 0;
	for (int c = 0; c < nparts; c++) {
		memcpy(byparts + off, parts[c]->data, ggml_nbytes(parts[c]));
		off += ggml_nelements(parts[c]);
	}
	free(parts);
	ggml_free(ctx);
	return 0;
}

// confclip_out_prod_layouts: the input gradient of a frozen weight as the
// backward pass computes it, out_prod(W, transpose(G)) with W k x m (k a
// row) and G m x n (m a row), three ways: G transposed in place (its rows
// read as runs of m values), G transposed into a contiguous copy (read
// across its rows, patch 0044's gather), and a row of the result at a time
// (a product too small for the copied panel of W). Each is k x n into
// whole, copied and byrow. Returns 0, or -1 when memory runs out.
static int confclip_out_prod_layouts(const float * w, const float * g, int k, int m, int n, int threads,
		float * whole, float * copied, float * byrow) {
	struct ggml_init_params ip = { sizeof(float)*((size_t) k*m + 2*(size_t) m*n + 4*(size_t) k*n) + (size_t) (n + 8)*8192 + 1024*1024, NULL, false };
	struct ggml_context * ctx = ggml_init(ip);
	if (!ctx) {
		return -1;
	}
	struct ggml_tensor * wt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, m);
	memcpy(wt->data, w, ggml_nbytes(wt));
	struct ggml_tensor * gt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, m, n);
	memcpy(gt->data, g, ggml_nbytes(gt));
	struct ggml_tensor * gtt = ggml_transpose(ctx, gt);

	struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 2*n + 16, false);
	struct ggml_tensor * a = ggml_out_prod(ctx, wt, gtt);
	struct ggml_tensor * b = ggml_out_prod(ctx, wt, ggml_cont(ctx, gtt));
	ggml_build_forward_expand(gf, a);
	ggml_build_forward_expand(gf, b);
	struct ggml_tensor ** rows = (struct ggml_tensor **) malloc(sizeof(struct ggml_tensor *) * n);
	if (!rows) {
		ggml_free(ctx);
		return -1;
	}
	for (int j = 0; j < n; j++) {
		rows[j] = ggml_out_prod(ctx, wt, ggml_view_2d(ctx, gtt, 1, m, gtt->nb[1], j*gtt->nb[0]));
		ggml_build_forward_expand(gf, rows[j]);
	}
	ggml_graph_compute_with_ctx(ctx, gf, threads);
	memcpy(whole, a->data, ggml_nbytes(a));
	memcpy(copied, b->data, ggml_nbytes(b));
	for (int j = 0; j < n; j++) {
		memcpy(byrow + (size_t) j*k, rows[j]->data, sizeof(float)*k);
	}
	free(rows);
	ggml_free(ctx);
	return 0;
}

// ggml-base's reference quantizer (ggml-quants.h is not among the headers
// the package builds with); the block is 4 + 256 + 32 bytes
void quantize_row_q8_K_ref(const float * x, void * y, int64_t k);

// confclip_q8K_first_difference quantizes nblocks blocks of 256 values of x
// to Q8_K with the CPU backend's quantizer (the one its K-quant products
// use on their input) and with ggml-base's reference, and returns the first
// block whose scale, values or sums differ (the sums of a block of zeros,
// whose scale is 0, are not compared: the reference leaves them as they
// were), or -1; -2 when memory runs out.
static int confclip_q8K_first_difference(const float * x, int nblocks) {
	const size_t bs = ggml_type_size(GGML_TYPE_Q8_K);
	unsigned char * a = (unsigned char *) malloc(bs * nblocks);
	unsigned char * b = (unsigned char *) malloc(bs * nblocks);
	if (!a || !b) {
		free(a);
		free(b);
		return -2;
	}
	memset(a, 0x55, bs * nblocks);
	memset(b, 0xaa, bs * nblocks);
	ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(x, a, (int64_t) nblocks * 256);
	quantize_row_q8_K_ref(x, b, (int64_t) nblocks * 256);
	int bad = -1;
	for (int i = 0; i < nblocks && bad < 0; i++) {
		const unsigned char * pa = a + i*bs;
		const unsigned char * pb = b + i*bs;
		float d;
		memcpy(&d, pb, sizeof d);
		const size_t n = d == 0.0f ? 4 + 256 : bs;
		if (memcmp(pa, pb, n) != 0) {
			bad = i;
		}
	}
	free(a);
	free(b);
	return bad;
}

// confclip_out_prod_fma: out_prod(W, transpose(G)) as ggml-cpu's tiled
// kernel sums each value, one value at a time: over blocks of kb rows of W
// (k values a row, m rows), a sum of FMAs in row order from 0, added to
// the result after each block. G is m x n (m a row); out is k x n.
static void confclip_out_prod_fma(const float * w, const float * g, int k, int m, int n, int kb, float * out) {
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < k; i++) {
			float d = 0.0f;
			for (int c0 = 0; c0 < m; c0 += kb) {
				float s = 0.0f;
				for (int c = c0; c < m && c < c0 + kb; c++) {
					s = fmaf(w[(size_t) c*k + i], g[(size_t) j*m + c], s);
				}
				d += s;
			}
			out[(size_t) j*k + i] = d;
		}
	}
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/confclip/confclip/llama"
)

// mulMatTypes are the weight types QuantMatMul takes.
var mulMatTypes = map[string]C.int{
	"f32": C.GGML_TYPE_F32, "q4_0": C.GGML_TYPE_Q4_0, "q5_0": C.GGML_TYPE_Q5_0, "q8_0": C.GGML_TYPE_Q8_0,
	"iq4_nl": C.GGML_TYPE_IQ4_NL, "q4_K": C.GGML_TYPE_Q4_K, "q5_K": C.GGML_TYPE_Q5_K, "q6_K": C.GGML_TYPE_Q6_K,
}

// QuantMatMul quantizes w (m rows of k values) to typ (f32: as it is) and
// multiplies it by x (planes matrices of n columns of k values) on ggml's
// CPU backend, once as one product and once in parts of `part` columns:
// whole and byParts, m values a column, column j of plane p at (p*n + j)*m.
// A part of one column takes ggml's matrix-vector kernels, llamafile's
// products need two or more. For the tests of patches 0040, 0042, 0044 and 0061.
func QuantMatMul(typ string, w, x []float32, k, m, n, planes, part, threads int) (whole, byParts []float32, err error) {
	llama.Init()
	t, ok := mulMatTypes[typ]
	if !ok {
		return nil, nil, fmt.Errorf("QuantMatMul: type %q", typ)
	}
	if k <= 0 || m <= 0 || n <= 0 || planes <= 0 || part <= 0 || len(w) != k*m || len(x) != k*n*planes {
		return nil, nil, fmt.Errorf("QuantMatMul: %d weights and %d inputs for k %d, m %d, n %d, planes %d, parts of %d", len(w), len(x), k, m, n, planes, part)
	}
	whole = make([]float32, m*n*planes)
	byParts = make([]float32, m*n*planes)
	if C.confclip_quant_mat_mul(t, (*C.float)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&x[0])), C.int(k), C.int(m), C.int(n),
		C.int(planes), C.int(part), C.int(threads), (*C.float)(unsafe.Pointer(&whole[0])), (*C.float)(unsafe.Pointer(&byParts[0]))) != 0 {
		return nil, nil, fmt.Errorf("QuantMatMul: out of memory")
	}
	return whole, byParts, nil
}

// OutProdLayouts computes the input gradient of a frozen weight w (m rows
// of k values) for the output gradient g (n columns of m values) on ggml's
// CPU backend as the backward pass does, out_prod(w, transpose(g)), three
// ways: g read in place, g read from a contiguous transposed copy, and a
// column of the result at a time. Each result is n columns of k values.
// For the test of patch 0044.
func OutProdLayouts(w, g []float32, k, m, n, threads int) (whole, copied, byRow []float32, err error) {
	if k <= 0 || m <= 0 || n <= 0 || len(w) != k*m || len(g) != m*n {
		return nil, nil, nil, fmt.Errorf("OutProdLayouts: %d weights and %d gradients for k %d, m %d, n %d", len(w), len(g), k, m, n)
	}
	llama.Init()
	whole, copied, byRow = make([]float32, k*n), make([]float32, k*n), make([]float32, k*n)
	if C.confclip_out_prod_layouts((*C.float)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&g[0])), C.int(k), C.int(m), C.int(n),
		C.int(threads), (*C.float)(unsafe.Pointer(&whole[0])), (*C.float)(unsafe.Pointer(&copied[0])), (*C.float)(unsafe.Pointer(&byRow[0]))) != 0 {
		return nil, nil, nil, fmt.Errorf("OutProdLayouts: out of memory")
	}
	return whole, copied, byRow, nil
}

// OutProdFMA is out_prod(w, transpose(g)) (OutProdLayouts' operands and
// layout) summed as ggml-cpu's tiled kernel sums each value: in blocks of
// kb rows of w, FMAs in order within a block. For the test of patch 0062.
func OutProdFMA(w, g []float32, k, m, n, kb int) ([]float32, error) {
	if k <= 0 || m <= 0 || n <= 0 || kb <= 0 || len(w) != k*m || len(g) != m*n {
		return nil, fmt.Errorf("OutProdFMA: %d weights and %d gradients for k %d, m %d, n %d", len(w), len(g), k, m, n)
	}
	out := make([]float32, k*n)
	C.confclip_out_prod_fma((*C.float)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&g[0])), C.int(k), C.int(m), C.int(n), C.int(kb),
		(*C.float)(unsafe.Pointer(&out[0])))
	return out, nil
}

// Q8KFirstDifference quantizes x (whole blocks of 256 values) to Q8_K with
// the CPU backend's quantizer and with ggml's reference, and returns the
// first block where they differ, or -1. For the test of patch 0046.
func Q8KFirstDifference(x []float32) (int, error) {
	if len(x) == 0 || len(x)%256 != 0 {
		return 0, fmt.Errorf("Q8KFirstDifference: %d values, want whole blocks of 256", len(x))
	}
	llama.Init()
	r := int(C.confclip_q8K_first_difference((*C.float)(unsafe.Pointer(&x[0])), C.int(len(x)/256)))
	if r == -2 {
		return 0, fmt.Errorf("Q8KFirstDifference: out of memory")
	}
	return r, nil
}
