// Sampling: each stage keeps exactly what it should, draws are reproducible
// for a seed, and frequencies follow the distribution.
#include "text/sampler.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

using toy::text::Sampler;
using toy::text::SamplerParams;

namespace {

std::vector<float> ramp(int n) {
    std::vector<float> l(n);
    for (int i = 0; i < n; ++i) l[i] = 0.1f * (float)((i * 37) % n);  // distinct, shuffled
    return l;
}

SamplerParams only(float temp) {
    SamplerParams p;
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

TEST(Sampler, GreedyIsArgmax) {
    auto l = ramp(100);
    Sampler s(only(0.0f));
    const int best = (int)(std::max_element(l.begin(), l.end()) - l.begin());
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l), best);
}

TEST(Sampler, NonFiniteLogitsAreAnErrorNotNoise) {
    for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
        auto l = ramp(100);
        l[42] = bad;
        for (const float temp : {0.0f, 0.8f}) {
            Sampler s(only(temp));
            try {
                s.sample(l);
                ADD_FAILURE() << "sampled from a logit of " << bad;
            } catch (const toy::Error &e) {
                EXPECT_NE(std::string(e.what()).find("the model's logits are not finite (token 42: "), std::string::npos) << e.what();
            }
        }
    }
    // a bias of -inf (a token banned, as llama.cpp spells it) is not the model's
    SamplerParams p = only(0.0f);
    auto l = ramp(100);
    const int best = (int)(std::max_element(l.begin(), l.end()) - l.begin());
    p.logit_bias.push_back({best, -INFINITY});
    Sampler s(p);
    EXPECT_NE(s.sample(l), best);
}

TEST(Sampler, TopKNeverLeavesTheTopK) {
    auto l = ramp(200);
    std::vector<int> order(200);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    const std::set<int> top5(order.begin(), order.begin() + 5);
    SamplerParams p = only(5.0f);  // hot: without top-k anything could come out
    p.top_k = 5;
    Sampler s(p);
    std::set<int> seen;
    for (int i = 0; i < 2000; ++i) {
        int t = s.sample(l);
        EXPECT_TRUE(top5.count(t)) << t;
        seen.insert(t);
    }
    EXPECT_EQ(seen, top5);  // and all five do come out
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
    // probabilities 0.5, 0.3, 0.15, 0.05 -> top_p 0.75 keeps the first two
    std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    SamplerParams p = only(1.0f);
    p.top_p = 0.75f;
    Sampler s(p);
    for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(l), 2);
    EXPECT_EQ(s.last_candidates().size(), 2u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
    std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.07f), std::log(0.03f)};
    SamplerParams p = only(1.0f);
    p.min_p = 0.1f;  // threshold 0.06: keeps 0.6, 0.3, 0.07
    Sampler s(p);
    for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(l), 3);
    EXPECT_EQ(s.last_candidates().size(), 3u);
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
    std::vector<float> l = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
    Sampler s(only(1.0f));
    std::map<int, int> n;
    const int N = 20000;
    for (int i = 0; i < N; ++i) n[s.sample(l)]++;
    EXPECT_NEAR(n[0] / (double)N, 0.7, 0.02);
    EXPECT_NEAR(n[1] / (double)N, 0.2, 0.02);
    EXPECT_NEAR(n[2] / (double)N, 0.1, 0.02);
}

TEST(Sampler, TemperatureSharpens) {
    std::vector<float> l = {1.0f, 0.0f};
    Sampler cold(only(0.25f)), hot(only(4.0f));
    int cold0 = 0, hot0 = 0;
    for (int i = 0; i < 5000; ++i) {
        cold0 += cold.sample(l) == 0;
        hot0 += hot.sample(l) == 0;
    }
    EXPECT_GT(cold0, 4800);  // p = 1/(1+e^-4) ~ 0.982
    EXPECT_LT(hot0, 3300);   // p = 1/(1+e^-0.25) ~ 0.562
}

TEST(Sampler, SeedReproducibility) {
    auto l = ramp(50);
    SamplerParams p;
    p.seed = 42;
    Sampler a(p), b(p);
    p.seed = 43;
    Sampler c(p);
    std::vector<int> ra, rb, rc;
    for (int i = 0; i < 200; ++i) {
        ra.push_back(a.sample(l));
        rb.push_back(b.sample(l));
        rc.push_back(c.sample(l));
    }
    EXPECT_EQ(ra, rb);
    EXPECT_NE(ra, rc);
}

TEST(Sampler, RepeatPenaltyDemotesRecentTokens) {
    std::vector<float> l = {2.0f, 1.9f, -1.0f};
    SamplerParams p = only(0.0f);
    p.repeat_penalty = 1.5f;
    Sampler s(p);
    EXPECT_EQ(s.sample(l), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(l), 1);  // 2.0 / 1.5 < 1.9
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.5f;
    Sampler q(p);
    q.accept(0);
    EXPECT_EQ(q.sample(l), 1);  // 2.0 - 0.5 < 1.9
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.06f;
    Sampler f(p);
    f.accept(0);
    EXPECT_EQ(f.sample(l), 0);  // 2.0 - 0.06 > 1.9
    f.accept(0);
    EXPECT_EQ(f.sample(l), 1);  // 2.0 - 0.12 < 1.9
}

TEST(Sampler, PenaltyWindowForgetsOldTokens) {
    std::vector<float> l = {2.0f, 1.9f};
    SamplerParams p = only(0.0f);
    p.repeat_penalty = 2.0f;
    p.penalty_last_n = 2;
    Sampler s(p);
    s.accept(0);
    s.accept(5);
    s.accept(6);  // token 0 has left the window
    EXPECT_EQ(s.sample(l), 0);
}

}  // namespace

namespace {

std::set<int> kept_after(const SamplerParams &p, const std::vector<float> &logits) {
    Sampler s(p);
    s.sample(logits);
    std::set<int> ids;
    for (const auto &c : s.last_candidates()) ids.insert(c.id);
    return ids;
}

std::vector<float> logs(std::initializer_list<float> probs) {
    std::vector<float> l;
    for (float p : probs) l.push_back(std::log(p));
    return l;
}

}  // namespace

TEST(Sampler, TypicalKeepsTheTokensNearestTheEntropy) {
    // p = 0.4, 0.3, 0.2, 0.1: entropy 1.2799 nats; |-log p - H| = 0.364, 0.076, 0.330, 1.023
    // -> order 1, 2, 0, 3; cumulative 0.3, 0.5, 0.9: typical_p 0.45 keeps {1, 2}
    SamplerParams p = only(1.0f);
    p.typical_p = 0.45f;
    EXPECT_EQ(kept_after(p, logs({0.4f, 0.3f, 0.2f, 0.1f})), (std::set<int>{1, 2}));
    p.typical_p = 0.85f;
    EXPECT_EQ(kept_after(p, logs({0.4f, 0.3f, 0.2f, 0.1f})), (std::set<int>{0, 1, 2}));
    p.typical_p = 0.45f;
    p.min_keep = 3;
    EXPECT_EQ(kept_after(p, logs({0.4f, 0.3f, 0.2f, 0.1f})), (std::set<int>{0, 1, 2}));
}

TEST(Sampler, TopNSigmaKeepsLogitsNearTheMax) {
    // logits 0, 1, 2, 3, 10: mean 3.2, std (population) 3.54 -> 1 sigma keeps >= 6.46: {4}; 3 sigma keeps >= -0.62: all
    const std::vector<float> l = {0, 1, 2, 3, 10};
    SamplerParams p = only(1.0f);
    p.top_n_sigma = 1.0f;
    EXPECT_EQ(kept_after(p, l), (std::set<int>{4}));
    p.top_n_sigma = 2.0f;  // >= 3.12 - ... = 10 - 7.08 = 2.92: {3, 4}
    EXPECT_EQ(kept_after(p, l), (std::set<int>{3, 4}));
    p.top_n_sigma = 3.0f;
    EXPECT_EQ(kept_after(p, l).size(), 5u);
}

TEST(Sampler, XtcCutsTheLikelyTokensButTheLeastOfThem) {
    // p = 0.5, 0.3, 0.15, 0.05 with threshold 0.1: 0, 1, 2 qualify; all but 2 go
    SamplerParams p = only(1.0f);
    p.xtc_probability = 1.0f;
    p.xtc_threshold = 0.1f;
    EXPECT_EQ(kept_after(p, logs({0.5f, 0.3f, 0.15f, 0.05f})), (std::set<int>{2, 3}));
    p.xtc_threshold = 0.6f;  // above 0.5: off
    EXPECT_EQ(kept_after(p, logs({0.5f, 0.3f, 0.15f, 0.05f})).size(), 4u);
    p.xtc_threshold = 0.4f;  // only one qualifies: nothing to cut
    EXPECT_EQ(kept_after(p, logs({0.5f, 0.3f, 0.15f, 0.05f})).size(), 4u);
    p.xtc_threshold = 0.1f;
    p.xtc_probability = 0.0f;
    EXPECT_EQ(kept_after(p, logs({0.5f, 0.3f, 0.15f, 0.05f})).size(), 4u);
}

TEST(Sampler, MirostatFollowsTheTargetSurprise) {
    // 1000 tokens with Zipf-like probabilities; the surprise of the draws
    // (under the truncated distribution they are drawn from, as mirostat
    // measures it) settles near tau, and v2 never keeps a token above mu
    std::vector<float> l(1000);
    for (int i = 0; i < 1000; ++i) l[i] = -1.1f * std::log((float)(i + 1));
    for (int version : {1, 2}) {
        SCOPED_TRACE(version);
        SamplerParams p = only(1.0f);
        p.mirostat = version;
        p.mirostat_tau = 3.0f;
        p.mirostat_eta = 0.1f;
        Sampler s(p);
        double surprise = 0;
        const int n = 4000;
        for (int i = 0; i < n; ++i) {
            const int t = s.sample(l);
            float pt = 0;
            for (const auto &c : s.last_candidates())
                if (c.id == t) pt = c.p;
            ASSERT_GT(pt, 0.0f);
            EXPECT_LT(s.last_candidates().size(), l.size());  // truncated
            if (i >= n / 2) surprise += -std::log2((double)pt);
        }
        EXPECT_NEAR(surprise / (n / 2), 3.0, 0.6);
    }
    SamplerParams p = only(1.0f);
    p.mirostat = 2;
    p.mirostat_tau = 2.0f;  // mu starts at 4 bits: tokens below 1/16 of the mass are out
    Sampler s(p);
    s.sample(l);
    for (const auto &c : s.last_candidates()) EXPECT_GE(c.p, 0.0f);
    double z = 0;
    for (float x : l) z += std::exp((double)x);
    for (const auto &c : s.last_candidates()) EXPECT_LE(-std::log2(std::exp((double)l[c.id]) / z), 4.0 + 1e-6);
}

TEST(Sampler, OrderIsConfigurableAndParsedAsLlamaCpp) {
    using toy::text::parse_stages;
    using toy::text::Stage;
    EXPECT_EQ(parse_stages("ekypmxt", "--samplers"), parse_stages("penalties;top_k;typ_p;top_p;min_p;xtc;temperature", "--samplers"));
    EXPECT_EQ(parse_stages("top-k;temp", "--samplers"), (std::vector<Stage>{Stage::TopK, Stage::Temperature}));
    EXPECT_EQ(toy::text::stage_names(SamplerParams{}.order), "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature");
    EXPECT_THROW(parse_stages("top_k;nope", "--samplers"), toy::Error);
    // min-p before or after a hot temperature keeps different sets
    const std::vector<float> l = logs({0.6f, 0.25f, 0.1f, 0.05f});
    SamplerParams p = only(3.0f);
    p.min_p = 0.2f;
    p.order = parse_stages("min_p;temperature", "--samplers");
    EXPECT_EQ(kept_after(p, l), (std::set<int>{0, 1}));
    p.order = parse_stages("temperature;min_p", "--samplers");
    EXPECT_EQ(kept_after(p, l), (std::set<int>{0, 1, 2, 3}));
}

TEST(Sampler, DryPenalizesTheTokenThatWouldRepeatASequence) {
    // history 1 2 3 4 1 2 3: token 4 would repeat "1 2 3 4" (a repeat of 3 so far)
    auto logits_after = [](SamplerParams p, std::vector<int32_t> history) {
        Sampler s(p);
        for (int32_t t : history) s.accept(t);
        s.sample(std::vector<float>(8, 0.0f));
        std::vector<float> by_id(8, 0.0f);
        for (const auto &c : s.last_candidates()) by_id[c.id] = c.logit;
        return by_id;
    };
    SamplerParams p = only(1.0f);
    p.dry_multiplier = 1.0f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 2;
    auto l = logits_after(p, {1, 2, 3, 4, 1, 2, 3});
    EXPECT_FLOAT_EQ(l[4], -1.75f);  // 1 x 1.75^(3 - 2)
    for (int t : {0, 1, 2, 3, 5, 6, 7}) EXPECT_EQ(l[t], 0.0f) << t;
    p.dry_allowed_length = 3;
    EXPECT_FLOAT_EQ(logits_after(p, {1, 2, 3, 4, 1, 2, 3})[4], -1.0f);
    p.dry_allowed_length = 4;  // a repeat of 3 is allowed
    EXPECT_EQ(logits_after(p, {1, 2, 3, 4, 1, 2, 3})[4], 0.0f);
    // a breaker token inside the repeat cuts it short: "3" alone is below the allowed length
    p.dry_allowed_length = 2;
    p.dry_breakers = {2};
    EXPECT_EQ(logits_after(p, {1, 2, 3, 4, 1, 2, 3})[4], 0.0f);
    // a window too short to see the first occurrence finds nothing
    p.dry_breakers.clear();
    p.dry_penalty_last_n = 4;
    EXPECT_EQ(logits_after(p, {1, 2, 3, 4, 1, 2, 3})[4], 0.0f);
    // off by default
    EXPECT_EQ(logits_after(only(1.0f), {1, 2, 3, 4, 1, 2, 3})[4], 0.0f);
}

TEST(Sampler, DryFindsTheLongestRepeatAsTheDefinitionSays) {
    // dry() is linear (a Z-function); this is its definition, compared back
    // from every position, on random histories of few tokens (many repeats)
    auto definition = [](const SamplerParams &p, const std::vector<int32_t> &h, size_t n_vocab) {
        std::vector<float> out(n_vocab, 0.0f);
        const size_t n = p.dry_penalty_last_n < 0 ? h.size() : std::min(h.size(), (size_t)p.dry_penalty_last_n);
        if (n <= (size_t)p.dry_allowed_length) return out;
        const size_t off = h.size() - n;
        auto breaks = [&](int32_t t) { return std::count(p.dry_breakers.begin(), p.dry_breakers.end(), t) > 0; };
        std::map<int32_t, size_t> longest;
        for (size_t i = 0; i + 1 < n; ++i) {
            size_t len = 0;
            while (len <= i && h[off + i - len] == h[off + n - 1 - len] && !breaks(h[off + i - len])) ++len;
            if (len > 0) longest[h[off + i + 1]] = std::max(longest[h[off + i + 1]], len);
        }
        for (auto [t, len] : longest)
            if (len >= (size_t)p.dry_allowed_length) out[(size_t)t] = -p.dry_multiplier * std::pow(p.dry_base, (float)(len - p.dry_allowed_length));
        return out;
    };
    std::mt19937 rng(7);
    for (int trial = 0; trial < 400; ++trial) {
        const size_t n_vocab = 2 + rng() % 4;
        SamplerParams p = only(1.0f);
        p.dry_multiplier = 0.5f;
        p.dry_base = 1.25f;
        p.dry_allowed_length = (int32_t)(rng() % 4);
        p.dry_penalty_last_n = rng() % 3 == 0 ? (int32_t)(rng() % 40) : -1;
        for (int32_t t = 0; t < (int32_t)n_vocab; ++t)
            if (rng() % 6 == 0) p.dry_breakers.push_back(t);
        std::vector<int32_t> h(1 + rng() % 60);
        for (int32_t &t : h) t = (int32_t)(rng() % (trial % 2 ? n_vocab : 2));  // every other one: two tokens only
        Sampler s(p);
        for (int32_t t : h) s.accept(t);
        s.sample(std::vector<float>(n_vocab, 0.0f));
        std::vector<float> got(n_vocab, 0.0f);
        for (const auto &c : s.last_candidates()) got[(size_t)c.id] = c.logit;
        const std::vector<float> want = definition(p, h, n_vocab);
        for (size_t t = 0; t < n_vocab; ++t) ASSERT_FLOAT_EQ(got[t], want[t]) << "trial " << trial << ", token " << t;
    }
}

TEST(Sampler, MirostatWithAWildLearningRateStaysInTheVocabulary) {
    // fuzz finding: --mirostat 1 --mirostat-lr 5.1 --mirostat-ent 5 drove mu
    // so far that k overflowed an int (undefined behaviour)
    std::vector<float> l(384);
    for (size_t i = 0; i < l.size(); ++i) l[i] = (float)((i * 37) % 11) - 5.0f;
    for (int version : {1, 2}) {
        SamplerParams p = only(1.0f);
        p.mirostat = version;
        p.mirostat_eta = 5.1f;
        p.mirostat_tau = 5.0f;
        p.seed = 3;
        Sampler s(p);
        for (int i = 0; i < 200; ++i) {
            const int t = s.sample(l);
            ASSERT_GE(t, 0);
            ASSERT_LT(t, (int)l.size());
        }
    }
}

TEST(Sampler, ValuesOutsideTheirRangesAreOneLineErrors) {
    using toy::text::check_params;
    using toy::text::ParamNames;
    // the defaults, and llama.cpp's ways of saying "off" or "greedy", pass
    SamplerParams ok;
    check_params(ok, ParamNames::flags);
    ok.temp = -1.0f;
    ok.top_k = -5;
    ok.top_p = 1.0f;
    ok.min_p = 0.0f;
    ok.top_n_sigma = -1.0f;
    ok.xtc_threshold = 0.9f;
    ok.dry_base = 0.5f;
    ok.penalty_last_n = -1;
    ok.presence_penalty = -2.0f;
    check_params(ok, ParamNames::fields);
    // --repeat-penalty 0 had divided the repeated tokens' logits by 0: the
    // prompt's tokens became certain and greedy decoding repeated BOS
    struct Bad {
        void (*set)(SamplerParams &);
        const char *flag_message, *field_message;
    };
    const Bad bad[] = {
        {[](SamplerParams &p) { p.repeat_penalty = 0.0f; }, "--repeat-penalty: expected a number > 0 (1: off), found 0",
         "'repeat_penalty' must be a number > 0 (1: off), found 0"},
        {[](SamplerParams &p) { p.repeat_penalty = -2.0f; }, "--repeat-penalty: expected a number > 0 (1: off), found -2", nullptr},
        {[](SamplerParams &p) { p.top_p = 1.5f; }, "--top-p: expected a number from 0 to 1 (1: off), found 1.5",
         "'top_p' must be a number from 0 to 1 (1: off), found 1.5"},
        {[](SamplerParams &p) { p.min_p = -0.1f; }, "--min-p: expected a number from 0 to 1 (0: off), found -0.1", nullptr},
        {[](SamplerParams &p) { p.typical_p = 2.0f; }, "--typical: expected a number from 0 to 1", "'typical_p' must be"},
        {[](SamplerParams &p) { p.xtc_probability = 3.0f; }, "--xtc-probability: expected a number from 0 to 1", nullptr},
        {[](SamplerParams &p) { p.xtc_threshold = -1.0f; }, "--xtc-threshold: expected a number from 0 to 1", nullptr},
        {[](SamplerParams &p) { p.penalty_last_n = -7; }, "--repeat-last-n: expected a whole number >= -1 (0: off, -1: all), found -7",
         "'repeat_last_n' must be a whole number >= -1"},
        {[](SamplerParams &p) { p.min_keep = -4; }, "--min-keep: expected a whole number >= 0, found -4", nullptr},
        {[](SamplerParams &p) { p.dry_multiplier = -5.0f; }, "--dry-multiplier: expected a number >= 0 (0: off), found -5", nullptr},
        {[](SamplerParams &p) { p.dry_base = 0.0f; }, "--dry-base: expected a number > 0 (below 1: off), found 0", nullptr},
        {[](SamplerParams &p) { p.dry_allowed_length = -3; }, "--dry-allowed-length: expected a whole number >= 0, found -3", nullptr},
        {[](SamplerParams &p) { p.dry_penalty_last_n = -9; }, "--dry-penalty-last-n: expected a whole number >= -1", nullptr},
        {[](SamplerParams &p) { p.mirostat = 3; }, "--mirostat: expected a whole number from 0 to 2 (0: off, 1: v1, 2: v2), found 3",
         "'mirostat' must be a whole number from 0 to 2"},
        {[](SamplerParams &p) { p.mirostat_tau = -3.0f; }, "--mirostat-ent: expected a number >= 0, found -3", "'mirostat_tau' must be"},
        {[](SamplerParams &p) { p.mirostat_eta = NAN; }, "--mirostat-lr: expected a number >= 0, found nan", "'mirostat_eta' must be"},
    };
    for (const Bad &b : bad) {
        SamplerParams p;
        b.set(p);
        for (ParamNames names : {ParamNames::flags, ParamNames::fields}) {
            const char *want = names == ParamNames::flags ? b.flag_message : b.field_message;
            try {
                check_params(p, names);
                ADD_FAILURE() << "no error for " << b.flag_message;
            } catch (const toy::Error &e) {
                const std::string what = e.what();
                if (want) {
                    EXPECT_EQ(what.rfind(want, 0), 0u) << what;
                }
                EXPECT_EQ(what.find('\n'), std::string::npos) << what;
            }
        }
    }
}
