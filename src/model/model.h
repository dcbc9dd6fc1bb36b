// Model: a GGUF file opened, its Config read, and its tensors bound for ggml.
//
// By default weights are zero-copy: ggml tensors point into the read-only
// mapping of the file. With use_mmap = false, or when a tensor must be
// transformed (per-head checkpoints assembled into fused projections, F32/F16
// requantized to Q8_0), the bytes are copied into a backend buffer instead.
#pragma once

#include "gguf/gguf_reader.h"
#include "model/config.h"
#include "model/weights.h"

#include <ggml-backend.h>
#include <ggml.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace toy {

struct LoadOptions {
    bool use_mmap = true;
    // GGML_TYPE_COUNT keeps every tensor's file type; GGML_TYPE_Q8_0
    // requantizes F32/F16 linear weights (norms, biases, embeddings stay).
    ggml_type weight_type = GGML_TYPE_COUNT;
    // Store matrices in the layouts of the CPU backend's extra kernels (AMX
    // tiles, interleaved repacked rows) where one takes their type and shape,
    // preferring them in the backend's order, as llama.cpp does. Those tensors
    // are copied out of the mapping.
    bool repack = true;
};

class Model {
public:
    static std::unique_ptr<Model> load(const std::string &path, const LoadOptions &opts = {});
    ~Model();
    Model(const Model &) = delete;
    Model &operator=(const Model &) = delete;

    const Config &config() const { return cfg_; }
    const Weights &weights() const { return w_; }
    const gguf::File &file() const { return *file_; }
    const std::string &path() const { return file_->path(); }

    // Any weight, by GGUF name, as float32 on the host (dequantized).
    std::vector<float> read_weight(const std::string &name, std::array<int64_t, 4> *ne = nullptr) const;
    ggml_tensor *find_weight(const std::string &name) const;

    size_t weight_bytes() const;      // bytes of all bound weights
    size_t copied_bytes() const;      // of which copied into backend buffers
    size_t repacked_bytes() const;    // of which stored in AMX / repack layouts
    bool per_head_checkpoint() const { return per_head_; }

    // Where a copied tensor's bytes come from: pieces of the mapping (one, or
    // one per head for per-head checkpoints) and their type.
    struct Source {
        ggml_type type = GGML_TYPE_F32;
        std::vector<const void *> parts;
        std::vector<size_t> part_bytes;
        std::vector<uint8_t> joined() const;
    };

private:
    Model() = default;
    std::unique_ptr<gguf::File> file_;
    Config cfg_;
    Weights w_;
    ggml_context *ctx_ = nullptr;                   // tensor metadata (no data)
    ggml_backend_buffer_t mmap_buf_ = nullptr;      // wraps the file mapping
    ggml_backend_buffer_t copy_buf_ = nullptr;      // copied / transformed tensors
    std::vector<ggml_backend_buffer_t> extra_bufs_; // matrices in the CPU's AMX / repack layouts
    bool per_head_ = false;
    // the repack layout cannot be read back: read_weight() converts these instead
    std::unordered_map<const ggml_tensor *, Source> repacked_sources_;
};

}  // namespace toy
