// toy imatrix: llama-imatrix's importance matrix (sums of squared inputs of
// every weight matrix over a calibration text; eval/imatrix.h) in its GGUF
// format, for toy quantize --imatrix or llama-quantize.
//
//   toy imatrix -m model-f16.gguf -f calibration.txt -o imatrix.gguf -c 512
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "core/progress.h"
#include "eval/imatrix.h"

#include <unistd.h>

#include <cstdio>
#include <memory>

namespace toy::cli {
namespace {

struct ImatrixFlags {
    ModelFlags model;
    std::string file;
    std::string output = "imatrix.gguf";
    int64_t n_chunks = -1;
    int64_t output_frequency = 10;
    bool process_output = false;
    bool no_ppl = false;
};

int run_imatrix(const ImatrixFlags &f) {
    if (f.file.empty()) fail("-f: a calibration text file is required");
    if (!f.model.lora.lora.empty() || !f.model.lora.lora_scaled.empty()) {
        fail("--lora: toy imatrix measures the model's own weights; merge the adapter first (toy export)");
    }
    const std::string text = read_input_file(f.file, "-f");
    eval::ImatrixOptions io;
    io.n_ctx = f.model.n_ctx > 0 ? f.model.n_ctx : 512;
    io.n_batch = f.model.n_batch;
    io.n_chunks = f.n_chunks;
    io.process_output = f.process_output;
    io.compute_ppl = !f.no_ppl;
    io.output_frequency = f.output_frequency;
    io.output = f.output;
    io.dataset = f.file;

    auto model = Model::load(f.model.model_path, eval::imatrix_load_options(f.model.load_options()));
    const text::Vocab vocab = text::Vocab::load(model->file());
    print_notes(vocab);

    const bool bar = isatty(STDOUT_FILENO) == 0;  // on a terminal the running PPL is the progress
    std::unique_ptr<Progress> progress;
    auto on_chunk = [&](const eval::ChunkReport &c) {
        if (bar && !progress) progress = std::make_unique<Progress>("imatrix chunks", (uint64_t)c.n_chunks);
        if (io.compute_ppl) {
            std::printf("[%lld]%.4f,", (long long)c.chunk, c.ppl);
            std::fflush(stdout);
        }
        if (progress) progress->update((uint64_t)c.chunk);
    };
    const eval::ImatrixResult r =
        eval::compute_imatrix(*model, vocab, text, f.file, io, f.model.session_options(), on_chunk);
    progress.reset();
    if (r.ppl) std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl->value, r.ppl->err);
    fmt::print(stderr, "toy: wrote {} ({} matrices; {} chunks of {} tokens from {} tokens of {})\n", f.output,
               r.matrix.entries.size(), r.plan.n_chunks, r.plan.n_ctx, r.n_tokens, f.file);
    return 0;
}

Command reg("imatrix", "Importance matrix of a model's weights on a calibration text (llama-imatrix's GGUF format)",
            [](CLI::App &app) {
                auto f = std::make_shared<ImatrixFlags>();
                f->model.n_ctx = 512;  // llama.cpp's default for these tools
                f->model.add_to(app, /*with_trace=*/false);
                app.get_option("--ctx-size")->description("tokens per chunk");
                app.get_option("--batch-size")
                    ->description("logical batch: up to -b / -c chunks are evaluated together (default 2048)");
                app.get_option("--no-repack")->description("(always: the matrices are read in the file's layout)");
                app.get_option("--no-fuse")->description("(always: Q, K and V are measured apart)");
                app.add_option("-f,--file", f->file, "calibration text (`-` for standard input)");
                app.add_option("-o,--output-file", f->output, "the imatrix to write (default imatrix.gguf)");
                app.add_option("--chunks", f->n_chunks, "process at most this many chunks (default: all)");
                app.add_option("--output-frequency", f->output_frequency,
                               "save the matrix every this many chunks (default 10; 0: only at the end)");
                app.add_flag("--process-output", f->process_output, "collect output.weight too");
                app.add_flag("--no-ppl", f->no_ppl, "do not compute the text's perplexity on the way");
                return [f] { return run_imatrix(*f); };
            });

}  // namespace
}  // namespace toy::cli
