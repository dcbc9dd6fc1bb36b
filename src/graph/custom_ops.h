// Ops toy computes itself where ggml's generic kernels are slow for training's
// shapes. Each is a ggml custom op, so graphs stay ggml graphs (these appear
// only after differentiation and are never differentiated themselves).
#pragma once

#include <ggml.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace toy::graph {

// A custom op's thread `ith` of `nth`: its contiguous share [begin, end) of n units.
inline std::pair<int64_t, int64_t> thread_share(int64_t n, int ith, int nth) {
    const int64_t per = (n + nth - 1) / nth;
    return {std::min(n, ith * per), std::min(n, (ith + 1) * per)};
}

// x^T of an F32 tensor (any strides), each [ne0, ne1] plane transposed:
// contiguous [ne1, ne0, ne2, ne3], blocked in 32 x 32 tiles over all threads. ggml's cont(transpose(x)) copies one
// element per memcpy call, the largest cost of a training step before this.
ggml_tensor *transpose_f32(ggml_context *ctx, ggml_tensor *x);

// The outer-product sum ggml_out_prod computes, dst[i, j] = sum_k a[i, k] b[j, k]
// per [.., .., ne2, ne3] plane of b (a: [n, K], b: [m, K] -> [n, m]; a's planes
// broadcast over b's as in ggml_out_prod), for a whose rows are contiguous (F32,
// or F16/BF16/quantized: converted a block of rows at a time, never as a whole
// F32 copy) and F32 b of any strides (a transposed view included).
// Register-blocked over i and j, vectorised along i; no copies of F32 operands.
// Needs AVX-512 or AVX2+FMA: where out_prod_f32_supported() is false, use
// ggml_out_prod (or transposes and ggml_mul_mat).
bool out_prod_f32_supported(const ggml_tensor *a, const ggml_tensor *b);
ggml_tensor *out_prod_f32(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b);

// Cross-entropy of logits [n, rows] against integer targets [rows] (I32; a
// negative target: the row has no loss): per-row losses [rows], log-sum-exp
// in double. The training loss replaces ggml's cross_entropy_loss by these
// (graph/backward.h), so no one-hot label matrix exists.
ggml_tensor *cross_entropy_rows(ggml_context *ctx, ggml_tensor *logits, ggml_tensor *targets);
// The gradient of mean(cross_entropy_rows) * grad (a scalar) with respect to
// the logits, written over the logits themselves (they are not needed after):
// (softmax - one-hot) * grad / rows, zero on rows without a target.
ggml_tensor *cross_entropy_grad_inplace(ggml_context *ctx, ggml_tensor *grad, ggml_tensor *logits, ggml_tensor *targets);

// sum(x^2) of a contiguous F32 tensor as a [1] tensor, accumulated in double
// (one pass, no squared copy).
ggml_tensor *sum_of_squares(ggml_context *ctx, ggml_tensor *x);

}  // namespace toy::graph
