// toy export: a plain GGUF from a base model, with LoRA adapters merged into
// its weights (W + s * B A) and the matrices stored in a chosen type with
// llama.cpp's type mixes (quant/mix.h, through model/init.h's storage_types). Per-head checkpoints
// come out in the standard fused layout (unless per_head_layout asks for
// theirs), so `toy fuse` is an export without adapters or type. Streaming: one tensor at a time is converted while the
// file is written; atomic (gguf::Writer).
#pragma once

#include "model/init.h"
#include "model/lora_adapter.h"
#include "model/model.h"

#include <optional>
#include <string>

namespace toy {

struct ExportOptions {
    std::optional<InitType> type;  // none: every tensor keeps its type
    // The original system's checkpoint layout: attn_q, attn_k and attn_v as
    // one tensor per head (blk.N.attn_q.head_H.weight, [n_embd, head_dim]),
    // marked by toy.ggml_native = true. toy loads both layouts.
    bool per_head_layout = false;
};

struct ExportResult {
    int64_t n_tensors = 0;
    int64_t n_merged = 0;          // tensors an adapter changed
    bool untied = false;           // a tied output projection written on its own (an adapter changed one side)
    uint64_t bytes = 0;            // of the written file
};

ExportResult export_model(const Model &base, const LoraSet &adapters, const std::string &path, const ExportOptions &o);

}  // namespace toy
