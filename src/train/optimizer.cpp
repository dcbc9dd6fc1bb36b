#include "train/optimizer.h"

#include "graph/custom_ops.h"

#include <algorithm>
#include <cmath>

namespace toy::train {
namespace {

void adamw_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    float *w = static_cast<float *>(dst->src[0]->data);
    float *g = static_cast<float *>(dst->src[1]->data);
    float *m = static_cast<float *>(dst->src[2]->data);
    float *v = static_cast<float *>(dst->src[3]->data);
    const float *h = static_cast<const float *>(dst->src[4]->data);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], eps = h[kEps], b1h = h[kBeta1Correction],
                b2h = h[kBeta2Correction], gs = h[kGradScale];
    const float keep = 1.0f - lr * h[kWeightDecay];
    const auto [begin, end] = graph::thread_share(ggml_nelements(dst->src[0]), ith, nth);
    for (int64_t i = begin; i < end; ++i) {
        const float gi = g[i] * gs;
        m[i] = m[i] * b1 + gi * (1.0f - b1);
        v[i] = v[i] * b2 + gi * gi * (1.0f - b2);
        const float mh = m[i] * b1h;
        const float vh = std::sqrt(v[i] * b2h) + eps;
        w[i] = w[i] * keep - lr * mh / vh;
        g[i] = 0.0f;
    }
}

void sgd_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    float *w = static_cast<float *>(dst->src[0]->data);
    float *g = static_cast<float *>(dst->src[1]->data);
    const float *h = static_cast<const float *>(dst->src[2]->data);
    const float lr = h[kLr], gs = h[kGradScale], keep = 1.0f - lr * h[kWeightDecay];
    const auto [begin, end] = graph::thread_share(ggml_nelements(dst->src[0]), ith, nth);
    for (int64_t i = begin; i < end; ++i) {
        w[i] = w[i] * keep - lr * g[i] * gs;
        g[i] = 0.0f;
    }
}

// ggml's ops: the gradient times the clipping factor, in place
ggml_tensor *scaled_grad(ggml_context *ctx, const Param &p, ggml_tensor *hyper) {
    return ggml_mul_inplace(ctx, p.grad, ggml_view_1d(ctx, hyper, 1, kGradScale * sizeof(float)));
}

}  // namespace

ggml_tensor *adamw_update(ggml_context *ctx, const Param &p, ggml_tensor *hyper) {
    if (p.device) return ggml_opt_step_adamw(ctx, p.value, scaled_grad(ctx, p, hyper), p.m, p.v, ggml_view_1d(ctx, hyper, 7, 0));
    ggml_tensor *args[] = {p.grad, p.m, p.v, hyper};
    return ggml_custom_inplace(ctx, p.value, args, 4, adamw_kernel, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor *sgd_update(ggml_context *ctx, const Param &p, ggml_tensor *hyper) {
    if (p.device) {
        return ggml_opt_step_sgd(ctx, p.value, scaled_grad(ctx, p, hyper), ggml_view_1d(ctx, hyper, 2, kSgdLr * sizeof(float)));
    }
    ggml_tensor *args[] = {p.grad, hyper};
    return ggml_custom_inplace(ctx, p.value, args, 2, sgd_kernel, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor *grad_sum_of_squares(ggml_context *ctx, const Param &p) {
    return p.device ? ggml_sum(ctx, ggml_sqr(ctx, p.grad)) : graph::sum_of_squares(ctx, p.grad);
}

}  // namespace toy::train
