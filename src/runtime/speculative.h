// Speculative decoding: a cheap drafter guesses the tokens that follow, the
// target model evaluates the last token and the guesses in one batch (one
// pass over its weights instead of one per token), and the target's own
// sampler decides position by position which guesses stand.
//
// Why the output is the target's own: row i of the batch holds the target's
// logits after the context, the pending token and guesses 1..i. Rows are
// handed to text::Generation::next in order, exactly as plain decoding would
// hand them one eval at a time, and only while every earlier guess equalled
// the token the sampler chose. So each emitted token is the sampler's draw
// from the target's logits given the text emitted before it; the sampler and
// the grammar see the same tokens in the same order (rejected guesses never
// reach them), and the sampler is called once per decided position as in
// plain decoding — it even consumes its random numbers in the same order.
// At temperature 0 the output is plain decoding's; with sampling, each token
// has the target's conditional distribution given the accepted prefix, so the
// whole output has the target's distribution whatever the drafter guesses.
// The drafter only changes how many positions one target pass decides.
// (Logits of a batch may differ from one-token evals in the last float bits:
// ggml sums in another order; that is the only difference.)
//
// Two drafters: another model with the same vocabulary (greedy, from its own
// KV cache kept in step with the accepted text: llama.cpp's draft model), and
// prompt lookup (the tokens that followed the latest earlier occurrence of
// the context's last n-gram; no second model).
#pragma once

#include "model/model.h"
#include "runtime/session.h"
#include "text/generation.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace toy {

struct DraftParams {
    int n_max = 16;      // tokens drafted per target pass at most (llama.cpp's --draft-max)
    int n_min = 0;       // a shorter draft is not used (--draft-min)
    float p_min = 0.8f;  // the draft model stops before a token it gives less probability (--draft-p-min)
};

// Throws toy::Error for values outside their ranges, naming the flag.
void check_draft_params(const DraftParams &p);

// Proposes tokens to follow `context`: every token so far (prompt and
// output), the last one sampled but not yet evaluated by the target. `seq`
// names the conversation (the serving scheduler drafts for several, one per
// sequence of its cache; a single conversation is sequence 0): a drafter that
// keeps state keeps it per sequence.
class Drafter {
public:
    virtual ~Drafter() = default;
    // At most n_max tokens; fewer (or none) when it has no confident guess.
    virtual std::vector<int32_t> draft(int32_t seq, std::span<const int32_t> context, int n_max) = 0;
    virtual std::string name() const = 0;  // for the statistics line
};

// A second model with the target's vocabulary drafting greedily (argmax).
// Its cache holds, per sequence, a prefix of that sequence's context: the
// part that still agrees is kept, the rest (rejected guesses, a shifted
// context, another request on the same slot) removed and the new tokens
// evaluated before drafting. Its session needs as many cells as the target
// gives the sequences it drafts for.
class DraftModel : public Drafter {
public:
    // opts: the target's session options (context size, threads, cache
    // types); adapters are the target's, never applied here.
    DraftModel(const Model &model, SessionOptions opts, float p_min);
    std::vector<int32_t> draft(int32_t seq, std::span<const int32_t> context, int n_max) override;
    std::string name() const override;
    Session &session() { return session_; }

private:
    // evaluates `tokens` on `seq` from position `pos` on, keeping the last one's logits
    void feed(int32_t seq, std::span<const int32_t> tokens, int32_t pos);

    const Model &model_;
    Session session_;
    float p_min_;
    std::vector<std::vector<int32_t>> cached_;  // per sequence: the tokens in session_'s cache, in order
};

// Prompt lookup decoding: the tokens that followed the most recent earlier
// occurrence of the context's last n tokens (continued periodically past the
// context's end: in "a b a b", the 1-gram "b" drafts "a b a ...").
class PromptLookup : public Drafter {
public:
    explicit PromptLookup(int ngram);  // throws toy::Error unless 1 <= ngram <= 64
    std::vector<int32_t> draft(int32_t seq, std::span<const int32_t> context, int n_max) override;
    std::string name() const override;

private:
    int ngram_;
};

// Throws toy::Error (naming both files and the first differing token id)
// unless the draft model's logits and token texts are the target's.
void check_same_vocab(const Model &target, const Model &draft);

struct SpeculativeStats {
    int64_t drafted = 0;   // tokens proposed and evaluated by the target
    int64_t accepted = 0;  // of those, the target's own choice at their position
    int64_t passes = 0;    // target evaluations (drafts or not)
    int64_t decided = 0;   // tokens those passes decided (steps handed out)
    double acceptance() const { return drafted ? (double)accepted / (double)drafted : 0.0; }
};

// Called for every decided position, in order, with the target's logits there.
using OnStep = std::function<void(const text::Step &, std::span<const float> logits)>;

// The two halves of a speculative pass, for callers that batch the target's
// evaluation themselves (the serving scheduler puts every sequence's pending
// token and guesses into one batch).
//
// propose: the drafter's guesses to follow `context` (its last token
// pending), at most k; none when k or the draft is shorter than p.n_min.
std::vector<int32_t> propose(Drafter &drafter, const DraftParams &p, int32_t seq, std::span<const int32_t> context,
                             int k);

// verify: `rows` holds the target's logits after the pending token and after
// each guess (1 + guess.size() rows of n_vocab). Hands them to gen.next in
// order while the guesses agree with its choices, calling on_step for each
// decided position. `kept`: the batch positions that stand (the pending token
// and the accepted guesses); the caller removes the rest from its cache.
// gen.next's errors propagate.
struct Verdict {
    text::Step last;  // done, or holding the next pending token
    size_t kept = 1;
};
Verdict verify(text::Generation &gen, const float *rows, size_t n_vocab, std::span<const int32_t> guess,
               SpeculativeStats &stats, const OnStep &on_step);

class Speculator {
public:
    Speculator(Session &target, std::unique_ptr<Drafter> drafter, DraftParams p);

    // `tokens`: the tokens in the target's cache (sequence 0, positions 0..);
    // `pending`: the token `gen` chose last, not yet evaluated. Drafts at
    // most n_max tokens (and no more than fit the context: one free cell is
    // needed for `pending`), evaluates pending + draft in one batch and hands
    // rows to gen.next until a guess differs from the target's choice or gen
    // is done. Afterwards the cache and `tokens` hold pending and the
    // accepted guesses (the rejected ones removed). Returns the last step:
    // done, or holding the next pending token.
    text::Step step(text::Generation &gen, std::vector<int32_t> &tokens, int32_t pending, int n_max,
                    const OnStep &on_step);

    const SpeculativeStats &stats() const { return stats_; }
    const Drafter &drafter() const { return *drafter_; }

private:
    Session &target_;
    std::unique_ptr<Drafter> drafter_;
    DraftParams p_;
    SpeculativeStats stats_;
    std::vector<int32_t> context_;
};

}  // namespace toy
