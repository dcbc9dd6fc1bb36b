#include "serve/api.h"

#include "core/error.h"
#include "serve/chat_page.h"
#include "serve/connection_pool.h"
#include "serve/request.h"

#include <nlohmann/json.hpp>

#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

namespace toy::serve {
namespace {

using nlohmann::json;

// OpenAI's error object.
json error_json(const ApiError &e) { return {{"error", {{"message", e.message}, {"type", e.type}, {"code", e.status}}}}; }

void send_error(httplib::Response &res, const ApiError &e) {
    res.status = e.status;
    res.set_content(error_json(e).dump(), "application/json");
}

void send_json(httplib::Response &res, const json &j) {
    res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

json bytes_of(const std::string &s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back((int)c);
    return b;
}

// OpenAI's chat shape: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]
json chat_logprobs(const text::Vocab &vocab, const std::vector<TokenLogprob> &lps) {
    json content = json::array();
    for (const TokenLogprob &lp : lps) {
        json top = json::array();
        for (const auto &[id, l] : lp.top) {
            const std::string t = vocab.token_to_piece(id);
            top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes_of(t)}});
        }
        const std::string t = vocab.token_to_piece(lp.id);
        content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
}

// the completions shape: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}
json completion_logprobs(const text::Vocab &vocab, const std::vector<TokenLogprob> &lps, size_t &offset) {
    json tokens = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
    for (const TokenLogprob &lp : lps) {
        const std::string t = vocab.token_to_piece(lp.id);
        tokens.push_back(t);
        logprobs.push_back(lp.logprob);
        json top = json::object();
        for (const auto &[id, l] : lp.top) top[vocab.token_to_piece(id)] = l;
        tops.push_back(top);
        offsets.push_back(offset);
        offset += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// One entry of "choices": chat's message (or stream delta) under `chat_key`,
// or the completion's text, with its finish reason and log-probabilities.
json choice_json(bool chat, const char *chat_key, json content, json finish, json logprobs) {
    json c = {{"index", 0}, {"finish_reason", std::move(finish)}, {"logprobs", std::move(logprobs)}};
    c[chat ? chat_key : "text"] = std::move(content);
    return c;
}

int64_t now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Standard base64 (RFC 4648, with padding) of n bytes: OpenAI's embeddings
// as encoding_format "base64" (float32, little-endian).
std::string base64(const uint8_t *p, size_t n) {
    static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out += kDigits[v >> 18 & 63];
        out += kDigits[v >> 12 & 63];
        out += i + 1 < n ? kDigits[v >> 6 & 63] : '=';
        out += i + 2 < n ? kDigits[v & 63] : '=';
    }
    return out;
}

// constant time over the expected key's length, whatever the given one is
bool same_key(const std::string &given, const std::string &expected) {
    unsigned char diff = given.size() != expected.size();
    for (size_t i = 0; i < expected.size(); ++i) diff |= (unsigned char)(expected[i] ^ (i < given.size() ? given[i] : 0));
    return diff == 0;
}

}  // namespace

Api::Api(ApiOptions opts) : opts_(std::move(opts)) {
    http_.set_payload_max_length(opts_.max_body);
    const size_t n = std::max<size_t>(1, opts_.n_http_threads), most = std::max(n, opts_.max_connections);
    http_.new_task_queue = [n, most] { return new ConnectionPool(n, most); };
    http_.set_socket_options([this](socket_t sock) {
        httplib::default_socket_options(sock);
        listen_fd_ = sock;
    });
    routes();
}

void Api::listen() {
    http_.listen_after_bind();
    listen_ended_ = true;
}

void Api::stop() {
    while (!http_.is_running() && !listen_ended_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    http_.stop();
}

int Api::bind(const std::string &host, int port) {
    const int bound = port == 0 ? http_.bind_to_any_port(host) : (http_.bind_to_port(host, port) ? port : -1);
    if (bound >= 0 && listen_fd_ >= 0) ::listen(listen_fd_, 1024);  // a listening socket takes a new backlog
    return bound;
}

void Api::attach(const Model &model, const text::Vocab &vocab, const text::ChatTemplate &tmpl, Scheduler &sched) {
    model_ = &model;
    vocab_ = &vocab;
    tmpl_ = &tmpl;
    sched_ = &sched;
    ready_ = true;
}

bool Api::authorized(const httplib::Request &req, httplib::Response &res) const {
    if (!ready_) {
        send_error(res, {503, "the model is loading", "unavailable_error"});
        return false;
    }
    if (opts_.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : "";
    if (!same_key(given, opts_.api_key)) {
        send_error(res, {401, "invalid or missing API key (Authorization: Bearer KEY)", "authentication_error"});
        return false;
    }
    return true;
}

void Api::routes() {
    // every handler: errors the client caused become OpenAI error objects
    auto guarded = [this](auto body) {
        return [this, body](const httplib::Request &req, httplib::Response &res) {
            if (!authorized(req, res)) return;
            try {
                body(req, res);
            } catch (const ApiError &e) {
                send_error(res, e);
            } catch (const Error &e) {
                send_error(res, {400, e.what()});
            } catch (const std::exception &e) {
                send_error(res, {500, e.what(), "server_error"});
            }
        };
    };
    // the chat page: static, no key needed to load it (its requests carry the key)
    http_.Get("/", [](const httplib::Request &, httplib::Response &res) { res.set_content(kChatPage, "text/html; charset=utf-8"); });
    http_.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
        if (!ready_) return send_error(res, {503, "the model is loading", "unavailable_error"});
        send_json(res, {{"status", "ok"}});
    });
    http_.Get("/v1/models", guarded([this](const httplib::Request &, httplib::Response &res) {
        send_json(res, {{"object", "list"},
                        {"data", json::array({{{"id", opts_.model_name}, {"object", "model"}, {"created", now_seconds()},
                                               {"owned_by", "toy"}}})}});
    }));
    http_.Post("/tokenize", guarded([this](const httplib::Request &req, httplib::Response &res) {
        const auto b = parse_body(req.body);
        const std::string content = field<std::string>(b, "content", "", "a string");
        const bool special = field<bool>(b, "add_special", false, "true or false");
        send_json(res, {{"tokens", vocab_->tokenize(content, special, true)}});
    }));
    http_.Post("/detokenize", guarded([this](const httplib::Request &req, httplib::Response &res) {
        const auto b = parse_body(req.body);
        auto it = b.find("tokens");
        if (it == b.end() || !it->is_array()) throw ApiError{400, "'tokens' must be an array of token ids"};
        std::string text;
        for (const auto &t : *it) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_->n_tokens()) {
                throw ApiError{400, fmt::format("'tokens' must hold ids from 0 to {}", vocab_->n_tokens() - 1)};
            }
            text += vocab_->token_to_piece(t.get<int32_t>());
        }
        send_json(res, {{"content", text}});
    }));
    http_.Post("/v1/completions", guarded([this](const httplib::Request &req, httplib::Response &res) { complete(req, res, false); }));
    http_.Post("/v1/embeddings", guarded([this](const httplib::Request &req, httplib::Response &res) {
        const EmbeddingsRequest e = parse_embeddings(req.body, *vocab_, model_->config().n_embd);
        if (sched_->pooling() == Pooling::None) {
            throw ApiError{400, "the model pools embeddings per token (pooling_type none), which OpenAI's API cannot return: "
                                "start toy serve with --pooling mean, cls or last"};
        }
        int64_t tokens = 0;
        for (const auto &t : e.inputs) tokens += (int64_t)t.size();
        auto pending = sched_->embed(e.inputs);
        if (!pending) {
            res.set_header("Retry-After", "1");
            throw ApiError{503, "the server is busy: too many requests are waiting", "unavailable_error"};
        }
        const Scheduler::Embeddings vs = pending->get();
        json data = json::array();
        for (size_t k = 0; k < vs.size(); ++k) {
            json v = e.base64 ? json(base64(reinterpret_cast<const uint8_t *>(vs[k].data()), vs[k].size() * sizeof(float))) : json(vs[k]);
            data.push_back({{"object", "embedding"}, {"index", k}, {"embedding", std::move(v)}});
        }
        send_json(res, {{"object", "list"}, {"data", data}, {"model", opts_.model_name},
                        {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
    }));
    http_.Post("/v1/chat/completions",
               guarded([this](const httplib::Request &req, httplib::Response &res) { complete(req, res, true); }));
    http_.Get("/metrics", guarded([this](const httplib::Request &, httplib::Response &res) {
        const SchedulerStats s = sched_->stats();
        const std::string text = fmt::format(
            "# HELP toy_requests_total Requests accepted.\n# TYPE toy_requests_total counter\ntoy_requests_total {}\n"
            "# HELP toy_prompt_tokens_total Prompt tokens of finished requests.\n# TYPE toy_prompt_tokens_total counter\n"
            "toy_prompt_tokens_total {}\n"
            "# HELP toy_cached_prompt_tokens_total Prompt tokens whose cache cells were reused.\n"
            "# TYPE toy_cached_prompt_tokens_total counter\ntoy_cached_prompt_tokens_total {}\n"
            "# HELP toy_generated_tokens_total Generated tokens of finished requests.\n"
            "# TYPE toy_generated_tokens_total counter\ntoy_generated_tokens_total {}\n"
            "# HELP toy_requests_cancelled_total Requests ended early because their client went away.\n"
            "# TYPE toy_requests_cancelled_total counter\ntoy_requests_cancelled_total {}\n"
            "# HELP toy_requests_active Requests being decoded.\n# TYPE toy_requests_active gauge\ntoy_requests_active {}\n"
            "# HELP toy_requests_queued Requests waiting for a slot.\n# TYPE toy_requests_queued gauge\ntoy_requests_queued {}\n"
            "# HELP toy_kv_cells_used KV cache cells in use.\n# TYPE toy_kv_cells_used gauge\ntoy_kv_cells_used {}\n"
            "# HELP toy_kv_cells KV cache cells.\n# TYPE toy_kv_cells gauge\ntoy_kv_cells {}\n"
            "# HELP toy_draft_tokens_total Speculative decoding: drafted tokens the model evaluated.\n"
            "# TYPE toy_draft_tokens_total counter\ntoy_draft_tokens_total {}\n"
            "# HELP toy_draft_tokens_accepted_total Speculative decoding: drafted tokens the model agreed with.\n"
            "# TYPE toy_draft_tokens_accepted_total counter\ntoy_draft_tokens_accepted_total {}\n",
            s.requests, s.prompt_tokens, s.cached_tokens, s.generated_tokens, s.cancelled, s.active, s.queued, s.kv_used,
            s.kv_size, s.drafted, s.accepted);
        res.set_content(text, "text/plain; version=0.0.4");
    }));
    http_.set_error_handler([](const httplib::Request &, httplib::Response &res) {
        if (res.status == 413) return send_error(res, {413, "the request body is too large"});
        if (res.status == 404 && res.body.empty()) send_error(res, {404, "no such route", "not_found_error"});
    });
}

void Api::complete(const httplib::Request &req, httplib::Response &res, bool chat) {
    CompletionRequest parsed = parse_completion(req.body, chat, *vocab_, *tmpl_, opts_.sampling);
    Request &r = parsed.req;
    const bool stream = parsed.stream;
    const bool want_logprobs = r.n_logprobs >= 0;
    std::shared_ptr<Stream> out = sched_->submit(std::move(r));
    if (!out) {
        res.set_header("Retry-After", "1");
        throw ApiError{503, "the server is busy: too many requests are waiting", "unavailable_error"};
    }
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++);
    const int64_t created = now_seconds();
    auto response = [=, this](const char *object, json choice) {
        return json{{"id", id}, {"object", object}, {"created", created}, {"model", opts_.model_name},
                    {"choices", json::array({std::move(choice)})}};
    };
    auto logprobs_json = [=, this](const std::vector<TokenLogprob> &lps, size_t &offset) {
        return chat ? chat_logprobs(*vocab_, lps) : completion_logprobs(*vocab_, lps, offset);
    };
    auto usage = [](const Event &ev) {
        return json{{"prompt_tokens", ev.prompt_tokens},
                    {"completion_tokens", ev.completion_tokens},
                    {"total_tokens", ev.prompt_tokens + ev.completion_tokens},
                    {"prompt_tokens_details", {{"cached_tokens", ev.cached_tokens}}}};
    };
    if (!stream) {
        // The reply so far; pump() adds the events that arrive before a
        // deadline and says whether the last one came.
        struct Whole {
            std::string text;
            std::vector<TokenLogprob> lps;
            Event last;
        };
        auto whole = std::make_shared<Whole>();
        auto pump = [out, whole](std::chrono::milliseconds wait) {
            const auto deadline = std::chrono::steady_clock::now() + wait;
            Event ev;
            for (;;) {
                const Stream::Wait w = out->next_until(ev, deadline);
                if (w == Stream::Wait::Timeout) return false;
                if (w == Stream::Wait::End) return true;
                whole->text += ev.text;
                whole->lps.insert(whole->lps.end(), ev.logprobs.begin(), ev.logprobs.end());
                whole->last = std::move(ev);
            }
        };
        auto reply = [=] {
            const Event &ev = whole->last;
            if (ev.finish_reason == "error") {
                return error_json({500, ev.error, "server_error"});
            }
            size_t offset = 0;
            const json content = chat ? json{{"role", "assistant"}, {"content", whole->text}} : json(whole->text);
            json j = response(chat ? "chat.completion" : "text_completion",
                              choice_json(chat, "message", content, ev.finish_reason,
                                          want_logprobs ? logprobs_json(whole->lps, offset) : json(nullptr)));
            j["usage"] = usage(ev);
            return j;
        };
        if (pump(opts_.keepalive)) {
            if (whole->last.finish_reason == "error") throw ApiError{500, whole->last.error, "server_error"};
            return send_json(res, reply());
        }
        // Not done yet: the reply goes out chunked, a space (JSON allows
        // leading white space) every keepalive interval until it is ready. A
        // client that went away makes a write fail, and its request stops.
        res.set_chunked_content_provider(
            "application/json",
            [=, this](size_t, httplib::DataSink &sink) {
                while (!pump(opts_.keepalive)) {
                    if (!sink.write(" ", 1)) return out->cancel(), false;
                }
                const std::string body = reply().dump(-1, ' ', false, json::error_handler_t::replace);
                sink.write(body.data(), body.size());
                sink.done();
                return true;
            },
            [out](bool success) {
                if (!success) out->cancel();
            });
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=](size_t, httplib::DataSink &sink) {
            auto send = [&](const json &j) {
                const std::string line = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
                return sink.write(line.data(), line.size());
            };
            size_t offset = 0;
            auto chunk = [&](const json &delta_or_text, const json &finish, const std::vector<TokenLogprob> &lps = {}) {
                const json lp = want_logprobs && !lps.empty() ? logprobs_json(lps, offset) : json(nullptr);
                return response(chat ? "chat.completion.chunk" : "text_completion",
                                choice_json(chat, "delta", delta_or_text, finish, lp));
            };
            if (chat && !send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return out->cancel(), false;
            Event ev;
            while (out->next(ev)) {
                if (!ev.text.empty() || (!ev.done && !ev.logprobs.empty())) {
                    const json piece = chat ? json{{"content", ev.text}} : json(ev.text);
                    if (!send(chunk(piece, nullptr, ev.logprobs))) return out->cancel(), false;
                    ev.logprobs.clear();
                }
                if (!ev.done) continue;
                if (ev.finish_reason == "error") {
                    send(error_json({500, ev.error, "server_error"}));
                } else {
                    json last = chunk(chat ? json::object() : json(""), ev.finish_reason, ev.logprobs);
                    last["usage"] = usage(ev);
                    send(last);
                }
            }
            const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
            sink.done();
            return true;
        },
        [out](bool success) {
            if (!success) out->cancel();
        });
}

}  // namespace toy::serve
