#include "text/sampler.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace toy::text {
namespace {

struct StageName {
    const char *name;
    char letter;
    Stage stage;
};
// llama.cpp's names (and the aliases its --samplers takes) and letters
constexpr StageName kStages[] = {
    {"penalties", 'e', Stage::Penalties}, {"dry", 'd', Stage::Dry}, {"top_n_sigma", 's', Stage::TopNSigma}, {"top_k", 'k', Stage::TopK},
    {"typ_p", 'y', Stage::Typical},       {"typical_p", 'y', Stage::Typical},      {"typical", 'y', Stage::Typical},
    {"top_p", 'p', Stage::TopP},          {"nucleus", 'p', Stage::TopP},           {"min_p", 'm', Stage::MinP},
    {"xtc", 'x', Stage::Xtc},             {"temperature", 't', Stage::Temperature}, {"temp", 't', Stage::Temperature},
};

// A sampler parameter's range: [lo, hi], or (lo, hi] with above (whole: an
// integer parameter); what a value means ("1: off") follows in the message.
struct Range {
    const char *flag, *field;
    double (*get)(const SamplerParams &);
    double lo, hi;
    bool above, whole;
    const char *note;
};
constexpr double kNoEnd = INFINITY;
#define TOY_PARAM(member) [](const SamplerParams &p) { return (double)p.member; }
// (temperature, top-k, top-n-sigma and the presence and frequency penalties
// take any value: at or below 0 they are off, or greedy)
constexpr Range kRanges[] = {
    {"--top-p", "top_p", TOY_PARAM(top_p), 0, 1, false, false, "1: off"},
    {"--min-p", "min_p", TOY_PARAM(min_p), 0, 1, false, false, "0: off"},
    {"--typical", "typical_p", TOY_PARAM(typical_p), 0, 1, false, false, "1: off"},
    {"--repeat-penalty", "repeat_penalty", TOY_PARAM(repeat_penalty), 0, kNoEnd, true, false, "1: off"},
    {"--repeat-last-n", "repeat_last_n", TOY_PARAM(penalty_last_n), -1, kNoEnd, false, true, "0: off, -1: all"},
    {"--xtc-probability", "xtc_probability", TOY_PARAM(xtc_probability), 0, 1, false, false, "0: off"},
    {"--xtc-threshold", "xtc_threshold", TOY_PARAM(xtc_threshold), 0, 1, false, false, "above 0.5: off"},
    {"--min-keep", "min_keep", TOY_PARAM(min_keep), 0, kNoEnd, false, true, nullptr},
    {"--dry-multiplier", "dry_multiplier", TOY_PARAM(dry_multiplier), 0, kNoEnd, false, false, "0: off"},
    {"--dry-base", "dry_base", TOY_PARAM(dry_base), 0, kNoEnd, true, false, "below 1: off"},
    {"--dry-allowed-length", "dry_allowed_length", TOY_PARAM(dry_allowed_length), 0, kNoEnd, false, true, nullptr},
    {"--dry-penalty-last-n", "dry_penalty_last_n", TOY_PARAM(dry_penalty_last_n), -1, kNoEnd, false, true, "0: off, -1: all"},
    {"--mirostat", "mirostat", TOY_PARAM(mirostat), 0, 2, false, true, "0: off, 1: v1, 2: v2"},
    {"--mirostat-ent", "mirostat_tau", TOY_PARAM(mirostat_tau), 0, kNoEnd, false, false, nullptr},
    {"--mirostat-lr", "mirostat_eta", TOY_PARAM(mirostat_eta), 0, kNoEnd, false, false, nullptr},
};
#undef TOY_PARAM

}  // namespace

std::vector<Stage> parse_stages(const std::string &text, std::string_view source) {
    std::vector<Stage> out;
    const bool letters = text.find(';') == std::string::npos && text.find('_') == std::string::npos &&
                         std::all_of(text.begin(), text.end(), [](char c) { return std::string("edskypmxt").find(c) != std::string::npos; });
    if (letters && !text.empty()) {
        for (char c : text) {
            for (const StageName &s : kStages) {
                if (s.letter == c) {
                    out.push_back(s.stage);
                    break;
                }
            }
        }
        return out;
    }
    size_t i = 0;
    while (i <= text.size()) {
        const size_t j = std::min(text.find(';', i), text.size());
        std::string name = text.substr(i, j - i);
        std::replace(name.begin(), name.end(), '-', '_');
        auto it = std::find_if(std::begin(kStages), std::end(kStages), [&](const StageName &s) { return name == s.name; });
        if (it == std::end(kStages)) {
            fail("{}: unknown sampler '{}' (expected names like penalties;top_k;typ_p;top_p;min_p;xtc;temperature, "
                 "or letters like ekypmxt)", source, text.substr(i, j - i));
        }
        out.push_back(it->stage);
        i = j + 1;
    }
    return out;
}

std::string stage_names(const std::vector<Stage> &order) {
    std::string out;
    for (Stage st : order) {
        for (const StageName &s : kStages) {
            if (s.stage == st) {
                if (!out.empty()) out += ';';
                out += s.name;
                break;
            }
        }
    }
    return out;
}

void check_params(const SamplerParams &p, ParamNames names) {
    for (const Range &r : kRanges) {
        const double v = r.get(p);
        if (std::isfinite(v) && (r.above ? v > r.lo : v >= r.lo) && v <= r.hi) continue;
        std::string expected = r.whole ? "a whole number" : "a number";
        expected += r.hi == kNoEnd ? fmt::format(" {} {}", r.above ? ">" : ">=", r.lo) : fmt::format(" from {} to {}", r.lo, r.hi);
        if (r.note) expected += fmt::format(" ({})", r.note);
        const std::string found = r.whole ? fmt::format("{}", (int64_t)v) : fmt::format("{}", (float)v);
        if (names == ParamNames::flags) fail("{}: expected {}, found {}", r.flag, expected, found);
        fail("'{}' must be {}, found {}", r.field, expected, found);
    }
}

Sampler::Sampler(const SamplerParams &p) : p_(p) {
    std::sort(p_.dry_breakers.begin(), p_.dry_breakers.end());  // looked up by dry()
    seed_ = p.seed == 0xFFFFFFFFu ? std::random_device{}() : p.seed;
    reset();
}

void Sampler::reset() {
    history_.clear();
    rng_.seed(seed_);
    mu_ = 2.0f * p_.mirostat_tau;
}

void Sampler::accept(int32_t token) {
    history_.push_back(token);
    auto window = [](int32_t n) { return n < 0 ? SIZE_MAX : (size_t)n; };
    const size_t keep = std::max(window(p_.penalty_last_n), p_.dry_multiplier != 0.0f ? window(p_.dry_penalty_last_n) : 0);
    while (history_.size() > keep) history_.pop_front();
}

void Sampler::apply_penalties() {
    if (history_.empty() || p_.penalty_last_n == 0) return;
    if (p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f) return;
    std::unordered_map<int32_t, int> counts;
    const size_t n = p_.penalty_last_n < 0 ? history_.size() : std::min(history_.size(), (size_t)p_.penalty_last_n);
    for (size_t i = history_.size() - n; i < history_.size(); ++i) counts[history_[i]]++;
    for (Candidate &c : cur_) {
        auto it = counts.find(c.id);
        if (it == counts.end()) continue;
        // a repeated token's logit moves toward "less likely" whatever its sign
        c.logit = c.logit <= 0 ? c.logit * p_.repeat_penalty : c.logit / p_.repeat_penalty;
        c.logit -= it->second * p_.frequency_penalty + p_.presence_penalty;
    }
}

void Sampler::softmax() {
    std::sort(cur_.begin(), cur_.end(), [](const Candidate &a, const Candidate &b) { return a.logit > b.logit; });
    const float mx = cur_.front().logit;
    double sum = 0;
    for (Candidate &c : cur_) sum += c.p = std::exp(c.logit - mx);
    for (Candidate &c : cur_) c.p = (float)(c.p / sum);
}

void Sampler::top_k(int32_t k) {
    if (k <= 0 || (size_t)k >= cur_.size()) return;
    std::partial_sort(cur_.begin(), cur_.begin() + k, cur_.end(),
                      [](const Candidate &a, const Candidate &b) { return a.logit > b.logit; });
    cur_.resize(k);
}

void Sampler::top_p(float p) {
    if (p >= 1.0f) return;
    softmax();
    double cum = 0;
    size_t keep = cur_.size();
    for (size_t i = 0; i < cur_.size(); ++i) {
        cum += cur_[i].p;
        if (cum >= p && i + 1 >= keep_at_least()) {
            keep = i + 1;
            break;
        }
    }
    cur_.resize(keep);
}

void Sampler::min_p(float p) {
    if (p <= 0.0f || cur_.size() <= keep_at_least()) return;
    float mx = -INFINITY;
    for (const Candidate &c : cur_) mx = std::max(mx, c.logit);
    const float threshold = mx + std::log(p);  // p_i >= p * p_max  <=>  logit_i >= max + log p
    std::vector<Candidate> kept;
    for (const Candidate &c : cur_)
        if (c.logit >= threshold) kept.push_back(c);
    if (kept.size() >= keep_at_least()) cur_ = std::move(kept);
}

// Locally typical sampling: the tokens whose surprise (-log p) is closest to
// the distribution's entropy, until they hold probability p.
void Sampler::typical(float p) {
    if (p >= 1.0f) return;
    softmax();
    double entropy = 0;
    for (const Candidate &c : cur_) entropy -= c.p > 0 ? c.p * std::log(c.p) : 0.0;
    std::vector<size_t> idx(cur_.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto distance = [&](size_t i) { return std::fabs(-std::log(cur_[i].p) - entropy); };
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return distance(a) < distance(b); });
    double cum = 0;
    size_t keep = idx.size();
    for (size_t i = 0; i < idx.size(); ++i) {
        cum += cur_[idx[i]].p;
        if (cum > p && i + 1 >= keep_at_least()) {
            keep = i + 1;
            break;
        }
    }
    std::vector<Candidate> kept;
    for (size_t i = 0; i < keep; ++i) kept.push_back(cur_[idx[i]]);
    cur_ = std::move(kept);
}

// Top-n-sigma: logits more than n standard deviations below the largest are out.
void Sampler::top_n_sigma(float n) {
    if (n <= 0.0f || cur_.size() <= 1) return;
    float mx = -INFINITY;
    double sum = 0;
    size_t finite = 0;
    for (const Candidate &c : cur_) {
        if (c.logit == -INFINITY) continue;
        mx = std::max(mx, c.logit);
        sum += c.logit;
        ++finite;
    }
    if (finite == 0) return;
    const double mean = sum / (double)finite;
    double sq = 0;
    for (const Candidate &c : cur_)
        if (c.logit != -INFINITY) sq += (c.logit - mean) * (c.logit - mean);
    const float floor = mx - n * (float)std::sqrt(sq / (double)finite);
    std::erase_if(cur_, [&](const Candidate &c) { return c.logit < floor; });
}

// XTC (exclude top choices): with probability xtc_probability, every token at
// least xtc_threshold likely except the least likely of them is removed.
void Sampler::xtc() {
    if (p_.xtc_probability <= 0.0f || p_.xtc_threshold > 0.5f || cur_.size() < 2) return;
    std::uniform_real_distribution<float> chance(0.0f, 1.0f);
    if (chance(rng_) > p_.xtc_probability) return;
    softmax();
    size_t last = 0;  // the least likely token above the threshold
    while (last + 1 < cur_.size() && cur_[last + 1].p >= p_.xtc_threshold) ++last;
    if (cur_[0].p < p_.xtc_threshold) last = 0;
    if (last > 0 && cur_.size() - last >= keep_at_least()) cur_.erase(cur_.begin(), cur_.begin() + (ptrdiff_t)last);
}

// DRY: for each earlier place where the text's latest tokens already
// occurred (up to a breaker token), the token that followed there would
// repeat them once more; it loses multiplier * base^(L - allowed) for the
// longest such repeat L >= allowed.
//
// Linear in the window (llama.cpp's DRY is too): read backwards, r[0] the
// latest token, the repeat that ends at window position i is the common
// prefix of r and r[n-1-i...] — the Z-function of r — cut at r's first
// breaker, since both copies hold the same tokens. (Comparing back from each
// position took 7 s per token for 4000 repeats of one token.)
void Sampler::dry() {
    if (p_.dry_multiplier == 0.0f || p_.dry_base < 1.0f || p_.dry_penalty_last_n == 0) return;
    const size_t n = p_.dry_penalty_last_n < 0 ? history_.size() : std::min(history_.size(), (size_t)p_.dry_penalty_last_n);
    if (n <= (size_t)std::max(p_.dry_allowed_length, 0)) return;
    std::vector<int32_t> &r = dry_reversed_;
    r.assign(history_.rbegin(), history_.rbegin() + (ptrdiff_t)n);
    size_t unbroken = 0;  // latest tokens before the first breaker
    while (unbroken < n && !std::binary_search(p_.dry_breakers.begin(), p_.dry_breakers.end(), r[unbroken])) ++unbroken;
    if (unbroken == 0) return;
    std::vector<size_t> &z = dry_z_;
    z.assign(n, 0);
    std::unordered_map<int32_t, size_t> longest;  // candidate token -> longest repeat it would extend
    for (size_t k = 1, left = 0, right = 0; k < n; ++k) {
        // [left, right): the match found so far that reaches furthest, r[left..right) == r[0..right-left)
        if (k < right) z[k] = std::min(right - k, z[k - left]);
        while (k + z[k] < n && r[z[k]] == r[k + z[k]]) ++z[k];
        if (k + z[k] > right) left = k, right = k + z[k];
        const size_t len = std::min(z[k], unbroken);
        if (len == 0) continue;
        size_t &best = longest[r[k - 1]];  // the token that followed that earlier occurrence
        best = std::max(best, len);
    }
    for (Candidate &c : cur_) {
        auto it = longest.find(c.id);
        if (it == longest.end() || it->second < (size_t)p_.dry_allowed_length) continue;
        c.logit -= p_.dry_multiplier * std::pow(p_.dry_base, (float)(it->second - (size_t)p_.dry_allowed_length));
    }
}

void Sampler::temperature() {
    if (p_.temp <= 0.0f) {
        // greedy: only the most likely token stays
        auto best = std::max_element(cur_.begin(), cur_.end(), [](const Candidate &a, const Candidate &b) { return a.logit < b.logit; });
        const Candidate chosen = *best;
        cur_ = {chosen};
        return;
    }
    for (Candidate &c : cur_) c.logit /= p_.temp;
}

int32_t Sampler::draw() {
    softmax();
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    const double r = uni(rng_);
    double cum = 0;
    for (const Candidate &c : cur_) {
        cum += c.p;
        if (r < cum) return c.id;
    }
    return cur_.back().id;
}

// Mirostat v1 (truncation to a k estimated from Zipf's exponent) and v2
// (truncation at surprise mu), with mu following the target surprise tau.
int32_t Sampler::mirostat(size_t n_vocab) {
    softmax();
    if (p_.mirostat == 1) {
        const size_t m = 100;
        double sum_ti_bi = 0, sum_ti_sq = 0;
        for (size_t i = 0; i + 1 < m && i + 1 < cur_.size(); ++i) {
            const double t = std::log((i + 2.0) / (i + 1.0));
            const double b = std::log((double)cur_[i].p / (double)cur_[i + 1].p);
            sum_ti_bi += t * b;
            sum_ti_sq += t * t;
        }
        const double s_hat = sum_ti_bi / sum_ti_sq;
        const double eps = s_hat - 1;
        double k = std::pow(eps * std::pow(2.0, mu_) / (1 - std::pow((double)n_vocab, -eps)), 1 / s_hat);
        // a large learning rate drives mu (and k) anywhere, NaN included: keep k a token count
        if (!(k < (double)n_vocab)) k = (double)n_vocab;
        top_k(std::max(1, (int)k));
    } else {
        size_t keep = 0;
        while (keep < cur_.size() && -std::log2(cur_[keep].p) <= mu_) ++keep;
        cur_.resize(std::max<size_t>(keep, 1));
    }
    const int32_t id = draw();
    float p = 0;
    for (const Candidate &c : cur_)
        if (c.id == id) p = c.p;
    mu_ -= p_.mirostat_eta * (-std::log2(p) - p_.mirostat_tau);
    return id;
}

int32_t Sampler::sample(std::span<const float> logits, const std::vector<uint8_t> *allowed) {
    cur_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        // a NaN in the weights (a corrupt file, a training run that diverged)
        // reaches every logit; sampled, it gives noise that looks like output
        if (!std::isfinite(logits[i])) {
            fail("the model's logits are not finite (token {}: {}): a non-finite weight (--check-tensors finds one) or an "
                 "overflowing activation; the output would be noise", i, logits[i]);
        }
        cur_[i] = {(int32_t)i, logits[i], 0.0f};
    }
    for (const auto &[id, bias] : p_.logit_bias) {
        if (id >= 0 && (size_t)id < cur_.size()) cur_[id].logit += bias;
    }
    if (allowed) std::erase_if(cur_, [&](const Candidate &c) { return !(*allowed)[(size_t)c.id]; });
    if (p_.mirostat == 1 || p_.mirostat == 2) {
        temperature();
        return cur_.size() == 1 ? cur_[0].id : mirostat(logits.size());
    }
    for (Stage st : p_.order) {
        switch (st) {
            case Stage::Penalties: apply_penalties(); break;
            case Stage::Dry: dry(); break;
            case Stage::TopNSigma: top_n_sigma(p_.top_n_sigma); break;
            case Stage::TopK: top_k(p_.top_k); break;
            case Stage::Typical: typical(p_.typical_p); break;
            case Stage::TopP: top_p(p_.top_p); break;
            case Stage::MinP: min_p(p_.min_p); break;
            case Stage::Xtc: xtc(); break;
            case Stage::Temperature: temperature(); break;
        }
    }
    if (cur_.size() == 1) {
        cur_[0].p = 1.0f;
        return cur_[0].id;
    }
    return draw();
}

}  // namespace toy::text
