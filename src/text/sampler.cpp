#include "text/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace toy::text {

Sampler::Sampler(const SamplerParams &p) : p_(p) {
    seed_ = p.seed == 0xFFFFFFFFu ? std::random_device{}() : p.seed;
    rng_.seed(seed_);
}

void Sampler::reset() {
    history_.clear();
    rng_.seed(seed_);
}

void Sampler::accept(int32_t token) {
    history_.push_back(token);
    const size_t keep = p_.penalty_last_n < 0 ? SIZE_MAX : (size_t)std::max(p_.penalty_last_n, 0);
    while (history_.size() > keep) history_.pop_front();
}

void Sampler::apply_penalties() {
    if (history_.empty() || p_.penalty_last_n == 0) return;
    if (p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f) return;
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : history_) counts[t]++;
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
        if (cum >= p) {
            keep = i + 1;
            break;
        }
    }
    cur_.resize(keep);
}

void Sampler::min_p(float p) {
    if (p <= 0.0f) return;
    float mx = -INFINITY;
    for (const Candidate &c : cur_) mx = std::max(mx, c.logit);
    const float threshold = mx + std::log(p);  // p_i >= p * p_max  <=>  logit_i >= max + log p
    std::erase_if(cur_, [&](const Candidate &c) { return c.logit < threshold; });
}

int32_t Sampler::sample(std::span<const float> logits) {
    cur_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) cur_[i] = {(int32_t)i, logits[i], 0.0f};
    for (const auto &[id, bias] : p_.logit_bias) {
        if (id >= 0 && (size_t)id < cur_.size()) cur_[id].logit += bias;
    }
    apply_penalties();
    if (p_.temp <= 0.0f) {
        auto best = std::max_element(cur_.begin(), cur_.end(),
                                     [](const Candidate &a, const Candidate &b) { return a.logit < b.logit; });
        const Candidate chosen = *best;
        cur_ = {chosen};
        cur_[0].p = 1.0f;
        return chosen.id;
    }
    top_k(p_.top_k);
    top_p(p_.top_p);
    min_p(p_.min_p);
    for (Candidate &c : cur_) c.logit /= p_.temp;
    softmax();
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    double r = uni(rng_), cum = 0;
    for (const Candidate &c : cur_) {
        cum += c.p;
        if (r < cum) return c.id;
    }
    return cur_.back().id;
}

}  // namespace toy::text
