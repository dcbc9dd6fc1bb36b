// Filling the forward graph's inputs, shared by Session (through the KV
// cache) and sequence mode. Attention masks hold 0 where a query may attend
// and -inf where it may not; cell j of the attended range holds position j
// (one sequence).
#pragma once

#include "graph/forward.h"

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdint>
#include <span>
#include <vector>

namespace toy {

// Fills `mask` [n_kv, n_queries] (F32 or F16): query i at position q_pos[i]
// sees cells j <= q_pos[i], and with n_swa > 0 only those less than n_swa
// positions back.
void set_causal_mask(ggml_tensor *mask, std::span<const int32_t> q_pos, int64_t n_swa);
// Uploads mask values (0 or -inf, row-major [n_queries][n_kv]) to `mask`, F32 or F16.
void upload_mask(ggml_tensor *mask, const std::vector<float> &f);

// Throws a toy::Error unless every token id is in the vocabulary and, for
// learned positions, positions first_pos .. first_pos+n-1 are in the table.
void check_tokens(const Model &model, std::span<const int32_t> tokens, int64_t first_pos);

// Uploads tokens, their positions, computed rope factors and, with
// causal_masks (sequence mode: cell j == position j), the causal and
// sliding-window masks. Cache indices, output rows and the masks of a cache
// (KvCache::fill_mask) are the caller's.
void set_forward_inputs(const graph::ForwardGraph &g, const Config &c, std::span<const int32_t> tokens,
                        std::span<const int32_t> pos, bool causal_masks = true);

// A graph's inputs in a buffer of their own, each on a cache-line boundary.
// Left to the graph allocator, a 4-byte input (one output row id, one token)
// would sit first in the compute buffer and, as ggml's CPU buffers align
// tensors to 32 bytes only, shift every activation after it half a cache line:
// 64-byte vector stores into matmul results then straddle two lines (ggml's
// AMX prompt matmul ran 25% slower so). With the inputs here the compute
// buffer holds only computed tensors, from its 64-byte aligned base.
class InputBuffer {
public:
    InputBuffer() = default;
    ~InputBuffer();
    InputBuffer(const InputBuffer &) = delete;
    InputBuffer &operator=(const InputBuffer &) = delete;

    // Places `inputs` (tensors not allocated yet) in this buffer, growing it
    // when needed; the previous placement is void. Call before the graph is
    // allocated, which then leaves these tensors where they are.
    void place(ggml_backend_buffer_type_t buft, const std::vector<ggml_tensor *> &inputs);

private:
    ggml_backend_buffer_t buf_ = nullptr;
};

}  // namespace toy
