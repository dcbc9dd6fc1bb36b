// toy's own matrix-multiply kernels for Q8_0 and F16 weights on CPUs with
// AVX-512 VNNI, where ggml has no repacked layout for them on x86 (its
// tinyBLAS and vec_dot paths reload every weight block once per column).
// F16 (below the Q8_0 description): groups of 16 rows stored input by
// input, converted with VCVTPH2PS and multiplied by up to 8 float32 columns
// (rounded through fp16 first, as ggml rounds them) per load.
//
// At load, a Q8_0 matrix [n_in, n_out] is rewritten in groups of 16 rows: for
// each block of 32 inputs, the 16 rows' fp16 scales, then their 16 x 32
// quants with 128 added (unsigned) and interleaved 4 bytes per row, so one
// 512-bit VPDPBUSD multiplies 4 inputs of all 16 rows by one broadcast
// 4-byte group of a column. The weights of a block stay in registers while
// up to 8 columns pass over them. Same size as Q8_0 (34 bytes per 32 values).
//
// In the graph, y = W x is two custom ops: x quantized per 32 values as
// ggml quantizes a Q8_0 matmul's input (scale amax/127 rounded to fp16, quants
// rounded to nearest even), then the products. Each block's integer dot is
// exact (the +128 is taken back with the column's block sum), so the result
// is ggml's Q8_0 x Q8_0 dot product up to float summation order.
#pragma once

#include <ggml.h>

#include <cstddef>
#include <cstdint>

namespace toy::graph {

// Whether this build has the kernel for a matrix of this type and shape:
// Q8_0 or F16, 2-D, n_out a multiple of 16. False on CPUs without AVX-512 VNNI
// (the build is -march=native), where ggml's own kernels run instead.
bool packed_matmul_supports(ggml_type type, const int64_t *ne, int n_dims);

// Rewrites a Q8_0 matrix [n_in, n_out] (ggml's row-major blocks) into the
// packed layout at dst; both are ggml_row_size(Q8_0, n_in) * n_out bytes.
void pack_q8_0(const void *src, void *dst, int64_t n_in, int64_t n_out);
// The same for F16: per group of 16 rows, input by input, the 16 weights.
void pack_f16(const void *src, void *dst, int64_t n_in, int64_t n_out);

// y = W x for a packed W [n_in, n_out] and x [n_in, ...] float32, as
// ggml_mul_mat(W, x) would compute it: [n_out, ...]. `xq`, when not null, is
// x already quantized by an earlier call with the same x (see quantize_input).
ggml_tensor *packed_mul_mat(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *xq = nullptr);

// x [n_in, ...] prepared for packed_mul_mat by a matrix of `type` (Q8_0:
// quantized; F16: rounded through fp16, as ggml does): several matrices
// multiplying the same input (gate and up) share one preparation.
ggml_tensor *quantize_input(ggml_context *ctx, ggml_tensor *x, ggml_type type);

}  // namespace toy::graph
