// toy perplexity: perplexity as llama-perplexity measures it (same windows,
// same scored tokens, same error estimate; eval/perplexity.h), and the KL
// divergence of a model from a base model through llama-perplexity's file of
// base log-probabilities.
//
//   toy perplexity -m model.gguf -f wiki.test.raw -c 512
//   toy perplexity -m f16.gguf -f text.txt --kl-divergence-base base.kld
//   toy perplexity -m q8_0.gguf --kl-divergence-base base.kld --kl-divergence
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "core/progress.h"
#include "eval/perplexity.h"

#include <unistd.h>

#include <cstdio>
#include <memory>

namespace toy::cli {
namespace {

struct PerplexityFlags {
    ModelFlags model;
    std::string file;
    int64_t n_chunks = -1;
    std::string kl_base;
    bool kl_divergence = false;
    CLI::Option *ctx_opt = nullptr;
};

void print_estimate(const char *label, const eval::Estimate &e, int precision) {
    std::printf("%s: %10.*f ± %10.*f\n", label, precision, e.value, precision, e.err);
}

void print_kl_stats(const eval::KlStats &k) {
    std::printf("\n====== Perplexity statistics ======\n");
    print_estimate("Mean PPL(Q)                  ", k.ppl, 6);
    print_estimate("Mean PPL(base)               ", k.ppl_base, 6);
    std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * k.ln_ppl_correlation);
    print_estimate("Mean ln(PPL(Q)/PPL(base))    ", k.ln_ppl_ratio, 6);
    print_estimate("Mean PPL(Q)/PPL(base)        ", k.ppl_ratio, 6);
    print_estimate("Mean PPL(Q)-PPL(base)        ", k.ppl_diff, 6);

    std::printf("\n====== KL divergence statistics ======\n");
    print_estimate("Mean    KLD", k.kld, 6);
    const eval::Quantiles &q = k.kld_q;
    const std::pair<const char *, double> kld_rows[] = {
        {"Maximum KLD", q.max}, {"99.9%   KLD", q.p99_9}, {"99.0%   KLD", q.p99}, {"95.0%   KLD", q.p95},
        {"90.0%   KLD", q.p90}, {"Median  KLD", q.median}, {"10.0%   KLD", q.p10}, {" 5.0%   KLD", q.p5},
        {" 1.0%   KLD", q.p1}, {" 0.1%   KLD", q.p0_1}, {"Minimum KLD", q.min}};
    for (const auto &[label, v] : kld_rows) std::printf("%s: %10.6f\n", label, v);

    std::printf("\n====== Token probability statistics ======\n");
    std::printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * k.p_diff.value, 100.0 * k.p_diff.err);
    const eval::Quantiles &d = k.p_diff_q;
    const std::pair<const char *, double> dp_rows[] = {
        {"Maximum Δp", d.max}, {"99.9%   Δp", d.p99_9}, {"99.0%   Δp", d.p99}, {"95.0%   Δp", d.p95},
        {"90.0%   Δp", d.p90}, {"75.0%   Δp", d.p75}, {"Median  Δp", d.median}, {"25.0%   Δp", d.p25},
        {"10.0%   Δp", d.p10}, {" 5.0%   Δp", d.p5}, {" 1.0%   Δp", d.p1}, {" 0.1%   Δp", d.p0_1},
        {"Minimum Δp", d.min}};
    for (const auto &[label, v] : dp_rows) std::printf("%s: %6.3f%%\n", label, 100.0 * v);
    std::printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * k.p_diff_rms.value, 100.0 * k.p_diff_rms.err);
    std::printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * k.same_top.value, 100.0 * k.same_top.err);
}

int run_perplexity(const PerplexityFlags &f) {
    if (f.kl_divergence && f.kl_base.empty()) {
        fail("--kl-divergence: give the base model's log-probabilities with --kl-divergence-base FILE");
    }
    if (!f.kl_divergence && f.file.empty()) fail("-f: a text file to evaluate on is required");
    const std::string text = f.file.empty() ? std::string() : read_input_file(f.file, "-f");

    eval::PerplexityOptions po;
    po.n_ctx_given = f.ctx_opt->count() > 0;
    po.n_ctx = po.n_ctx_given ? f.model.n_ctx : 512;
    if (po.n_ctx == 0) po.n_ctx = 512;
    po.n_batch = f.model.n_batch;
    po.n_chunks = f.n_chunks;
    po.kl_base = f.kl_base;
    po.kl_divergence = f.kl_divergence;

    auto model = f.model.load();
    const text::Vocab vocab = text::Vocab::load(model->file());
    print_notes(vocab);
    const SessionOptions so = f.model.session_options();

    // On a terminal the running estimates are the progress; a bar on stderr
    // would redraw over them, so it is drawn only when stdout goes elsewhere.
    const bool bar = isatty(STDOUT_FILENO) == 0;
    std::unique_ptr<Progress> progress;
    bool header = false;
    auto on_chunk = [&](const eval::ChunkReport &c) {
        if (bar && !progress) progress = std::make_unique<Progress>("perplexity chunks", (uint64_t)c.n_chunks);
        if (c.kl) {
            if (!header) {
                std::printf("chunk             PPL          ln(PPL(Q)/PPL(base))        KL Divergence           "
                            "Δp RMS            Same top p\n");
                header = true;
            }
            const eval::KlStats &k = *c.kl;
            std::printf("%4lld    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± "
                        "%6.3f %%\n",
                        (long long)c.chunk, k.ppl.value, k.ppl.err, k.ln_ppl_ratio.value, k.ln_ppl_ratio.err, k.kld.value,
                        k.kld.err, 100 * k.p_diff_rms.value, 100 * k.p_diff_rms.err, 100 * k.same_top.value,
                        100 * k.same_top.err);
        } else {
            std::printf("[%lld]%.4f,", (long long)c.chunk, c.ppl);
        }
        std::fflush(stdout);
        if (progress) progress->update((uint64_t)c.chunk);
    };
    const std::string source = f.file.empty() ? f.kl_base : f.file;
    const eval::PerplexityResult r = eval::perplexity(*model, vocab, text, source, po, so, on_chunk);
    progress.reset();
    std::fprintf(stderr, "toy: %lld tokens, %lld chunks of %lld (%lld per graph), %lld tokens scored\n",
                 (long long)r.n_tokens, (long long)r.plan.n_chunks, (long long)r.plan.n_ctx, (long long)r.plan.n_seq,
                 (long long)r.count);
    if (r.kl) {
        print_kl_stats(*r.kl);
    } else {
        std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl.value, r.ppl.err);
        if (!f.kl_base.empty()) std::fprintf(stderr, "toy: wrote the base log-probabilities to %s\n", f.kl_base.c_str());
    }
    return 0;
}

Command reg("perplexity",
            "Perplexity of a model on a text as llama-perplexity measures it; KL divergence from a base model",
            [](CLI::App &app) {
                auto f = std::make_shared<PerplexityFlags>();
                f->model.n_ctx = 512;  // llama.cpp's default for these tools
                f->model.add_to(app);
                f->ctx_opt = app.get_option("--ctx-size");
                f->ctx_opt->description("tokens per window (with --kl-divergence: the base file's unless given)");
                app.get_option("--batch-size")
                    ->description("logical batch: up to -b / -c windows are evaluated together (default 2048)");
                app.add_option("-f,--file", f->file, "text to evaluate on (`-` for standard input)");
                app.add_option("--chunks", f->n_chunks, "evaluate at most this many windows (default: all)");
                app.add_option("--kl-divergence-base", f->kl_base,
                               "file of the base model's log-probabilities (llama-perplexity's format): written by a "
                               "run without --kl-divergence, read with it");
                app.add_flag("--kl-divergence", f->kl_divergence,
                             "compare with --kl-divergence-base: KL divergence, top-token agreement, PPL ratio "
                             "(the windows' tokens come from that file; -f, if given, must match them)");
                return [f] { return run_perplexity(*f); };
            });

}  // namespace
}  // namespace toy::cli
