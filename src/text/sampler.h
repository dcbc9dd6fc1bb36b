// Sampler: turns a row of logits into the next token, with llama.cpp's
// definitions: logit biases first, then the stages in `order` (llama.cpp's
// default: penalties, top-n-sigma, top-k, typical, top-p, min-p, XTC,
// temperature), then a seeded draw; temperature <= 0 keeps only the most
// likely token (greedy). With mirostat 1 or 2, temperature and mirostat's
// own truncation replace the stages, as in llama.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace toy::text {

enum class Stage { Penalties, Dry, TopNSigma, TopK, Typical, TopP, MinP, Xtc, Temperature };

// llama.cpp's --samplers names separated by ';' (penalties, dry, top_n_sigma,
// top_k, typ_p, top_p, min_p, xtc, temperature; also typical, temp, ...) or
// its --sampling-seq letters (e, d, s, k, y, p, m, x, t). Throws toy::Error
// naming `source` (the flag or request field the text came from).
std::vector<Stage> parse_stages(const std::string &text, std::string_view source);
std::string stage_names(const std::vector<Stage> &order);

struct SamplerParams {
    std::vector<Stage> order = {Stage::Penalties, Stage::Dry,  Stage::TopNSigma, Stage::TopK,       Stage::Typical,
                                Stage::TopP,      Stage::MinP, Stage::Xtc,       Stage::Temperature};
    float temp = 0.8f;
    int32_t top_k = 40;           // <= 0: off
    float top_p = 0.95f;          // >= 1: off
    float min_p = 0.05f;          // <= 0: off
    float repeat_penalty = 1.0f;  // 1: off
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int32_t penalty_last_n = 64;  // window of recent tokens the penalties see (0: off, -1: whole history)
    float typical_p = 1.0f;       // >= 1: off
    float top_n_sigma = -1.0f;    // <= 0: off; keeps logits within n standard deviations of the max
    float xtc_probability = 0.0f; // 0: off; the chance of cutting the most likely tokens
    float xtc_threshold = 0.1f;   // > 0.5: off; tokens at least this likely are the ones cut (all but the least)
    int32_t min_keep = 0;         // top-p, typical, min-p and XTC keep at least this many (0: 1)
    // DRY ("don't repeat yourself"): a token that would extend a repeat of
    // length L >= allowed_length loses multiplier * base^(L - allowed_length).
    float dry_multiplier = 0.0f;  // 0: off
    float dry_base = 1.75f;
    int32_t dry_allowed_length = 2;
    int32_t dry_penalty_last_n = -1;  // tokens scanned for repeats (-1: all seen, 0: off)
    // Tokens a repeat does not run across (the tokens whose text holds one of
    // the breaker strings, "\n", ":", "\"", "*" by default; dry_breaker_ids()).
    std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
    std::vector<int32_t> dry_breakers;  // their tokens: filled by with_dry_breakers()
    int mirostat = 0;             // 1, 2: mirostat v1 / v2 instead of the stages
    float mirostat_tau = 5.0f;    // target surprise (bits)
    float mirostat_eta = 0.1f;    // its learning rate
    uint64_t seed = 0xFFFFFFFFu;  // 0xFFFFFFFF: a random seed
    // Added to the logits of these tokens before anything else (-INFINITY
    // bans a token); ids outside the vocabulary are ignored.
    std::vector<std::pair<int32_t, float>> logit_bias;
};

// Each parameter's accepted values, in one place for the command-line
// flags and the server's request fields (llama.cpp's ways of saying "off"
// included: top-k <= 0, top-p 1, temperature <= 0 for greedy, DRY's base
// below 1). Throws toy::Error naming the first value outside its range by
// its flag ("--repeat-penalty: expected a number > 0 (1: off), found 0") or
// by its request field ("'repeat_penalty' must be a number > 0 ...").
enum class ParamNames { flags, fields };
void check_params(const SamplerParams &p, ParamNames names);

class Sampler {
public:
    explicit Sampler(const SamplerParams &p);

    // Picks a token from logits[n_vocab]. Does not record it: call accept().
    // With `allowed` (n_vocab flags), only the tokens flagged are candidates
    // (at least one must be).
    int32_t sample(std::span<const float> logits, const std::vector<uint8_t> *allowed = nullptr);
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
    void typical(float p);
    void top_n_sigma(float n);
    void xtc();
    void dry();
    void temperature();
    int32_t mirostat(size_t n_vocab);
    int32_t draw();
    void softmax();
    size_t keep_at_least() const { return (size_t)std::max<int32_t>(1, p_.min_keep); }

    SamplerParams p_;
    uint64_t seed_;
    std::mt19937_64 rng_;
    std::deque<int32_t> history_;  // the longer of the penalties' and DRY's windows
    std::vector<Candidate> cur_;
    float mu_ = 0.0f;  // mirostat's running surprise bound
    std::vector<int32_t> dry_reversed_;  // dry()'s scratch: the window, latest token first
    std::vector<size_t> dry_z_;          // ... and its Z-function
};

}  // namespace toy::text
