// Weights: the model's tensors bound to ggml, and the table of which tensors
// an architecture has (names, shapes, roles). The same table drives loading,
// `toy init` (random models) and, later, training and export.
#pragma once

#include "model/config.h"

#include <ggml.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace toy {

struct LayerWeights {
    ggml_tensor *attn_norm = nullptr, *attn_norm_b = nullptr;
    // wqkv: [n_embd, n_q + n_k + n_v], from the file (gpt2) or fused at load
    ggml_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wqkv = nullptr, *wo = nullptr;
    ggml_tensor *bq = nullptr, *bk = nullptr, *bv = nullptr, *bqkv = nullptr, *bo = nullptr;
    ggml_tensor *q_norm = nullptr, *k_norm = nullptr;
    ggml_tensor *post_attn_norm = nullptr;
    ggml_tensor *ffn_norm = nullptr, *ffn_norm_b = nullptr;
    ggml_tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
    // [n_embd, 2 n_ff]: gate's rows then up's, fused at load for a block on
    // an offload device (model.cpp)
    ggml_tensor *ffn_gate_up = nullptr;
    ggml_tensor *ffn_up_b = nullptr, *ffn_down_b = nullptr;
    ggml_tensor *post_ffn_norm = nullptr;
    ggml_tensor *ffn_gate_inp = nullptr;                                      // router [n_embd, n_expert]
    ggml_tensor *ffn_gate_exps = nullptr, *ffn_up_exps = nullptr, *ffn_down_exps = nullptr;
};

struct Weights {
    ggml_tensor *tok_embd = nullptr;   // [n_embd, n_vocab]
    ggml_tensor *pos_embd = nullptr;   // [n_embd, n_ctx_train] (learned positions)
    ggml_tensor *output_norm = nullptr, *output_norm_b = nullptr;
    ggml_tensor *output = nullptr;     // [n_embd, n_vocab]; tok_embd or a converted copy of it when tied
    ggml_tensor *rope_freqs = nullptr; // [n_rot/2] Llama-3 frequency factors
    std::vector<LayerWeights> layers;
    bool tied_output = false;          // the file has no output.weight: the projection is the embedding
    // Training only: when the vocabulary is padded (tok_embd and output then
    // have n_vocab_padded rows, the extra ones zero), -1e30 on the padded
    // rows of the logits and 0 elsewhere, so they take no probability.
    ggml_tensor *vocab_pad_mask = nullptr;
    // Training with a projection lens (toy train --lens-from): no tok_embd;
    // the embedding is a donor's frozen one [d_donor, n_vocab] times a
    // trainable projection [d_donor, n_embd], computed in the graph (and used
    // as the output projection too when it is tied).
    ggml_tensor *lens_embd = nullptr, *lens_proj = nullptr;
    // Matrices stored in toy's packed layout (graph/packed_matmul.h): the
    // graph multiplies them with packed_mul_mat, never ggml_mul_mat.
    std::unordered_set<const ggml_tensor *> packed;
    bool is_packed(const ggml_tensor *t) const { return packed.count(t) > 0; }
    // Whether a binding slot (TensorSpec::slot) is the head's: the output
    // norm or projection, which a split puts on LayerSplit::output.
    bool is_head_slot(ggml_tensor *const *slot) const { return slot == &output || slot == &output_norm || slot == &output_norm_b; }
};

// What a tensor is, for initialization and requantization decisions.
enum class TensorRole { Embedding, Linear, Norm, NormBias, Bias, Router, Experts, RopeFactors, Positions };

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;       // ggml order
    TensorRole role;
    bool required = true;
    ggml_tensor **slot = nullptr;  // where the bound tensor goes (null when only listing)
    int layer = -1;
};

// Every tensor the architecture described by `cfg` may have. With `w`, each
// spec's slot points into it. `output.weight` is optional (tied to the
// embedding when absent); `rope_freqs.weight` is optional.
std::vector<TensorSpec> tensor_specs(const Config &cfg, Weights *w = nullptr);

}  // namespace toy
