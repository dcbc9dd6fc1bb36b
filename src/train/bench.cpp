#include "train/bench.h"

#include "core/error.h"
#include "core/memory.h"
#include "runtime/bandwidth.h"
#include "text/vocab.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace toy::train {

double training_flops_per_token(const Model &model, int64_t n_ctx, bool weights_train, int64_t adapter_params) {
    const gguf::File &f = model.file();
    double p = 0;
    for (const auto &t : f.tensors()) {
        const bool gathered = t.name == "token_embd.weight" || t.name == "position_embd.weight";
        if (t.n_dims >= 2 && !gathered) p += (double)t.n_elements();
    }
    if (!f.has_tensor("output.weight")) p += (double)f.tensor("token_embd.weight").n_elements();  // tied
    const Config &c = model.config();
    const double attention = 6.0 * (double)n_ctx * (double)c.n_head * (double)(c.head_dim_k + c.head_dim_v) * (double)c.n_layer;
    return (weights_train ? 6.0 : 4.0) * p + 6.0 * (double)adapter_params + attention;
}

BenchResult bench_training(const RunSettings &s, int n_threads, int64_t steps, bool grad_checkpointing) {
    if (steps < 1) fail("--bench: expected at least 1 timed step, found {}", steps);
    Trainable t = load_trainable(s);
    TrainerOptions to = trainer_options(s);
    to.recompute = grad_checkpointing;
    const int64_t per_step = to.seqs_per_ubatch * to.ubatches;

    // the windows: the data's, cycled, or random tokens
    std::vector<Window> windows;
    if (!s.data.empty()) {
        const text::Vocab vocab = text::Vocab::load(t.model->file());
        windows = load_dataset(s.data, vocab, nullptr, s.n_ctx, s.separator).windows;
    } else {
        std::mt19937_64 rng(s.seed);
        const int64_t n_vocab = t.model->config().n_vocab;
        for (int64_t i = 0; i < per_step; ++i) {
            Window w;
            for (int64_t k = 0; k <= s.n_ctx; ++k) w.tokens.push_back((int32_t)(rng() % (uint64_t)n_vocab));
            w.mask.assign(s.n_ctx, 1);
            w.n_targets = s.n_ctx;
            windows.push_back(std::move(w));
        }
    }

    Engine engine(n_threads);
    Trainer trainer(engine, *t.tm, to);
    std::vector<double> ms;
    for (int64_t step = 0; step <= steps; ++step) {  // step 0 builds the graphs: not timed
        std::vector<const Window *> batch;
        for (int64_t i = 0; i < per_step; ++i) batch.push_back(&windows[(size_t)((step * per_step + i) % (int64_t)windows.size())]);
        const auto t0 = std::chrono::steady_clock::now();
        trainer.step(batch, s.opt.lr);
        const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (step > 0) ms.push_back(dt);
    }
    std::sort(ms.begin(), ms.end());

    BenchResult r;
    const bool full = s.mode == Mode::Full;
    r.mode = full ? "full" : fmt::format("lora rank {}", s.lora.rank);
    r.steps = steps;
    r.tokens_per_step = per_step * s.n_ctx;
    r.n_trainable = t.tm->params().n_elements();
    r.ms_per_step = ms[ms.size() / 2];
    r.tokens_per_s = (double)r.tokens_per_step / (r.ms_per_step / 1e3);
    r.flops_per_token = training_flops_per_token(*t.model, s.n_ctx, full, full ? 0 : r.n_trainable);
    r.gflops = r.flops_per_token * r.tokens_per_s / 1e9;
    r.weight_bytes = t.model->weight_bytes();
    r.state_bytes = t.tm->params().state_bytes();
    r.peak_rss = peak_rss_bytes();  // before the probe's own buffers
    r.peak_gflops = measure_f32_matmul_gflops(engine);
    return r;
}

}  // namespace toy::train
