// The serving scheduler: requests decoded together (continuous batching, a
// prompt joining while others generate) give the tokens each gives alone at
// temperature 0; the next request on a slot reuses the cached prefix; too
// long prompts, a full queue and a reader that leaves are handled.
#include "serve/scheduler.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <functional>

using namespace toy;

namespace {

struct Served {
    std::unique_ptr<Model> model = Model::load(test::shared_path("models/stories260K.gguf"));
    text::Vocab vocab = text::Vocab::load(model->file());

    SessionOptions session(int64_t n_ctx) const {
        SessionOptions o;
        o.n_ctx = n_ctx;
        o.n_threads = 2;
        return o;
    }
    serve::Request request(const std::string &prompt, int64_t max_tokens) const {
        serve::Request r;
        r.prompt = vocab.tokenize(prompt, true, false);
        r.sampling.temp = 0.0f;
        r.limits.max_tokens = max_tokens;
        return r;
    }
    // the same request on a session of its own
    std::vector<int32_t> alone(const serve::Request &r) const {
        Session s(*model, session(256));
        text::Sampler sampler(r.sampling);
        for (int32_t t : r.prompt) sampler.accept(t);
        text::Generation gen(&vocab, sampler, r.limits);
        s.eval(r.prompt);
        for (;;) {
            const text::Step st = gen.next({s.last_logits(), (size_t)s.n_vocab()});
            if (st.done) break;
            s.eval(std::span<const int32_t>(&st.token, 1));
        }
        return gen.tokens();
    }
};

struct Reply {
    std::string text;
    serve::Event last;
};

Reply read_all(serve::Stream &s) {
    Reply r;
    serve::Event ev;
    while (s.next(ev)) {
        r.text += ev.text;
        if (ev.done) r.last = ev;
    }
    return r;
}

// Submits every request at once and checks each reply against the same
// request served alone: text, token counts and finish reason.
void expect_each_as_alone(const Served &sv, serve::Scheduler &sched, const std::vector<serve::Request> &reqs) {
    std::vector<std::shared_ptr<serve::Stream>> streams;
    for (const auto &r : reqs) streams.push_back(sched.submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
        SCOPED_TRACE(i);
        ASSERT_NE(streams[i], nullptr);
        const Reply got = read_all(*streams[i]);
        const std::vector<int32_t> want = sv.alone(reqs[i]);
        std::string want_text;
        for (int32_t t : want) want_text += sv.vocab.token_to_piece(t);
        EXPECT_EQ(got.text, want_text);
        EXPECT_EQ(got.last.completion_tokens, (int64_t)want.size());
        EXPECT_EQ(got.last.prompt_tokens, (int64_t)reqs[i].prompt.size());
        EXPECT_TRUE(got.last.finish_reason == "length" || got.last.finish_reason == "stop") << got.last.finish_reason;
    }
}

}  // namespace

TEST(Scheduler, RequestsServedTogetherGiveWhatEachGivesAlone) {
    Served sv;
    serve::Scheduler sched(*sv.model, sv.vocab, sv.session(1024), {.n_slots = 4, .max_queue = 8, .n_batch = 64});
    const std::vector<serve::Request> reqs{sv.request("Once upon a time", 40), sv.request("Lily and Tom went to the park", 30),
                                           sv.request("One day, a little dog", 50), sv.request("The sun", 20),
                                           sv.request("Once upon a time, there was a big", 25)};
    expect_each_as_alone(sv, sched, reqs);  // five requests, four slots: one waits
    EXPECT_EQ(sched.stats().requests, 5);
}

TEST(Scheduler, TheNextRequestOnASlotReusesTheCachedPrefix) {
    Served sv;
    serve::Scheduler sched(*sv.model, sv.vocab, sv.session(256), {.n_slots = 1});
    const serve::Request first = sv.request("Once upon a time, there was a little girl", 8);
    read_all(*sched.submit(first));
    const serve::Request second = sv.request("Once upon a time, there was a little boy", 12);
    const Reply got = read_all(*sched.submit(second));
    size_t common = 0;
    while (first.prompt[common] == second.prompt[common]) ++common;
    EXPECT_EQ(got.last.cached_tokens, (int64_t)common);
    EXPECT_GT(common, 8u);
    std::string want;
    for (int32_t t : sv.alone(second)) want += sv.vocab.token_to_piece(t);
    EXPECT_EQ(got.text, want);
}

TEST(Scheduler, APromptPrefixHeldByAnotherSlotIsShared) {
    Served sv;
    serve::Scheduler sched(*sv.model, sv.vocab, sv.session(512), {.n_slots = 2});
    const serve::Request a = sv.request("Once upon a time, there was a little girl named Lily", 6);
    read_all(*sched.submit(a));  // slot 0 now holds a's prompt
    // while slot 0 serves a long request, the same prompt again goes to slot 1
    auto busy = sched.submit(sv.request("One day", 200));
    const Reply again = read_all(*sched.submit(a));
    EXPECT_EQ(again.last.cached_tokens, (int64_t)a.prompt.size() - 1);
    std::string want;
    for (int32_t t : sv.alone(a)) want += sv.vocab.token_to_piece(t);
    EXPECT_EQ(again.text, want);
    busy->cancel();
    read_all(*busy);
}

TEST(Scheduler, AnEarlierPromptComesBackFromASpareSequence) {
    Served sv;
    serve::Scheduler sched(*sv.model, sv.vocab, sv.session(256), {.n_slots = 1});
    const serve::Request a = sv.request("Once upon a time, there was a little girl named Lily", 6);
    const serve::Request b = sv.request("One day, a big dog ran to the park", 6);
    read_all(*sched.submit(a));
    read_all(*sched.submit(b));  // the only slot now holds b; a's cells were kept as a spare
    const Reply again = read_all(*sched.submit(a));
    EXPECT_EQ(again.last.cached_tokens, (int64_t)a.prompt.size() - 1);
    std::string want;
    for (int32_t t : sv.alone(a)) want += sv.vocab.token_to_piece(t);
    EXPECT_EQ(again.text, want);
    // spares give way when the cache needs their cells: many long requests still all run
    for (int i = 0; i < 6; ++i) {
        const Reply r = read_all(*sched.submit(sv.request(fmt::format("Story {} begins with a", i), 150)));
        EXPECT_NE(r.last.finish_reason, "error") << r.last.error;
    }
}

TEST(Scheduler, BadRequestsFullQueueAndCancellation) {
    Served sv;
    serve::Scheduler sched(*sv.model, sv.vocab, sv.session(128), {.n_slots = 2, .max_queue = 1});
    EXPECT_EQ(sched.context_per_slot(), 64);
    try {
        sched.submit(sv.request(std::string(400, 'a'), 4));
        ADD_FAILURE() << "a prompt longer than a slot's context was accepted";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("context per sequence holds 64"), std::string::npos) << e.what();
    }
    // a reader that leaves: its request ends, the next one is served
    auto gone = sched.submit(sv.request("Once upon a time", 60));
    ASSERT_NE(gone, nullptr);
    gone->cancel();
    std::shared_ptr<serve::Stream> next_stream;
    while (!(next_stream = sched.submit(sv.request("One day", 5)))) std::this_thread::yield();  // the queue holds one
    const Reply next = read_all(*next_stream);
    EXPECT_EQ(next.last.completion_tokens, 5);
}

namespace {

// Guesses the same tokens whatever the context: mostly rejected, so every
// step removes guesses from the cache.
struct StubbornDrafter : Drafter {
    std::vector<int32_t> draft(int32_t, std::span<const int32_t>, int n_max) override {
        return std::vector<int32_t>((size_t)std::min(n_max, 3), 13);
    }
    std::string name() const override { return "stubborn"; }
};

}  // namespace

// Speculative decoding in the scheduler: every sequence's pending token and
// guesses share one batch; the text is what each request gives alone, with
// drafts that are always right (the model itself, one cache sequence per
// slot), sometimes (prompt lookup) and almost never.
TEST(Scheduler, SpeculativeDecodingGivesWhatEachGivesAlone) {
    Served sv;
    const std::vector<serve::Request> reqs{sv.request("Once upon a time", 40), sv.request("Lily and Tom went to the park", 30),
                                           sv.request("One day, a little dog", 50), sv.request("The sun", 20),
                                           sv.request("Once upon a time, there was a big", 25), sv.request("Tom said", 3)};
    struct Case {
        const char *name;
        std::function<std::unique_ptr<Drafter>()> make;
        int n_max;
        double min_acceptance, max_acceptance;
    };
    const std::vector<Case> cases = {
        {"self", [&] { return std::make_unique<DraftModel>(*sv.model, sv.session(1024), 0.0f); }, 8, 0.9, 1.0},
        {"lookup 2", [] { return std::make_unique<PromptLookup>(2); }, 16, 0.0, 1.0},
        {"stubborn", [] { return std::make_unique<StubbornDrafter>(); }, 4, 0.0, 0.2},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.name);
        DraftParams p;
        p.n_max = c.n_max;
        p.p_min = 0.0f;
        serve::Scheduler sched(*sv.model, sv.vocab, sv.session(1024), {.n_slots = 4, .max_queue = 8, .n_batch = 64},
                               c.make(), p);
        expect_each_as_alone(sv, sched, reqs);  // six requests, four slots: two wait
        const serve::SchedulerStats s = sched.stats();
        EXPECT_GT(s.drafted, 0);
        const double acceptance = (double)s.accepted / (double)s.drafted;
        EXPECT_GE(acceptance, c.min_acceptance) << s.accepted << " of " << s.drafted;
        EXPECT_LE(acceptance, c.max_acceptance) << s.accepted << " of " << s.drafted;
        EXPECT_LE(s.kv_used, s.kv_size);
    }
}
