// Perplexity as llama-perplexity measures it, so the numbers of the two tools
// can be compared directly: the text in windows of n_ctx tokens
// (eval/windows.h), each window scored on its second half only (every scored
// token has at least n_ctx/2 tokens of context): the logits at positions
// n_ctx/2 .. n_ctx-2 predict tokens n_ctx/2+1 .. n_ctx-1. PPL = exp(mean
// NLL); its error is PPL times the standard error of the mean NLL.
//
// KL divergence against a base model, in two runs:
//   1. the base model writes its log-probabilities (--kl-divergence-base FILE);
//   2. another model (a quantized copy) reads them (--kl-divergence) and is
//      compared token by token: KL(base || model), top-token agreement, the
//      change in the probability of the right token, ln(PPL ratio).
// The file is llama-perplexity's, byte for byte, so either tool reads the
// other's (little-endian):
//   "_logits_", int32 n_ctx, int32 n_vocab, int32 n_chunk,
//   int32 tokens[n_chunk * n_ctx] (as tokenized, before the BOS substitution),
//   then per window, for each of its n_ctx - 1 - n_ctx/2 scored positions, a
//   row of nv = 2*ceil(n_vocab/2) + 4 uint16: float scale and float min_lp
//   (the first 4 uint16), then per token q with
//   log p = scale * q + min_lp; log-probabilities more than 16 below the
//   maximum are stored as q = 0 (the row's floor), the rest rounded to
//   65535 steps between that floor and the maximum.
#pragma once

#include "eval/windows.h"
#include "model/model.h"
#include "runtime/session.h"
#include "text/vocab.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace toy::eval {

struct PerplexityOptions : WindowOptions {
    std::string kl_base;         // --kl-divergence-base FILE
    bool kl_divergence = false;  // false: write kl_base (when set); true: compare with it
    bool n_ctx_given = true;     // false: in KL mode take the base file's n_ctx
};

// A value with its standard error.
struct Estimate {
    double value = 0, err = 0;
};

// Order statistics of a per-token quantity (linear interpolation between
// ranks, as llama-perplexity's percentiles).
struct Quantiles {
    double min = 0, p0_1 = 0, p1 = 0, p5 = 0, p10 = 0, p25 = 0, median = 0, p75 = 0, p90 = 0, p95 = 0, p99 = 0,
           p99_9 = 0, max = 0;
};

// KL divergence of a model from a base (llama-perplexity's statistics).
struct KlStats {
    int64_t count = 0;                 // tokens compared
    Estimate ppl, ppl_base;            // PPL(Q), PPL(base)
    double ln_ppl_correlation = 0;     // Cor(ln PPL(Q), ln PPL(base))
    Estimate ln_ppl_ratio;             // mean ln(PPL(Q)/PPL(base))
    Estimate ppl_ratio, ppl_diff;      // PPL(Q)/PPL(base), PPL(Q)-PPL(base)
    Estimate kld;                      // mean KL(base || Q) per token, nats
    Quantiles kld_q;
    Estimate p_diff;                   // mean p(Q) - p(base) of the right token
    Quantiles p_diff_q;
    Estimate p_diff_rms;               // RMS of that difference
    Estimate same_top;                 // fraction of tokens whose most likely token agrees
};

// What the caller hears after each window: its 1-based number and the
// running estimates (PPL over every token scored so far; in KL mode the
// running KL statistics too).
struct ChunkReport {
    int64_t chunk = 0, n_chunks = 0;
    double ppl = 0;
    const KlStats *kl = nullptr;
};

struct PerplexityResult {
    int64_t n_tokens = 0;    // tokens of the text (KL mode: of the base file)
    WindowPlan plan;
    int64_t count = 0;       // tokens scored
    Estimate ppl;            // exp(mean NLL) and its error
    std::vector<double> chunk_ppl;   // the running estimate after each window
    std::optional<KlStats> kl;       // KL mode
};

// -log p(next) from one position's logits [n_vocab] (max-shifted softmax,
// summed in double).
double token_nll(const float *logits, int64_t n_vocab, int32_t next);

// Perplexity of `model` on `text` (and, with opts.kl_base, writes the base
// file). KL mode (opts.kl_divergence) reads the windows' tokens from the base
// file instead; `text`, when not empty, must tokenize to the same tokens.
// session: threads, cache types, flash attention, adapters (its n_ctx and
// batch sizes are set from the plan). Throws toy::Error with one line.
PerplexityResult perplexity(const Model &model, const text::Vocab &vocab, const std::string &text,
                            const std::string &source, const PerplexityOptions &opts, const SessionOptions &session,
                            const std::function<void(const ChunkReport &)> &on_chunk = {});

}  // namespace toy::eval
