// Filling the forward graph's inputs, shared by Session (through the KV
// cache) and sequence mode. Attention masks hold 0 where a query may attend
// and -inf where it may not; cell j of the attended range holds position j
// (one sequence).
#pragma once

#include "graph/forward.h"

#include <ggml.h>

#include <cstdint>
#include <span>

namespace toy {

// Fills `mask` [n_kv, n_queries] (F32 or F16): query i at position q_pos[i]
// sees cells j <= q_pos[i], and with n_swa > 0 only those less than n_swa
// positions back.
void set_causal_mask(ggml_tensor *mask, std::span<const int32_t> q_pos, int64_t n_swa);

// Throws a toy::Error unless every token id is in the vocabulary and, for
// learned positions, positions first_pos .. first_pos+n-1 are in the table.
void check_tokens(const Model &model, std::span<const int32_t> tokens, int64_t first_pos);

// Uploads tokens, their positions, the causal (and sliding-window) masks and
// computed rope factors. Cache indices and output rows are the caller's.
void set_forward_inputs(const graph::ForwardGraph &g, const Config &c, std::span<const int32_t> tokens,
                        std::span<const int32_t> pos);

}  // namespace toy
