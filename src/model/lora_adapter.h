// LoRA adapters from GGUF files in llama.cpp's adapter format, applied at
// inference in the graph (y = W x + s * B (A x)), never merged into the base:
// a mapped or quantized base stays as it is.
//
// The format: general.type = "adapter", adapter.type = "lora",
// general.architecture = the base's, adapter.lora.alpha (0 or absent: the
// scale is the user's alone, else user scale * alpha / rank), and per adapted
// base tensor NAME the pair NAME.lora_a [n_in, r] and NAME.lora_b [r, n_out]
// (ggml order; for token_embd.weight A [r, n_vocab] and B [r, n_embd]).
// Adapted tensors toy applies: the attention and feed-forward projections of
// every block (a fused attn_qkv adapter is split over Q, K and V), the output
// projection and the token embedding.
#pragma once

#include "graph/adapters.h"
#include "model/model.h"

#include <ggml-backend.h>

#include <memory>
#include <string>
#include <vector>

namespace toy {

class LoraAdapter {
public:
    // Reads and checks `path` against `base` (architecture, names, shapes) and
    // copies its tensors into memory: the CPU's, or for a split base the
    // device of the block each pair adapts. Throws a one-line toy::Error.
    static std::unique_ptr<LoraAdapter> load(const std::string &path, const Model &base, float scale = 1.0f);
    ~LoraAdapter();
    LoraAdapter(const LoraAdapter &) = delete;
    LoraAdapter &operator=(const LoraAdapter &) = delete;

    // Adds this adapter's terms, scaled, to `out`.
    void add_to(graph::Adapters &out) const;

    // The file's pairs as they are (a fused attn_qkv one not split), for
    // merging into the base: the target weight's name, A, B and the scale.
    struct FilePair {
        std::string target;
        const ggml_tensor *a = nullptr, *b = nullptr;
        float scale = 1.0f;
    };
    const std::vector<FilePair> &file_pairs() const { return file_pairs_; }

    const std::string &path() const { return path_; }
    float alpha() const { return alpha_; }
    float scale() const { return scale_; }
    size_t n_pairs() const { return pairs_.size(); }
    size_t bytes() const;

private:
    LoraAdapter() = default;
    // One term: where it applies and its A, B (B may be a view: a fused
    // attn_qkv adapter becomes three terms sharing A).
    enum class Where { Block, Output, Embedding };
    struct Pair {
        Where where = Where::Block;
        int layer = -1;
        graph::Proj proj = graph::Proj::Q;
        ggml_tensor *a = nullptr, *b = nullptr;
        float scale = 1.0f;      // alpha / rank * the user's scale
    };
    std::string path_;
    float alpha_ = 0.0f, scale_ = 1.0f;
    std::vector<Pair> pairs_;
    std::vector<FilePair> file_pairs_;
    std::vector<std::pair<ggml_backend_dev_t, ggml_context *>> ctxs_;  // per device (nullptr: the CPU)
    std::vector<ggml_backend_buffer_t> bufs_;
};

// The adapters of several files (as llama.cpp's repeated --lora / --lora-scaled).
struct LoraSet {
    std::vector<std::unique_ptr<LoraAdapter>> adapters;
    graph::Adapters terms;  // all of them, for the graph

    // path + scale pairs, in order
    static LoraSet load(const std::vector<std::pair<std::string, float>> &files, const Model &base);
    bool empty() const { return adapters.empty(); }
};

}  // namespace toy
