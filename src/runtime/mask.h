// Attention masks as graph inputs: 0 where a query may attend, -inf where it
// may not. Cell j of the attended range holds position j (one sequence).
#pragma once

#include <ggml.h>

#include <cstdint>
#include <span>

namespace toy {

// Fills `mask` [n_kv, n_queries] (F32 or F16): query i at position q_pos[i]
// sees cells j <= q_pos[i], and with n_swa > 0 only those less than n_swa
// positions back.
void set_causal_mask(ggml_tensor *mask, std::span<const int32_t> q_pos, int64_t n_swa);

}  // namespace toy
