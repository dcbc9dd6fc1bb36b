// Generation: token limits, end-of-generation tokens and stop strings, with
// the text released only when no stop string can still claim it. The logits
// are one-hot, so a greedy sampler picks the tokens of a known text.
#include "test_util.h"
#include "text/generation.h"

#include <gtest/gtest.h>

using namespace toy;

namespace {

text::SamplerParams greedy() {
    text::SamplerParams p;
    p.temp = 0.0f;
    return p;
}

struct Script {
    text::Vocab vocab = text::Vocab::load(*gguf::File::open(test::shared_path("models/stories260K.gguf")));
    text::Sampler sampler{greedy()};
    std::vector<float> logits = std::vector<float>((size_t)vocab.n_tokens(), 0.0f);

    // runs `gen` over the tokens of `text` then an end-of-text token; returns
    // the text shown (flush included) and the number of steps taken
    std::pair<std::string, int> play(text::Generation &gen, const std::string &text) {
        std::vector<int32_t> ids = vocab.tokenize(text, false, false);
        ids.push_back(vocab.eos());
        std::string shown;
        int steps = 0;
        for (int32_t id : ids) {
            std::fill(logits.begin(), logits.end(), 0.0f);
            logits[(size_t)id] = 1.0f;
            const text::Step st = gen.next(logits);
            ++steps;
            shown += st.text;
            if (st.done) break;
        }
        return {shown + gen.flush(), steps};
    }
};

}  // namespace

TEST(Generation, EndsAtTheEndOfTextToken) {
    Script s;
    text::Generation gen(&s.vocab, s.sampler, {});
    auto [shown, steps] = s.play(gen, "Once upon a time");
    EXPECT_EQ(shown, " Once upon a time");
    EXPECT_EQ(gen.reason(), text::StopReason::EndOfGeneration);
    EXPECT_EQ((int)gen.tokens().size(), steps - 1);  // the end-of-text token is not part of the output
}

TEST(Generation, StopsAtTheTokenLimit) {
    Script s;
    text::GenerationLimits limits;
    limits.max_tokens = 2;
    text::Generation gen(&s.vocab, s.sampler, limits);
    auto [shown, steps] = s.play(gen, "Once upon a time");
    EXPECT_EQ(steps, 2);
    EXPECT_EQ(gen.tokens().size(), 2u);
    EXPECT_EQ(gen.reason(), text::StopReason::Length);
    EXPECT_EQ(std::string(text::stop_reason_name(gen.reason())), "length");
}

TEST(Generation, StopStringsEndTheTextAndAreHeldBackUntilDecided) {
    Script s;
    text::Generation gen(&s.vocab, s.sampler, {.stop = {"a tim", "zzz"}});
    auto [shown, steps] = s.play(gen, "Once upon a time there was");
    EXPECT_EQ(shown, " Once upon ");
    EXPECT_EQ(gen.reason(), text::StopReason::StopString);
    EXPECT_EQ(std::string(text::stop_reason_name(gen.reason())), "stop");

    // a tail that starts like a stop string but turns out not to be one is shown in the end
    text::Generation near(&s.vocab, s.sampler, {.stop = {"time!"}});
    const std::string all = s.play(near, "Once upon a time").first;
    EXPECT_EQ(all, " Once upon a time");
    EXPECT_EQ(near.reason(), text::StopReason::EndOfGeneration);
}

TEST(Generation, HeldBackTextIsNotShownEarly) {
    Script s;
    text::Generation gen(&s.vocab, s.sampler, {.stop = {"upon a day"}});
    std::vector<int32_t> ids = s.vocab.tokenize("Once upon a", false, false);
    std::string shown;
    for (int32_t id : ids) {
        std::fill(s.logits.begin(), s.logits.end(), 0.0f);
        s.logits[(size_t)id] = 1.0f;
        shown += gen.next(s.logits).text;
    }
    EXPECT_EQ(shown, " Once ");  // "upon a" may still become the stop string
    EXPECT_EQ(gen.flush(), "upon a");
}
