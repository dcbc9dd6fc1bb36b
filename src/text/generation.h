// Generation: what happens to one sequence's output token by token — sample
// from the logits, end on an end-of-generation token, a token limit or a stop
// string, and turn tokens into text that is safe to show: whole UTF-8
// characters, with any tail that could still become a stop string held back
// until it cannot. It does not evaluate anything: `toy run` and `toy chat`
// drive one with a Session, the server one per sequence of a shared batch.
#pragma once

#include "text/grammar.h"
#include "text/sampler.h"
#include "text/string_set.h"
#include "text/vocab.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace toy::text {

enum class StopReason { None, EndOfGeneration, Length, StopString };
const char *stop_reason_name(StopReason r);  // "stop" for end of generation and stop strings, "length"

struct GenerationLimits {
    int64_t max_tokens = -1;          // < 0: no limit
    bool ignore_eos = false;          // end-of-generation tokens are generated like any other
    std::vector<std::string> stop;    // text that ends generation; it is not part of the output
    bool show_stop = false;           // ... unless this is set (llama.cpp's reverse prompts are shown)
    // The output must be a sentence of this grammar (needs a vocabulary):
    // only tokens it allows are sampled, and generation ends when nothing more may follow.
    std::shared_ptr<const Grammar> grammar = nullptr;
    // `stop` prepared for the search (made from it when null): the server's
    // request parser builds it on the connection's thread, not the engine's
    std::shared_ptr<const StringSet> stop_set = nullptr;
};

// A generated token's log-probability under the model (log-softmax of its
// logits, before sampling's transformations) and the n_top most likely tokens there.
struct TokenLogprob {
    int32_t id = -1;
    float logprob = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // most likely first
};
TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int n_top);

// The parameters with DRY's breaker tokens found: every token whose text
// holds one of the sequence-breaker strings (nothing to do when DRY is off).
SamplerParams with_dry_breakers(SamplerParams p, const Vocab &vocab);

struct Step {
    int32_t token = -1;  // the token chosen, -1 when none (end of generation, or the limit was already reached)
    std::string text;    // text that became safe to show with it (may be empty)
    bool done = false;   // nothing follows; `token`, if any, need not be evaluated
};

class Generation {
public:
    // vocab null: ids only (no text, no end-of-generation check, no stop strings).
    Generation(const Vocab *vocab, Sampler &sampler, GenerationLimits limits, bool special = false);

    // Picks the next token from the logits of the last one evaluated.
    Step next(std::span<const float> logits);
    // At the end: text still held back (an incomplete character; a tail that
    // could have begun a stop string). Empty after a stop string.
    std::string flush();

    const std::vector<int32_t> &tokens() const { return tokens_; }
    const GenerationLimits &limits() const { return limits_; }
    StopReason reason() const { return reason_; }

private:
    // Text of `pending_` that no stop string can still claim, removed from it.
    std::string release();
    // A token the grammar allows: the sampler's own choice when the grammar
    // allows it (one cheap check; with plain temperature sampling this is
    // rejection sampling, the same distribution as masking first), else a
    // second draw among the allowed tokens only. llama.cpp does the same.
    int32_t sample_constrained(std::span<const float> logits);

    const Vocab *vocab_;
    Sampler &sampler_;
    GenerationLimits limits_;
    std::unique_ptr<Detokenizer> detok_;
    std::string pending_;
    std::shared_ptr<const StringSet> stops_;  // limits_.stop, searched for in the text as it comes
    StringSet::State stop_state_ = StringSet::kStart;
    std::vector<int32_t> tokens_;
    StopReason reason_ = StopReason::None;
    std::unique_ptr<GrammarState> grammar_;
    std::vector<uint8_t> allowed_;
};

}  // namespace toy::text
