// Shared blocks of the forward pass: normalization, attention, feed-forward,
// mixture of experts. They take small option structs, never architecture names.
#pragma once

#include "model/config.h"
#include "model/weights.h"

#include <ggml.h>

namespace toy::graph {

// Names a tensor `name-il` (il >= 0) or `name`, as llama.cpp's callbacks do.
ggml_tensor *named(ggml_tensor *t, const char *name, int il = -1);

// RMSNorm(x) * w, or LayerNorm(x) * w + b. x: [n, T], w, b: [n].
ggml_tensor *norm(ggml_context *ctx, ggml_tensor *x, ggml_tensor *w, ggml_tensor *b, NormKind kind, float eps);

// y = W x (+ b). W: [n_in, n_out], x: [n_in, T] -> [n_out, T].
ggml_tensor *linear(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *b = nullptr);

struct AttentionOptions {
    float kq_scale = 1.0f;
    float softcap = 0.0f;
    bool flash_attn = false;
};

// Multi-head attention of q over (k, v) under `mask`.
//   q: [head_dim_k, n_head, n_tokens]
//   k: [head_dim_k, n_head_kv, n_kv]   (views into the cache, or the batch's own)
//   v: [head_dim_v, n_head_kv, n_kv], or when v_trans [n_kv, n_head_kv, head_dim_v]
//   mask: [n_kv, n_tokens]
// Returns [head_dim_v * n_head, n_tokens].
ggml_tensor *attention(ggml_context *ctx, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, bool v_trans,
                       ggml_tensor *mask, const AttentionOptions &o);

// Dense feed-forward: gated (SwiGLU / GeGLU) or plain GELU with biases.
ggml_tensor *feed_forward(ggml_context *ctx, ggml_tensor *x, const LayerWeights &l, FfnKind kind);

// Mixture of experts: softmax router, top-k, optional renormalization,
// experts via ggml_mul_mat_id on the stacked tensors. x: [n_embd, T].
// `choices` receives the selected expert ids [n_expert_used, T].
ggml_tensor *mixture_of_experts(ggml_context *ctx, ggml_tensor *x, const LayerWeights &l, const Config &c, int il,
                                ggml_tensor **choices);

}  // namespace toy::graph
