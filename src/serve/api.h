// The OpenAI-compatible HTTP API over a Scheduler (cpp-httplib, nlohmann-json):
// /v1/chat/completions, /v1/completions (both with "stream": server-sent
// events ending in "data: [DONE]"), /v1/embeddings, /v1/models, /health, /tokenize,
// /detokenize, /metrics, and a chat page at / (serve/chat_page.html, compiled
// in). Bad requests get an OpenAI-style error object and
// the matching status; the API key, when set, is checked on every route but
// /health and the page.
#pragma once

#include "serve/request.h"
#include "serve/scheduler.h"
#include "text/chat_template.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

namespace toy::serve {

struct ApiOptions {
    std::string api_key;                 // empty: no key
    size_t max_body = 1 << 20;           // bytes per request body
    std::string model_name = "toy";      // what /v1/models lists
    // HTTP threads: every request holds one while it waits or streams, so
    // the server needs one per sequence and per queued request, and a few
    // more for /health and /metrics (cpp-httplib's default is 8)
    size_t n_http_threads = 8;
    // ... and when all of them are busy (slow clients) more start, up to
    // this many connections served at once (ConnectionPool)
    size_t max_connections = 1024;
    // A non-streaming reply not ready after this long is sent chunked with a
    // space every interval until it is: a client that went away is noticed
    // (its request stops) and proxies see a live connection.
    std::chrono::milliseconds keepalive{1000};
    // The sampling of a request that does not set a field (toy serve's
    // sampling flags, starting from default_request_sampling()).
    text::SamplerParams sampling = default_request_sampling();
};

class Api {
public:
    explicit Api(ApiOptions opts);
    // Until attach(), every route but /health answers 503 ("loading").
    void attach(const Model &model, const text::Vocab &vocab, const text::ChatTemplate &tmpl, Scheduler &sched);
    httplib::Server &http() { return http_; }
    // Binds the server to host:port (0: any free port) and returns the port,
    // -1 when it cannot. Debian's cpp-httplib listens with a backlog of 5, so
    // a burst of connections would wait a second each for SYN retries: the
    // backlog is raised to 1024 here.
    int bind(const std::string &host, int port);
    // Serves until stop(): call on a thread of its own after bind().
    void listen();
    // Ends listen(), from any thread, also when listen() has not got going yet
    // (cpp-httplib's stop() does nothing then, and the listener would serve on).
    void stop();

private:
    void routes();
    int listen_fd_ = -1;  // the listening socket, seen when cpp-httplib creates it
    bool authorized(const httplib::Request &req, httplib::Response &res) const;
    void complete(const httplib::Request &req, httplib::Response &res, bool chat);

    ApiOptions opts_;
    httplib::Server http_;
    std::atomic<bool> ready_{false};
    std::atomic<bool> listen_ended_{false};
    const Model *model_ = nullptr;
    const text::Vocab *vocab_ = nullptr;
    const text::ChatTemplate *tmpl_ = nullptr;
    Scheduler *sched_ = nullptr;
    std::atomic<int64_t> next_id_{1};
};

}  // namespace toy::serve
