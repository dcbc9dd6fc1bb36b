// fuzz_request: the server's completion request parser (serve/request.h) as
// toy serve runs it on every POST body of /v1/completions and
// /v1/chat/completions, and the embeddings parser of /v1/embeddings. Input:
// byte 0 picks the endpoint (bit 0: chat; bit 2: embeddings) and the
// model's vocabulary (bit 1), the rest is the body. A body either parses
// or is an ApiError with a 4xx status and a message (a toy::Error is a bug:
// the server would answer 400 with an internal message, so it is a finding
// too); what parses must be a request the scheduler can run: prompt ids in
// the vocabulary, sane limits, at most 20 log-probabilities, sampler
// parameters that sample inside the vocabulary, and a generation (stop
// strings, grammar) whose text is what its tokens spell, up to a stop string.
#include "fuzz_common.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "serve/request.h"
#include "text/chat_template.h"
#include "text/generation.h"
#include "text/vocab.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace toy;

namespace {
std::unique_ptr<text::Vocab> g_vocabs[2];
std::unique_ptr<text::ChatTemplate> g_template;

[[noreturn]] void finding(const char *what) {
    std::fprintf(stderr, "fuzz_request: %s\n", what);
    std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const char *paths[] = {"models/stories260K.gguf", "fixtures/gpt2.f32.gguf"};
    for (int i = 0; i < 2; ++i) {
        auto f = gguf::File::open(fuzz::shared_path(paths[i]));
        g_vocabs[i] = std::make_unique<text::Vocab>(text::Vocab::load(*f));
    }
    g_template = std::make_unique<text::ChatTemplate>(text::ChatTemplate::builtin_source("chatml"), "<s>", "</s>", "chatml");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Input in(data, size);
    const uint8_t opts = in.byte();
    const bool chat = opts & 1;
    const text::Vocab &vocab = *g_vocabs[(opts >> 1) & 1];
    const std::string body(in.rest());
    if (opts & 4) {  // /v1/embeddings
        try {
            const serve::EmbeddingsRequest e = serve::parse_embeddings(body, vocab, 64);
            if (e.inputs.empty() || e.inputs.size() > 2048) finding("an embeddings request of no or too many inputs");
            for (const auto &t : e.inputs) {
                if (t.empty()) finding("an empty embeddings input");
                for (int32_t id : t) {
                    if (id < 0 || id >= vocab.n_tokens()) finding("an embeddings token outside the vocabulary");
                }
            }
        } catch (const serve::ApiError &e) {
            if (e.status < 400 || e.status >= 500 || e.message.empty()) finding("an ApiError that is not a 4xx with a message");
        }
        return 0;
    }
    serve::CompletionRequest r;
    try {
        r = serve::parse_completion(body, chat, vocab, *g_template);
    } catch (const serve::ApiError &e) {
        if (e.status < 400 || e.status >= 500 || e.message.empty()) finding("an ApiError that is not a 4xx with a message");
        return 0;
    } catch (const Error &e) {
        // the chat template refusing the messages, a grammar the vocabulary cannot spell
        return 0;
    }
    const serve::Request &req = r.req;
    for (int32_t id : req.prompt) {
        if (id < 0 || id >= vocab.n_tokens()) finding("a prompt token outside the vocabulary");
    }
    if (req.n_logprobs > 20) finding("more than 20 log-probabilities");
    if (req.limits.max_tokens == 0 || req.limits.max_tokens < -1) finding("max_tokens out of range");
    // what the scheduler then runs on its engine thread: the sampler the
    // request asks for (the prompt seen) draws inside the
    // vocabulary, and the text shown is what the tokens spell, up to a stop
    // string where one ended it
    std::vector<float> logits((size_t)vocab.n_tokens());
    text::Sampler sampler(req.sampling);
    for (int32_t t : req.prompt) sampler.accept(t);
    std::string shown;
    std::unique_ptr<text::Generation> gen;
    try {
        gen = std::make_unique<text::Generation>(&vocab, sampler, req.limits);
        for (int step = 0; step < 12; ++step) {
            for (size_t i = 0; i < logits.size(); ++i) logits[i] = (float)(((i + (size_t)step * 7) * 2654435761u) % 1000) / 100.0f;
            const text::Step st = gen->next(logits);
            if (st.token >= vocab.n_tokens() || st.token < -1) finding("a sampled token outside the vocabulary");
            shown += st.text;
            if (st.done) break;
        }
    } catch (const Error &) {
        return 0;  // a grammar that no token of the vocabulary can continue
    }
    shown += gen->flush();
    text::Detokenizer detok(vocab);
    std::string spelled;
    for (int32_t t : gen->tokens()) spelled += detok.push(t);
    spelled += detok.flush();
    if (gen->reason() == text::StopReason::StopString) {
        if (spelled.compare(0, shown.size(), shown) != 0) finding("the text shown is not the beginning of the tokens' text");
        bool found = false;  // (a request's stop strings are not shown)
        for (const std::string &stop : req.limits.stop) {
            found = found || (!stop.empty() && spelled.compare(shown.size(), stop.size(), stop) == 0);
        }
        if (!found) finding("no stop string follows the text shown");
    } else if (shown != spelled) {
        finding("the text shown is not the tokens' text");
    }
    return 0;
}
