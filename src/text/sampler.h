// Sampler: turns a row of logits into the next token. The stages run in
// llama.cpp's default order — penalties, top-k, top-p, min-p, temperature —
// then a seeded draw; temperature <= 0 is greedy (argmax).
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace toy::text {

struct SamplerParams {
    float temp = 0.8f;
    int32_t top_k = 40;           // <= 0: off
    float top_p = 0.95f;          // >= 1: off
    float min_p = 0.05f;          // <= 0: off
    float repeat_penalty = 1.0f;  // 1: off
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int32_t penalty_last_n = 64;  // window of recent tokens the penalties see (0: off, -1: whole history)
    uint64_t seed = 0xFFFFFFFFu;  // 0xFFFFFFFF: a random seed
    // Added to the logits of these tokens before anything else (-INFINITY
    // bans a token); ids outside the vocabulary are ignored.
    std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
public:
    explicit Sampler(const SamplerParams &p);

    // Picks a token from logits[n_vocab]. Does not record it: call accept().
    int32_t sample(std::span<const float> logits);
    // Records a token (prompt or generated) for the penalties.
    void accept(int32_t token);
    void reset();

    uint64_t seed() const { return seed_; }
    const SamplerParams &params() const { return p_; }

    // The candidates left after the filtering stages of the last sample()
    // (for tests): token ids with their probabilities, most likely first.
    struct Candidate {
        int32_t id;
        float logit;
        float p;
    };
    const std::vector<Candidate> &last_candidates() const { return cur_; }

private:
    void apply_penalties();
    void top_k(int32_t k);
    void top_p(float p);
    void min_p(float p);
    void softmax();

    SamplerParams p_;
    uint64_t seed_;
    std::mt19937_64 rng_;
    std::deque<int32_t> history_;
    std::vector<Candidate> cur_;
};

}  // namespace toy::text
