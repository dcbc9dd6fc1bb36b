// Sequence mode: the logits of every position of a token sequence from one
// graph without a KV cache — attention runs over the sequence itself under a
// causal mask. This is the forward pass training differentiates; inference
// uses Session, which computes the same function through the cache.
#pragma once

#include "graph/adapters.h"
#include "model/model.h"

#include <span>
#include <vector>

namespace toy {

// T x n_vocab logits, row-major. Positions start at 0. With adapters, their
// terms are added to the model's projections.
std::vector<float> eval_sequence(const Model &model, std::span<const int32_t> tokens, int n_threads = 0,
                                 const graph::Adapters *adapters = nullptr);

}  // namespace toy
