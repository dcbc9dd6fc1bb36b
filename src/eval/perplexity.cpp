#include "eval/perplexity.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace toy::eval {
namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
// log-probabilities more than this below a row's maximum are stored as the floor
constexpr float kLogProbRange = 16.0f;

// uint16 per stored row: two floats (scale, min_lp), then n_vocab values
// padded to an even count
int64_t row_u16(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// ---- per-row computations (one scored position: logits [n_vocab], the token that follows) ----

struct RowMax {
    float max;
    int64_t argmax;  // first maximum
    double sum_exp;  // sum of exp(logit - max)
};

RowMax row_max(const float *l, int64_t n) {
    RowMax r{l[0], 0, 0.0};
    for (int64_t i = 1; i < n; ++i)
        if (l[i] > r.max) r.max = l[i], r.argmax = i;
    for (int64_t i = 0; i < n; ++i) r.sum_exp += std::exp(l[i] - r.max);
    return r;
}

// Stores the row's log-probabilities in the base file's form (out: row_u16
// uint16) and returns -log p(tok).
float quantize_row(const float *l, int64_t n, int32_t tok, uint16_t *out) {
    const RowMax r = row_max(l, n);
    float lo = l[0];
    for (int64_t i = 1; i < n; ++i) lo = std::min(lo, l[i]);
    lo = std::max(lo, r.max - kLogProbRange);
    const float lse = (float)std::log(r.sum_exp);
    const float scale = (r.max - lo) / 65535.0f;
    const float min_lp = lo - r.max - lse;
    std::memcpy(out, &scale, sizeof scale);
    std::memcpy(out + 2, &min_lp, sizeof min_lp);
    uint16_t *q = out + 4;
    std::fill(q, q + (row_u16(n) - 4), uint16_t{0});
    if (scale != 0.0f) {
        const float inv = 1.0f / scale;
        // round half to even, as the file's writers round
        for (int64_t i = 0; i < n; ++i) q[i] = l[i] > lo ? (uint16_t)std::nearbyint(inv * (l[i] - lo)) : 0;
    }
    return r.max + lse - l[tok];
}

// One scored position compared with the base's stored row.
struct TokenKl {
    double kld = 0;       // sum_i p_base(i) (log p_base(i) - log p(i))
    float nll = 0, nll_base = 0;
    float p_diff = 0;     // p(tok) - p_base(tok)
    bool same_top = false;
};

TokenKl compare_row(const float *l, int64_t n, int32_t tok, const uint16_t *base) {
    const RowMax r = row_max(l, n);
    const float lse = (float)std::log(r.sum_exp);
    float scale, min_lp;
    std::memcpy(&scale, base, sizeof scale);
    std::memcpy(&min_lp, base + 2, sizeof min_lp);
    const uint16_t *q = base + 4;
    TokenKl t;
    t.nll = r.max + lse - l[tok];
    t.nll_base = -(scale * q[tok] + min_lp);
    const float log_norm = r.max + lse;  // log p(i) = l[i] - log_norm
    int64_t top_base = 0;
    float top_lp = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float lp_base = scale * q[i] + min_lp;
        if (i == 0 || lp_base > top_lp) top_lp = lp_base, top_base = i;
        // the floor stands for "negligible": those tokens add nothing
        if (lp_base > -kLogProbRange) t.kld += std::exp(lp_base) * (lp_base - l[i] + log_norm);
    }
    t.same_top = top_base == r.argmax;
    t.p_diff = std::exp(-t.nll) - std::exp(-t.nll_base);
    return t;
}

// ---- statistics ----

// Mean and standard error of the mean from a sum and a sum of squares
// (no error under 11 values, as llama-perplexity reports them).
Estimate mean_err(double sum, double sum2, int64_t n) {
    if (n < 1) return {};
    const double m = sum / n;
    const double var = sum2 / n - m * m;
    return {m, var > 0 && n > 10 ? std::sqrt(var / (n - 1)) : 0.0};
}

// Covariance of the two means.
double mean_covariance(double sum_a, double sum_b, double sum_ab, int64_t n) {
    if (n < 10) return 0.0;
    return (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1);
}

double percentile(const std::vector<float> &sorted, double fraction) {
    if (fraction <= 0) return sorted.front();
    if (fraction >= 1) return sorted.back();
    const double at = fraction * (double)(sorted.size() - 1);
    const size_t i = (size_t)at;
    const double f = at - (double)i;
    return (1 - f) * sorted[i] + f * sorted[std::min(i + 1, sorted.size() - 1)];
}

Quantiles quantiles(std::vector<float> v) {
    Quantiles q;
    if (v.empty()) return q;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    q.min = v.front();
    q.max = v.back();
    q.median = n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2] + v[n / 2 - 1]);
    q.p0_1 = percentile(v, 0.001);
    q.p1 = percentile(v, 0.01);
    q.p5 = percentile(v, 0.05);
    q.p10 = percentile(v, 0.10);
    q.p25 = percentile(v, 0.25);
    q.p75 = percentile(v, 0.75);
    q.p90 = percentile(v, 0.90);
    q.p95 = percentile(v, 0.95);
    q.p99 = percentile(v, 0.99);
    q.p99_9 = percentile(v, 0.999);
    return q;
}

struct KlSums {
    double nll = 0, nll2 = 0, nll_base = 0, nll_base2 = 0, nll_nll_base = 0;
    double kld = 0, kld2 = 0, p_diff = 0, p_diff2 = 0, p_diff4 = 0;
    int64_t same_top = 0, count = 0;
    std::vector<float> kld_values, p_diff_values;

    void add(const TokenKl &t) {
        nll += t.nll;
        nll2 += (double)t.nll * t.nll;
        nll_base += t.nll_base;
        nll_base2 += (double)t.nll_base * t.nll_base;
        nll_nll_base += (double)t.nll * t.nll_base;
        kld += t.kld;
        kld2 += t.kld * t.kld;
        const double d2 = (double)t.p_diff * t.p_diff;
        p_diff += t.p_diff;
        p_diff2 += d2;
        p_diff4 += d2 * d2;
        same_top += t.same_top;
        ++count;
        kld_values.push_back((float)t.kld);
        p_diff_values.push_back(t.p_diff);
    }

    KlStats stats(bool with_quantiles) const {
        KlStats s;
        s.count = count;
        const Estimate lp = mean_err(nll, nll2, count), lb = mean_err(nll_base, nll_base2, count);
        s.ppl = {std::exp(lp.value), std::exp(lp.value) * lp.err};
        s.ppl_base = {std::exp(lb.value), std::exp(lb.value) * lb.err};
        const double cov = mean_covariance(nll, nll_base, nll_nll_base, count);
        s.ln_ppl_correlation = lp.err > 0 && lb.err > 0 ? cov / (lp.err * lb.err) : 0.0;
        const double ratio_err = std::sqrt(std::max(0.0, lp.err * lp.err + lb.err * lb.err - 2 * cov));
        s.ln_ppl_ratio = {lp.value - lb.value, ratio_err};
        s.ppl_ratio = {std::exp(s.ln_ppl_ratio.value), std::exp(s.ln_ppl_ratio.value) * ratio_err};
        const double ppl_cov = s.ppl.value * s.ppl_base.value * cov;
        s.ppl_diff = {s.ppl.value - s.ppl_base.value,
                      std::sqrt(std::max(0.0, s.ppl.err * s.ppl.err + s.ppl_base.err * s.ppl_base.err - 2 * ppl_cov))};
        s.kld = mean_err(kld, kld2, count);
        s.p_diff = mean_err(p_diff, p_diff2, count);
        const Estimate mse = mean_err(p_diff2, p_diff4, count);
        const double rms = std::sqrt(mse.value);
        s.p_diff_rms = {rms, rms > 0 ? 0.5 / rms * mse.err : 0.0};
        const double top = count ? (double)same_top / count : 0.0;
        s.same_top = {top, count > 1 ? std::sqrt(top * (1 - top) / (count - 1)) : 0.0};
        if (with_quantiles) {
            s.kld_q = quantiles(kld_values);
            s.p_diff_q = quantiles(p_diff_values);
        }
        return s;
    }
};

// ---- the base file ----

template <class T>
void put(AtomicFile &f, const T &v) {
    f.write(&v, sizeof v);
}

struct BaseHeader {
    int64_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
    std::vector<int32_t> tokens;
};

class BaseReader {
public:
    BaseReader(const std::string &path, int64_t n_vocab) : path_(path), in_(path, std::ios::binary) {
        if (!in_) fail("--kl-divergence-base: cannot read '{}'", path);
        char magic[8] = {};
        in_.read(magic, 8);
        if (!in_ || std::memcmp(magic, kMagic, 8) != 0) {
            fail("--kl-divergence-base {}: not a file of base log-probabilities (expected it to start with '_logits_')", path);
        }
        int32_t h[3] = {};
        in_.read(reinterpret_cast<char *>(h), sizeof h);
        if (!in_) fail("--kl-divergence-base {}: the header ends early", path);
        hdr_.n_ctx = h[0], hdr_.n_vocab = h[1], hdr_.n_chunk = h[2];
        if (hdr_.n_ctx < kMinWindow || hdr_.n_vocab < 1 || hdr_.n_chunk < 1) {
            fail("--kl-divergence-base {}: header n_ctx {}, n_vocab {}, n_chunk {} out of range", path, hdr_.n_ctx,
                 hdr_.n_vocab, hdr_.n_chunk);
        }
        if (hdr_.n_vocab != n_vocab) {
            fail("--kl-divergence-base {}: written for a vocabulary of {} tokens, the model has {}", path, hdr_.n_vocab,
                 n_vocab);
        }
        rows_ = hdr_.n_ctx - 1 - hdr_.n_ctx / 2;
        // (in 128 bits: forged counts must not wrap around to the file's size)
        using u128 = unsigned __int128;
        const u128 want = 8 + 12 + 4 * (u128)hdr_.n_chunk * (u128)hdr_.n_ctx +
                          2 * (u128)hdr_.n_chunk * (u128)rows_ * (u128)row_u16(hdr_.n_vocab);
        const uint64_t have = std::filesystem::file_size(path);
        if (have != want) {
            const std::string size = want >> 64 ? "more than 2^64" : std::to_string((uint64_t)want);
            fail("--kl-divergence-base {}: {} bytes, but n_ctx {}, n_vocab {} and {} chunks make {} bytes (truncated?)",
                 path, have, hdr_.n_ctx, hdr_.n_vocab, hdr_.n_chunk, size);
        }
        hdr_.tokens.resize((size_t)(hdr_.n_chunk * hdr_.n_ctx));
        in_.read(reinterpret_cast<char *>(hdr_.tokens.data()), (std::streamsize)(hdr_.tokens.size() * 4));
        if (!in_) fail("--kl-divergence-base {}: the token list ends early", path);
    }
    const BaseHeader &header() const { return hdr_; }
    // The stored rows of the next `count` windows.
    void read_windows(int64_t count, std::vector<uint16_t> &out) {
        out.resize((size_t)(count * rows_ * row_u16(hdr_.n_vocab)));
        in_.read(reinterpret_cast<char *>(out.data()), (std::streamsize)(out.size() * 2));
        if (!in_) fail("--kl-divergence-base {}: the log-probabilities end early", path_);
    }

private:
    std::string path_;
    std::ifstream in_;
    BaseHeader hdr_;
    int64_t rows_ = 0;
};

}  // namespace

double token_nll(const float *logits, int64_t n_vocab, int32_t next) {
    const RowMax r = row_max(logits, n_vocab);
    return (double)r.max + std::log(r.sum_exp) - logits[next];
}

PerplexityResult perplexity(const Model &model, const text::Vocab &vocab, const std::string &text,
                            const std::string &source, const PerplexityOptions &opts, const SessionOptions &session,
                            const std::function<void(const ChunkReport &)> &on_chunk) {
    const int64_t n_vocab = model.config().n_vocab;
    const bool compare = opts.kl_divergence;
    if (compare && opts.kl_base.empty()) fail("--kl-divergence: give the base model's file with --kl-divergence-base FILE");

    std::unique_ptr<BaseReader> base;
    std::vector<int32_t> tokens;
    WindowOptions wo = opts;
    if (compare) {
        base = std::make_unique<BaseReader>(opts.kl_base, n_vocab);
        const BaseHeader &h = base->header();
        if (opts.n_ctx_given && opts.n_ctx != h.n_ctx) {
            fail("-c {}: the base file {} was written with -c {}", opts.n_ctx, opts.kl_base, h.n_ctx);
        }
        wo.n_ctx = h.n_ctx;
        tokens = h.tokens;
        if (!text.empty()) {
            const std::vector<int32_t> mine = window_tokens(vocab, text);
            const size_t n = std::min(mine.size(), tokens.size());
            for (size_t i = 0; i < n; ++i) {
                if (mine[i] != tokens[i]) {
                    fail("{}: token {} is {}, the base file {} has {} there (another text or tokenizer)", source, i,
                         mine[i], opts.kl_base, tokens[i]);
                }
            }
            if (mine.size() < tokens.size()) {
                fail("{}: {} tokens, the base file {} has {}", source, mine.size(), opts.kl_base, tokens.size());
            }
        }
    } else {
        tokens = window_tokens(vocab, text);
    }

    PerplexityResult res;
    res.n_tokens = (int64_t)tokens.size();
    res.plan = plan_windows(res.n_tokens, wo, session.n_ubatch, compare ? opts.kl_base : source);
    const WindowPlan &p = res.plan;
    const int64_t first = p.n_ctx / 2, rows = p.n_ctx - 1 - first, nv = row_u16(n_vocab);

    std::unique_ptr<AtomicFile> out;
    if (!compare && !opts.kl_base.empty()) {
        out = std::make_unique<AtomicFile>(opts.kl_base);
        out->write(kMagic, 8);
        put(*out, (int32_t)p.n_ctx);
        put(*out, (int32_t)n_vocab);
        put(*out, (int32_t)p.n_chunks);
        out->write(tokens.data(), (uint64_t)(p.n_chunks * p.n_ctx) * sizeof(int32_t));
    }

    Session s(model, window_session_options(session, p));
    const int32_t bos = vocab.add_bos() ? vocab.bos() : text::Vocab::kNoToken;
    double nll = 0, nll2 = 0;
    KlSums kl;
    std::vector<uint16_t> rows_u16, base_rows;
    std::vector<double> row_nlls;
    std::vector<TokenKl> row_kls;

    auto on_windows = [&](int64_t w0, int64_t count, const float *logits) {
        const int64_t n_rows = count * rows;
        // the target of row r of window w is token first + r + 1 of that window
        auto target = [&](int64_t r) { return tokens[(size_t)((w0 + r / rows) * p.n_ctx + first + r % rows + 1)]; };
        auto row = [&](int64_t r) { return logits + r * n_vocab; };
        if (compare) {
            base->read_windows(count, base_rows);
            row_kls.resize((size_t)n_rows);
            parallel_for(n_rows, session.n_threads,
                         [&](int64_t r) { row_kls[r] = compare_row(row(r), n_vocab, target(r), base_rows.data() + r * nv); });
        } else if (out) {
            rows_u16.resize((size_t)(n_rows * nv));
            row_nlls.resize((size_t)n_rows);
            parallel_for(n_rows, session.n_threads,
                         [&](int64_t r) { row_nlls[r] = quantize_row(row(r), n_vocab, target(r), rows_u16.data() + r * nv); });
            out->write(rows_u16.data(), rows_u16.size() * sizeof(uint16_t));
        } else {
            row_nlls.resize((size_t)n_rows);
            parallel_for(n_rows, session.n_threads, [&](int64_t r) { row_nlls[r] = token_nll(row(r), n_vocab, target(r)); });
        }
        // sums in token order: the result does not depend on the thread count
        for (int64_t w = 0; w < count; ++w) {
            KlStats running;
            for (int64_t r = w * rows; r < (w + 1) * rows; ++r) {
                if (compare) {
                    kl.add(row_kls[r]);
                } else {
                    nll += row_nlls[r];
                    nll2 += row_nlls[r] * row_nlls[r];
                }
            }
            res.count += rows;
            double ppl;
            if (compare) {
                running = kl.stats(false);
                ppl = running.ppl.value;
            } else {
                ppl = std::exp(nll / res.count);
            }
            res.chunk_ppl.push_back(ppl);
            if (on_chunk) on_chunk({w0 + w + 1, p.n_chunks, ppl, compare ? &running : nullptr});
        }
    };
    evaluate_windows(s, tokens, p, bos, first, p.n_ctx - 1, on_windows);
    if (out) out->commit();

    if (compare) {
        res.kl = kl.stats(true);
        res.ppl = res.kl->ppl;
    } else {
        const double mean = nll / res.count;
        const double var = nll2 / res.count - mean * mean;
        const double ppl = std::exp(mean);
        res.ppl = {ppl, var > 0 && res.count > 1 ? ppl * std::sqrt(var / (res.count - 1)) : 0.0};
    }
    return res;
}

}  // namespace toy::eval
