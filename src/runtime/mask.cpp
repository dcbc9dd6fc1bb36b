#include "runtime/mask.h"

#include <ggml-backend.h>

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
    if (mask->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(mask, f.data(), 0, f.size() * sizeof(float));
    } else {
        std::vector<ggml_fp16_t> h(f.size());
        ggml_fp32_to_fp16_row(f.data(), h.data(), (int64_t)f.size());
        ggml_backend_tensor_set(mask, h.data(), 0, h.size() * sizeof(ggml_fp16_t));
    }
}

}  // namespace toy
