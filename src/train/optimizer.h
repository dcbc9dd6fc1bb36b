// The optimizer update as one ggml custom op per parameter, in place: AdamW
// (ggml's formula: decoupled weight decay, bias-corrected moments) or SGD,
// with the gradient-clipping factor applied as the gradient is read and the
// gradient accumulator zeroed as it is consumed. One pass over weights,
// gradients and moments; ggml's own step op needs a scaled copy of the
// gradient for clipping and a separate pass to clear it.
#pragma once

#include "train/params.h"

#include <ggml.h>

namespace toy::train {

// Hyper-parameters as the op reads them from a [kHyperCount] F32 input.
enum Hyper { kLr, kBeta1, kBeta2, kEps, kWeightDecay, kBeta1Correction, kBeta2Correction, kGradScale, kHyperCount };

ggml_tensor *adamw_update(ggml_context *ctx, const Param &p, ggml_tensor *hyper);
ggml_tensor *sgd_update(ggml_context *ctx, const Param &p, ggml_tensor *hyper);

}  // namespace toy::train
