// Low-rank adapters as the graph sees them: extra terms on a layer's linear
// projections, keyed by (layer, projection) — never by weight tensor, since
// loading may fuse Q|K|V into one matrix and leave no separate Q weight.
//
//   y = W x + sum over terms of  scale * B (A x)
//
// A standard term has A: [n_in, r] and B: [r, n_out] (ggml order, the layout
// of llama.cpp's adapter files). A per-head term (the original system's query
// LoRA) has one A_h [n_in, r] and B_h [r, head_dim] per head, stored stacked
// as A: [n_in, r * n_head] and B: [r, head_dim, n_head]; it is computed in two
// matmuls for all heads and equals a rank r * n_head term with block-diagonal B.
#pragma once

#include <ggml.h>

#include <array>
#include <vector>

namespace toy::graph {

enum class Proj { Q, K, V, O, Gate, Up, Down };
inline constexpr int kProjCount = 7;
inline constexpr std::array<const char *, kProjCount> kProjNames{"q", "k", "v", "o", "gate", "up", "down"};
// The GGUF weight each projection adapts ("attn_q" -> blk.N.attn_q.weight).
inline constexpr std::array<const char *, kProjCount> kProjTensors{"attn_q",   "attn_k",  "attn_v",  "attn_output",
                                                                   "ffn_gate", "ffn_up", "ffn_down"};

struct LoraTerm {
    ggml_tensor *a = nullptr;  // [n_in, r] or per head [n_in, r * n_head]
    ggml_tensor *b = nullptr;  // [r, n_out] or per head [r, head_dim, n_head]
    float scale = 1.0f;        // alpha / r, times a user scale at inference
    bool per_head = false;
};

// Every term of every layer; empty lists where nothing adapts a projection.
// Adapters loaded from files may also adapt the output projection, and the
// token embedding: there, as in llama.cpp's files, A [r, n_vocab] is gathered
// by token and B [r, n_embd] maps it up (the delta is added before any
// embedding scale).
struct Adapters {
    std::vector<std::array<std::vector<LoraTerm>, kProjCount>> layers;
    std::vector<LoraTerm> output;
    std::vector<LoraTerm> tok_embd;

    const std::vector<LoraTerm> &terms(int il, Proj p) const {
        static const std::vector<LoraTerm> none;
        return il < (int)layers.size() ? layers[il][(int)p] : none;
    }
    void add(int il, Proj p, const LoraTerm &t) {
        if ((int)layers.size() <= il) layers.resize(il + 1);
        layers[il][(int)p].push_back(t);
    }
    size_t n_terms() const {
        size_t n = output.size() + tok_embd.size();
        for (const auto &l : layers)
            for (const auto &v : l) n += v.size();
        return n;
    }
    bool empty() const { return n_terms() == 0; }
};

}  // namespace toy::graph
