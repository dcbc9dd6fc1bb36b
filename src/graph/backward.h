// The backward pass of a training graph: ggml's automatic differentiation,
// then the gradients of matrix products (weights, inputs, attention's batched
// products) recomputed as matrix products.
//
// ggml differentiates y = W x into dW = out_prod(x, dy) and dx = out_prod(W,
// dy^T). Its CPU out_prod is a loop of row updates; the same sums as a matmul
// (dW = mul_mat(x^T, dy^T), dx = mul_mat(W^T, dy), operands copied contiguous)
// run through the blocked GEMM kernels (llamafile's tinyBLAS) that inference
// uses. Same values up to the order of float additions.
#pragma once

#include <ggml.h>

#include <utility>
#include <vector>

namespace toy::graph {

// `gf` (created with grads) holds the forward pass ending in `loss` (flagged
// with ggml_set_loss); `accumulators` pairs each parameter with the tensor its
// gradient is added into. Returns a new graph (of at most `graph_size` nodes,
// in `ctx`) computing the forward pass, then every gradient.
ggml_cgraph *build_backward(ggml_context *ctx, ggml_cgraph *gf, ggml_tensor *loss,
                            const std::vector<std::pair<ggml_tensor *, ggml_tensor *>> &accumulators, size_t graph_size);

}  // namespace toy::graph
