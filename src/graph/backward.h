// The backward pass of a training graph: ggml's automatic differentiation,
// then its slow or memory-hungry nodes replaced by toy's own (custom_ops.h).
//
// ggml differentiates y = W x into dW = out_prod(x, dy) and dx = out_prod(W,
// dy^T). Its CPU out_prod is a loop of row updates; toy's out_prod_f32 computes
// the same sums register-blocked, reading W (of any type) and the activations
// where they lie. Products of blocks on an offload device (a GPU, an RPC
// server) stay ggml's and run there, an F16 or quantized weight there
// dequantized first. ggml's cross-entropy takes one-hot labels as large as
// the logits; with `targets`, the loss and its gradient come from integer
// targets instead, the gradient written over the logits. Same values up to
// the order of float additions.
#pragma once

#include <ggml.h>

#include <utility>
#include <vector>

namespace toy::graph {

// `gf` (created with grads) holds the forward pass ending in `loss` (flagged
// with ggml_set_loss); `accumulators` pairs each parameter with the tensor its
// gradient is added into. Returns a new graph (of at most `graph_size` nodes,
// in `ctx`) computing the forward pass, then every gradient.
struct BackwardOptions {
    // I32, one per row of the logits (negative: no loss): every
    // ggml_cross_entropy_loss(logits, labels) of the forward pass is computed
    // from these instead; its labels are then only a placeholder for the
    // shape, never allocated or read.
    ggml_tensor *targets = nullptr;
    // Gradient checkpointing: the backward pass keeps only these forward
    // tensors (ForwardGraph::checkpoints) and recomputes every other
    // activation it reads from them, block by block, just before its use.
    // Same values; activation memory of one block instead of all.
    const std::vector<ggml_tensor *> *recompute_from = nullptr;
};
ggml_cgraph *build_backward(ggml_context *ctx, ggml_cgraph *gf, ggml_tensor *loss,
                            const std::vector<std::pair<ggml_tensor *, ggml_tensor *>> &accumulators, size_t graph_size,
                            const BackwardOptions &opts = {});

// The mean over the rows of cross_entropy_rows(logits, targets) (rows without
// a target count as zero): the value ggml_cross_entropy_loss gives with the
// one-hot labels of the targets.
ggml_tensor *mean_cross_entropy(ggml_context *ctx, ggml_tensor *logits, ggml_tensor *targets);

}  // namespace toy::graph
