#include "runtime/inputs.h"

#include "core/error.h"

#include <ggml-backend.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace toy {

void set_causal_mask(ggml_tensor *mask, std::span<const int32_t> q_pos, int64_t n_swa) {
    const int64_t n_kv = mask->ne[0];
    const int64_t n_q = (int64_t)q_pos.size();
    std::vector<float> f((size_t)n_kv * n_q);
    for (int64_t i = 0; i < n_q; ++i) {
        const int64_t p = q_pos[i];
        for (int64_t j = 0; j < n_kv; ++j) {
            const bool hidden = j > p || (n_swa > 0 && p - j >= n_swa);
            f[i * n_kv + j] = hidden ? -INFINITY : 0.0f;
        }
    }
    upload_mask(mask, f);
}

void upload_mask(ggml_tensor *mask, const std::vector<float> &f) {
    if (mask->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(mask, f.data(), 0, f.size() * sizeof(float));
    } else {
        std::vector<ggml_fp16_t> h(f.size());
        ggml_fp32_to_fp16_row(f.data(), h.data(), (int64_t)f.size());
        ggml_backend_tensor_set(mask, h.data(), 0, h.size() * sizeof(ggml_fp16_t));
    }
}

void check_tokens(const Model &model, std::span<const int32_t> tokens, int64_t first_pos) {
    const Config &c = model.config();
    const int64_t n = (int64_t)tokens.size();
    if (n == 0) fail("nothing to evaluate: the token list is empty");
    if (c.pos == PosKind::Learned && first_pos + n > c.n_ctx_train) {
        fail("position {} is beyond the {} learned positions of {}", first_pos + n - 1, c.n_ctx_train, model.path());
    }
    const int64_t n_vocab = model.weights().tok_embd->ne[1];
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            fail("token id {} at index {} is out of range: the vocabulary has {} tokens", tokens[i], i, n_vocab);
        }
    }
}

void set_forward_inputs(const graph::ForwardGraph &g, const Config &c, std::span<const int32_t> tokens,
                        std::span<const int32_t> pos, bool causal_masks) {
    ggml_backend_tensor_set(g.tokens, tokens.data(), 0, tokens.size() * sizeof(int32_t));
    ggml_backend_tensor_set(g.pos, pos.data(), 0, pos.size() * sizeof(int32_t));
    if (causal_masks) {
        // several sequences of the same positions share one mask of their length
        const std::span<const int32_t> q_pos = pos.first(g.mask->ne[1]);
        set_causal_mask(g.mask, q_pos, 0);
        if (g.mask_swa) set_causal_mask(g.mask_swa, q_pos, c.n_swa);
    }
    if (g.rope_freqs) {
        ggml_backend_tensor_set(g.rope_freqs, c.rope.freq_factors.data(), 0, c.rope.freq_factors.size() * sizeof(float));
    }
}

InputBuffer::~InputBuffer() {
    if (buf_) ggml_backend_buffer_free(buf_);
}

void InputBuffer::place(ggml_backend_buffer_type_t buft, const std::vector<ggml_tensor *> &inputs) {
    const size_t align = std::max<size_t>(64, ggml_backend_buft_get_alignment(buft));
    auto padded = [&](const ggml_tensor *t) { return GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align); };
    size_t need = align;  // room to align the first tensor whatever the base
    for (const ggml_tensor *t : inputs) need += padded(t);
    if (!buf_ || ggml_backend_buffer_get_size(buf_) < need) {
        if (buf_) ggml_backend_buffer_free(buf_);
        buf_ = ggml_backend_buft_alloc_buffer(buft, need);
        if (!buf_) fail("could not allocate {} bytes for the graph inputs", need);
    }
    auto *base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(buf_));
    uint8_t *at = base + (GGML_PAD((uintptr_t)base, align) - (uintptr_t)base);
    for (ggml_tensor *t : inputs) {
        if (ggml_backend_tensor_alloc(buf_, t, at) != GGML_STATUS_SUCCESS) {
            fail("could not place graph input '{}'", ggml_get_name(t));
        }
        at += padded(t);
    }
}

}  // namespace toy
