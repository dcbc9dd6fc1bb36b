#include "runtime/speculative.h"

#include "core/error.h"
#include "core/escape.h"
#include "text/vocab.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>

namespace toy {

void check_draft_params(const DraftParams &p) {
    if (p.n_max < 1) fail("--draft-max: expected a token count >= 1, found {}", p.n_max);
    if (p.n_min < 0 || p.n_min > p.n_max) {
        fail("--draft-min: expected a token count from 0 to --draft-max ({}), found {}", p.n_max, p.n_min);
    }
    if (!(p.p_min >= 0.0f && p.p_min <= 1.0f)) fail("--draft-p-min: expected a probability from 0 to 1, found {}", p.p_min);
}

// ---- draft model ----

DraftModel::DraftModel(const Model &model, SessionOptions opts, float p_min)
    : model_(model), session_(model, [&] {
          opts.adapters = nullptr;  // LoRA adapters were checked against the target, not this model
          opts.trace = nullptr;
          opts.eval_callback = nullptr;
          return opts;
      }()),
      p_min_(p_min) {}

std::string DraftModel::name() const { return "draft model " + std::filesystem::path(model_.path()).filename().string(); }

void DraftModel::feed(int32_t seq, std::span<const int32_t> tokens, int32_t pos) {
    Batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], pos + (int32_t)i, seq, i + 1 == tokens.size());
    session_.decode(b);
}

std::vector<int32_t> DraftModel::draft(int32_t seq, std::span<const int32_t> context, int n_max) {
    std::vector<int32_t> out;
    if (seq < 0 || seq >= KvCache::kMaxSeqs) fail("draft model: sequence {} is out of range 0..{}", seq, KvCache::kMaxSeqs - 1);
    // the context and n_max - 1 drafted tokens are evaluated (the last guess needs no logits)
    int64_t limit = session_.n_ctx();
    if (model_.config().pos == PosKind::Learned) limit = std::min<int64_t>(limit, model_.config().n_ctx_train);
    const int64_t room = limit - (int64_t)context.size() + 1;
    n_max = (int)std::min<int64_t>(n_max, room);
    if (context.empty() || n_max <= 0) return out;

    // keep what still agrees with the context; the last token is evaluated again if
    // need be, since drafting starts from its logits
    if ((size_t)seq >= cached_.size()) cached_.resize((size_t)seq + 1);
    std::vector<int32_t> &cached = cached_[(size_t)seq];
    size_t keep = (size_t)(std::mismatch(cached.begin(), cached.end(), context.begin(), context.end()).first -
                           cached.begin());
    keep = std::min(keep, context.size() - 1);
    if (keep < cached.size()) {
        session_.kv().remove(seq, (int32_t)keep);
        cached.resize(keep);
    }
    feed(seq, context.subspan(keep), (int32_t)keep);
    cached.insert(cached.end(), context.begin() + (long)keep, context.end());

    const size_t n_vocab = (size_t)session_.n_vocab();
    for (;;) {
        const float *logits = session_.last_logits();
        const size_t best = (size_t)(std::max_element(logits, logits + n_vocab) - logits);
        // its probability: 1 / sum(exp(l - l_best))
        double sum = 0;
        for (size_t i = 0; i < n_vocab; ++i) sum += std::exp((double)(logits[i] - logits[best]));
        if (1.0 / sum < (double)p_min_) break;  // a guess this unsure would likely be wasted (llama.cpp: before it)
        const int32_t token = (int32_t)best;
        out.push_back(token);
        if ((int)out.size() >= n_max) break;
        feed(seq, std::span<const int32_t>(&token, 1), (int32_t)cached.size());
        cached.push_back(token);
    }
    return out;
}

// ---- prompt lookup ----

PromptLookup::PromptLookup(int ngram) : ngram_(ngram) {
    if (ngram < 1 || ngram > 64) fail("--lookup-ngram: expected an n-gram size from 1 to 64, found {}", ngram);
}

std::string PromptLookup::name() const { return fmt::format("prompt lookup ({}-grams)", ngram_); }

std::vector<int32_t> PromptLookup::draft(int32_t, std::span<const int32_t> context, int n_max) {
    const size_t n = context.size(), g = (size_t)ngram_;
    if (n_max <= 0 || n < g + 1) return {};
    const auto tail = context.subspan(n - g);
    // latest first; an occurrence may overlap the tail (a repeated run of tokens)
    for (size_t j = n - g; j-- > 0;) {
        if (std::equal(tail.begin(), tail.end(), context.begin() + (long)j)) {
            // copy what followed it; past the context's end the copy reads its own
            // output (as LZ77 copies overlap), so a text repeating with period
            // n - (j + g) drafts n_max tokens, not just what is left of one period
            const size_t from = j + g;
            std::vector<int32_t> out;
            for (size_t i = 0; i < (size_t)n_max; ++i) out.push_back(from + i < n ? context[from + i] : out[from + i - n]);
            return out;
        }
    }
    return {};
}

// ---- vocabulary ----

void check_same_vocab(const Model &target, const Model &draft) {
    const std::string &tp = target.path(), &dp = draft.path();
    const int64_t nt = target.config().n_vocab, nd = draft.config().n_vocab;
    if (nt != nd) {
        fail("--model-draft {}: its vocabulary has {} tokens, the target {}'s has {}: the draft must share the "
             "target's vocabulary", dp, nd, tp, nt);
    }
    const text::Vocab vt = text::Vocab::load(target.file()), vd = text::Vocab::load(draft.file());
    if (vt.n_tokens() != vd.n_tokens()) {
        fail("--model-draft {}: its tokenizer has {} tokens, the target {}'s has {}: the draft must share the "
             "target's vocabulary", dp, vd.n_tokens(), tp, vt.n_tokens());
    }
    for (int32_t id = 0; id < vt.n_tokens(); ++id) {
        if (vt.token_text(id) != vd.token_text(id)) {
            fail("--model-draft {}: token {} is {} there but {} in the target {}: the draft must share the target's "
                 "vocabulary", dp, id, quote_escaped(vd.token_text(id)), quote_escaped(vt.token_text(id)), tp);
        }
    }
}

// ---- the loop ----

std::vector<int32_t> propose(Drafter &drafter, const DraftParams &p, int32_t seq, std::span<const int32_t> context,
                             int k) {
    if (k <= 0 || k < p.n_min) return {};
    std::vector<int32_t> guess = drafter.draft(seq, context, k);
    if ((int)guess.size() > k) guess.resize((size_t)k);
    if ((int)guess.size() < p.n_min) guess.clear();  // too short to be worth a wider batch
    return guess;
}

// Row i: the target's logits after pending and guesses 0..i-1. A row is read
// only while every earlier guess was the target's own choice, so the text
// before it is the text plain decoding would have produced.
Verdict verify(text::Generation &gen, const float *rows, size_t n_vocab, std::span<const int32_t> guess,
               SpeculativeStats &stats, const OnStep &on_step) {
    Verdict v;
    for (size_t i = 0;; ++i) {
        const std::span<const float> logits(rows + i * n_vocab, n_vocab);
        v.last = gen.next(logits);
        if (v.last.token >= 0) ++stats.decided;
        if (on_step) on_step(v.last, logits);
        const bool agreed = i < guess.size() && v.last.token == guess[i];
        if (agreed) ++stats.accepted;
        // done: whatever the draft holds after an end of text, a stop string or
        // the -n limit is never emitted
        if (v.last.done || !agreed) {
            v.kept = i + 1;  // pending and the guesses emitted
            return v;
        }
    }
}

Speculator::Speculator(Session &target, std::unique_ptr<Drafter> drafter, DraftParams p)
    : target_(target), drafter_(std::move(drafter)), p_(p) {
    check_draft_params(p_);
}

text::Step Speculator::step(text::Generation &gen, std::vector<int32_t> &tokens, int32_t pending, int n_max,
                            const OnStep &on_step) {
    const int64_t base = (int64_t)tokens.size();
    if (target_.n_past() != base) fail("speculative decoding: the cache holds {} tokens, expected {}", target_.n_past(), base);
    const int64_t room = target_.n_ctx() - base;  // pending takes one cell, the draft the rest
    if (room < 1) fail("context overflow: no room for the next token in a context of {} (raise -c)", target_.n_ctx());

    context_.assign(tokens.begin(), tokens.end());
    context_.push_back(pending);
    const std::vector<int32_t> guess =
        propose(*drafter_, p_, 0, context_, (int)std::min<int64_t>({(int64_t)p_.n_max, (int64_t)n_max, room - 1}));

    std::vector<int32_t> batch{pending};
    batch.insert(batch.end(), guess.begin(), guess.end());
    target_.eval(batch, /*all_logits=*/!guess.empty());
    tokens.insert(tokens.end(), batch.begin(), batch.end());
    ++stats_.passes;
    stats_.drafted += (int64_t)guess.size();

    const Verdict v = verify(gen, target_.logits().data(), (size_t)target_.n_vocab(), guess, stats_, on_step);
    // the rejected guesses leave the cache
    const int64_t keep = base + (int64_t)v.kept;
    if (keep < (int64_t)tokens.size()) {
        target_.kv().remove(0, (int32_t)keep);
        tokens.resize((size_t)keep);
    }
    return v.last;
}

}  // namespace toy
