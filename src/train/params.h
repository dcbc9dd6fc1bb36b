// The trainable tensors of a run and their optimizer state, as one list
// (llm.c's one-slab idea): the optimizer step, the gradient norms, the
// checkpoint and the export are each one loop over it. Values, gradient
// accumulators and AdamW moments live in three backend buffers owned here, so
// the moments persist across steps and graph rebuilds and are saved with the
// weights. A parameter may live on an offload device (the block it belongs to
// is there, model/split.h): each device holding some gets its own three.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace toy::train {

struct Param {
    std::string name;          // GGUF name: the weight's, or "<weight>.lora_a" / ".lora_b"
    ggml_tensor *value = nullptr;
    ggml_tensor *grad = nullptr;   // accumulated over the micro-batches of a step
    ggml_tensor *m = nullptr, *v = nullptr;  // AdamW first and second moments
    bool decay = true;         // weight decay applies (matrices; not norms, biases, embeddings)
    std::string group;         // for per-group gradient norms: "embd", "attn", "ffn", "norm", "lora", ...
    ggml_backend_dev_t device = nullptr;  // where value, gradient and moments live; nullptr: the CPU
};

class ParamSet {
public:
    ParamSet(size_t max_params);
    ~ParamSet();
    ParamSet(const ParamSet &) = delete;
    ParamSet &operator=(const ParamSet &) = delete;

    // Declares an F32 parameter (before allocate()) on `device` (nullptr: the CPU).
    Param &add(const std::string &name, const std::vector<int64_t> &ne, bool decay, const std::string &group,
               ggml_backend_dev_t device = nullptr);
    // A constant F32 tensor that lives beside the parameters on the CPU but is not trained (rope factors).
    ggml_tensor *add_constant(const std::string &name, const std::vector<int64_t> &ne);
    // Allocates every declared tensor on its device; gradients and moments start at zero.
    void allocate();

    std::vector<Param> &params() { return params_; }
    const std::vector<Param> &params() const { return params_; }
    const Param *find(const std::string &name) const;
    int64_t n_elements() const;
    size_t state_bytes() const;  // values + gradients + moments
    // The same on each offload device holding some (none without a split).
    std::vector<std::pair<ggml_backend_dev_t, size_t>> offloaded_bytes() const;

    // Clears the gradient accumulators (offloaded_only: those on offload devices).
    void zero_grads(bool offloaded_only = false);

private:
    ggml_context *ctx_ = nullptr;
    struct Buffers {
        ggml_backend_dev_t device = nullptr;  // nullptr: the CPU
        ggml_backend_buffer_t values = nullptr, grads = nullptr, moments = nullptr;
        size_t bytes() const;  // of the three
    };
    std::vector<Buffers> bufs_;  // per device holding parameters, the CPU first
    std::vector<Param> params_;
    std::vector<ggml_tensor *> constants_;
    bool allocated_ = false;
};

// An F32 tensor's values, copied to the host.
std::vector<float> read_f32(const ggml_tensor *t);

}  // namespace toy::train
