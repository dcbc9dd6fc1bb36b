#include "train/params.h"

#include "core/error.h"

#include <ggml-alloc.h>

namespace toy::train {

ParamSet::ParamSet(size_t max_params) {
    ggml_init_params ip{(4 * max_params + 16) * ggml_tensor_overhead(), nullptr, true};
    ctx_ = ggml_init(ip);
    if (!ctx_) fail("out of memory creating the parameter context");
}

ParamSet::~ParamSet() {
    for (auto *b : {values_buf_, grads_buf_, moments_buf_})
        if (b) ggml_backend_buffer_free(b);
    ggml_free(ctx_);
}

Param &ParamSet::add(const std::string &name, const std::vector<int64_t> &ne, bool decay, const std::string &group) {
    if (allocated_) fail("internal: parameter '{}' declared after allocation", name);
    Param p;
    p.name = name;
    p.decay = decay;
    p.group = group;
    p.value = ggml_new_tensor(ctx_, GGML_TYPE_F32, (int)ne.size(), ne.data());
    ggml_set_name(p.value, name.c_str());
    ggml_set_param(p.value);
    p.grad = ggml_dup_tensor(ctx_, p.value);
    ggml_format_name(p.grad, "%s.grad", name.c_str());
    p.m = ggml_dup_tensor(ctx_, p.value);
    p.v = ggml_dup_tensor(ctx_, p.value);
    params_.push_back(p);
    return params_.back();
}

ggml_tensor *ParamSet::add_constant(const std::string &name, const std::vector<int64_t> &ne) {
    ggml_tensor *t = ggml_new_tensor(ctx_, GGML_TYPE_F32, (int)ne.size(), ne.data());
    ggml_set_name(t, name.c_str());
    constants_.push_back(t);
    return t;
}

namespace {

// One buffer holding `tensors`, each at the buffer type's alignment.
ggml_backend_buffer_t alloc_group(ggml_backend_buffer_type_t buft, const std::vector<ggml_tensor *> &tensors,
                                  const char *what) {
    if (tensors.empty()) return nullptr;
    const size_t align = ggml_backend_buft_get_alignment(buft);
    size_t size = 0;
    for (ggml_tensor *t : tensors) size += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, size);
    if (!buf) fail("could not allocate {} bytes for the {}", size, what);
    auto *base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(buf));
    size_t at = 0;
    for (ggml_tensor *t : tensors) {
        if (ggml_backend_tensor_alloc(buf, t, base + at) != GGML_STATUS_SUCCESS) {
            ggml_backend_buffer_free(buf);
            fail("could not place '{}' in the {}", ggml_get_name(t), what);
        }
        at += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
    }
    ggml_backend_buffer_clear(buf, 0);
    return buf;
}

}  // namespace

void ParamSet::allocate(ggml_backend_buffer_type_t buft) {
    allocated_ = true;
    std::vector<ggml_tensor *> values(constants_), grads, moments;
    for (const Param &p : params_) {
        values.push_back(p.value);
        grads.push_back(p.grad);
        moments.push_back(p.m);
        moments.push_back(p.v);
    }
    values_buf_ = alloc_group(buft, values, "trainable weights");
    if (values_buf_) ggml_backend_buffer_set_usage(values_buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    grads_buf_ = alloc_group(buft, grads, "gradients");
    moments_buf_ = alloc_group(buft, moments, "optimizer moments");
}

const Param *ParamSet::find(const std::string &name) const {
    for (const Param &p : params_)
        if (p.name == name) return &p;
    return nullptr;
}

int64_t ParamSet::n_elements() const {
    int64_t n = 0;
    for (const Param &p : params_) n += ggml_nelements(p.value);
    return n;
}

size_t ParamSet::state_bytes() const {
    size_t n = 0;
    for (auto *b : {values_buf_, grads_buf_, moments_buf_})
        if (b) n += ggml_backend_buffer_get_size(b);
    return n;
}

std::vector<float> read_f32(const ggml_tensor *t) {
    std::vector<float> v(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, v.size() * sizeof(float));
    return v;
}

void ParamSet::zero_grads() {
    if (grads_buf_) ggml_backend_buffer_clear(grads_buf_, 0);
}

}  // namespace toy::train
