// Parity with llama.cpp on ../shared/fixtures: logits of every fixture,
// batched and one token at a time, within the fixture README's tolerances,
// and greedy continuations where they are required to match.
#include "model/model.h"
#include "runtime/sequence.h"
#include "runtime/session.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace toy;
using toy::test::compare_rows;

namespace {

struct Fixture {
    std::string name;   // e.g. llama-256.q8_0.kvq8 (reference prefix)
    std::string dir;    // fixtures or models
};

void PrintTo(const Fixture &f, std::ostream *os) { *os << f.dir << "/" << f.name; }

std::vector<Fixture> all_fixtures() {
    std::vector<Fixture> out;
    std::error_code ec;  // no ../shared: no fixture cases (the test listing must not abort)
    for (const auto &e : std::filesystem::directory_iterator(test::shared_path("fixtures"), ec)) {
        if (e.path().extension() == ".json") out.push_back({e.path().stem().string(), "fixtures"});
    }
    std::sort(out.begin(), out.end(), [](auto &a, auto &b) { return a.name < b.name; });
    out.push_back({"stories260K", "models"});
    return out;
}

struct Reference {
    nlohmann::json meta;
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    size_t n_vocab = 0;
    bool strict = false;  // F32 weights, F32 cache, no flash attention
};

Reference load_reference(const Fixture &f) {
    Reference r;
    const std::string base = test::shared_path(f.dir + "/" + f.name);
    r.meta = test::read_json(base + ".json");
    r.tokens = r.meta["tokens"].get<std::vector<int32_t>>();
    r.logits = test::read_f32(test::shared_path(f.dir + "/" + r.meta["logits_file"].get<std::string>()));
    r.n_vocab = r.meta["n_vocab"].get<size_t>();
    const std::string model = r.meta["model"];
    const bool f32_weights = model.find(".f32.") != std::string::npos || f.name == "stories260K";
    r.strict = f32_weights && r.meta["kv_type"] == "f32" && !r.meta["flash_attn"].get<bool>();
    return r;
}

ggml_type cache_type(const std::string &s) {
    return s == "f16" ? GGML_TYPE_F16 : s == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_F32;
}

SessionOptions options_for(const Reference &r) {
    SessionOptions o;
    o.n_ctx = 256;
    o.n_threads = 2;
    o.type_k = o.type_v = cache_type(r.meta["kv_type"]);
    o.flash_attn = r.meta["flash_attn"].get<bool>() ? FlashAttn::On : FlashAttn::Off;
    return o;
}

void expect_within_tolerance(const Reference &r, const std::vector<float> &got, const std::string &what) {
    ASSERT_EQ(got.size(), r.logits.size()) << what;
    auto s = compare_rows(got, r.logits, r.n_vocab);
    if (r.strict) {
        EXPECT_LE(s.d_max, 1e-3) << what;
        EXPECT_EQ(s.argmax_equal, 1.0) << what;
    } else {
        EXPECT_LE(s.d_max, 2e-2) << what;
        EXPECT_GE(s.argmax_equal, 0.95) << what;
    }
    ::testing::Test::RecordProperty(what + "_d_max", std::to_string(s.d_max));
}

class Parity : public ::testing::TestWithParam<Fixture> {};

TEST_P(Parity, BatchedLogits) {
    Reference r = load_reference(GetParam());
    auto model = Model::load(test::shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()));
    Session s(*model, options_for(r));
    s.eval(r.tokens, /*all_logits=*/true);
    expect_within_tolerance(r, s.logits(), "batched");
}

TEST_P(Parity, StepwiseLogits) {
    Reference r = load_reference(GetParam());
    auto model = Model::load(test::shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()));
    Session s(*model, options_for(r));
    std::vector<float> got;
    for (int32_t t : r.tokens) {
        s.eval(std::span<const int32_t>(&t, 1));
        got.insert(got.end(), s.logits().begin(), s.logits().end());
    }
    expect_within_tolerance(r, got, "stepwise");
    // one graph serves every decode step below the first KV padding boundary
    EXPECT_EQ(s.graphs_built(), 1);
}

TEST_P(Parity, SmallUbatchesMatchOneBatch) {
    // prefill split into ubatches of 5 tokens must give the same logits
    Reference r = load_reference(GetParam());
    auto model = Model::load(test::shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()));
    SessionOptions o = options_for(r);
    o.n_ubatch = 5;
    Session s(*model, o);
    s.eval(r.tokens, true);
    expect_within_tolerance(r, s.logits(), "ubatch5");
}

TEST_P(Parity, SequenceModeWithoutCache) {
    // the training forward pass (no KV cache, causal mask over the batch)
    Reference r = load_reference(GetParam());
    if (r.meta["flash_attn"].get<bool>()) GTEST_SKIP() << "sequence mode runs plain attention";
    auto model = Model::load(test::shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()));
    expect_within_tolerance(r, eval_sequence(*model, r.tokens, 2), "sequence");
}

TEST_P(Parity, GreedyContinuation) {
    Reference r = load_reference(GetParam());
    if (!r.strict) GTEST_SKIP() << "greedy equality is not required for quantized weights/caches or flash attention";
    auto model = Model::load(test::shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()));
    Session s(*model, options_for(r));
    const size_t n_prompt = r.meta["greedy_prompt_len"].get<size_t>();
    const auto expected = r.meta["greedy"].get<std::vector<int32_t>>();
    std::vector<int32_t> prompt(r.tokens.begin(), r.tokens.begin() + n_prompt);
    s.eval(prompt);
    std::vector<int32_t> got;
    for (size_t i = 0; i < expected.size(); ++i) {
        int32_t next = test::argmax(s.last_logits(), s.n_vocab());
        got.push_back(next);
        s.eval(std::span<const int32_t>(&next, 1));
    }
    EXPECT_EQ(got, expected);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::ValuesIn(all_fixtures()), [](const auto &info) {
    std::string n = info.param.name;
    for (char &ch : n)
        if (!isalnum((unsigned char)ch)) ch = '_';
    return n;
});

}  // namespace
