// Ops toy computes itself where ggml's generic kernels are slow for training's
// shapes. Each is a ggml custom op, so graphs stay ggml graphs (these appear
// only after differentiation and are never differentiated themselves).
#pragma once

#include <ggml.h>

namespace toy::graph {

// x^T of an F32 tensor (any strides), each [ne0, ne1] plane transposed:
// contiguous [ne1, ne0, ne2, ne3], blocked in 32 x 32 tiles over all threads. ggml's cont(transpose(x)) copies one
// element per memcpy call, the largest cost of a training step before this.
ggml_tensor *transpose_f32(ggml_context *ctx, ggml_tensor *x);

// sum(x^2) of a contiguous F32 tensor as a [1] tensor, accumulated in double
// (one pass, no squared copy).
ggml_tensor *sum_of_squares(ggml_context *ctx, ggml_tensor *x);

}  // namespace toy::graph
