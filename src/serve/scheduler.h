// Scheduler: serves many requests from one model and one KV cache. A single
// engine thread runs continuous batching: every step decodes one token for
// each sequence that is generating and fills the rest of the batch with chunks
// of waiting prompts, so a new request's prompt joins without stalling the
// others. Each of the n_slots sequences keeps its cells after a request; a
// new request reuses the longest prompt prefix any sequence holds (its own
// slot's, or another's cells shared into its sequence without copying K/V).
// What a slot would throw away is kept as a spare sequence (a prompt cache in
// the KV cache's free cells), the least recently used evicted when cells run
// short. With a drafter (speculative decoding), a generating sequence puts
// its pending token and the drafter's guesses into the step's batch, and the
// step decides as many of its tokens as the target agrees with
// (runtime/speculative.h): the text is the same, with fewer steps.
// HTTP threads submit() requests and read their Streams.
#pragma once

#include "runtime/embeddings.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "text/generation.h"
#include "text/sampler.h"
#include "text/vocab.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace toy::serve {

struct Request {
    std::vector<int32_t> prompt;
    text::SamplerParams sampling;   // with DRY's breaker tokens found (text::with_dry_breakers), as parse_completion does
    text::GenerationLimits limits;
    int n_logprobs = -1;          // >= 0: each generated token's log-probability and this many top alternatives
};

using text::TokenLogprob;

// What a request produces, in order: text pieces, then one last event.
struct Event {
    std::string text;
    std::vector<TokenLogprob> logprobs;  // with Request::n_logprobs >= 0: the tokens this event completes
    bool done = false;            // the last event of the request
    std::string finish_reason;    // with done: "stop", "length", or "error"
    std::string error;            // with finish_reason "error"
    int64_t prompt_tokens = 0;    // with done
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;    // prompt tokens whose cells were reused
};

// One request's events, written by the engine thread and read by one reader.
class Stream {
public:
    // Blocks for the next event; false once the last one was read.
    bool next(Event &ev);
    enum class Wait { Event, End, Timeout };
    // The same, waiting at most until `deadline`.
    Wait next_until(Event &ev, std::chrono::steady_clock::time_point deadline);
    // The reader went away: the request stops at the engine's next step.
    void cancel();
    bool cancelled() const;
    void push(Event ev);

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Event> events_;
    bool finished_ = false, cancelled_ = false;
};

struct SchedulerOptions {
    int n_slots = 4;              // sequences decoded together (-np)
    int64_t max_queue = 64;       // requests waiting for a slot; more are refused
    int64_t n_batch = 512;        // tokens per step at most (prompt chunks fill what decoding leaves)
    Pooling pooling = Pooling::Mean;  // of embeddings (embed())
    // the most requests that may wait: each holds one of the server's HTTP
    // threads, which start with it (toy serve)
    static constexpr int64_t kMaxQueue = 1024;
};

// Throws toy::Error naming the flag (-np, --max-queue, -b) of a value out of range.
void check_scheduler_options(const SchedulerOptions &opts);

struct SchedulerStats {
    int64_t requests = 0, prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0;
    int64_t cancelled = 0;  // requests whose client went away before the end
    int64_t active = 0, queued = 0, kv_used = 0, kv_size = 0;
    int64_t drafted = 0, accepted = 0;  // speculative decoding: guesses evaluated, and those that stood
};

class Scheduler {
public:
    // The session's context is shared: each slot gets n_ctx / n_slots cells.
    // drafter: null, or the speculative drafter (guessing as `draft` says),
    // asked with slot numbers as sequences (a draft model needs a session of
    // n_ctx cells for them).
    Scheduler(const Model &model, const text::Vocab &vocab, const SessionOptions &session, const SchedulerOptions &opts,
              std::unique_ptr<Drafter> drafter = nullptr, const DraftParams &draft = {});
    ~Scheduler();
    Scheduler(const Scheduler &) = delete;
    Scheduler &operator=(const Scheduler &) = delete;

    // Queues a request. Throws toy::Error for an empty prompt or one that
    // leaves no room in a slot's context; returns null when the queue is full.
    std::shared_ptr<Stream> submit(Request r);
    // The embeddings of these token lists (SchedulerOptions::pooling,
    // Euclidean-normalized), computed by the engine thread between steps in a
    // session of its own of a slot's context; the future throws toy::Error
    // for a list that does not fit. Throws toy::Error for an empty list or a
    // token out of range; returns nullopt when the queue is full.
    using Embeddings = std::vector<std::vector<float>>;
    std::optional<std::future<Embeddings>> embed(std::vector<std::vector<int32_t>> inputs);
    int64_t context_per_slot() const { return slot_ctx_; }
    Pooling pooling() const { return opts_.pooling; }
    SchedulerStats stats() const;

private:
    struct Slot;
    struct Spare {
        int32_t seq;
        std::vector<int32_t> tokens;  // what its cells hold, in order
        uint64_t used = 0;            // last use, for eviction
    };
    struct Pending {
        Request req;
        std::shared_ptr<Stream> out;
    };
    struct EmbedJob {
        std::vector<std::vector<int32_t>> inputs;
        std::promise<Embeddings> done;
    };
    void loop();
    void run_embed(EmbedJob &job);
    bool step();  // one decode; false when there was nothing to do
    void start(Slot &s, Pending p);
    void finish(Slot &s, const std::string &reason, const std::string &error = "");

    const text::Vocab &vocab_;
    SchedulerOptions opts_;
    SessionOptions session_opts_;
    Session session_;
    std::unique_ptr<Session> embed_session_;  // made at the first embed()
    std::unique_ptr<Drafter> drafter_;
    DraftParams draft_;
    int64_t slot_ctx_ = 0;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<Spare> spares_;
    uint64_t clock_ = 0;
    // frees cells by forgetting the least recently used spares until `need` are free
    void make_room(int64_t need);

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Pending> queue_;
    std::deque<EmbedJob> embeds_;
    bool stop_ = false;
    SchedulerStats stats_;
    std::thread thread_;
};

}  // namespace toy::serve
