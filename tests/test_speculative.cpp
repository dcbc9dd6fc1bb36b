// Speculative decoding (runtime/speculative.h): whatever the drafter guesses,
// the output is the target's. At temperature 0 the token ids equal plain
// decoding's; with sampling, the distribution of the tokens at a position
// equals plain decoding's (a chi-square test between samples with different
// seeds); end of text, stop strings and -n inside an accepted draft end the
// output where plain decoding ends it; bad drafts and flags are one-line errors.
#include "runtime/speculative.h"
#include "test_util.h"
#include "text/vocab.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <map>

using namespace toy;
using toy::test::run_toy;

namespace {

const std::string kStories = test::shared_path("models/stories260K.gguf");

// Draft models made once for the suite: the target quantized (high but not
// full acceptance) and a random model with its vocabulary (low acceptance).
struct Models {
    test::TempDir dir;
    std::string q8 = dir.file("q8.gguf"), random = dir.file("random.gguf");
    Models() {
        for (const std::string &args :
             {"export -q -m " + kStories + " --type q8_0 -o " + q8,
              "init -q --arch llama --n-embd 32 --n-layer 2 --n-head 4 --n-ff 64 --n-ctx 512 --type f32 --vocab-from " +
                  kStories + " -o " + random}) {
            const test::CommandResult r = run_toy(args);
            if (r.code != 0) throw std::runtime_error("toy " + args + ": " + r.err);
        }
    }
};
const Models &models() {
    static Models m;
    return m;
}

SessionOptions session_options() {
    SessionOptions o;
    o.n_ctx = 512;
    o.n_threads = 2;
    return o;
}

text::SamplerParams greedy() {
    text::SamplerParams p;
    p.temp = 0.0f;
    return p;
}

// Plain temperature sampling (no truncation: every token may come, so a
// wrong distribution shows).
text::SamplerParams sampling(uint64_t seed, float temp) {
    text::SamplerParams p;
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

struct Output {
    std::vector<int32_t> ids;     // Generation::tokens()
    std::string text;             // shown, flush included
    text::StopReason reason = text::StopReason::None;
    std::vector<int32_t> cached;  // the tokens in the target's cache at the end
    int steps = 0;                // decided positions handed out (end-of-text steps included)
};

// One generation after `prompt` on a cleared session, plainly (spec null)
// or speculatively, as toy run drives it: no guesses past the token limit
// unless `cap` is off. With `prompt_logits` the cache already holds the
// prompt (and perhaps more, removed) and these are its last logits: many
// short generations from one prompt skip its evaluation.
Output generate(Session &s, Speculator *spec, const text::Vocab &vocab, const std::vector<int32_t> &prompt,
                const text::SamplerParams &sp, const text::GenerationLimits &limits, bool cap = true,
                const std::vector<float> *prompt_logits = nullptr) {
    text::Sampler sampler(sp);
    for (int32_t t : prompt) sampler.accept(t);
    std::vector<int32_t> cached = prompt;
    if (prompt_logits) {
        s.kv().remove(0, (int32_t)prompt.size());
    } else {
        s.reset();
        s.eval(prompt);
    }
    text::Generation gen(&vocab, sampler, limits);
    Output out;
    auto on_step = [&](const text::Step &st, std::span<const float>) {
        out.text += st.text;
        ++out.steps;
    };
    auto last = [&] { return std::span<const float>(s.last_logits(), (size_t)s.n_vocab()); };
    const std::span<const float> first = prompt_logits ? std::span<const float>(*prompt_logits) : last();
    text::Step st = gen.next(first);
    on_step(st, first);
    while (!st.done) {
        if (spec) {
            const int64_t left = limits.max_tokens - (int64_t)gen.tokens().size() - 1;
            st = spec->step(gen, cached, st.token, cap && limits.max_tokens >= 0 ? (int)left : INT_MAX, on_step);
        } else {
            s.eval(std::span<const int32_t>(&st.token, 1));
            cached.push_back(st.token);
            st = gen.next(last());
            on_step(st, last());
        }
    }
    out.text += gen.flush();
    out.ids = gen.tokens();
    out.reason = gen.reason();
    out.cached = cached;
    EXPECT_EQ(s.n_past(), (int64_t)cached.size());
    return out;
}

// Drafts from a script: what follows the context there, when the context is
// a prefix of it (otherwise nothing).
struct ScriptDrafter : Drafter {
    std::vector<int32_t> script;
    std::vector<int32_t> draft(int32_t, std::span<const int32_t> context, int n_max) override {
        if (context.size() >= script.size() || !std::equal(context.begin(), context.end(), script.begin())) return {};
        const size_t n = std::min(script.size() - context.size(), (size_t)n_max);
        return {script.begin() + (long)context.size(), script.begin() + (long)(context.size() + n)};
    }
    std::string name() const override { return "script"; }
};

struct Target {
    std::unique_ptr<Model> model = Model::load(kStories);
    text::Vocab vocab = text::Vocab::load(model->file());
    Session session{*model, session_options()};
    std::vector<std::vector<int32_t>> prompts;
    Target() {
        for (const char *p : {"Once upon a time", "Tom and Lily went to the park. Tom said", "The cat sat on the"})
            prompts.push_back(vocab.tokenize(p, true));
    }
};

DraftParams draft_params(int n_max, float p_min) {
    DraftParams p;
    p.n_max = n_max;
    p.p_min = p_min;
    return p;
}

}  // namespace

TEST(Speculative, GreedyOutputIsPlainDecodingsWithEveryDrafter) {
    Target t;
    std::vector<Output> plain;
    text::GenerationLimits limits;
    limits.max_tokens = 64;
    limits.ignore_eos = true;  // 64 tokens every time, across a story's end
    for (const auto &p : t.prompts) plain.push_back(generate(t.session, nullptr, t.vocab, p, greedy(), limits));

    std::unique_ptr<Model> q8 = Model::load(models().q8), random = Model::load(models().random);
    struct Case {
        const char *name;
        std::function<std::unique_ptr<Drafter>()> make;
        DraftParams params;
        double min_acceptance, max_acceptance;
        bool fewer_passes = false;  // long accepted drafts: far fewer target passes than tokens
    };
    const std::vector<Case> cases = {
        {"self, p-min 0", [&] { return std::make_unique<DraftModel>(*t.model, session_options(), 0.0f); },
         draft_params(16, 0.0f), 0.95, 1.0, true},
        {"self, p-min 0.8", [&] { return std::make_unique<DraftModel>(*t.model, session_options(), 0.8f); },
         draft_params(5, 0.8f), 0.95, 1.0},
        {"q8_0 copy", [&] { return std::make_unique<DraftModel>(*q8, session_options(), 0.0f); },
         draft_params(8, 0.0f), 0.3, 1.0},
        {"random model", [&] { return std::make_unique<DraftModel>(*random, session_options(), 0.0f); },
         draft_params(4, 0.0f), 0.0, 0.3},
        {"lookup 2", [] { return std::make_unique<PromptLookup>(2); }, draft_params(16, 0.8f), 0.0, 1.0},
        {"lookup 1", [] { return std::make_unique<PromptLookup>(1); }, draft_params(3, 0.8f), 0.0, 1.0},
    };
    for (const Case &c : cases) {
        Speculator spec(t.session, c.make(), c.params);
        for (size_t i = 0; i < t.prompts.size(); ++i) {
            const Output o = generate(t.session, &spec, t.vocab, t.prompts[i], greedy(), limits);
            EXPECT_EQ(o.ids, plain[i].ids) << c.name << ", prompt " << i;
            EXPECT_EQ(o.text, plain[i].text) << c.name << ", prompt " << i;
            EXPECT_EQ(o.cached, plain[i].cached) << c.name << ", prompt " << i;
            EXPECT_EQ(o.steps, plain[i].steps) << c.name << ", prompt " << i;
        }
        const SpeculativeStats &s = spec.stats();
        EXPECT_GT(s.drafted, 0) << c.name;
        EXPECT_GE(s.acceptance(), c.min_acceptance) << c.name << ": " << s.accepted << " of " << s.drafted;
        EXPECT_LE(s.acceptance(), c.max_acceptance) << c.name << ": " << s.accepted << " of " << s.drafted;
        EXPECT_EQ(s.decided, 3 * 63) << c.name;  // the first token of each comes from the prompt's pass
        if (c.fewer_passes) {
            EXPECT_LT(s.passes, 3 * 63 / 2) << c.name;  // far fewer passes than tokens
        }
    }
}

TEST(Speculative, CommandLineGivesPlainDecodingsIdsAndCounts) {
    const std::string base = "run -m " + kStories + " -p 'Once upon a time' -n 64 --temp 0 --ignore-eos --json -t 2";
    const test::CommandResult plain = run_toy(base);
    ASSERT_EQ(plain.code, 0) << plain.err;
    const auto want = nlohmann::json::parse(plain.out)["tokens"];
    ASSERT_EQ(want.size(), 64u);
    for (const std::string &flags : {"-md " + kStories, "--model-draft " + models().q8 + " --draft-max 4",
                                     std::string("--lookup-ngram 2 --draft 8 --draft-min 2")}) {
        const test::CommandResult r = run_toy(base + " " + flags);
        ASSERT_EQ(r.code, 0) << flags << ": " << r.err;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["tokens"], want) << flags;
        EXPECT_GE(j["speculative"]["drafted"].get<int>(), j["speculative"]["accepted"].get<int>()) << flags;
    }
    // the statistics line beside the timing line
    const test::CommandResult r = run_toy("run -m " + kStories + " -p 'Once upon a time' -n 32 --temp 0 -md " + kStories);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("draft model stories260K.gguf: drafted "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("accepted"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, run_toy("run -m " + kStories + " -p 'Once upon a time' -n 32 --temp 0").out);
}

// Sampling: the tokens at positions 1 and 2 (0 comes from the prompt's pass)
// over 800 seeds, plainly and with each drafter (other seeds: equal
// distributions, not equal draws), compared by a two-sample chi-square test.
// Temperature 1.3 instead of 1 must fail the same test: it has the power to
// see a wrong distribution (emitting a rejected guess would skew it further).
TEST(Speculative, SampledTokensHaveThePlainDistribution) {
    Target t;
    // repeated text, so that prompt lookup finds drafts the target takes
    const std::vector<int32_t> prompt =
        t.vocab.tokenize("Tom had a red ball. Tom had a red ball. Tom had a", true);
    text::GenerationLimits limits;
    limits.max_tokens = 3;
    limits.ignore_eos = true;
    constexpr int kRuns = 800;
    t.session.reset();
    t.session.eval(prompt);
    const std::vector<float> prompt_logits(t.session.last_logits(), t.session.last_logits() + t.session.n_vocab());
    using Counts = std::vector<std::map<int32_t, int>>;  // per position: token -> count
    auto sample = [&](Speculator *spec, uint64_t seed0, float temp) {
        Counts c(limits.max_tokens);
        for (int i = 0; i < kRuns; ++i) {
            const text::SamplerParams sp = sampling(seed0 + (uint64_t)i, temp);
            const Output o = generate(t.session, spec, t.vocab, prompt, sp, limits, true, &prompt_logits);
            for (size_t k = 0; k < o.ids.size(); ++k) ++c[k][o.ids[k]];
        }
        return c;
    };
    // Pearson's two-sample statistic over tokens seen 10 times or more (the
    // rest pooled), against the chi-square quantile at p = 1e-4
    // (Wilson-Hilferty): a deterministic check, as the seeds are fixed.
    auto same = [](const std::map<int32_t, int> &a, const std::map<int32_t, int> &b) {
        std::map<int32_t, std::pair<int, int>> both;
        for (auto [k, n] : a) both[k].first += n;
        for (auto [k, n] : b) both[k].second += n;
        std::vector<std::pair<int, int>> bins(1, {0, 0});
        for (auto [k, ab] : both) {
            if (ab.first + ab.second >= 10) bins.push_back(ab);
            else bins[0].first += ab.first, bins[0].second += ab.second;
        }
        double chi2 = 0;
        int df = -1;
        for (auto [x, y] : bins) {
            if (x + y == 0) continue;
            chi2 += (double)(x - y) * (x - y) / (x + y);
            ++df;
        }
        if (df < 1) return true;
        const double z = 3.719, h = 2.0 / (9.0 * df);
        const double limit = df * std::pow(1 - h + z * std::sqrt(h), 3);
        return chi2 < limit;
    };

    const Counts plain = sample(nullptr, 1000, 1.0f);
    std::unique_ptr<Model> q8 = Model::load(models().q8);
    Speculator self(t.session, std::make_unique<DraftModel>(*t.model, session_options(), 0.0f), draft_params(3, 0.0f));
    Speculator quant(t.session, std::make_unique<DraftModel>(*q8, session_options(), 0.3f), draft_params(3, 0.3f));
    Speculator lookup(t.session, std::make_unique<PromptLookup>(2), draft_params(3, 0.8f));
    for (Speculator *spec : {&self, &quant, &lookup}) {
        const Counts c = sample(spec, 5000, 1.0f);
        for (size_t k = 1; k < c.size(); ++k) EXPECT_TRUE(same(plain[k], c[k])) << spec->drafter().name() << ", position " << k;
        EXPECT_GT(spec->stats().accepted, 0) << spec->drafter().name();
    }
    const Counts hotter = sample(nullptr, 9000, 1.3f);
    bool any_differs = false;
    for (size_t k = 1; k < hotter.size(); ++k) any_differs |= !same(plain[k], hotter[k]);
    EXPECT_TRUE(any_differs);
}

// End of text, a stop string and -n land inside a draft the target accepts
// whole (the target drafts for itself): the output ends where plain
// decoding's does, and nothing after is emitted or left in the cache.
TEST(Speculative, EndOfTextStopStringAndLimitInsideAnAcceptedDraft) {
    Target t;
    Speculator spec(t.session, std::make_unique<DraftModel>(*t.model, session_options(), 0.0f), draft_params(16, 0.0f));
    const std::vector<int32_t> &prompt = t.prompts[0];

    // The greedy stories never end, so a bias on the end-of-text token makes
    // one end after a few tokens; the drafter proposes that text, the end of
    // text and more tokens after it, all in one draft.
    text::SamplerParams biased = greedy();
    text::GenerationLimits to_eos;
    to_eos.max_tokens = 64;
    Output plain;
    for (float bias = 1; bias < 64 && plain.reason != text::StopReason::EndOfGeneration; bias *= 1.25f) {
        biased.logit_bias = {{t.vocab.eos(), bias}};
        plain = generate(t.session, nullptr, t.vocab, prompt, biased, to_eos);
    }
    ASSERT_EQ(plain.reason, text::StopReason::EndOfGeneration);
    ASSERT_GE(plain.ids.size(), 3u);
    auto script = std::make_unique<ScriptDrafter>();
    script->script = prompt;
    script->script.insert(script->script.end(), plain.ids.begin(), plain.ids.end());
    script->script.insert(script->script.end(), {t.vocab.eos(), plain.ids[0], plain.ids[1], plain.ids[2]});
    Speculator scripted(t.session, std::move(script), draft_params(64, 0.0f));
    const Output eos = generate(t.session, &scripted, t.vocab, prompt, biased, to_eos);
    EXPECT_EQ(eos.ids, plain.ids);
    EXPECT_EQ(eos.text, plain.text);
    EXPECT_EQ(eos.reason, text::StopReason::EndOfGeneration);
    EXPECT_EQ(eos.cached, plain.cached);
    EXPECT_EQ(eos.steps, plain.steps);
    EXPECT_EQ(scripted.stats().passes, 1);  // the whole text and its end decided in one pass
    // the guesses after the first token (an end of text is not counted: Step hides its id)
    EXPECT_EQ(scripted.stats().accepted, (int64_t)plain.ids.size() - 1);

    // a stop string ending in the middle of the output
    text::GenerationLimits n40;
    n40.max_tokens = 40;
    const Output story = generate(t.session, nullptr, t.vocab, prompt, greedy(), n40);
    text::GenerationLimits stop;
    stop.stop = {t.vocab.detokenize({story.ids[20], story.ids[21]})};
    const Output ps = generate(t.session, nullptr, t.vocab, prompt, greedy(), stop);
    const Output ss = generate(t.session, &spec, t.vocab, prompt, greedy(), stop);
    EXPECT_EQ(ps.reason, text::StopReason::StopString);
    EXPECT_EQ(ss.reason, text::StopReason::StopString);
    EXPECT_EQ(ss.ids, ps.ids);
    EXPECT_EQ(ss.text, ps.text);
    EXPECT_EQ(ss.cached, ps.cached);
    EXPECT_EQ(ss.steps, ps.steps);

    // -n 10 with drafts of 16 (the loop is not told the limit: Generation ends it)
    text::GenerationLimits n10;
    n10.max_tokens = 10;
    const Output pn = generate(t.session, nullptr, t.vocab, prompt, greedy(), n10);
    const Output sn = generate(t.session, &spec, t.vocab, prompt, greedy(), n10, /*cap=*/false);
    EXPECT_EQ(sn.ids, pn.ids);
    EXPECT_EQ(sn.ids.size(), 10u);
    EXPECT_EQ(sn.reason, text::StopReason::Length);
    EXPECT_EQ(sn.cached, pn.cached);
    EXPECT_EQ(sn.steps, 10);
    EXPECT_GE(spec.stats().accepted, 9);
}

TEST(Speculative, PromptLookupDraftsWhatFollowedTheLatestOccurrence) {
    PromptLookup two(2);
    const std::vector<int32_t> ctx = {5, 6, 7, 8, 9, 5, 6, 1, 2, 5, 6};
    EXPECT_EQ(two.draft(0, ctx, 2), (std::vector<int32_t>{1, 2}));  // what followed the latest earlier "5 6"
    // past the context's end the copy goes on with its own output: period 4
    EXPECT_EQ(two.draft(0, ctx, 7), (std::vector<int32_t>{1, 2, 5, 6, 1, 2, 5}));
    EXPECT_TRUE(two.draft(0, std::vector<int32_t>{1, 2, 3, 4}, 16).empty());  // no earlier "3 4"
    EXPECT_EQ(PromptLookup(1).draft(0, std::vector<int32_t>{7, 7, 7}, 4), (std::vector<int32_t>{7, 7, 7, 7}));  // a run
    EXPECT_NE(test::error_of([] { PromptLookup(0); }).find("--lookup-ngram"), std::string::npos);
}

TEST(Speculative, BadDraftsAndFlagsAreOneLineErrors) {
    const std::string run = "run -m " + kStories + " -p 'Once upon a time' -n 4 ";
    auto one_line_error = [](const test::CommandResult &r, const std::vector<std::string> &parts) {
        EXPECT_EQ(r.code, 1) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(r.err.rfind("toy: error: ", 0), 0u) << r.err;
        for (const std::string &p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << " in " << r.err;
    };
    // another vocabulary: another count, or the same count with other texts
    test::TempDir dir;
    const std::string other_count = dir.file("spm.gguf");
    ASSERT_EQ(run_toy("init -q --arch llama --n-embd 16 --n-layer 1 --n-head 2 --n-ff 32 --type f32 --vocab-from " +
                      test::shared_path("models/vocab/ggml-vocab-llama-spm.gguf") + " -o " + other_count)
                  .code, 0);
    one_line_error(run_toy(run + "-md " + other_count), {other_count, kStories, "32000 tokens", "512"});
    const std::string other = dir.file("other.gguf");
    ASSERT_EQ(run_toy("init -q --arch llama --n-embd 32 --n-layer 1 --n-head 4 --n-ff 64 --n-vocab 512 --type f32 -o " + other).code, 0);
    one_line_error(run_toy(run + "-md " + other), {other, kStories, "token "});

    one_line_error(run_toy(run + "-md " + kStories + " --draft-max 0"), {"--draft-max", "found 0"});
    one_line_error(run_toy(run + "-md " + kStories + " --draft-max -3"), {"--draft-max", "found -3"});
    one_line_error(run_toy(run + "-md " + kStories + " --draft-min 20"), {"--draft-min", "found 20"});
    one_line_error(run_toy(run + "-md " + kStories + " --draft-p-min 1.5"), {"--draft-p-min", "1.5"});
    one_line_error(run_toy(run + "--lookup-ngram -1"), {"--lookup-ngram", "-1"});
    one_line_error(run_toy(run + "--lookup-ngram 2 -md " + kStories), {"--model-draft and --lookup-ngram"});
    one_line_error(run_toy(run + "-md " + dir.file("missing.gguf")), {"missing.gguf"});
    // toy serve checks the same before it serves
    const std::string serve = "serve -m " + kStories + " --port 0 -t 2 ";
    one_line_error(run_toy(serve + "-md " + other), {other, kStories, "token "});
    one_line_error(run_toy(serve + "--lookup-ngram 2 -md " + kStories), {"--model-draft and --lookup-ngram"});
    one_line_error(run_toy(serve + "--lookup-ngram 3 --draft-min 99"), {"--draft-min", "found 99"});
}
