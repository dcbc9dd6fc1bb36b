// The training step: the forward graph of the one builder in training mode
// over a micro-batch of sequences, a masked next-token cross-entropy loss,
// its gradient through ggml's backward pass accumulated over the micro-batches
// of a step, then one optimizer update (AdamW or SGD, toy's own moments and
// step counter, gradient-norm clipping) as a graph of toy's update ops
// (train/optimizer.h).
//
// Shapes: a micro-batch is n_seqs windows of T tokens, tokens [T * n_seqs];
// logits [n_vocab, T * n_seqs]; targets [T * n_seqs] (I32, -1 on rows that are
// not targets: they add neither loss nor gradient); a scalar weight turns the
// loss's per-row mean into the mean over the step's targets.
#pragma once

#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/trace.h"
#include "train/data.h"
#include "train/trainable.h"

#include <ggml-alloc.h>

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace toy::train {

enum class OptimizerKind { AdamW, Sgd };
enum class ScheduleKind { Constant, Cosine, Linear };

struct OptimizerOptions {
    OptimizerKind kind = OptimizerKind::AdamW;
    float lr = 1e-4f;
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float weight_decay = 0.0f;  // decoupled (AdamW); only on parameters with decay set
    float grad_clip = 1.0f;     // max global gradient norm; 0: no clipping
};

// Learning rate at a step: linear warmup from 0, then constant, cosine or
// linear decay to lr * min_ratio at `total` steps.
struct LrSchedule {
    float lr = 1e-4f;
    int64_t warmup = 0;
    int64_t total = 1;
    ScheduleKind kind = ScheduleKind::Cosine;
    float min_ratio = 0.0f;
    float at(int64_t step) const;  // step counts from 0
};

struct TrainerOptions {
    int64_t n_ctx = 128;          // T: tokens per sequence
    int64_t seqs_per_ubatch = 1;  // sequences per graph
    int64_t ubatches = 1;         // micro-batches accumulated per optimizer step
    OptimizerOptions opt;
    FILE *trace = nullptr;        // per-block activation statistics of each training graph
    bool recompute = false;       // gradient checkpointing: keep block inputs, recompute the rest in the backward
};

struct StepStats {
    double loss = 0;              // mean over the step's targets
    double grad_norm = 0;         // before clipping
    std::vector<std::pair<std::string, double>> group_norms;
    int64_t n_targets = 0;
};

class Trainer {
public:
    Trainer(const Engine &engine, TrainableModel &model, const TrainerOptions &opts);
    ~Trainer();
    Trainer(const Trainer &) = delete;
    Trainer &operator=(const Trainer &) = delete;

    int64_t seqs_per_step() const { return opts_.seqs_per_ubatch * opts_.ubatches; }

    // One optimizer step over seqs_per_step() windows of n_ctx (+1) tokens:
    // gradients() then update().
    StepStats step(std::span<const Window *const> windows, float lr);
    // The loss and gradients (left in the parameters' .grad) of a step's windows.
    StepStats gradients(std::span<const Window *const> windows);
    // The optimizer update from the gradients of the last gradients() call.
    void update(const StepStats &st, float lr);
    // Mean loss over the windows' targets (no update, no gradient).
    double evaluate(std::span<const Window> windows);

    // Optimizer steps taken so far, as restored from a checkpoint (AdamW's bias correction counts from it).
    void set_optimizer_steps(int64_t n) { opt_steps_ = n; }

private:
    struct LossGraph;
    void build_loss_graph(LossGraph &lg, bool backward);
    // Runs lg over windows [0, seqs_per_ubatch) with this weight on its loss; returns the loss value.
    double run_ubatch(LossGraph &lg, std::span<const Window *const> windows, float weight);
    void build_optimizer_graphs();

    const Engine &engine_;
    TrainableModel &model_;
    TrainerOptions opts_;
    std::unique_ptr<LossGraph> train_;  // built at the first step
    TraceState trace_;

    // gradient norms and the optimizer update, each with a scheduler of its
    // own (parameters may live on offload devices)
    ggml_context *opt_ctx_ = nullptr;
    ggml_cgraph *norm_graph_ = nullptr, *update_graph_ = nullptr;
    ggml_backend_sched_t norm_sched_ = nullptr, update_sched_ = nullptr;
    // the sums of squared gradients, one vector per device holding parameters
    // (one read per device, not per parameter): entry k is params[index[k]]'s
    struct NormRead {
        ggml_tensor *sums = nullptr;
        std::vector<size_t> index;
    };
    std::vector<NormRead> norm_reads_;
    ggml_tensor *hp_decay_ = nullptr, *hp_no_decay_ = nullptr;
    InputBuffer opt_inputs_;
    int64_t opt_steps_ = 0;
    bool pending_ = false;  // gradients computed, not yet applied
};

}  // namespace toy::train
