// The forward pass of every supported architecture as one ggml graph.
//
// One builder serves inference and training: with a KV cache the batch's K
// and V are written into the cache (ggml_set_rows at index tensors, so the
// position is data and the graph can be reused) and attention reads the
// cache; without one (sequence mode) attention runs over the batch itself
// under a causal mask, which is the graph a trainer differentiates.
#pragma once

#include "graph/adapters.h"
#include "model/model.h"

#include <ggml.h>

#include <algorithm>
#include <vector>

namespace toy::graph {

// The KV cache as the graph sees it: per layer one K and one V tensor.
struct KvBinding {
    std::vector<ggml_tensor *> k;  // [head_dim_k, kv_size, n_head_kv]: each head's cells together
    std::vector<ggml_tensor *> v;  // [head_dim_v, kv_size, n_head_kv], or [kv_size, n_embd_v_gqa] when v_trans
    bool v_trans = false;          // V stored transposed (plain attention reads it without a copy)
    int64_t kv_size = 0;
};

struct ForwardParams {
    int64_t n_tokens = 0;       // all tokens of the batch (n_seqs sequences of n_tokens / n_seqs each)
    int64_t n_seqs = 1;         // sequence mode only: independent sequences, each attending to itself
    int64_t n_kv = 0;           // cache cells attended (with a cache); ignored without
    int64_t n_outputs = 0;      // rows that go through the output head (the last n_outputs of out_ids)
    bool flash_attn = false;
    const KvBinding *kv = nullptr;  // null: sequence mode (attention within the batch)
    bool logits = true;         // false: stop at result_norm (hidden states)
    const Adapters *adapters = nullptr;  // LoRA terms on the linear projections (null: none)
    bool train = false;         // only ops ggml can differentiate (blocks.h); sequence mode only
};

// Inputs the caller fills before each compute, and the outputs.
struct ForwardGraph {
    ggml_tensor *tokens = nullptr;    // I32 [n_tokens]
    ggml_tensor *pos = nullptr;       // I32 [n_tokens]
    ggml_tensor *mask = nullptr;      // F32 (F16 with flash attention) [n_kv, n_tokens]: 0 or -inf
                                      // (several sequences: [T, T], shared by all of them)
    ggml_tensor *mask_swa = nullptr;  // same, for sliding-window layers (null when none)
    ggml_tensor *k_idxs = nullptr;    // I64 [n_tokens]: cache cell of each token
    ggml_tensor *v_idxs = nullptr;    // I64 [n_tokens] or, transposed V, [n_tokens * n_embd_v_gqa]
    ggml_tensor *out_ids = nullptr;   // I32 [n_outputs] (null when every row is output)
    ggml_tensor *hidden = nullptr;    // [n_embd, n_outputs] after the final norm
    ggml_tensor *logits = nullptr;    // [n_vocab, n_outputs]
    ggml_tensor *rope_freqs = nullptr;   // F32 [n_rot/2]: Llama-3 factors from metadata (null when unused)
    std::vector<ggml_tensor *> router_choices;  // per MoE layer: I32 [n_expert_used, n_tokens]
    // What a backward pass that recomputes activations keeps from the forward
    // pass: each block's input (the embeddings, every layer's output) and the
    // products over the vocabulary (costly to redo).
    std::vector<ggml_tensor *> checkpoints;

    // The tensors above that the caller fills before computing (non-null ones).
    std::vector<ggml_tensor *> inputs() const {
        std::vector<ggml_tensor *> out;
        for (ggml_tensor *t : {tokens, pos, mask, mask_swa, k_idxs, v_idxs, out_ids, rope_freqs}) {
            if (t) out.push_back(t);
        }
        return out;
    }
};

// Nodes a forward graph of this model needs at most (for ggml_new_graph_custom).
inline size_t forward_graph_size(const Config &c, const Adapters *adapters = nullptr) {
    return std::max<size_t>(2048, (size_t)c.n_layer * 96 + 256) + (adapters ? 8 * adapters->n_terms() : 0);
}

// Adds the forward pass to `gf`. Tensors are named as llama.cpp names them
// (inp_embd, attn_norm-L, Qcur-L, ..., result_output) so traces can be diffed.
ForwardGraph build_forward(ggml_context *ctx, ggml_cgraph *gf, const Config &c, const Weights &w,
                           const ForwardParams &p);
inline ForwardGraph build_forward(ggml_context *ctx, ggml_cgraph *gf, const Model &model, const ForwardParams &p) {
    return build_forward(ctx, gf, model.config(), model.weights(), p);
}

// Index of cell `cell`, row `j` of a transposed V cache, for v_idxs.
inline int64_t v_trans_index(int64_t kv_size, int64_t j, int64_t cell) { return j * kv_size + cell; }

}  // namespace toy::graph
