// The HTTP API over the scheduler, in process: OpenAI-shaped replies,
// server-sent events ending in [DONE], the API key, and bad requests answered
// with OpenAI-style errors while a good request alongside them is served.
#include "json_schema_check.h"
#include "serve/api.h"
#include "serve/connection_pool.h"
#include "serve/request.h"
#include "test_util.h"
#include "text/chat_template.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

using namespace toy;
using nlohmann::json;

namespace {

struct Server {
    std::unique_ptr<Model> model = Model::load(test::shared_path("models/stories260K.gguf"));
    text::Vocab vocab = text::Vocab::load(model->file());
    text::ChatTemplate tmpl{text::ChatTemplate::builtin_source("chatml")};
    serve::Api api;
    std::unique_ptr<serve::Scheduler> sched;
    int port = 0;
    std::thread listener;

    explicit Server(int n_ctx = 512, int n_slots = 2, std::chrono::milliseconds keepalive = std::chrono::milliseconds(1000))
        : api(serve::ApiOptions{.api_key = "k3y", .max_body = 4096, .model_name = "stories", .n_http_threads = 8,
                                .keepalive = keepalive}) {
        SessionOptions so;
        so.n_ctx = n_ctx;
        so.n_threads = 2;
        port = api.bind("127.0.0.1", 0);
        listener = std::thread([this] { api.listen(); });
        sched = std::make_unique<serve::Scheduler>(*model, vocab, so,
                                                   serve::SchedulerOptions{.n_slots = n_slots, .max_queue = 4});
        api.attach(*model, vocab, tmpl, *sched);
    }
    ~Server() {
        api.stop();
        listener.join();
    }
    httplib::Client client(const std::string &key = "k3y") const {
        httplib::Client c("127.0.0.1", port);
        if (!key.empty()) c.set_bearer_token_auth(key);
        c.set_read_timeout(60, 0);
        return c;
    }
};

json post(const httplib::Client &cc, const std::string &path, const std::string &body, int *status = nullptr) {
    auto &c = const_cast<httplib::Client &>(cc);
    auto r = c.Post(path, body, "application/json");
    if (!r) return json{{"transport_error", (int)r.error()}};
    if (status) *status = r->status;
    return json::parse(r->body, nullptr, false);
}

}  // namespace

TEST(Server, CompletionsChatModelsTokenizeAndMetrics) {
    Server s;
    auto c = s.client();
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "stories");

    int status = 0;
    json r = post(c, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})", &status);
    const json r0 = r;
    EXPECT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["object"], "text_completion");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r["usage"]["completion_tokens"], 12);
    EXPECT_FALSE(r["choices"][0]["text"].get<std::string>().empty());

    r = post(c, "/v1/chat/completions",
             R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 4,
                 "stop": ["\n\n"], "seed": 3})",
             &status);
    EXPECT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["object"], "chat.completion");
    EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(r["usage"]["total_tokens"], r["usage"]["prompt_tokens"].get<int>() + r["usage"]["completion_tokens"].get<int>());

    json tok = post(c, "/tokenize", R"({"content": "Once upon a time"})");
    json detok = post(c, "/detokenize", json{{"tokens", tok["tokens"]}}.dump());
    EXPECT_EQ(detok["content"], " Once upon a time");
    // the same prompt as token ids (BOS first, as the string gets it) continues the same way
    json ids = json::array({1});
    for (const json &id : tok["tokens"]) ids.push_back(id);
    const json by_ids = post(c, "/v1/completions", json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}}.dump(), &status);
    EXPECT_EQ(status, 200) << by_ids.dump();
    EXPECT_EQ(by_ids["choices"][0]["text"], r0["choices"][0]["text"]);

    auto page = s.client("").Get("/");  // the chat page needs no key; its requests send it
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_NE(page->body.find("/v1/chat/completions"), std::string::npos);
    EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");

    auto metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_NE(metrics->body.find("toy_requests_total 3"), std::string::npos) << metrics->body;
}

TEST(Server, LogProbabilitiesInChatAndCompletionShapes) {
    Server s;
    auto c = s.client();
    int status = 0;
    json r = post(c, "/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0,
                      "logprobs": true, "top_logprobs": 3})",
                  &status);
    ASSERT_EQ(status, 200) << r.dump();
    const json &content = r["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), 5u) << r.dump();
    std::string joined;
    for (const json &t : content) {
        joined += t["token"].get<std::string>();
        EXPECT_LE(t["logprob"].get<double>(), 0.0);
        ASSERT_EQ(t["top_logprobs"].size(), 3u);
        // greedy: the chosen token is the most likely one
        EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
        EXPECT_DOUBLE_EQ(t["top_logprobs"][0]["logprob"].get<double>(), t["logprob"].get<double>());
        EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(), t["top_logprobs"][1]["logprob"].get<double>());
    }
    EXPECT_EQ(joined, r["choices"][0]["message"]["content"]);

    r = post(c, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "logprobs": 2})", &status);
    ASSERT_EQ(status, 200) << r.dump();
    const json &lp = r["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 4u) << r.dump();
    EXPECT_EQ(lp["token_logprobs"].size(), 4u);
    EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
    EXPECT_EQ(lp["text_offset"][0], 0);
    EXPECT_TRUE(post(c, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})")["choices"][0]["logprobs"].is_null());
    post(c, "/v1/completions", R"({"prompt": "x", "logprobs": 50})", &status);
    EXPECT_EQ(status, 400);
}

TEST(Server, StreamingIsServerSentEventsEndingInDone) {
    Server s;
    auto c = s.client();
    auto r = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Tell a story"}], "max_tokens": 6,
                                                "stream": true, "temperature": 0})",
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    // every event is "data: {json}\n\n"; the last is [DONE]; the content deltas add up to the reply
    std::string body = r->body, content, finish;
    size_t at = 0;
    int events = 0;
    bool done = false;
    while (at < body.size()) {
        const size_t end = body.find("\n\n", at);
        ASSERT_NE(end, std::string::npos) << body.substr(at);
        const std::string ev = body.substr(at, end - at);
        ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
        at = end + 2;
        ++events;
        if (ev == "data: [DONE]") {
            done = true;
            EXPECT_EQ(at, body.size());
            break;
        }
        const json j = json::parse(ev.substr(6));
        EXPECT_EQ(j["object"], "chat.completion.chunk");
        const json &ch = j["choices"][0];
        if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(finish, "length");
    EXPECT_GE(events, 4);
    // the same request without streaming gives the same text
    json whole = post(c, "/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": "Tell a story"}], "max_tokens": 6, "temperature": 0})");
    EXPECT_EQ(whole["choices"][0]["message"]["content"], content);
}

// One counter of /metrics.
int64_t metric(const httplib::Client &cc, const std::string &name) {
    auto r = const_cast<httplib::Client &>(cc).Get("/metrics");
    if (!r) return -1;
    const size_t at = r->body.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stoll(r->body.substr(at + name.size() + 2));
}

TEST(Server, LogitBiasAndIgnoreEos) {
    Server s;
    auto c = s.client();
    const json ids = post(c, "/tokenize", R"({"content": " cat"})")["tokens"];
    ASSERT_FALSE(ids.empty()) << ids.dump();
    const int32_t cat = ids.back();
    const std::string three = post(c, "/detokenize", fmt::format(R"({{"tokens": [{0}, {0}, {0}]}})", cat))["content"];
    ASSERT_FALSE(three.empty());
    // +100 on one token makes greedy decoding say it every time (OpenAI's object form, then llama-server's pairs)
    for (const std::string &bias : {fmt::format(R"({{"{}": 100}})", cat), fmt::format("[[{}, 100]]", cat)}) {
        json r = post(c, "/v1/completions",
                      fmt::format(R"({{"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0, "logit_bias": {}}})", bias));
        EXPECT_EQ(r["choices"][0]["text"], three) << r.dump();
    }
    // banning it (false) keeps it out of a reply that would otherwise be made of it
    const std::string piece = post(c, "/detokenize", fmt::format(R"({{"tokens": [{}]}})", cat))["content"];
    json banned = post(c, "/v1/completions",
                       fmt::format(R"({{"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0,
                                       "logit_bias": [[{0}, 100], [{0}, false]]}})", cat));
    EXPECT_NE(banned["choices"][0]["text"].get<std::string>().rfind(piece, 0), 0u) << banned.dump();
    int status = 0;
    for (const char *body : {R"({"prompt": "Once", "samplers": ["top_k", "wat"]})", R"({"prompt": "Once", "mirostat": 3})"}) {
        post(c, "/v1/completions", body, &status);
        EXPECT_EQ(status, 400) << body;
    }
    // the message names the request's field, not a command-line flag
    const json unknown = post(c, "/v1/completions", R"({"prompt": "Once", "samplers": ["top_k", "wat"]})", &status);
    EXPECT_EQ(unknown["error"]["message"].get<std::string>().rfind("'samplers': unknown sampler 'wat'", 0), 0u) << unknown.dump();
    json mirostat = post(c, "/v1/completions", R"({"prompt": "Once", "max_tokens": 4, "mirostat": 2, "typical_p": 0.9,
                                                   "samplers": ["top_k", "typ_p", "temperature"], "seed": 1})", &status);
    EXPECT_EQ(status, 200) << mirostat.dump();
    json bad = post(c, "/v1/completions", R"({"prompt": "Once", "logit_bias": {"99999": 1}})", &status);
    EXPECT_EQ(status, 400);
    EXPECT_NE(bad["error"]["message"].get<std::string>().find("logit_bias"), std::string::npos) << bad.dump();
    // ignore_eos: an end-of-text token with all the weight does not end the reply before max_tokens
    json eos = post(c, "/v1/completions",
                    fmt::format(R"({{"prompt": "Once", "max_tokens": 5, "temperature": 0, "ignore_eos": true,
                                    "logit_bias": {{"{}": 100}}}})", s.vocab.eos()));
    EXPECT_EQ(eos["choices"][0]["finish_reason"], "length") << eos.dump();
    EXPECT_EQ(eos["usage"]["completion_tokens"], 5);
}

TEST(Server, AClientLeavingANonStreamingRequestStopsIt) {
    // one slot with a long context: the request below would take seconds
    Server s(4096, 1, std::chrono::milliseconds(20));
    {
        // a client that hangs up at the first byte of the reply (the first keep-alive space)
        httplib::Client gone("127.0.0.1", s.port);
        gone.set_bearer_token_auth("k3y");
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.set_header("Content-Type", "application/json");
        req.body = R"({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "temperature": 0})";
        req.content_receiver = [](const char *, size_t, uint64_t, uint64_t) { return false; };
        httplib::Response res;
        httplib::Error err = httplib::Error::Success;
        EXPECT_FALSE(gone.send(req, res, err));
    }
    auto c = s.client();
    int64_t cancelled = 0;
    for (int i = 0; i < 100 && cancelled < 1; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        cancelled = metric(c, "toy_requests_cancelled_total");
    }
    EXPECT_EQ(cancelled, 1);
    const int64_t generated = metric(c, "toy_generated_tokens_total");
    EXPECT_GT(generated, 0);
    EXPECT_LT(generated, 4000);
    // a reply that takes longer than the keep-alive interval still arrives whole, as JSON
    json r = post(c, "/v1/completions", R"({"prompt": "Once", "max_tokens": 400, "ignore_eos": true, "temperature": 0})");
    EXPECT_EQ(r["usage"]["completion_tokens"], 400) << r.dump();
}

TEST(Server, BadRequestsGetOpenAiErrorsAndDoNotDisturbOthers) {
    Server s;
    auto c = s.client();
    // a long request runs while the bad ones arrive
    json good;
    std::thread other([&] {
        good = post(s.client(), "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0})");
    });
    struct Bad {
        std::string path, body;
        int status;
        std::string says;
    };
    for (const Bad &b : {
             Bad{"/v1/completions", "{not json", 400, "not valid JSON"},
             Bad{"/v1/completions", R"({"prompt": 7})", 400, "'prompt' must be a string or an array of token ids"},
             Bad{"/v1/completions", R"({"prompt": [1, 2, 512]})", 400, "token ids must be integers from 0 to 511, found 512"},
             Bad{"/v1/completions", R"({"prompt": ["a", "b"]})", 400, "one prompt per request"},
             Bad{"/v1/completions", R"({"prompt": []})", 400, "empty array"},
             Bad{"/v1/completions", R"({"prompt": "x", "n": 2})", 400, "'n': one choice per request is supported, found 2"},
             Bad{"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 3})", 400, "'n': one choice"},
             Bad{"/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]})",
                 400, "'tools': toy serve does not call tools (function calling is not supported)"},
             Bad{"/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}], "tool_choice": "auto"})", 400,
                 "send the request without 'tools', or with \"tool_choice\": \"none\""},
             Bad{"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})", 400,
                 "'functions': toy serve does not call tools"},
             Bad{"/v1/chat/completions", R"({"messages": [{"role": "tool", "content": "42", "tool_call_id": "c1"}]})", 400,
                 "unknown role 'tool'"},
             Bad{"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", 400, "at least 1"},
             Bad{"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -5})", 400,
                 "'max_completion_tokens' must be at least 1"},
             Bad{"/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400, "'temperature' must be a number"},
             Bad{"/v1/completions", R"({"prompt": "x", "temperature": 1e300})", 400, "'temperature' must be a finite number"},
             Bad{"/v1/completions", R"({"prompt": "x", "top_k": 1000000000000})", 400, "'top_k' is out of range"},
             Bad{"/v1/completions", R"({"prompt": "x", "repeat_penalty": 0})", 400,
                 "'repeat_penalty' must be a number > 0 (1: off), found 0"},
             Bad{"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_p": 2})", 400,
                 "'top_p' must be a number from 0 to 1 (1: off), found 2"},
             Bad{"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "unknown role 'wizard'"},
             Bad{"/v1/chat/completions", R"({"messages": []})", 400, "non-empty array"},
             // fuzz_request's finding: a content part whose "type" is not a string escaped as nlohmann's type_error (a 500)
             Bad{"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": 16, "text": "y"}]}]})", 400,
                 "message content parts must be"},
             Bad{"/v1/completions", json{{"prompt", std::string(3000, 'z')}}.dump(), 400, "context per sequence"},
             // 200000 levels (past this server's --max-body) ended the server with SIGSEGV when the error quoted them
             Bad{"/v1/completions", R"({"prompt": "x", "logit_bias": {"1": )" + std::string(600, '[') + std::string(600, ']') + "}}",
                 400, "the request body: JSON nested deeper than 512 levels"},
             Bad{"/v1/completions", json{{"prompt", std::string(5000, 'z')}}.dump(), 413, "too large"},
         }) {
        SCOPED_TRACE(b.body.substr(0, 60));
        int status = 0;
        const json e = post(c, b.path, b.body, &status);
        EXPECT_EQ(status, b.status) << e.dump();
        EXPECT_NE(e.value("/error/message"_json_pointer, std::string()).find(b.says), std::string::npos) << e.dump();
    }
    for (const std::string key : {"", "wrong"}) {
        int status = 0;
        const json e = post(s.client(key), "/v1/completions", R"({"prompt": "x"})", &status);
        EXPECT_EQ(status, 401) << e.dump();
        EXPECT_EQ(e["error"]["type"], "authentication_error");
    }
    // with tool_choice "none" the model may call no tool: served without the tools
    int served = 0;
    post(c, "/v1/chat/completions",
         R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
             "tool_choice": "none", "max_tokens": 2})",
         &served);
    EXPECT_EQ(served, 200);
    auto missing = c.Get("/v2/nothing");
    EXPECT_TRUE(missing && missing->status == 404);
    other.join();  // (no ASSERT before this: a failure must not leave the thread running)
    EXPECT_EQ(good["usage"]["completion_tokens"], 40) << good.dump();
}

TEST(Server, ResponseFormatGrammarAndJsonSchemaConstrainTheReply) {
    Server s;
    auto c = s.client();
    int status = 0;
    // properties come out in the schema's order (zeta before alpha), whatever the JSON library does with keys
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(R"({
        "type": "object",
        "properties": {"zeta": {"type": "string", "maxLength": 10}, "alpha": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["zeta", "alpha"]
    })");
    for (int seed = 1; seed <= 8; ++seed) {
        nlohmann::ordered_json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                                       {"max_tokens", 200}, {"temperature", 1.0}, {"seed", seed},
                                       {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}};
        json r = post(c, "/v1/chat/completions", body.dump(), &status);
        ASSERT_EQ(status, 200) << r.dump();
        EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
        const std::string content = r["choices"][0]["message"]["content"];
        nlohmann::ordered_json value;
        ASSERT_NO_THROW(value = nlohmann::ordered_json::parse(content)) << content;
        EXPECT_EQ(test::json_schema_violation(schema, value), "") << content;
        EXPECT_LT(content.find("\"zeta\""), content.find("\"alpha\"")) << content;
    }
    // any JSON object
    json r = post(c, "/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 300, "seed": 5,
                      "response_format": {"type": "json_object"}})", &status);
    ASSERT_EQ(status, 200) << r.dump();
    if (r["choices"][0]["finish_reason"] == "stop") {
        EXPECT_TRUE(json::parse(r["choices"][0]["message"]["content"].get<std::string>()).is_object()) << r.dump();
    }
    // llama-server's fields on the completions endpoint
    r = post(c, "/v1/completions", R"({"prompt": "Once", "max_tokens": 20, "seed": 2, "grammar": "root ::= \"yes\" | \"no\""})", &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_TRUE(r["choices"][0]["text"] == "yes" || r["choices"][0]["text"] == "no") << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    r = post(c, "/v1/completions", R"({"prompt": "Once", "max_tokens": 30, "seed": 2, "json_schema": {"enum": [1, 22, 333]}})", &status);
    ASSERT_EQ(status, 200) << r.dump();
    const json number = json::parse(r["choices"][0]["text"].get<std::string>(), nullptr, false);  // may end in a space
    EXPECT_TRUE(number == 1 || number == 22 || number == 333) << r.dump();
    // what cannot be honoured is a 400 that says why
    const std::pair<const char *, const char *> bad[] = {
        {R"({"prompt": "x", "grammar": "root ::= foo"})", "rule 'foo' is used but never defined"},
        {R"({"prompt": "x", "grammar": 7})", "'grammar' must be a string"},
        {R"({"prompt": "x", "json_schema": {"not": {"type": "string"}}})", "not"},
        {R"({"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}})", "at most one of"},
        {R"({"prompt": "x", "response_format": {"type": "xml"}})", "'response_format' must be"},
        {R"({"prompt": "x", "response_format": {"type": "json_schema"}})", "needs {\"json_schema\""},
    };
    for (const auto &[body, message] : bad) {
        r = post(c, "/v1/completions", body, &status);
        EXPECT_EQ(status, 400) << body;
        EXPECT_NE(r["error"]["message"].get<std::string>().find(message), std::string::npos) << r.dump();
    }
    // a grammar whose readings explode is found out while generating: the
    // request ends with the error within a few tokens, the slot is free again
    r = post(c, "/v1/completions", R"({"prompt": "Once", "max_tokens": 200, "seed": 2, "grammar": "root ::= [^\\n] root? [^\\n]? root? [^\\n]?"})",
             &status);
    EXPECT_EQ(status, 500) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find("can be read in more than 4096 ways"), std::string::npos) << r.dump();
    r = post(c, "/v1/completions", R"({"prompt": "Once", "max_tokens": 5, "seed": 2})", &status);
    EXPECT_EQ(status, 200) << r.dump();
}

namespace {

// A TCP connection to the server that writes what it is given, nothing more.
struct RawClient {
    int fd = -1;
    explicit RawClient(int port) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            fd = -1;
        }
    }
    ~RawClient() {
        if (fd >= 0) close(fd);
    }
    bool send(const std::string &s) const { return fd >= 0 && ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == (ssize_t)s.size(); }
    std::string reply() const {
        std::string out;
        char buf[4096];
        for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, (size_t)n);
        return out;
    }
};

}  // namespace

// Issue 14's server faults on loopback: many clients that send their request
// a byte at a time and never finish (slowloris, 100 of them: more than the
// server's HTTP threads), clients that send bytes that are not HTTP and one
// with an oversized header do not keep a normal request from being served.
TEST(Server, SlowMalformedAndOversizedClientsDoNotStopTheService) {
    Server s;  // 8 HTTP threads to begin with
    std::vector<std::unique_ptr<RawClient>> slow;
    for (int i = 0; i < 100; ++i) {
        slow.push_back(std::make_unique<RawClient>(s.port));
        ASSERT_TRUE(slow.back()->send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")) << i;
    }
    std::atomic<bool> done{false};
    std::thread drip([&] {
        // a header byte from each, every 100 ms, until the normal request is answered
        for (int tick = 0; !done && tick < 600; ++tick) {
            for (auto &c : slow) c->send("X");
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the slow ones are connected and read from
    for (const char *junk : {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS hello to a plain HTTP port\r\n\r\n",
                             "GET\r\n\r\n", "NOT HTTP AT ALL \xff\xfe\r\n\r\n"}) {
        RawClient bad(s.port);
        ASSERT_TRUE(bad.send(junk));
        shutdown(bad.fd, SHUT_WR);
        const std::string reply = bad.reply();
        EXPECT_TRUE(reply.empty() || reply.rfind("HTTP/1.1 400", 0) == 0) << reply;
    }
    {
        // an oversized header line is refused (the server may close before it is all sent)
        RawClient big(s.port);
        big.send("GET /health HTTP/1.1\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n");
        shutdown(big.fd, SHUT_WR);
        const std::string reply = big.reply();
        EXPECT_TRUE(reply.empty() || reply.rfind("HTTP/1.1 400", 0) == 0) << reply.substr(0, 80);
    }
    auto c = s.client();
    c.set_read_timeout(30, 0);
    int status = 0;
    json r = post(c, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})", &status);
    done = true;
    drip.join();
    EXPECT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["usage"]["completion_tokens"], 8) << r.dump();
}

TEST(Server, ConnectionPoolGrowsWhenBusyAndShrinksWhenIdle) {
    serve::ConnectionPool pool(2, 6, std::chrono::milliseconds(50));
    EXPECT_EQ(pool.threads(), 2u);
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    std::atomic<int> started{0}, finished{0};
    for (int i = 0; i < 8; ++i) {
        pool.enqueue([&] {
            started++;
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return release; });
            finished++;
        });
    }
    for (int i = 0; i < 1000 && started < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(started, 6);  // at most 6 at once; the other 2 wait their turn
    EXPECT_EQ(pool.threads(), 6u);
    {
        std::lock_guard lock(mu);
        release = true;
    }
    cv.notify_all();
    for (int i = 0; i < 1000 && (finished < 8 || pool.threads() > 2); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(finished, 8);
    EXPECT_EQ(pool.threads(), 2u);  // the extra threads ended once idle
    pool.shutdown();
    EXPECT_EQ(pool.threads(), 0u);
}

TEST(Server, TheRequestParserPreparesDryBreakersAndStopStringsOffTheEngineThread) {
    // the scheduler's engine thread serves every client: what a request's
    // lists cost to prepare (a megabyte of breakers or stop strings: 0.4 s
    // and more) is spent by parse_completion, on the connection's thread
    const text::Vocab vocab = text::Vocab::load(*gguf::File::open(test::shared_path("models/stories260K.gguf")));
    const text::ChatTemplate chatml(text::ChatTemplate::builtin_source("chatml"), "<s>", "</s>", "chatml");
    const serve::CompletionRequest r = serve::parse_completion(
        R"({"prompt": "Once", "dry_multiplier": 0.8, "dry_sequence_breakers": ["e", "."], "stop": ["the end", "zz"]})", false, vocab,
        chatml);
    text::SamplerParams want = r.req.sampling;
    want.dry_breakers.clear();
    EXPECT_EQ(r.req.sampling.dry_breakers, text::with_dry_breakers(want, vocab).dry_breakers);
    EXPECT_FALSE(r.req.sampling.dry_breakers.empty());
    ASSERT_NE(r.req.limits.stop_set, nullptr);
    text::StringSet::State s = text::StringSet::kStart;
    for (char c : std::string("so the end")) s = r.req.limits.stop_set->next(s, (unsigned char)c);
    int ended = -1;
    r.req.limits.stop_set->for_each_ended(s, [&](int32_t index, size_t) { ended = index; });
    EXPECT_EQ(ended, 0);
    // without stop strings there is nothing to prepare
    EXPECT_EQ(serve::parse_completion(R"({"prompt": "Once"})", false, vocab, chatml).req.limits.stop_set, nullptr);
}

TEST(Server, TheServersSamplingFlagsAreTheDefaultsOfRequests) {
    // toy serve --temp, --top-k, -l, ... (llama-server's): what a request does
    // not set comes from them; each field a request gives replaces one
    const text::Vocab vocab = text::Vocab::load(*gguf::File::open(test::shared_path("models/stories260K.gguf")));
    const text::ChatTemplate chatml(text::ChatTemplate::builtin_source("chatml"), "<s>", "</s>", "chatml");
    const text::SamplerParams openai = serve::default_request_sampling();
    EXPECT_EQ(openai.temp, 1.0f);
    EXPECT_EQ(openai.top_k, 0);
    EXPECT_EQ(openai.top_p, 1.0f);
    EXPECT_EQ(openai.min_p, 0.0f);
    text::SamplerParams server = openai;
    server.temp = -1.0f;  // greedy, as llama.cpp's flag allows
    server.top_k = 7;
    server.repeat_penalty = 1.3f;
    server.logit_bias = {{5, -INFINITY}};
    server.order = {text::Stage::TopK, text::Stage::Temperature};
    server.seed = 11;
    const auto parse = [&](const std::string &body) { return serve::parse_completion(body, false, vocab, chatml, server).req.sampling; };
    const text::SamplerParams plain = parse(R"({"prompt": "Once"})");
    EXPECT_EQ(plain.temp, -1.0f);
    EXPECT_EQ(plain.top_k, 7);
    EXPECT_EQ(plain.repeat_penalty, 1.3f);
    EXPECT_EQ(plain.logit_bias, server.logit_bias);
    EXPECT_EQ(plain.order, server.order);
    EXPECT_EQ(plain.seed, 11u);
    const text::SamplerParams own = parse(
        R"({"prompt": "Once", "temperature": 0.5, "top_k": 2, "logit_bias": {"6": 1}, "samplers": ["min_p"], "seed": 3})");
    EXPECT_EQ(own.temp, 0.5f);
    EXPECT_EQ(own.top_k, 2);
    EXPECT_EQ(own.repeat_penalty, 1.3f);  // not given: the server's
    EXPECT_EQ(own.logit_bias, (std::vector<std::pair<int32_t, float>>{{6, 1.0f}}));
    EXPECT_EQ(own.order, std::vector<text::Stage>{text::Stage::MinP});
    EXPECT_EQ(own.seed, 3u);
    // a request's own temperature keeps OpenAI's range; null is no value (the server's)
    EXPECT_EQ(parse(R"({"prompt": "Once", "temperature": null})").temp, -1.0f);
    try {
        parse(R"({"prompt": "Once", "temperature": -1})");
        ADD_FAILURE() << "a negative temperature in a request was taken";
    } catch (const serve::ApiError &e) {
        EXPECT_EQ(e.status, 400);
    }
    // the flags' values are checked before the server starts
    const test::CommandResult bad =
        test::run_command(test::shell_quote(test::toy_bin()) + " serve -m " + test::shared_path("models/stories260K.gguf") +
                          " --port 0 --top-p 2");
    EXPECT_EQ(bad.code, 1);
    EXPECT_NE(bad.err.find("--top-p: expected a number from 0 to 1 (1: off), found 2"), std::string::npos) << bad.err;
}

// /v1/embeddings: OpenAI's shape, the same vectors as toy embed (the model's
// pooling, Euclidean-normalized), base64 as float32 little-endian bytes,
// token-id inputs, errors, and a completion served alongside.
TEST(Server, EmbeddingsAreOpenAisShapeAndToyEmbedsValues) {
    Server s;
    const httplib::Client &c = s.client();
    int status = 0;
    const json r = post(c, "/v1/embeddings", R"({"input": ["Once upon a time", "The cat sat."], "model": "x"})", &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["object"], "list");
    EXPECT_EQ(r["model"], "stories");
    ASSERT_EQ(r["data"].size(), 2u);
    // the same as toy embed's (the model has no pooling_type: mean)
    const auto cli = test::run_toy("embed -m " + test::shell_quote(test::shared_path("models/stories260K.gguf")) +
                                   " -p 'Once upon a time\\nThe cat sat.' --json");  // (-p's escapes: two texts)
    ASSERT_EQ(cli.code, 0) << cli.err;
    const json want = json::parse(cli.out)["data"];
    size_t n_tokens = 0;
    for (size_t k = 0; k < 2; ++k) {
        EXPECT_EQ(r["data"][k]["index"], k);
        EXPECT_EQ(r["data"][k]["object"], "embedding");
        const std::vector<float> a = r["data"][k]["embedding"], b = want[k]["embedding"];
        ASSERT_EQ(a.size(), (size_t)s.model->config().n_embd);
        for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << k << " " << i;
        n_tokens += s.vocab.tokenize(k == 0 ? "Once upon a time" : "The cat sat.", true, true).size();
    }
    EXPECT_EQ(r["usage"]["prompt_tokens"], n_tokens);
    // base64: the same floats
    const json b64 = post(c, "/v1/embeddings", R"({"input": "Once upon a time", "encoding_format": "base64"})", &status);
    ASSERT_EQ(status, 200) << b64.dump();
    const std::string text = b64["data"][0]["embedding"];
    std::string bytes;
    const std::string digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i + 3 < text.size() + 0; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int j = 0; j < 4; ++j) {
            const char ch = text[i + j];
            v = v << 6 | (ch == '=' ? (++pad, 0u) : (uint32_t)digits.find(ch));
        }
        bytes += (char)(v >> 16);
        if (pad < 2) bytes += (char)(v >> 8);
        if (pad < 1) bytes += (char)v;
    }
    ASSERT_EQ(bytes.size(), 4 * r["data"][0]["embedding"].size());
    for (size_t i = 0; i < bytes.size() / 4; ++i) {
        float f;
        std::memcpy(&f, bytes.data() + 4 * i, 4);
        EXPECT_EQ(f, r["data"][0]["embedding"][i].get<float>()) << i;
    }
    // token ids, as one input or several
    const json ids = post(c, "/tokenize", R"({"content": "Once upon a time", "add_special": true})")["tokens"];
    const json by_ids = post(c, "/v1/embeddings", json{{"input", ids}}.dump(), &status);
    ASSERT_EQ(status, 200) << by_ids.dump();
    EXPECT_EQ(by_ids["data"][0]["embedding"], r["data"][0]["embedding"]);
    EXPECT_EQ(post(c, "/v1/embeddings", json{{"input", json::array({ids, ids})}}.dump(), &status)["data"].size(), 2u);
    // errors: OpenAI's error objects
    for (const char *bad : {R"({"input": ""})", R"({"input": []})", R"({"input": [[]]})", R"({"input": 5})", R"({"input": [1, "a"]})",
                            R"({"input": ["a", 5]})", R"({"input": [99999]})", R"({"input": "x", "encoding_format": "hex"})",
                            R"({"input": "x", "dimensions": 3})", R"({})"}) {
        const json e = post(c, "/v1/embeddings", bad, &status);
        EXPECT_EQ(status, 400) << bad;
        EXPECT_TRUE(e.contains("error")) << bad << " " << e.dump();
    }
    std::string longer;
    for (int i = 0; i < 80; ++i) longer += "Once upon a time ";  // past the 256 cells of a slot, within the 4 KiB body
    const json too_long = post(c, "/v1/embeddings", json{{"input", longer}}.dump(), &status);
    EXPECT_EQ(status, 400) << too_long.dump();
    // while a completion runs, and after it: the completion is the one served alone
    const json alone = post(c, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0})");
    json beside;
    std::thread t([&] { beside = post(s.client(), "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0})"); });
    for (int i = 0; i < 5; ++i) EXPECT_EQ(post(c, "/v1/embeddings", R"({"input": "The cat sat."})", &status)["data"].size(), 1u);
    t.join();
    EXPECT_EQ(beside["choices"][0]["text"], alone["choices"][0]["text"]);
}
