// toy eval: the mean next-token loss (and perplexity) of a model on a text
// file, cut into windows of -c tokens as training cuts its held-out data.
//
//   toy eval -m model.gguf -f held-out.txt -c 256
#include "apps/cli.h"
#include "core/error.h"
#include "train/run.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <memory>

namespace toy::cli {
namespace {

struct EvalFlags {
    std::string model, data;
    int64_t n_ctx = 256;
    int n_threads = 0;
    bool json = false;
};

int run_eval(const EvalFlags &f) {
    if (f.data.empty()) fail("-f: a text file to evaluate on is required");
    int64_t n = 0;
    const double loss = train::held_out_loss(f.model, f.data, f.n_ctx, f.n_threads, &n);
    if (f.json) {
        fmt::print("{}\n", nlohmann::json{{"model", f.model}, {"data", f.data}, {"n_ctx", f.n_ctx}, {"loss", loss},
                                          {"perplexity", std::exp(loss)}, {"n_targets", n}}
                               .dump(2));
    } else {
        fmt::print("{}: loss {:.4f} nats/token, perplexity {:.3f} over {} tokens of {} (windows of {})\n", f.model, loss,
                   std::exp(loss), n, f.data, f.n_ctx);
    }
    return 0;
}

Command reg("eval", "Mean next-token loss and perplexity of a model on a text file (as training measures held-out loss)",
            [](CLI::App &app) {
                auto f = std::make_shared<EvalFlags>();
                app.add_option("-m,--model", f->model, "GGUF model")->required();
                app.add_option("-f,--file", f->data, "text (documents split at <|endoftext|>, each ended by EOS)");
                app.add_option("-c,--ctx-size", f->n_ctx, "tokens per window (default 256)");
                app.add_option("-t,--threads", f->n_threads, "threads (0: all)");
                app.add_flag("--json", f->json, "print one JSON object");
                return [f] { return run_eval(*f); };
            });

}  // namespace
}  // namespace toy::cli
