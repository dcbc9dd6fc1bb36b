// toy embed: embeddings of texts, as llama.cpp's llama-embedding computes
// them: the final norm's hidden states, pooled per text (--pooling) and
// normalized (--embd-normalize); one text per line of the input
// (--embd-separator).
//
//   toy embed -m model.gguf -p $'first text\nsecond text' [--pooling mean] [--json]
#include "apps/cli.h"
#include "apps/prompt_input.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "runtime/embeddings.h"
#include "text/vocab.h"

#include <nlohmann/json.hpp>

#include <memory>

namespace toy::cli {
namespace {

struct EmbedOptions {
    ModelFlags model;
    PromptFlags input;
    std::string pooling;  // "": the model's
    int normalize = 2;
    std::string separator = "\n";
    bool json = false;
};

int run_embed(const EmbedOptions &o) {
    o.input.check_one();
    if (o.normalize < -1) fail("--embd-normalize: expected -1 (none), 0 (int16 range), 1 (taxicab), 2 (Euclidean) or a p-norm p > 2, found {}", o.normalize);
    const std::string separator = o.input.no_escape ? o.separator : process_escapes(o.separator);  // as -p's text
    if (separator.empty()) fail("--embd-separator: expected a non-empty separator");
    auto model = o.model.load(0);
    const Pooling pooling = o.pooling.empty() ? model_pooling(*model) : parse_pooling(o.pooling, "--pooling");
    const text::Vocab vocab = text::Vocab::load(model->file());
    // the texts: -p/-f cut at the separator (empty pieces skipped), or --tokens as one
    std::vector<std::vector<int32_t>> inputs;
    if (o.input.as_ids()) {
        inputs.push_back(o.input.ids());
    } else {
        const std::string all = o.input.text();
        for (size_t at = 0; at <= all.size();) {
            const size_t end = std::min(all.find(separator, at), all.size());
            if (end > at) inputs.push_back(vocab.tokenize(all.substr(at, end - at), /*add_special=*/true, /*parse_special=*/true));
            at = end + separator.size();
        }
        if (inputs.empty()) fail("nothing to embed: the text is empty");
    }
    SessionOptions so = o.model.session_options();
    so.embeddings = true;
    if (so.n_ctx == 0) {  // room for the longest text
        size_t most = 1;
        for (const auto &t : inputs) most = std::max(most, t.size());
        so.n_ctx = (int64_t)most;
    }
    Session session(*model, so);
    print_notes(session);
    nlohmann::json data = nlohmann::json::array();
    int index = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
        for (const std::vector<float> &v : embed(session, inputs[k], pooling, o.normalize)) {
            if (o.json) {
                data.push_back({{"object", "embedding"}, {"index", index}, {"embedding", v}});
            } else {
                std::string line = fmt::format("embedding {}:", index);
                for (float x : v) line += fmt::format(" {:.7g}", x);
                std::printf("%s\n", line.c_str());
            }
            ++index;
        }
    }
    if (o.json) {
        std::printf("%s\n", nlohmann::json{{"object", "list"}, {"data", data}, {"model", model->path()}, {"pooling", pooling_name(pooling)}}
                                .dump()
                                .c_str());
    }
    return 0;
}

Command reg("embed", "Embeddings of texts (one per line) as llama-embedding computes them: pooled, normalized hidden states",
            [](CLI::App &app) {
                auto o = std::make_shared<EmbedOptions>();
                o->model.add_to(app);
                o->input.add_to(app, /*with_tokens=*/true);
                app.add_option("--pooling", o->pooling,
                               "none (every token), mean, cls (the first token) or last (default: the model's pooling_type, else mean)");
                app.add_option("--embd-normalize", o->normalize,
                               "-1 none, 0 scaled to int16's range, 1 taxicab, 2 Euclidean (default), p > 2: p-norm");
                app.add_option("--embd-separator", o->separator, "what separates the texts (escapes as in -p)")->default_str("\\n");
                app.add_flag("--json", o->json, "print OpenAI's embeddings list as JSON");
                return [o] { return run_embed(*o); };
            });

}  // namespace
}  // namespace toy::cli
