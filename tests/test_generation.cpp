// Generation: token limits, end-of-generation tokens and stop strings, with
// the text released only when no stop string can still claim it. The logits
// are one-hot, so a greedy sampler picks the tokens of a known text.
#include "test_util.h"
#include "text/generation.h"

#include <gtest/gtest.h>

#include <random>

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

TEST(Generation, StopStringsAreFoundAsTheDefinitionSays) {
    // Generation reads the text once, for all stop strings together; here is
    // the definition, each stop string searched for in the text not yet shown
    // after every token, on random texts of a few pieces (so stop strings
    // recur, overlap and nest) with stop strings cut from them
    Script s;
    std::vector<int32_t> pieces = s.vocab.tokenize("a b ab ba aab abba bab ca c", false, false);
    std::sort(pieces.begin(), pieces.end());
    pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
    ASSERT_GE(pieces.size(), 5u);
    std::mt19937 rng(5);
    for (int trial = 0; trial < 500; ++trial) {
        std::vector<int32_t> ids(1 + rng() % 40);
        for (int32_t &id : ids) id = pieces[rng() % pieces.size()];
        std::vector<std::string> chunks;
        text::Detokenizer detok(s.vocab);
        std::string all;
        for (int32_t id : ids) all += chunks.emplace_back(detok.push(id));
        text::GenerationLimits limits;
        limits.show_stop = trial % 3 == 0;
        for (size_t k = 1 + rng() % 4; k > 0; --k) {
            const size_t at = rng() % all.size(), n = 1 + rng() % std::min<size_t>(all.size() - at, 9);
            limits.stop.push_back(rng() % 5 ? all.substr(at, n) : all.substr(at, n) + "c");
        }
        // the definition
        std::string want, pending;
        int want_steps = (int)ids.size();
        bool stopped = false;
        for (size_t t = 0; t < chunks.size(); ++t) {
            pending += chunks[t];
            size_t cut = std::string::npos, len = 0;
            for (const std::string &stop : limits.stop) {
                const size_t at = pending.find(stop);
                if (at < cut) cut = at, len = stop.size();
            }
            if (cut != std::string::npos) {
                want += pending.substr(0, limits.show_stop ? cut + len : cut);
                pending.clear();
                want_steps = (int)t + 1;
                stopped = true;
                break;
            }
            size_t hold = 0;  // the longest tail that is a proper beginning of a stop string
            for (const std::string &stop : limits.stop)
                for (size_t n = std::min(stop.size() - 1, pending.size()); n > hold; --n)
                    if (pending.compare(pending.size() - n, n, stop, 0, n) == 0) hold = n;
            want += pending.substr(0, pending.size() - hold);
            pending.erase(0, pending.size() - hold);
        }
        want += pending;
        // Generation
        text::Generation gen(&s.vocab, s.sampler, limits);
        std::string got;
        int steps = 0;
        for (int32_t id : ids) {
            std::fill(s.logits.begin(), s.logits.end(), 0.0f);
            s.logits[(size_t)id] = 1.0f;
            const text::Step st = gen.next(s.logits);
            got += st.text;
            ++steps;
            if (st.done) break;
        }
        got += gen.flush();
        ASSERT_EQ(got, want) << "trial " << trial << ", text '" << all << "', first stop '" << limits.stop[0] << "'";
        ASSERT_EQ(steps, want_steps) << "trial " << trial;
        ASSERT_EQ(gen.reason() == text::StopReason::StopString, stopped) << "trial " << trial;
    }
}

TEST(Generation, DryBreakersAreTheTokensThatHoldABreakerString) {
    // with_dry_breakers searches every piece for all breakers at once; here
    // each is searched for on its own, on a 50257-token vocabulary, with
    // breakers that overlap, nest and share prefixes, and bytes no piece has
    const text::Vocab vocab = text::Vocab::load(*gguf::File::open(test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf")));
    auto by_definition = [&](const std::vector<std::string> &breakers) {
        std::vector<int32_t> ids;
        for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
            const std::string piece = vocab.token_to_piece(id);
            for (const std::string &b : breakers)
                if (!b.empty() && piece.find(b) != std::string::npos) {
                    ids.push_back(id);
                    break;
                }
        }
        return ids;
    };
    std::mt19937 rng(11);
    std::vector<std::vector<std::string>> sets = {
        {"\n", ":", "\"", "*"},  // the default
        {"ing", "in", "tion", "ation", "nation"},
        {"abcab", "bca", "cabx", "zzz", "q"},
        {"", "\xff\xfe", "the quick brown fox jumps over the lazy dog"},
    };
    for (int k = 0; k < 6; ++k) {  // substrings of random pieces, short and long
        std::vector<std::string> set;
        for (int i = 0; i < 40; ++i) {
            const std::string piece = vocab.token_to_piece((int32_t)(rng() % (uint32_t)vocab.n_tokens()));
            if (piece.empty()) continue;
            const size_t at = rng() % piece.size(), len = 1 + rng() % std::min<size_t>(piece.size() - at, 2 + (size_t)k);
            set.push_back(piece.substr(at, len) + (i % 7 == 0 ? "#" : ""));
        }
        sets.push_back(set);
    }
    for (const auto &set : sets) {
        text::SamplerParams p;
        p.dry_multiplier = 1.0f;
        p.dry_sequence_breakers = set;
        const std::vector<int32_t> got = text::with_dry_breakers(p, vocab).dry_breakers, want = by_definition(set);
        EXPECT_EQ(got, want) << set.size() << " breakers, the first '" << set.front() << "'";
        EXPECT_FALSE(want.empty() && set.size() > 3);
    }
    text::SamplerParams off;  // DRY off: nothing to look for
    EXPECT_TRUE(text::with_dry_breakers(off, vocab).dry_breakers.empty());
}
