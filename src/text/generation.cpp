#include "text/generation.h"

#include "core/error.h"
#include "text/string_set.h"

#include <algorithm>
#include <cmath>

namespace toy::text {

const char *stop_reason_name(StopReason r) { return r == StopReason::Length ? "length" : "stop"; }

Generation::Generation(const Vocab *vocab, Sampler &sampler, GenerationLimits limits, bool special)
    : vocab_(vocab), sampler_(sampler), limits_(std::move(limits)) {
    if (vocab_) detok_ = std::make_unique<Detokenizer>(*vocab_, special);
    std::erase(limits_.stop, std::string());
    if (!limits_.stop.empty()) stops_ = limits_.stop_set ? limits_.stop_set : std::make_shared<const StringSet>(limits_.stop);
    if (limits_.grammar) {
        if (!vocab_) fail("a grammar needs the model's vocabulary");
        grammar_ = std::make_unique<GrammarState>(limits_.grammar);
    }
}

int32_t Generation::sample_constrained(std::span<const float> logits) {
    // mirostat adapts to each draw: draw once, from the allowed tokens
    if (sampler_.params().mirostat == 0) {
        const int32_t token = sampler_.sample(logits);
        if (grammar_->allows(*vocab_, token) && !(limits_.ignore_eos && vocab_->is_eog(token))) return token;
    }
    grammar_->allowed_tokens(*vocab_, allowed_);
    if (limits_.ignore_eos) {
        for (int32_t id : vocab_->eog_ids())
            if (id >= 0 && (size_t)id < allowed_.size()) allowed_[(size_t)id] = 0;
    }
    if (std::find(allowed_.begin(), allowed_.end(), 1) == allowed_.end()) {
        fail("grammar: no token of the vocabulary can continue the output (after {} generated tokens)", tokens_.size());
    }
    return sampler_.sample(logits, &allowed_);
}

Step Generation::next(std::span<const float> logits) {
    Step st;
    if (reason_ != StopReason::None) {
        st.done = true;
        return st;
    }
    if (limits_.max_tokens >= 0 && (int64_t)tokens_.size() >= limits_.max_tokens) {
        reason_ = StopReason::Length;
        st.done = true;
        return st;
    }
    if (grammar_ && grammar_->finished()) {
        reason_ = StopReason::EndOfGeneration;  // the grammar allows nothing more
        st.done = true;
        return st;
    }
    const int32_t token = grammar_ ? sample_constrained(logits) : sampler_.sample(logits);
    sampler_.accept(token);
    if (grammar_) grammar_->accept(*vocab_, token);
    if (vocab_ && !limits_.ignore_eos && vocab_->is_eog(token)) {
        reason_ = StopReason::EndOfGeneration;
        st.done = true;
        return st;
    }
    st.token = token;
    tokens_.push_back(token);
    if (detok_) {
        const size_t read = pending_.size();
        pending_ += detok_->push(token);
        // the earliest stop string in the text not yet shown ends it there (the
        // first in the list of those that begin at the same place)
        size_t cut = std::string::npos, len = 0;
        int32_t first = -1;
        for (size_t i = read; stops_ && i < pending_.size(); ++i) {
            stop_state_ = stops_->next(stop_state_, (unsigned char)pending_[i]);
            stops_->for_each_ended(stop_state_, [&](int32_t index, size_t n) {
                const size_t at = i + 1 - n;
                if (at < cut || (at == cut && index < first)) cut = at, len = n, first = index;
            });
        }
        if (cut != std::string::npos) {
            st.text = pending_.substr(0, limits_.show_stop ? cut + len : cut);
            pending_.clear();
            reason_ = StopReason::StopString;
            st.done = true;
            return st;
        }
        st.text = release();
    }
    if (limits_.max_tokens >= 0 && (int64_t)tokens_.size() >= limits_.max_tokens) {
        reason_ = StopReason::Length;
        st.done = true;
    }
    return st;
}

TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int n_top) {
    float mx = -INFINITY;
    for (float x : logits) mx = std::max(mx, x);
    double sum = 0;
    for (float x : logits) sum += std::exp((double)(x - mx));
    const float lse = mx + (float)std::log(sum);
    TokenLogprob lp;
    lp.id = token;
    lp.logprob = logits[(size_t)token] - lse;
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int32_t)i;
    const size_t k = std::min<size_t>((size_t)std::max(n_top, 0), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + (long)k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[(size_t)a] > logits[(size_t)b]; });
    for (size_t i = 0; i < k; ++i) lp.top.emplace_back(ids[i], logits[(size_t)ids[i]] - lse);
    return lp;
}

SamplerParams with_dry_breakers(SamplerParams p, const Vocab &vocab) {
    p.dry_breakers.clear();
    if (p.dry_multiplier == 0.0f || p.dry_sequence_breakers.empty()) return p;
    // one pass over the vocabulary: a request's breakers (a megabyte of them)
    // each searched for in every token took minutes of the server's engine
    const StringSet breakers(p.dry_sequence_breakers);
    for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
        if (breakers.found_in(vocab.piece_view(id))) p.dry_breakers.push_back(id);
    }
    return p;
}

std::string Generation::release() {
    // hold back the longest tail of pending_ that begins a stop string (no
    // stop string ends in it, or generation would have ended)
    const size_t hold = stops_ ? std::min(stops_->depth(stop_state_), pending_.size()) : 0;
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
}

std::string Generation::flush() {
    if (reason_ == StopReason::StopString || !detok_) return "";
    std::string out = pending_ + detok_->flush();
    pending_.clear();
    return out;
}

}  // namespace toy::text
