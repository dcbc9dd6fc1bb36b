#include "text/generation.h"

#include "core/error.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <unordered_map>

namespace toy::text {

const char *stop_reason_name(StopReason r) { return r == StopReason::Length ? "length" : "stop"; }

Generation::Generation(const Vocab *vocab, Sampler &sampler, GenerationLimits limits, bool special)
    : vocab_(vocab), sampler_(sampler), limits_(std::move(limits)) {
    if (vocab_) detok_ = std::make_unique<Detokenizer>(*vocab_, special);
    std::erase(limits_.stop, std::string());
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
        pending_ += detok_->push(token);
        // the earliest stop string in the text not yet shown ends it there
        size_t cut = std::string::npos, len = 0;
        for (const std::string &s : limits_.stop) {
            const size_t at = pending_.find(s);
            if (at < cut) cut = at, len = s.size();
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

namespace {

// Whether a text holds any of a set of strings, in one pass over the text
// (Aho-Corasick): a trie of the strings whose every node knows the longest
// proper suffix of its path that is also in the trie. Building it and each
// search are linear in the bytes involved, however many strings there are.
class AnyOf {
public:
    explicit AnyOf(const std::vector<std::string> &needles) {
        fail_.push_back(0), ends_.push_back(0), depth_.push_back(0), parent_.push_back(0), byte_.push_back(0);
        for (const std::string &s : needles) {
            if (s.empty()) continue;
            uint32_t at = 0;
            for (unsigned char c : s) {
                const auto next = (uint32_t)fail_.size();
                uint32_t &child = at == 0 ? root_[c] : edges_.try_emplace(key(at, c), next).first->second;
                if (at == 0 && child == 0) child = next;
                if (child == next) fail_.push_back(0), ends_.push_back(0), depth_.push_back(depth_[at] + 1), parent_.push_back(at), byte_.push_back(c);
                at = child;
            }
            ends_[at] = 1;
        }
        // suffix links, shallower nodes first (a counting sort by depth)
        std::vector<uint32_t> first(depth_.empty() ? 1 : *std::max_element(depth_.begin(), depth_.end()) + 2, 0);
        for (uint32_t d : depth_) ++first[d + 1];
        for (size_t d = 1; d < first.size(); ++d) first[d] += first[d - 1];
        std::vector<uint32_t> order(fail_.size());
        for (uint32_t v = 0; v < order.size(); ++v) order[first[depth_[v]]++] = v;
        for (uint32_t v : order) {
            if (depth_[v] < 2) continue;  // the root and its children fall back to the root
            fail_[v] = step(fail_[parent_[v]], byte_[v]);
            ends_[v] |= ends_[fail_[v]];
        }
    }

    bool found_in(std::string_view text) const {
        uint32_t at = 0;
        for (unsigned char c : text) {
            at = step(at, c);
            if (ends_[at]) return true;
        }
        return false;
    }

private:
    static uint64_t key(uint32_t node, unsigned char c) { return (uint64_t)node << 8 | c; }
    // the node after reading c at `at`: the longest suffix of the path + c in the trie
    uint32_t step(uint32_t at, unsigned char c) const {
        for (; at != 0; at = fail_[at]) {
            if (auto it = edges_.find(key(at, c)); it != edges_.end()) return it->second;
        }
        return root_[c];
    }

    std::array<uint32_t, 256> root_{};                  // the root's children (0: none), most steps start there
    std::unordered_map<uint64_t, uint32_t> edges_;       // (node, byte) -> child, below the root
    std::vector<uint32_t> fail_, depth_, parent_;       // per node
    std::vector<uint8_t> ends_, byte_;                  // a needle ends here (or at a suffix); the byte into it
};

}  // namespace

SamplerParams with_dry_breakers(SamplerParams p, const Vocab &vocab) {
    p.dry_breakers.clear();
    if (p.dry_multiplier == 0.0f || p.dry_sequence_breakers.empty()) return p;
    // one pass over the vocabulary: a request's breakers (a megabyte of them)
    // each searched for in every token took minutes of the server's engine
    const AnyOf breakers(p.dry_sequence_breakers);
    for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
        if (breakers.found_in(vocab.piece_view(id))) p.dry_breakers.push_back(id);
    }
    return p;
}

std::string Generation::release() {
    // hold back the longest tail of pending_ that is a proper prefix of a stop string
    size_t hold = 0;
    for (const std::string &s : limits_.stop) {
        for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
            if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
                hold = n;
                break;
            }
        }
    }
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
