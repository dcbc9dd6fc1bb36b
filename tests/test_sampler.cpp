// Sampling: each stage keeps exactly what it should, draws are reproducible
// for a seed, and frequencies follow the distribution.
#include "text/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
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
