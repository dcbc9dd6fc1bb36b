#include "graph/blocks.h"

#include <cmath>

namespace toy::graph {

ggml_tensor *named(ggml_tensor *t, const char *name, int il) {
    if (il >= 0) {
        ggml_format_name(t, "%s-%d", name, il);
    } else {
        ggml_set_name(t, name);
    }
    return t;
}

ggml_tensor *norm(ggml_context *ctx, ggml_tensor *x, ggml_tensor *w, ggml_tensor *b, NormKind kind, float eps) {
    x = kind == NormKind::Rms ? ggml_rms_norm(ctx, x, eps) : ggml_norm(ctx, x, eps);
    if (w) x = ggml_mul(ctx, x, w);
    if (b) x = ggml_add(ctx, x, b);
    return x;
}

ggml_tensor *linear(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *b) {
    ggml_tensor *y = ggml_mul_mat(ctx, w, x);
    return b ? ggml_add(ctx, y, b) : y;
}

ggml_tensor *attention(ggml_context *ctx, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, bool v_trans,
                       ggml_tensor *mask, const AttentionOptions &o) {
    const int64_t n_tokens = q->ne[2];
    q = ggml_permute(ctx, q, 0, 2, 1, 3);  // [head_dim_k, n_tokens, n_head]
    k = ggml_permute(ctx, k, 0, 2, 1, 3);  // [head_dim_k, n_kv, n_head_kv]
    v = ggml_permute(ctx, v, 0, 2, 1, 3);  // [head_dim_v, n_kv, n_head_kv] or transposed [n_kv, head_dim_v, n_head_kv]

    if (o.flash_attn) {
        if (v_trans) v = ggml_transpose(ctx, v);
        // the flash kernel wants F16 K/V; a quantized or F16 cache passes as is
        if (k->type == GGML_TYPE_F32) k = ggml_cast(ctx, k, GGML_TYPE_F16);
        if (v->type == GGML_TYPE_F32) v = ggml_cast(ctx, v, GGML_TYPE_F16);
        ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, o.kq_scale, 0.0f, o.softcap);
        ggml_prec_set_acc(out, GGML_PREC_F32);
        // out: [head_dim_v, n_head, n_tokens]
        return ggml_reshape_2d(ctx, out, out->ne[0] * out->ne[1], n_tokens);
    }

    ggml_tensor *kq = ggml_mul_mat(ctx, k, q);  // [n_kv, n_tokens, n_head]
    ggml_prec_set_acc(kq, GGML_PREC_F32);
    if (o.softcap > 0.0f) {
        kq = ggml_scale(ctx, kq, 1.0f / o.softcap);
        kq = ggml_tanh(ctx, kq);
        kq = ggml_scale(ctx, kq, o.softcap);
    }
    kq = ggml_soft_max_ext(ctx, kq, mask, o.kq_scale, 0.0f);
    if (!v_trans) v = ggml_cont(ctx, ggml_transpose(ctx, v));  // [n_kv, head_dim_v, n_head_kv]
    ggml_tensor *kqv = ggml_mul_mat(ctx, v, kq);                // [head_dim_v, n_tokens, n_head]
    kqv = ggml_permute(ctx, kqv, 0, 2, 1, 3);                   // [head_dim_v, n_head, n_tokens]
    return ggml_cont_2d(ctx, kqv, kqv->ne[0] * kqv->ne[1], n_tokens);
}

ggml_tensor *feed_forward(ggml_context *ctx, ggml_tensor *x, const LayerWeights &l, FfnKind kind) {
    switch (kind) {
    case FfnKind::SwiGlu:
        return linear(ctx, l.ffn_down, ggml_swiglu_split(ctx, linear(ctx, l.ffn_gate, x), linear(ctx, l.ffn_up, x)));
    case FfnKind::GeGlu:
        return linear(ctx, l.ffn_down, ggml_geglu_split(ctx, linear(ctx, l.ffn_gate, x), linear(ctx, l.ffn_up, x)));
    case FfnKind::Gelu:
        return linear(ctx, l.ffn_down, ggml_gelu(ctx, linear(ctx, l.ffn_up, x, l.ffn_up_b)), l.ffn_down_b);
    }
    return x;
}

ggml_tensor *mixture_of_experts(ggml_context *ctx, ggml_tensor *x, const LayerWeights &l, const Config &c, int il,
                                ggml_tensor **choices) {
    const int64_t n_tokens = x->ne[1];
    const int64_t k = c.n_expert_used;
    ggml_tensor *router = named(ggml_mul_mat(ctx, l.ffn_gate_inp, x), "ffn_moe_logits", il);  // [n_expert, T]
    ggml_tensor *probs = named(ggml_soft_max(ctx, router), "ffn_moe_probs", il);
    ggml_tensor *selected = named(ggml_argsort_top_k(ctx, probs, (int)k), "ffn_moe_topk", il);  // I32 [k, T]
    if (choices) *choices = selected;

    // weights of the chosen experts: [1, k, T]
    ggml_tensor *weights = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, c.n_expert, n_tokens), selected);
    if (c.expert_weights_norm) {
        weights = ggml_reshape_2d(ctx, weights, k, n_tokens);
        ggml_tensor *sum = ggml_sum_rows(ctx, weights);  // [1, T]
        sum = ggml_clamp(ctx, sum, 6.103515625e-5f, INFINITY);
        weights = ggml_div(ctx, weights, sum);
        weights = ggml_reshape_3d(ctx, weights, 1, k, n_tokens);
    }
    named(weights, "ffn_moe_weights", il);

    ggml_tensor *x3 = ggml_reshape_3d(ctx, x, x->ne[0], 1, n_tokens);
    ggml_tensor *up = ggml_mul_mat_id(ctx, l.ffn_up_exps, x3, selected);      // [n_ff_exp, k, T]
    ggml_tensor *gate = ggml_mul_mat_id(ctx, l.ffn_gate_exps, x3, selected);  // [n_ff_exp, k, T]
    ggml_tensor *act = ggml_swiglu_split(ctx, gate, up);
    ggml_tensor *experts = ggml_mul_mat_id(ctx, l.ffn_down_exps, act, selected);  // [n_embd, k, T]
    experts = ggml_mul(ctx, experts, weights);

    // sum the k expert outputs
    ggml_tensor *out = nullptr;
    for (int64_t i = 0; i < k; ++i) {
        ggml_tensor *e = ggml_view_2d(ctx, experts, experts->ne[0], n_tokens, experts->nb[2], i * experts->nb[1]);
        out = out ? ggml_add(ctx, out, e) : e;
    }
    if (k == 1) out = ggml_cont(ctx, out);
    return out;
}

}  // namespace toy::graph
