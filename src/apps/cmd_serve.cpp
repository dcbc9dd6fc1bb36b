// toy serve: the OpenAI-compatible HTTP server (serve/api.h) over the
// continuous-batching scheduler (serve/scheduler.h). It listens at once and
// answers /health with 503 while the model loads.
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "serve/api.h"

#include <cstdio>
#include <filesystem>
#include <thread>

namespace toy::cli {
namespace {

struct ServeOptions {
    ModelFlags model;
    std::string host = "127.0.0.1";
    int port = 8080;
    int n_parallel = 4;
    int64_t max_queue = 64;
    std::string api_key;
    size_t max_body = 1 << 20;
    std::string alias;
    std::string chat_template;
    std::string chat_template_file;
    DraftFlags draft;  // speculative decoding: -md / --lookup-ngram
    std::string pooling;  // of /v1/embeddings ("": the model's, else mean)
    text::SamplerParams sampling = serve::default_request_sampling();  // what a request does not set
};

int run_serve(const ServeOptions &o) {
    // every flag checked before the port is bound and the HTTP threads start
    serve::SchedulerOptions sched_opts{o.n_parallel, o.max_queue, o.model.n_batch};
    serve::check_scheduler_options(sched_opts);
    // OpenAI's embeddings are one vector per input: no --pooling none
    if (!o.pooling.empty()) sched_opts.pooling = parse_pooling(o.pooling, "--pooling", false);
    if (o.port < 0 || o.port > 65535) fail("--port {}: expected a port from 1 to 65535, or 0 for any free one", o.port);
    if (o.max_body < 1) fail("--max-body {}: expected a size of at least 1 byte", o.max_body);
    serve::ApiOptions ao;
    ao.api_key = o.api_key;
    ao.max_body = o.max_body;
    ao.n_http_threads = (size_t)(o.n_parallel + o.max_queue + 4);
    ao.model_name = o.alias.empty() ? std::filesystem::path(o.model.model_path).filename().string() : o.alias;
    ao.sampling = o.sampling;
    serve::Api api(ao);
    const int port = api.bind(o.host, o.port);
    if (port < 0) fail("cannot listen on {}:{} (in use, or not an address of this machine)", o.host, o.port);
    std::thread listener([&] { api.listen(); });

    std::unique_ptr<Model> model;
    std::unique_ptr<text::Vocab> vocab;
    std::unique_ptr<text::ChatTemplate> tmpl;
    std::unique_ptr<serve::Scheduler> sched;
    try {
        model = o.model.load(kServingTokens);  // auto's huge pages: the load is paid once
        SessionOptions so = o.model.session_options();
        if (o.model.n_ctx == 0) so.n_ctx = std::min<int64_t>(model->config().n_ctx_train, 4096);
        std::unique_ptr<Drafter> drafter = o.draft.make_drafter(*model, so.n_ctx, o.model, kServingTokens);
        if (drafter) std::fprintf(stderr, "toy: speculative decoding: %s\n", drafter->name().c_str());
        vocab = std::make_unique<text::Vocab>(text::Vocab::load(model->file()));
        print_notes(*vocab);
        std::string note;
        tmpl = std::make_unique<text::ChatTemplate>(
            text::select_chat_template(model->file(), *vocab, o.chat_template, o.chat_template_file, &note));
        if (!note.empty()) std::fprintf(stderr, "toy: %s\n", note.c_str());
        if (o.pooling.empty()) sched_opts.pooling = model_pooling(*model);
        sched = std::make_unique<serve::Scheduler>(*model, *vocab, so, sched_opts, std::move(drafter), o.draft.params);
        api.attach(*model, *vocab, *tmpl, *sched);
    } catch (...) {
        api.stop();
        listener.join();
        throw;
    }
    std::fprintf(stderr, "toy: serving %s on http://%s:%d (%d sequences of %lld tokens, chat template %s)\n",
                 ao.model_name.c_str(), o.host.c_str(), port, o.n_parallel, (long long)sched->context_per_slot(),
                 tmpl->name().c_str());
    std::fflush(stderr);
    listener.join();
    return 0;
}

Command reg("serve", "OpenAI-compatible HTTP server: continuous batching of concurrent requests", [](CLI::App &app) {
    auto o = std::make_shared<ServeOptions>();
    o->model.add_to(app);
    app.add_option("--host", o->host, "address to listen on (default 127.0.0.1)");
    app.add_option("--port", o->port, "port (default 8080; 0: any free port, printed at start)");
    app.add_option("--parallel", o->n_parallel, "sequences decoded together; each gets -c / -np tokens (default 4); also -np");
    app.add_option("--max-queue", o->max_queue, "requests waiting for a sequence before 503 (default 64, at most 1024)");
    app.add_option("--api-key", o->api_key, "require Authorization: Bearer KEY on every route but /health");
    app.add_option("--max-body", o->max_body, "largest request body in bytes (default 1 MiB)");
    app.add_option("-a,--alias", o->alias, "model name in the API (default: the file name)");
    app.add_option("--chat-template", o->chat_template, "built-in template name or Jinja source (default: the model's)");
    app.add_option("--chat-template-file", o->chat_template_file, "read the Jinja chat template from a file");
    o->draft.add_to(app);
    app.add_option("--pooling", o->pooling, "pooling of /v1/embeddings: mean, cls or last (default: the model's pooling_type, else mean)");
    // llama-server's: the sampling of requests that do not set it (shown with
    // the server's defaults: OpenAI's where OpenAI has the field)
    add_sampling_flags(app, o->sampling);
    return [o] { return run_serve(*o); };
});

}  // namespace
}  // namespace toy::cli
