// Parity with llama.cpp on ../shared/fixtures: logits of every fixture,
// batched and one token at a time, within the fixture README's tolerances,
// and greedy continuations where they are required to match.
#include "model/model.h"
#include "runtime/sequence.h"
#include "runtime/session.h"
#include "parity_fixtures.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace toy;
using toy::test::compare_rows;

namespace {

using namespace toy::test;

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

// Several sequences in one cache, their tokens interleaved in shared batches
// (continuous batching: a new sequence's prompt joins others mid-way; a
// finished sequence is removed and its cells reused): the fixture's own
// sequence still gives llama.cpp's logits, and the others the logits they
// give alone.
TEST_P(Parity, SequencesSharingBatchesGiveTheirLogitsAlone) {
    Reference r = load_reference(GetParam());
    auto model = Model::load(test::shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()));
    const std::vector<int32_t> &a = r.tokens;
    const size_t n = a.size();
    const std::vector<int32_t> b(a.rbegin(), a.rbegin() + (long)(n * 5 / 8)), c(a.begin() + (long)(n / 5), a.begin() + (long)(n * 4 / 5));
    const std::vector<const std::vector<int32_t> *> seqs{&a, &b, &c};
    // phases: [sequence, first token, end] spans decoded together
    struct Span {
        int seq;
        size_t from, to;
    };
    const size_t nb = b.size(), nc = c.size();
    const std::vector<std::vector<Span>> phases{{{0, 0, n * 2 / 5}, {1, 0, nb * 2 / 5}},
                                                {{0, n * 2 / 5, n * 3 / 5}, {1, nb * 2 / 5, nb}, {2, 0, nc / 2}},
                                                {{0, n * 3 / 5, n}, {2, nc / 2, nc}}};
    Session s(*model, options_for(r));
    std::vector<std::vector<float>> got(3);
    const int64_t V = s.n_vocab();
    for (size_t ph = 0; ph < phases.size(); ++ph) {
        if (ph == 2) s.kv().remove(1);  // b is done: its cells are free for the others
        Batch batch;
        std::vector<int> row_seq;
        for (const Span &sp : phases[ph]) {
            for (size_t i = sp.from; i < sp.to; ++i) {
                batch.add((*seqs[sp.seq])[i], (int32_t)i, sp.seq, true);
                row_seq.push_back(sp.seq);
            }
        }
        s.decode(batch);
        for (size_t row = 0; row < row_seq.size(); ++row) {
            got[row_seq[row]].insert(got[row_seq[row]].end(), s.logits().begin() + row * V, s.logits().begin() + (row + 1) * V);
        }
    }
    EXPECT_EQ(s.kv().n_used(), (int64_t)(n + nc));
    expect_within_tolerance(r, got[0], "sequence 0 of 3");
    for (int q : {1, 2}) {
        Session alone(*model, options_for(r));
        alone.eval(*seqs[q], true);
        const test::RowStats d = compare_rows(got[q], alone.logits(), r.n_vocab);
        EXPECT_LE(d.d_max, r.strict ? 1e-4 : 2e-2) << "sequence " << q;
    }
}

// A prompt prefix cached for one sequence, shared by another (KvCache::copy):
// the second sequence decodes only its own continuation and gets the logits
// of its whole prompt evaluated alone; removing the first keeps the shared
// cells for the second.
TEST_P(Parity, SharedPrefixGivesTheLogitsOfTheWholePrompt) {
    Reference r = load_reference(GetParam());
    auto model = Model::load(test::shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()));
    const size_t n = r.tokens.size(), prefix = n / 2;
    std::vector<int32_t> other(r.tokens.begin(), r.tokens.begin() + (long)prefix);
    for (size_t i = prefix; i < n; ++i) other.push_back(r.tokens[n - 1 - (i - prefix)]);  // a different continuation
    Session s(*model, options_for(r));
    s.eval(r.tokens);  // sequence 0: the whole fixture prompt
    s.kv().copy(0, 1, 0, (int32_t)prefix);
    s.kv().remove(0);
    EXPECT_EQ(s.kv().n_used(), (int64_t)prefix);
    Batch rest;
    for (size_t i = prefix; i < n; ++i) rest.add(other[i], (int32_t)i, 1, true);
    s.decode(rest);
    Session alone(*model, options_for(r));
    alone.eval(other, true);
    const std::vector<float> want(alone.logits().begin() + (long)(prefix * r.n_vocab), alone.logits().end());
    EXPECT_LE(compare_rows(s.logits(), want, r.n_vocab).d_max, r.strict ? 1e-4 : 2e-2);
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

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::ValuesIn(all_fixtures()), fixture_test_name);

}  // namespace
