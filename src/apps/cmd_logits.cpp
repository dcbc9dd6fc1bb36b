// toy logits: logits after each token, as T x n_vocab float32 row-major.
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/atomic_file.h"
#include "core/error.h"

#include <cstdio>
#include <memory>

namespace toy::cli {
namespace {

struct LogitsOptions {
    ModelFlags model;
    std::string tokens;
    std::string output;
    bool stepwise = false;
    std::string dump_weight;
};

void write_floats(const std::string &path, const std::vector<float> &v) {
    write_file_atomic(path, {reinterpret_cast<const char *>(v.data()), v.size() * sizeof(float)});
}

int run_logits(const LogitsOptions &o) {
    if (o.output.empty()) fail("-o: an output file is required");
    check_writable(o.output);  // before the model loads and runs
    std::vector<int32_t> ids;
    if (o.dump_weight.empty()) {
        ids = parse_id_list(o.tokens, "--tokens");
        if (ids.empty()) fail("--tokens: expected at least one token id");
    }
    // one batch decodes nothing; --stepwise one token at a time
    auto model = o.model.load(o.stepwise ? (int64_t)ids.size() : 0);
    if (!o.dump_weight.empty()) {
        std::array<int64_t, 4> ne{};
        std::vector<float> w = model->read_weight(o.dump_weight, &ne);
        write_floats(o.output, w);
        std::fprintf(stderr, "toy: wrote %s [%lld, %lld, %lld, %lld] as float32 to %s\n", o.dump_weight.c_str(),
                     (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3], o.output.c_str());
        return 0;
    }
    Session session(*model, o.model.session_options());
    print_notes(session);
    std::vector<float> all;
    all.reserve(ids.size() * session.n_vocab());
    if (o.stepwise) {
        for (int32_t id : ids) {
            session.eval(std::span<const int32_t>(&id, 1));
            all.insert(all.end(), session.logits().begin(), session.logits().end());
        }
    } else {
        session.eval(ids, /*all_logits=*/true);
        all = session.logits();
    }
    write_floats(o.output, all);
    std::fprintf(stderr, "toy: wrote %zu x %lld logits to %s\n", ids.size(), (long long)session.n_vocab(),
                 o.output.c_str());
    return 0;
}

Command reg("logits", "Write the logits after each token (T x n_vocab float32) or dump a weight", [](CLI::App &app) {
    auto o = std::make_shared<LogitsOptions>();
    o->model.add_to(app);
    app.add_option("--tokens", o->tokens, "token ids, comma-separated");
    app.add_option("-o,--output", o->output, "output file (float32, row-major)");
    app.add_flag("--stepwise", o->stepwise, "one token per eval (decode path) instead of one batch");
    app.add_option("--dump-weight", o->dump_weight, "write this weight (GGUF name) as float32 instead");
    return [o] { return run_logits(*o); };
});

}  // namespace
}  // namespace toy::cli
