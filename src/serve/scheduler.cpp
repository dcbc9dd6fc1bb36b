#include "serve/scheduler.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace toy::serve {

bool Stream::next(Event &ev) {
    return next_until(ev, std::chrono::steady_clock::time_point::max()) == Wait::Event;
}

Stream::Wait Stream::next_until(Event &ev, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu_);
    auto ready = [&] { return !events_.empty() || finished_; };
    if (deadline == std::chrono::steady_clock::time_point::max()) {
        cv_.wait(lock, ready);
    } else if (!cv_.wait_until(lock, deadline, ready)) {
        return Wait::Timeout;
    }
    if (events_.empty()) return Wait::End;
    ev = std::move(events_.front());
    events_.pop_front();
    if (ev.done) finished_ = true;
    return Wait::Event;
}

void Stream::cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
}

bool Stream::cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
}

void Stream::push(Event ev) {
    {
        std::lock_guard lock(mu_);
        events_.push_back(std::move(ev));
    }
    cv_.notify_all();
}

namespace {

// How many leading tokens `cached` and `prompt` share, at most `limit`.
size_t common_prefix(const std::vector<int32_t> &cached, const std::vector<int32_t> &prompt, size_t limit = SIZE_MAX) {
    const size_t n = std::min({cached.size(), prompt.size(), limit});
    return (size_t)(std::mismatch(cached.begin(), cached.begin() + (long)n, prompt.begin()).first - cached.begin());
}

}  // namespace

// One sequence of the shared cache: the request it serves, if any, and the
// tokens its cells hold (kept after a request for the next one's prefix).
struct Scheduler::Slot {
    int32_t seq = 0;
    std::vector<int32_t> cached;     // tokens whose K/V are in this sequence's cells, in order
    std::shared_ptr<Stream> out;     // null: idle
    Request req;
    size_t fed = 0;                  // prompt tokens in the cache
    int64_t reused = 0;              // of which reused from the previous request
    std::unique_ptr<text::Sampler> sampler;
    std::unique_ptr<text::Generation> gen;
    int32_t next_token = -1;         // generated, to be evaluated next
    std::vector<TokenLogprob> logprobs;  // of tokens whose text is not out yet
    bool active() const { return out != nullptr; }
};

void check_scheduler_options(const SchedulerOptions &opts) {
    if (opts.n_slots < 1 || opts.n_slots > KvCache::kMaxSeqs) {
        fail("-np {}: expected 1 to {} parallel sequences", opts.n_slots, KvCache::kMaxSeqs);
    }
    if (opts.max_queue < 0 || opts.max_queue > SchedulerOptions::kMaxQueue) {
        fail("--max-queue {}: expected 0 to {} waiting requests", opts.max_queue, SchedulerOptions::kMaxQueue);
    }
    if (opts.n_batch < 1) fail("-b {}: expected at least 1 token per step", opts.n_batch);
}

Scheduler::Scheduler(const Model &model, const text::Vocab &vocab, const SessionOptions &session, const SchedulerOptions &opts,
                     std::unique_ptr<Drafter> drafter, const DraftParams &draft)
    : vocab_(vocab), opts_(opts), session_opts_(session), session_(model, session), drafter_(std::move(drafter)), draft_(draft) {
    if (drafter_) check_draft_params(draft_);
    check_scheduler_options(opts);
    slot_ctx_ = session_.n_ctx() / opts.n_slots;
    if (model.config().pos == PosKind::Learned) slot_ctx_ = std::min<int64_t>(slot_ctx_, model.config().n_ctx_train);
    if (slot_ctx_ < 2) fail("-c {} for {} sequences leaves {} tokens each", session_.n_ctx(), opts.n_slots, slot_ctx_);
    for (int i = 0; i < opts.n_slots; ++i) {
        slots_.push_back(std::make_unique<Slot>());
        slots_.back()->seq = i;
    }
    stats_.kv_size = session_.n_ctx();
    thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

std::shared_ptr<Stream> Scheduler::submit(Request r) {
    if (r.prompt.empty()) fail("the prompt is empty");
    if ((int64_t)r.prompt.size() >= slot_ctx_) {
        fail("the prompt has {} tokens; the context per sequence holds {} (prompt and reply)", r.prompt.size(), slot_ctx_);
    }
    for (int32_t t : r.prompt) {
        if (t < 0 || t >= vocab_.n_tokens()) fail("token id {} is out of range: the vocabulary has {} tokens", t, vocab_.n_tokens());
    }
    auto out = std::make_shared<Stream>();
    {
        std::lock_guard lock(mu_);
        if ((int64_t)queue_.size() >= opts_.max_queue) return nullptr;
        queue_.push_back({std::move(r), out});
        stats_.requests++;
        stats_.queued = (int64_t)queue_.size();
    }
    cv_.notify_all();
    return out;
}

std::optional<std::future<Scheduler::Embeddings>> Scheduler::embed(std::vector<std::vector<int32_t>> inputs) {
    if (inputs.empty()) fail("nothing to embed");
    for (const auto &t : inputs) {
        if (t.empty()) fail("an input to embed is empty");
        for (int32_t id : t) {
            if (id < 0 || id >= vocab_.n_tokens()) fail("token id {} is out of range: the vocabulary has {} tokens", id, vocab_.n_tokens());
        }
    }
    EmbedJob job{std::move(inputs), {}};
    std::future<Embeddings> result = job.done.get_future();
    {
        std::lock_guard lock(mu_);
        if ((int64_t)(queue_.size() + embeds_.size()) >= opts_.max_queue) return std::nullopt;
        embeds_.push_back(std::move(job));
        stats_.requests++;
    }
    cv_.notify_all();
    return result;
}

void Scheduler::run_embed(EmbedJob &job) {
    try {
        if (!embed_session_) {
            SessionOptions so = session_opts_;
            so.embeddings = true;
            so.n_ctx = slot_ctx_;
            embed_session_ = std::make_unique<Session>(session_.model(), so);
        }
        Embeddings out;
        int64_t tokens = 0;
        for (const auto &t : job.inputs) {
            if ((int64_t)t.size() > slot_ctx_) fail("an input has {} tokens; the context per sequence holds {}", t.size(), slot_ctx_);
            out.push_back(toy::embed(*embed_session_, t, opts_.pooling, 2).front());
            tokens += (int64_t)t.size();
        }
        {
            std::lock_guard lock(mu_);
            stats_.prompt_tokens += tokens;
        }
        job.done.set_value(std::move(out));
    } catch (...) {
        job.done.set_exception(std::current_exception());
    }
}

SchedulerStats Scheduler::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

void Scheduler::loop() {
    for (;;) {
        std::optional<EmbedJob> job;  // one a turn, between steps
        bool busy = false;
        {
            std::unique_lock lock(mu_);
            // take waiting requests into idle slots: each into the one that
            // loses the fewest cached tokens (those past the common prefix
            // with its prompt), the longest prefix among equals
            while (!queue_.empty()) {
                Slot *best = nullptr;
                size_t best_lost = 0, best_common = 0;
                for (auto &s : slots_) {
                    if (s->active()) continue;
                    const size_t common = common_prefix(s->cached, queue_.front().req.prompt);
                    const size_t lost = s->cached.size() - common;
                    if (!best || lost < best_lost || (lost == best_lost && common > best_common)) {
                        best = s.get(), best_lost = lost, best_common = common;
                    }
                }
                if (!best) break;
                Pending p = std::move(queue_.front());
                queue_.pop_front();
                lock.unlock();
                start(*best, std::move(p));
                lock.lock();
            }
            stats_.queued = (int64_t)queue_.size();
            busy = std::any_of(slots_.begin(), slots_.end(), [](auto &s) { return s->active(); });
            if (stop_) {
                std::deque<EmbedJob> left = std::move(embeds_);
                lock.unlock();
                for (auto &s : slots_)
                    if (s->active()) finish(*s, "error", "the server is shutting down");
                for (EmbedJob &j : left) j.done.set_exception(std::make_exception_ptr(Error("the server is shutting down")));
                return;
            }
            if (!embeds_.empty()) {
                job.emplace(std::move(embeds_.front()));
                embeds_.pop_front();
            }
            if (!busy && !job) {
                cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !embeds_.empty(); });
                continue;
            }
        }
        if (job) run_embed(*job);
        if (!busy) continue;
        try {
            step();
        } catch (const Error &e) {
            // every request in the failed step ends with the error; the token
            // lists already name the step's tokens, which have no cells, so
            // the cache is forgotten rather than trusted
            for (auto &s : slots_) {
                if (s->active()) finish(*s, "error", e.what());
                s->cached.clear();
            }
            spares_.clear();
            session_.kv().clear();
        }
    }
}

void Scheduler::start(Slot &s, Pending p) {
    // reuse the longest common prefix that any sequence's cells hold: the
    // slot's own, or another's, shared by adding this sequence to those cells
    // (no K/V is copied). At least one prompt token is evaluated again, for
    // its logits.
    const std::vector<int32_t> &prompt = p.req.prompt;
    auto common_with = [&](const std::vector<int32_t> &cached) { return common_prefix(cached, prompt, prompt.size() - 1); };
    KvCache &kv = session_.kv();
    // what this slot holds beyond the prefix it keeps becomes a spare, unless
    // another sequence holds all of it already or no sequence id is free
    const size_t own = common_with(s.cached);
    auto holds_all = [&](const std::vector<int32_t> &t) {
        return t.size() >= s.cached.size() && std::equal(s.cached.begin(), s.cached.end(), t.begin());
    };
    bool kept = s.cached.size() <= own;
    for (const auto &o : slots_) kept = kept || (o.get() != &s && holds_all(o->cached));
    for (const Spare &sp : spares_) kept = kept || holds_all(sp.tokens);
    if (!kept && opts_.n_slots + (int)spares_.size() < KvCache::kMaxSeqs) {
        int32_t id = opts_.n_slots;
        while (std::any_of(spares_.begin(), spares_.end(), [&](const Spare &sp) { return sp.seq == id; })) ++id;
        kv.copy(s.seq, id, 0, (int32_t)s.cached.size());
        spares_.push_back({id, s.cached, ++clock_});
    }
    // the longest prefix any sequence holds
    size_t common = own;
    int32_t donor = s.seq;
    Spare *spare_donor = nullptr;
    for (const auto &o : slots_) {
        if (const size_t c = common_with(o->cached); c > common) common = c, donor = o->seq;
    }
    for (Spare &sp : spares_) {
        if (const size_t c = common_with(sp.tokens); c > common) common = c, donor = sp.seq, spare_donor = &sp;
    }
    if (spare_donor) spare_donor->used = ++clock_;
    if (donor == s.seq) {
        kv.remove(s.seq, (int32_t)common);
    } else {
        kv.remove(s.seq);
        kv.copy(donor, s.seq, 0, (int32_t)common);
    }
    s.cached.assign(prompt.begin(), prompt.begin() + (long)common);
    s.fed = common;
    s.reused = (int64_t)common;
    s.req = std::move(p.req);
    s.out = std::move(p.out);
    s.sampler = std::make_unique<text::Sampler>(s.req.sampling);
    for (int32_t t : s.req.prompt) s.sampler->accept(t);
    // the reply may use what is left of the slot's context
    text::GenerationLimits limits = s.req.limits;
    const int64_t room = slot_ctx_ - (int64_t)s.req.prompt.size();
    limits.max_tokens = limits.max_tokens < 0 ? room : std::min(limits.max_tokens, room);
    s.gen = std::make_unique<text::Generation>(&vocab_, *s.sampler, limits);
    s.next_token = -1;
}

void Scheduler::finish(Slot &s, const std::string &reason, const std::string &error) {
    Event ev;
    if (s.gen && reason != "error") ev.text = s.gen->flush();
    ev.logprobs = std::move(s.logprobs);
    s.logprobs.clear();
    ev.done = true;
    ev.finish_reason = reason;
    ev.error = error;
    ev.prompt_tokens = (int64_t)s.req.prompt.size();
    ev.completion_tokens = s.gen ? (int64_t)s.gen->tokens().size() : 0;
    ev.cached_tokens = s.reused;
    {
        std::lock_guard lock(mu_);
        stats_.prompt_tokens += ev.prompt_tokens;
        stats_.generated_tokens += ev.completion_tokens;
        stats_.cached_tokens += ev.cached_tokens;
    }
    s.out->push(std::move(ev));
    s.out.reset();
    s.gen.reset();
    s.sampler.reset();
}

void Scheduler::make_room(int64_t need) {
    KvCache &kv = session_.kv();
    while (kv.size() - kv.n_used() < need && !spares_.empty()) {
        auto lru = std::min_element(spares_.begin(), spares_.end(), [](const Spare &a, const Spare &b) { return a.used < b.used; });
        kv.remove(lru->seq);
        spares_.erase(lru);
    }
}

bool Scheduler::step() {
    // requests whose reader left end here (their cells stay for reuse)
    for (auto &s : slots_) {
        if (!s->active() || !s->out->cancelled()) continue;
        {
            std::lock_guard lock(mu_);
            stats_.cancelled++;
        }
        finish(*s, "stop");
    }

    // every generating sequence's pending token (and guesses) first, then prompt chunks
    Batch batch;
    struct Rows {
        Slot *slot;
        int64_t first;               // its first output row
        std::vector<int32_t> guess;  // drafted tokens after the pending one
        size_t base = 0;             // generating: the cache's length before the pending token
    };
    std::vector<Rows> rows;
    int64_t n_out = 0;
    SpeculativeStats spec;
    for (auto &s : slots_) {
        if (!s->active() || s->next_token < 0) continue;
        Rows r{s.get(), n_out, {}, s->cached.size()};
        s->cached.push_back(s->next_token);
        if (drafter_) {
            // no guess past the request's token limit or the slot's context
            const int64_t left = s->gen->limits().max_tokens - (int64_t)s->gen->tokens().size() - 1;
            const int64_t room = slot_ctx_ - (int64_t)s->cached.size();
            r.guess = propose(*drafter_, draft_, s->seq, s->cached,
                              (int)std::min<int64_t>({(int64_t)draft_.n_max, left, room}));
        }
        batch.add(s->next_token, (int32_t)r.base, s->seq, true);
        for (int32_t t : r.guess) {
            batch.add(t, (int32_t)s->cached.size(), s->seq, true);
            s->cached.push_back(t);
        }
        spec.drafted += (int64_t)r.guess.size();
        n_out += 1 + (int64_t)r.guess.size();
        s->next_token = -1;
        rows.push_back(std::move(r));
    }
    for (auto &s : slots_) {
        if (!s->active() || s->fed >= s->req.prompt.size()) continue;
        while (s->fed < s->req.prompt.size() && batch.size() < opts_.n_batch) {
            const bool last = s->fed + 1 == s->req.prompt.size();
            batch.add(s->req.prompt[s->fed], (int32_t)s->fed, s->seq, last);
            s->cached.push_back(s->req.prompt[s->fed]);
            s->fed++;
            if (last) rows.push_back({s.get(), n_out++, {}});
        }
    }
    if (batch.size() == 0) return false;
    make_room(batch.size());
    session_.decode(batch);
    // output rows come in batch order
    const int64_t V = session_.n_vocab();
    for (Rows &r : rows) {
        Slot &s = *r.slot;
        auto emit = [&](const text::Step &st, std::span<const float> row) {
            if (st.token >= 0 && s.req.n_logprobs >= 0) s.logprobs.push_back(text::logprob_of(row, st.token, s.req.n_logprobs));
            if (st.text.empty()) return;
            Event piece;
            piece.text = st.text;
            piece.logprobs = std::move(s.logprobs);
            s.logprobs.clear();
            s.out->push(std::move(piece));
        };
        Verdict v;
        try {
            v = verify(*s.gen, session_.logits().data() + r.first * V, (size_t)V, r.guess, spec, emit);
        } catch (const Error &e) {
            finish(s, "error", e.what());  // this request's own failure (a grammar no token can continue)
            continue;
        }
        if (!r.guess.empty() && r.base + v.kept < s.cached.size()) {
            // the rejected guesses leave the cache
            session_.kv().remove(s.seq, (int32_t)(r.base + v.kept));
            s.cached.resize(r.base + v.kept);
        }
        if (v.last.done) {
            finish(s, text::stop_reason_name(s.gen->reason()));
        } else {
            s.next_token = v.last.token;
        }
    }
    std::lock_guard lock(mu_);
    stats_.drafted += spec.drafted;
    stats_.accepted += spec.accepted;
    stats_.kv_used = session_.kv().n_used();
    stats_.active = std::count_if(slots_.begin(), slots_.end(), [](auto &s) { return s->active(); });
    return true;
}

}  // namespace toy::serve
