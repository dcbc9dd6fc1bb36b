// A training run from start to end, as `toy train` does it: load the model
// and data, train for the epochs or steps asked for, evaluate held-out loss,
// log every step (CSV), checkpoint every N steps and on SIGINT/SIGTERM, resume
// from a checkpoint bit for bit, plot the losses (SVG) and write the result
// (a model GGUF, or a LoRA adapter in llama.cpp's format).
#pragma once

#include "model/split.h"
#include "train/trainable.h"
#include "train/trainer.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace toy::train {

// Everything that decides what a run computes; saved in its checkpoints.
struct RunSettings {
    std::string model;             // base GGUF (from scratch: the random model toy init wrote)
    std::string data;              // training text (.txt) or chat (.jsonl)
    std::string val_data;          // held-out file; empty: val_split of the data
    double val_split = 0.0;
    std::string separator = "<|endoftext|>";
    std::string chat_template;     // a built-in name, or empty for the model's own
    Mode mode = Mode::Full;
    std::string lens_from;         // a donor GGUF: projection lens on its embedding (from scratch)
    LoraOptions lora;
    int64_t n_ctx = 128;           // -c: tokens per window
    int64_t n_batch = 0;           // -b: tokens per optimizer step (0: n_ctx)
    int64_t n_ubatch = 0;          // -ub: tokens per graph (0: n_batch)
    OptimizerOptions opt;
    ScheduleKind schedule = ScheduleKind::Cosine;
    int64_t warmup = 0;
    float lr_min_ratio = 0.0f;
    int64_t epochs = 1;
    int64_t max_steps = 0;         // > 0: stop after this many steps (epochs as needed)
    int64_t eval_every = 0;        // steps between held-out evaluations (0: at the end only)
    uint64_t seed = 42;

    nlohmann::json to_json() const;
    static RunSettings from_json(const nlohmann::json &j);
};

struct RunIo {
    std::string output;            // the trained model or adapter
    bool per_head_layout = false;  // a trained model with attn_q/k/v per head (model/export.h)
    std::string checkpoint_dir;    // empty: no checkpoints
    int64_t checkpoint_every = 0;  // steps; 0: only at the end and on a signal
    int keep_checkpoints = 3;
    std::string resume;            // a checkpoint file, or a directory (its newest)
    std::string log_csv;           // empty: none
    std::string plot_svg;          // empty: none
    int n_threads = 0;
    // the frozen base of a LoRA run on other devices (RPC servers, GPUs);
    // full and from-scratch runs train on the CPU
    SplitOptions split;
    bool grad_checkpointing = false;  // recompute activations in the backward (less memory, more compute)
    FILE *progress = stderr;       // null: quiet
    FILE *trace = nullptr;         // per-block activation statistics
    const std::atomic<bool> *stop = nullptr;  // set by a signal handler: checkpoint and return
};

struct RunResult {
    int64_t steps = 0;
    double train_loss = NAN;        // mean of the last step
    double val_loss = NAN;          // last evaluation
    bool interrupted = false;
    std::string checkpoint;         // the last one written
    double tokens_per_s = 0;
    size_t peak_rss = 0;
};

RunResult run_training(RunSettings s, const RunIo &io);

// The model of a run, loaded for training, and its trainable part (whole, or LoRA adapters).
struct Trainable {
    std::unique_ptr<Model> model;
    std::unique_ptr<TrainableModel> tm;
};
// Throws toy::Error when `split` offloads anything and the run is not LoRA.
Trainable load_trainable(const RunSettings &s, const SplitOptions &split = {});

// The trainer's shape from -c, -b, -ub (checked) and the optimizer settings.
TrainerOptions trainer_options(const RunSettings &s);

// Mean next-token loss of `model` on the windows of a data file, as the trainer computes it.
double held_out_loss(const std::string &model, const std::string &data, int64_t n_ctx, int n_threads,
                     int64_t *n_targets = nullptr);

// The loss plot: training loss per step and held-out loss per evaluation.
void write_loss_plot(const std::string &path, const std::vector<float> &train, const std::vector<int64_t> &val_steps,
                     const std::vector<float> &val, const std::string &title);

}  // namespace toy::train
