// `toy train --bench N`: the training step's speed and memory without a run
// around it. One untimed step (graphs built, buffers allocated), then N timed
// optimizer steps on the data given (or on random tokens), reporting tokens/s,
// the matmul FLOPs per token and the fraction of this machine's measured F32
// matmul peak they reach, and the memory of the parts (weights, trainable
// state, peak RSS).
#pragma once

#include "train/run.h"

#include <cstdint>
#include <string>

namespace toy::train {

struct BenchResult {
    std::string mode;             // "full" or "lora rank R"
    int64_t steps = 0;
    int64_t tokens_per_step = 0;
    int64_t n_trainable = 0;      // parameters
    double ms_per_step = 0;       // median over the timed steps
    double tokens_per_s = 0;      // from the median step
    double flops_per_token = 0;   // matmuls of forward and backward (attention included)
    double gflops = 0;            // achieved
    double peak_gflops = 0;       // this machine's F32 matmul, same threads
    size_t weight_bytes = 0;      // the base model's tensors
    size_t state_bytes = 0;       // trainable parameters, gradients, moments
    size_t peak_rss = 0;
};

// Benchmarks the step the run `s` would take (its model, mode, -c/-b/-ub and
// optimizer); data from s.data, or random tokens when it is empty.
BenchResult bench_training(const RunSettings &s, int n_threads, int64_t steps, bool grad_checkpointing = false);

// Matmul FLOPs per trained token of one step: forward 2P, backward 2P for the
// inputs' gradient plus 2P for the weights' when they train (P: parameters of
// the projections, output included, embeddings gathered not multiplied; a
// LoRA run adds 6 per adapter parameter), plus
// attention's Q·K and P·V over the full window (forward 4*T*H*d per layer,
// backward twice that).
double training_flops_per_token(const Model &model, int64_t n_ctx, bool weights_train, int64_t adapter_params);

}  // namespace toy::train
