// The graph builder: one object carrying what every block needs — the ggml
// context, the model's Config and Weights, the adapters and whether the graph
// will be differentiated — and the shared blocks (normalization, linear with
// adapters, attention, feed-forward, mixture of experts) as its methods.
// Blocks take small option structs, never architecture names.
//
// With `train` set, every op the graph holds is one ggml can differentiate:
// LayerNorm, GELU, GEGLU and tanh (soft-caps), which ggml 0.25.1 has no
// backward for, are built as exact compositions of ops it has; attention runs
// the plain (not flash) path over a batch of sequences. Without it the graph
// is the inference graph, op for op (its logits are llama.cpp's bit for bit).
#pragma once

#include "graph/adapters.h"
#include "model/config.h"
#include "model/weights.h"

#include <ggml.h>

#include <map>
#include <utility>

namespace toy::graph {

// Names a tensor `name-il` (il >= 0) or `name`, as llama.cpp's callbacks do.
ggml_tensor *named(ggml_tensor *t, const char *name, int il = -1);

struct AttentionOptions {
    float kq_scale = 1.0f;
    float softcap = 0.0f;
    bool flash_attn = false;
};

class Builder {
public:
    Builder(ggml_context *ctx, const Config &c, const Weights &w, const Adapters *adapters, bool train)
        : ctx_(ctx), c_(c), w_(w), adapters_(adapters), train_(train) {}

    ggml_context *ctx() const { return ctx_; }
    const Config &config() const { return c_; }
    const Weights &weights() const { return w_; }
    bool train() const { return train_; }

    // RMSNorm(x) * w, or LayerNorm(x) * w + b. x: [n, T], w, b: [n].
    ggml_tensor *norm(ggml_tensor *x, ggml_tensor *w, ggml_tensor *b, NormKind kind) const;

    // y = W x + the adapters' terms of (il, p) (+ b, added last as llama.cpp
    // does). W: [n_in, n_out], x: [n_in, T] -> [n_out, T]. il < 0: no adapters
    // (a fused Q|K|V matrix, whose slices take theirs with add_adapters).
    ggml_tensor *linear(int il, Proj p, ggml_tensor *w, ggml_tensor *x, ggml_tensor *b = nullptr) const;
    // The adapters' terms alone (added to a fused projection's slice).
    ggml_tensor *add_adapters(int il, Proj p, ggml_tensor *y, ggml_tensor *x) const;
    // The output projection W x with the adapters of output.weight.
    ggml_tensor *output(ggml_tensor *w, ggml_tensor *x) const;
    // The token embeddings' rows with the adapters of token_embd.weight.
    ggml_tensor *embed(ggml_tensor *tok_embd, ggml_tensor *tokens) const;

    // Multi-head attention of q over (k, v) under `mask`, one sequence.
    //   q: [head_dim_k, n_head, n_tokens]
    //   k: [head_dim_k, n_head_kv, n_kv]   (views into the cache, or the batch's own)
    //   v: [head_dim_v, n_head_kv, n_kv], or when v_trans [n_kv, n_head_kv, head_dim_v]
    //   mask: [n_kv, n_tokens]
    // Returns [head_dim_v * n_head, n_tokens].
    ggml_tensor *attention(ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, bool v_trans, ggml_tensor *mask,
                           const AttentionOptions &o) const;
    // The same over n_seqs sequences of T tokens each, every one attending to
    // itself only (training). q, k, v: [head_dim, heads, T * n_seqs],
    // mask: [T, T]. Returns [head_dim_v * n_head, T * n_seqs].
    ggml_tensor *attention_batched(ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, ggml_tensor *mask, int64_t n_seqs,
                                   const AttentionOptions &o) const;

    // Dense feed-forward: gated (SwiGLU / GeGLU) or plain GELU with biases.
    ggml_tensor *feed_forward(ggml_tensor *x, int il) const;

    // Mixture of experts: softmax router, top-k, optional renormalization,
    // experts via ggml_mul_mat_id on the stacked tensors. x: [n_embd, T].
    // `choices` receives the selected expert ids [n_expert_used, T].
    ggml_tensor *mixture_of_experts(ggml_tensor *x, int il, ggml_tensor **choices) const;

    // Element-wise functions with a differentiable form in training graphs.
    ggml_tensor *gelu(ggml_tensor *x) const;  // tanh approximation, as ggml_gelu
    ggml_tensor *tanh(ggml_tensor *x) const;
    ggml_tensor *softcap(ggml_tensor *x, float cap) const;  // cap * tanh(x / cap)

private:
    ggml_context *ctx_;
    const Config &c_;
    const Weights &w_;
    ggml_tensor *add_terms(const std::vector<LoraTerm> &terms, ggml_tensor *y, ggml_tensor *x) const;
    // W x by ggml, or by toy's kernel for a packed W (one quantization of x
    // per input, shared by the matrices that multiply it: gate and up).
    ggml_tensor *mul_mat(ggml_tensor *w, ggml_tensor *x) const;
    const Adapters *adapters_;
    bool train_;
    mutable std::map<std::pair<const ggml_tensor *, ggml_type>, ggml_tensor *> quantized_inputs_;
};

}  // namespace toy::graph
