// What a training run changes: the trainable tensors of a base model, bound
// so the one graph builder (graph/forward.h) runs over them.
//
//   full fine-tune (and from scratch, which is a full fine-tune of a model
//   `toy init` made): every weight becomes an F32 parameter; F32, F16 and
//   BF16 bases convert exactly, a quantized base is refused.
//   LoRA: the base stays as loaded (mapped, any type toy runs) and frozen;
//   the parameters are the adapters' A and B (graph/adapters.h).
#pragma once

#include "graph/adapters.h"
#include "model/model.h"
#include "train/params.h"

#include <memory>
#include <string>
#include <vector>

namespace toy::train {

enum class Mode { Full, Lora };

struct LoraOptions {
    int rank = 8;
    float alpha = 16.0f;
    std::vector<graph::Proj> targets{graph::Proj::Q, graph::Proj::K, graph::Proj::V, graph::Proj::O};
    bool per_head = false;  // Q as one rank-r adapter per head (the original system's query LoRA)
    uint64_t seed = 42;
};

// How a model is loaded for training or evaluating a training loss: mapped,
// not repacked (the backward pass needs the plain layouts), Q|K|V not fused
// (adapters and gradients are per projection).
LoadOptions trainable_load_options();

// "q,k,v,o,gate,up,down" (or "all") -> projections; throws toy::Error.
std::vector<graph::Proj> parse_lora_targets(const std::string &list);

// Throws a one-line toy::Error when this architecture cannot be trained
// (ops ggml cannot differentiate), before anything is built.
void check_trainable(const Config &c);

class TrainableModel {
public:
    // lens_from: a donor GGUF with the same vocabulary; the token embedding
    // becomes its frozen embedding times a trainable projection (the
    // original system's warm start), folded into token_embd by write().
    // split: where each block's parameters live (a base loaded on the CPU;
    // the embedding, lens and head stay there).
    static std::unique_ptr<TrainableModel> full(const Model &base, const std::string &lens_from = "", uint64_t seed = 42,
                                                const LayerSplit &split = {});
    // The adapters of a block live where the base has that block (Model::split).
    static std::unique_ptr<TrainableModel> lora(const Model &base, const LoraOptions &o);
    // Nothing trainable: the base as it is, for evaluating held-out loss.
    static std::unique_ptr<TrainableModel> frozen(const Model &base);

    Mode mode() const { return mode_; }
    const Model &base() const { return base_; }
    const Config &config() const { return base_.config(); }
    const Weights &weights() const { return mode_ == Mode::Full ? w_ : base_.weights(); }
    const graph::Adapters *adapters() const { return mode_ == Mode::Lora ? &adapters_ : nullptr; }
    ParamSet &params() { return *params_; }
    const ParamSet &params() const { return *params_; }
    const LoraOptions &lora_options() const { return lora_; }
    // Which device runs each block: the base's split (LoRA) or the parameters' (full).
    const LayerSplit &split() const { return mode_ == Mode::Full ? split_ : base_.split(); }

    // Full: a GGUF of the trained model (the base's metadata, F32 weights,
    // per-head checkpoints written in the standard fused layout).
    // LoRA: an adapter in llama.cpp's format (per-head terms, and the Q, K, V
    // terms of a fused attn_qkv matrix, as the equivalent standard pair with
    // block-diagonal B). Atomic.
    void write(const std::string &path) const;

    // The adapter file's pairs: A [n_in, rank], B [rank, n_out] (ggml order),
    // scaled so that llama.cpp's alpha / rank gives each term its own scale.
    struct ExportPair {
        std::string target;  // the base tensor, e.g. blk.0.attn_qkv.weight
        int64_t n_in = 0, n_out = 0, rank = 0;
        std::vector<float> a, b;
    };
    std::vector<ExportPair> export_pairs() const;
    // With a lens: its donor, and the token embedding it makes [n_vocab rows of n_embd].
    const std::string &lens_from() const { return lens_from_; }
    std::vector<float> lens_embedding() const;

private:
    TrainableModel(const Model &base, Mode mode) : base_(base), mode_(mode) {}
    const Model &base_;
    Mode mode_;
    std::unique_ptr<ParamSet> params_;
    Weights w_;
    graph::Adapters adapters_;
    LoraOptions lora_;
    std::string lens_from_;
    LayerSplit split_;
};

}  // namespace toy::train
