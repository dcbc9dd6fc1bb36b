// The optimizer update of one parameter, in place: AdamW (ggml's formula:
// decoupled weight decay, bias-corrected moments) or SGD.
//
// On the CPU, one toy custom op: the gradient-clipping factor applied as the
// gradient is read and the accumulator zeroed as it is consumed, one pass
// over weights, gradients and moments. A parameter on an offload device
// (its block is there, model/split.h) gets ggml's own ops, which every
// backend has: the gradient scaled in place, ggml's step op, and the
// accumulator cleared afterwards (ParamSet::zero_grads(true)); the same
// arithmetic, in more passes.
#pragma once

#include "train/params.h"

#include <ggml.h>

namespace toy::train {

// Hyper-parameters as the ops read them from a [kHyperCount] F32 input: the
// first seven in the order of ggml_opt_step_adamw's parameters, the last two
// ggml_opt_step_sgd's.
enum Hyper {
    kLr, kBeta1, kBeta2, kEps, kWeightDecay, kBeta1Correction, kBeta2Correction,
    kGradScale,
    kSgdLr, kSgdWeightDecay,
    kHyperCount
};

ggml_tensor *adamw_update(ggml_context *ctx, const Param &p, ggml_tensor *hyper);
ggml_tensor *sgd_update(ggml_context *ctx, const Param &p, ggml_tensor *hyper);
// The sum of the squares of p's gradient, one F32 (for the gradient norms).
ggml_tensor *grad_sum_of_squares(ggml_context *ctx, const Param &p);

}  // namespace toy::train
