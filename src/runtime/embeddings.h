// Embeddings: a text's hidden states after the final norm (Session's
// embeddings mode), pooled per text and normalized as llama.cpp's
// llama-embedding does (--pooling, --embd-normalize).
#pragma once

#include "runtime/session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace toy {

enum class Pooling { None, Mean, Cls, Last };

// "none", "mean", "cls" or "last"; throws toy::Error naming `flag` and the
// accepted names (without "none" where `allow_none` is false: one vector per text).
Pooling parse_pooling(const std::string &name, const std::string &flag, bool allow_none = true);
const char *pooling_name(Pooling p);
// The pooling a model's metadata asks for ({arch}.pooling_type: 0 none, 1
// mean, 2 cls, 3 last), or mean when it says nothing (a generative model).
Pooling model_pooling(const Model &model);

// The hidden states of `tokens` (a fresh sequence in `session`, whose
// options have embeddings on), pooled: one vector of n_embd, or with None
// one per token. Each normalized by `norm`: -1 none, 0 scaled so that the
// largest magnitude is 32760 (int16's range), 2 Euclidean, p > 0 the p-norm.
std::vector<std::vector<float>> embed(Session &session, const std::vector<int32_t> &tokens, Pooling pooling, int norm);

// llama.cpp's common_embd_normalize, in place.
void normalize_embedding(std::vector<float> &v, int norm);

}  // namespace toy
