#include "train/params.h"

#include "core/error.h"
#include "core/remote_wait.h"

#include <ggml-alloc.h>
#include <ggml-cpu.h>

#include <algorithm>

namespace toy::train {

ParamSet::ParamSet(size_t max_params) {
    ggml_init_params ip{(4 * max_params + 16) * ggml_tensor_overhead(), nullptr, true};
    ctx_ = ggml_init(ip);
    if (!ctx_) fail("out of memory creating the parameter context");
}

ParamSet::~ParamSet() {
    RemoteWait wait("freeing the trainable weights");
    for (const Buffers &b : bufs_)
        for (ggml_backend_buffer_t buf : {b.values, b.grads, b.moments})
            if (buf) ggml_backend_buffer_free(buf);
    ggml_free(ctx_);
}

Param &ParamSet::add(const std::string &name, const std::vector<int64_t> &ne, bool decay, const std::string &group,
                     ggml_backend_dev_t device) {
    if (allocated_) fail("internal: parameter '{}' declared after allocation", name);
    Param p;
    p.name = name;
    p.decay = decay;
    p.group = group;
    p.device = device;
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

// The bytes `tensors` take in one buffer of buft, each at its alignment.
size_t group_bytes(ggml_backend_buffer_type_t buft, const std::vector<ggml_tensor *> &tensors) {
    const size_t align = ggml_backend_buft_get_alignment(buft);
    size_t size = 0;
    for (ggml_tensor *t : tensors) size += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
    return size;
}

// One buffer holding `tensors`, each at the buffer type's alignment.
ggml_backend_buffer_t alloc_group(ggml_backend_buffer_type_t buft, const std::vector<ggml_tensor *> &tensors,
                                  const char *what) {
    if (tensors.empty()) return nullptr;
    const size_t align = ggml_backend_buft_get_alignment(buft);
    const size_t size = group_bytes(buft, tensors);
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, size);
    if (!buf) fail("could not allocate {} bytes for the {} on {}", size, what, ggml_backend_buft_name(buft));
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

void ParamSet::allocate() {
    allocated_ = true;
    RemoteWait wait("allocating the trainable weights");
    std::vector<ggml_backend_dev_t> devices{nullptr};  // the CPU first: the constants live there
    for (const Param &p : params_)
        if (std::find(devices.begin(), devices.end(), p.device) == devices.end()) devices.push_back(p.device);
    for (ggml_backend_dev_t dev : devices) {
        std::vector<ggml_tensor *> values, grads, moments;
        if (!dev) values = constants_;
        for (const Param &p : params_) {
            if (p.device != dev) continue;
            values.push_back(p.value);
            grads.push_back(p.grad);
            moments.push_back(p.m);
            moments.push_back(p.v);
        }
        ggml_backend_buffer_type_t buft = dev ? ggml_backend_dev_buffer_type(dev) : ggml_backend_cpu_buffer_type();
        if (dev) {  // said before anything is copied, as for the base's weights (model.cpp)
            const size_t need = group_bytes(buft, values) + group_bytes(buft, grads) + group_bytes(buft, moments);
            size_t free = 0, total = 0;
            ggml_backend_dev_memory(dev, &free, &total);
            if (need > free) {
                fail("the trainable weights, gradients and optimizer moments split to {} need {:.1f} MiB, it has {:.1f} MiB "
                     "free (lower -ngl, or shift --tensor-split)",
                     ggml_backend_dev_name(dev), need / 1048576.0, free / 1048576.0);
            }
        }
        Buffers &b = bufs_.emplace_back();
        b.device = dev;
        b.values = alloc_group(buft, values, "trainable weights");
        if (b.values) ggml_backend_buffer_set_usage(b.values, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        b.grads = alloc_group(buft, grads, "gradients");
        b.moments = alloc_group(buft, moments, "optimizer moments");
    }
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

size_t ParamSet::Buffers::bytes() const {
    size_t n = 0;
    for (ggml_backend_buffer_t buf : {values, grads, moments})
        if (buf) n += ggml_backend_buffer_get_size(buf);
    return n;
}

size_t ParamSet::state_bytes() const {
    size_t n = 0;
    for (const Buffers &b : bufs_) n += b.bytes();
    return n;
}

std::vector<std::pair<ggml_backend_dev_t, size_t>> ParamSet::offloaded_bytes() const {
    std::vector<std::pair<ggml_backend_dev_t, size_t>> out;
    for (const Buffers &b : bufs_)
        if (b.device) out.emplace_back(b.device, b.bytes());
    return out;
}

std::vector<float> read_f32(const ggml_tensor *t) {
    std::vector<float> v(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, v.size() * sizeof(float));
    return v;
}

void ParamSet::zero_grads(bool offloaded_only) {
    RemoteWait wait("clearing the gradients");
    for (const Buffers &b : bufs_)
        if (b.grads && (b.device || !offloaded_only)) ggml_backend_buffer_clear(b.grads, 0);
}

}  // namespace toy::train
