// The trainable tensors of a run and their optimizer state, as one list
// (llm.c's one-slab idea): the optimizer step, the gradient norms, the
// checkpoint and the export are each one loop over it. Values, gradient
// accumulators and AdamW moments live in three backend buffers owned here, so
// the moments persist across steps and graph rebuilds and are saved with the
// weights.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <memory>
#include <string>
#include <vector>

namespace toy::train {

struct Param {
    std::string name;          // GGUF name: the weight's, or "<weight>.lora_a" / ".lora_b"
    ggml_tensor *value = nullptr;
    ggml_tensor *grad = nullptr;   // accumulated over the micro-batches of a step
    ggml_tensor *m = nullptr, *v = nullptr;  // AdamW first and second moments
    bool decay = true;         // weight decay applies (matrices; not norms, biases, embeddings)
    std::string group;         // for per-group gradient norms: "embd", "attn", "ffn", "norm", "lora", ...
};

class ParamSet {
public:
    ParamSet(size_t max_params);
    ~ParamSet();
    ParamSet(const ParamSet &) = delete;
    ParamSet &operator=(const ParamSet &) = delete;

    // Declares an F32 parameter (before allocate()).
    Param &add(const std::string &name, const std::vector<int64_t> &ne, bool decay, const std::string &group);
    // A constant F32 tensor that lives beside the parameters but is not trained (rope factors).
    ggml_tensor *add_constant(const std::string &name, const std::vector<int64_t> &ne);
    // Allocates every declared tensor in `buft`; gradients and moments start at zero.
    void allocate(ggml_backend_buffer_type_t buft);

    std::vector<Param> &params() { return params_; }
    const std::vector<Param> &params() const { return params_; }
    const Param *find(const std::string &name) const;
    int64_t n_elements() const;
    size_t state_bytes() const;  // values + gradients + moments

    void zero_grads();

private:
    ggml_context *ctx_ = nullptr;
    ggml_backend_buffer_t values_buf_ = nullptr, grads_buf_ = nullptr, moments_buf_ = nullptr;
    std::vector<Param> params_;
    std::vector<ggml_tensor *> constants_;
    bool allocated_ = false;
};

// An F32 tensor's values, copied to the host.
std::vector<float> read_f32(const ggml_tensor *t);

}  // namespace toy::train
