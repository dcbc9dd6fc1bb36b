#include "graph/blocks.h"

#include "graph/flash_attention.h"
#include "graph/packed_matmul.h"

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

ggml_tensor *Builder::norm(ggml_tensor *x, ggml_tensor *w, ggml_tensor *b, NormKind kind) const {
    if (kind == NormKind::Rms) {
        x = ggml_rms_norm(ctx_, x, c_.norm_eps);
    } else if (!train_) {
        x = ggml_norm(ctx_, x, c_.norm_eps);
    } else {
        // LayerNorm(x) = RMSNorm(x - mean(x)); the mean as a row sum (ggml's
        // MEAN backward cannot add to a gradient x already has)
        ggml_tensor *mean = ggml_scale(ctx_, ggml_sum_rows(ctx_, x), -1.0f / (float)x->ne[0]);  // [1, T]
        x = ggml_rms_norm(ctx_, ggml_add(ctx_, x, mean), c_.norm_eps);
    }
    if (w) x = ggml_mul(ctx_, x, w);
    if (b) x = ggml_add(ctx_, x, b);
    return x;
}

ggml_tensor *Builder::add_adapters(int il, Proj p, ggml_tensor *y, ggml_tensor *x) const {
    return adapters_ ? add_terms(adapters_->terms(il, p), y, x) : y;
}

ggml_tensor *Builder::add_terms(const std::vector<LoraTerm> &terms, ggml_tensor *y, ggml_tensor *x) const {
    for (const LoraTerm &t : terms) {
        ggml_tensor *ax = ggml_mul_mat(ctx_, t.a, x);  // [r, T] or per head [r * n_head, T]
        ggml_tensor *bax;
        if (!t.per_head) {
            bax = ggml_mul_mat(ctx_, t.b, ax);  // [n_out, T]
        } else {
            // every head's B_h [r, head_dim] times its own r rows of A x, in one
            // batched matmul: [r, n_head, T] -> [r, T, n_head] x [r, head_dim, n_head]
            const int64_t r = t.b->ne[0], hd = t.b->ne[1], nh = t.b->ne[2], T = x->ne[1];
            ggml_tensor *ax3 = ggml_permute(ctx_, ggml_reshape_3d(ctx_, ax, r, nh, T), 0, 2, 1, 3);
            ggml_tensor *h = ggml_mul_mat(ctx_, t.b, ax3);  // [head_dim, T, n_head]
            bax = ggml_reshape_2d(ctx_, ggml_cont(ctx_, ggml_permute(ctx_, h, 0, 2, 1, 3)), hd * nh, T);
        }
        y = ggml_add(ctx_, y, t.scale == 1.0f ? bax : ggml_scale(ctx_, bax, t.scale));
    }
    return y;
}

ggml_tensor *Builder::mul_mat(ggml_tensor *w, ggml_tensor *x) const {
    if (!w_.is_packed(w)) return ggml_mul_mat(ctx_, w, x);
    if (packed_input_inline(x)) return packed_mul_mat(ctx_, w, x);
    ggml_tensor *&xq = quantized_inputs_[{x, packed_input_type(w->type)}];
    if (!xq) xq = quantize_input(ctx_, x, w->type);
    return packed_mul_mat(ctx_, w, x, xq);
}

ggml_tensor *Builder::linear(int il, Proj p, ggml_tensor *w, ggml_tensor *x, ggml_tensor *b) const {
    ggml_tensor *y = mul_mat(w, x);
    if (il >= 0) y = add_adapters(il, p, y, x);
    return b ? ggml_add(ctx_, y, b) : y;
}

ggml_tensor *Builder::output(ggml_tensor *w, ggml_tensor *x) const {
    ggml_tensor *y = mul_mat(w, x);
    return adapters_ ? add_terms(adapters_->output, y, x) : y;
}

ggml_tensor *Builder::embed(ggml_tensor *tok_embd, ggml_tensor *tokens) const {
    ggml_tensor *x = ggml_get_rows(ctx_, tok_embd, tokens);  // [n_embd, T]
    if (!adapters_) return x;
    for (const LoraTerm &t : adapters_->tok_embd) {
        // A [r, n_vocab] is a table like the embedding: B (A's row of each token)
        ggml_tensor *d = ggml_mul_mat(ctx_, t.b, ggml_get_rows(ctx_, t.a, tokens));
        x = ggml_add(ctx_, x, ggml_scale(ctx_, d, t.scale));
    }
    return x;
}

ggml_tensor *Builder::gelu(ggml_tensor *x) const {
    if (!train_) return ggml_gelu(ctx_, x);
    // 0.5 x (1 + tanh(u)) with u = c x (1 + a x^2) equals x * sigmoid(2u) =
    // silu(2u) / (2 c (1 + a x^2)): no tanh, and the divisor is never 0
    const float c = std::sqrt(2.0f / (float)M_PI), a = 0.044715f;
    ggml_tensor *s = ggml_scale_bias(ctx_, ggml_sqr(ctx_, x), a, 1.0f);  // 1 + a x^2
    ggml_tensor *z = ggml_scale(ctx_, ggml_mul(ctx_, x, s), 2.0f * c);   // 2u
    return ggml_div(ctx_, ggml_silu(ctx_, z), ggml_scale(ctx_, s, 2.0f * c));
}

ggml_tensor *Builder::tanh(ggml_tensor *x) const {
    if (!train_) return ggml_tanh(ctx_, x);
    // tanh(x) = 1 - 2 / (1 + e^{2x}) = 1 - 2 exp(-softplus(2x)): exp of a
    // non-positive number, so nothing overflows in either direction
    ggml_tensor *sp = ggml_softplus(ctx_, ggml_scale(ctx_, x, 2.0f));
    return ggml_scale_bias(ctx_, ggml_exp(ctx_, ggml_scale(ctx_, sp, -1.0f)), -2.0f, 1.0f);
}

ggml_tensor *Builder::softcap(ggml_tensor *x, float cap) const {
    return ggml_scale(ctx_, tanh(ggml_scale(ctx_, x, 1.0f / cap)), cap);
}

ggml_tensor *Builder::attention(ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, bool v_trans, ggml_tensor *mask,
                                const AttentionOptions &o) const {
    const int64_t n_tokens = q->ne[2];
    q = ggml_permute(ctx_, q, 0, 2, 1, 3);  // [head_dim_k, n_tokens, n_head]
    k = ggml_permute(ctx_, k, 0, 2, 1, 3);  // [head_dim_k, n_kv, n_head_kv]
    v = ggml_permute(ctx_, v, 0, 2, 1, 3);  // [head_dim_v, n_kv, n_head_kv] or transposed [n_kv, head_dim_v, n_head_kv]

    if (o.flash_attn) {
        if (v_trans) v = ggml_transpose(ctx_, v);
        if (!train_ && host_flash_attn_applies(q, k, v, mask, o.softcap)) {
            ggml_tensor *out = host_flash_attn(ctx_, q, k, v, mask, o.kq_scale, o.softcap);  // [head_dim_v, n_head, n_tokens]
            return ggml_reshape_2d(ctx_, out, out->ne[0] * out->ne[1], n_tokens);
        }
        // the flash kernel wants F16 K/V; a quantized or F16 cache passes as is
        if (k->type == GGML_TYPE_F32) k = ggml_cast(ctx_, k, GGML_TYPE_F16);
        if (v->type == GGML_TYPE_F32) v = ggml_cast(ctx_, v, GGML_TYPE_F16);
        ggml_tensor *out = ggml_flash_attn_ext(ctx_, q, k, v, mask, o.kq_scale, 0.0f, o.softcap);
        ggml_prec_set_acc(out, GGML_PREC_F32);
        // out: [head_dim_v, n_head, n_tokens]
        return ggml_reshape_2d(ctx_, out, out->ne[0] * out->ne[1], n_tokens);
    }

    ggml_tensor *kq = ggml_mul_mat(ctx_, k, q);  // [n_kv, n_tokens, n_head]
    ggml_prec_set_acc(kq, GGML_PREC_F32);
    if (o.softcap > 0.0f) kq = softcap(kq, o.softcap);
    kq = ggml_soft_max_ext(ctx_, kq, mask, o.kq_scale, 0.0f);
    if (!v_trans) v = ggml_cont(ctx_, ggml_transpose(ctx_, v));  // [n_kv, head_dim_v, n_head_kv]
    ggml_tensor *kqv = ggml_mul_mat(ctx_, v, kq);                 // [head_dim_v, n_tokens, n_head]
    kqv = ggml_permute(ctx_, kqv, 0, 2, 1, 3);                    // [head_dim_v, n_head, n_tokens]
    return ggml_cont_2d(ctx_, kqv, kqv->ne[0] * kqv->ne[1], n_tokens);
}

namespace {

// [a, b, n_kv, B] -> [a, b, n_kv * g, B] where head h reads kv head h / g, as
// ggml's broadcasting matmul pairs them (its backward cannot broadcast over
// dims 2 and 3 at once, so training repeats K and V explicitly).
ggml_tensor *repeat_kv(ggml_context *ctx, ggml_tensor *x, int64_t g) {
    if (g == 1) return x;
    const int64_t a = x->ne[0], b = x->ne[1], nkv = x->ne[2], B = x->ne[3];
    ggml_tensor *x4 = ggml_reshape_4d(ctx, ggml_is_contiguous(x) ? x : ggml_cont(ctx, x), a * b, 1, nkv, B);
    ggml_tensor *rep = ggml_repeat_4d(ctx, x4, a * b, g, nkv, B);
    return ggml_reshape_4d(ctx, rep, a, b, nkv * g, B);
}

}  // namespace

ggml_tensor *Builder::attention_batched(ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, ggml_tensor *mask,
                                        int64_t n_seqs, const AttentionOptions &o) const {
    const int64_t n_head = q->ne[1], n_head_kv = k->ne[1], T = q->ne[2] / n_seqs;
    const int64_t g = n_head / n_head_kv;
    auto seqs = [&](ggml_tensor *x) {
        if (!ggml_is_contiguous(x)) x = ggml_cont(ctx_, x);
        return ggml_reshape_4d(ctx_, x, x->ne[0], x->ne[1], T, n_seqs);
    };
    q = ggml_permute(ctx_, seqs(q), 0, 2, 1, 3);                // [head_dim_k, T, n_head, B]
    k = repeat_kv(ctx_, ggml_permute(ctx_, seqs(k), 0, 2, 1, 3), g);  // [head_dim_k, T, n_head, B]
    ggml_tensor *kq = ggml_mul_mat(ctx_, k, q);                 // [T, T, n_head, B]
    if (o.softcap > 0.0f) kq = softcap(kq, o.softcap);
    kq = ggml_soft_max_ext(ctx_, kq, mask, o.kq_scale, 0.0f);
    v = repeat_kv(ctx_, ggml_cont(ctx_, ggml_permute(ctx_, seqs(v), 1, 2, 0, 3)), g);  // [T, head_dim_v, n_head, B]
    ggml_tensor *kqv = ggml_mul_mat(ctx_, v, kq);               // [head_dim_v, T, n_head, B]
    kqv = ggml_permute(ctx_, kqv, 0, 2, 1, 3);                  // [head_dim_v, n_head, T, B]
    return ggml_cont_2d(ctx_, kqv, kqv->ne[0] * kqv->ne[1], T * n_seqs);
}

ggml_tensor *Builder::feed_forward(ggml_tensor *x, int il) const {
    const LayerWeights &l = w_.layers[il];
    const bool swiglu = c_.ffn == FfnKind::SwiGlu;
    switch (c_.ffn) {
    case FfnKind::SwiGlu:
    case FfnKind::GeGlu: {
        ggml_tensor *gate, *up;
        if (l.ffn_gate_up) {
            ggml_tensor *gu = mul_mat(l.ffn_gate_up, x);  // [2 n_ff, T]: gate's rows, then up's
            // ggml's GLU over the halves of each column, unless adapters
            // change the halves first
            const bool adapted = adapters_ && !(adapters_->terms(il, Proj::Gate).empty() && adapters_->terms(il, Proj::Up).empty());
            if (!adapted) return linear(il, Proj::Down, l.ffn_down, swiglu ? ggml_swiglu(ctx_, gu) : ggml_geglu(ctx_, gu));
            const int64_t n_ff = gu->ne[0] / 2;
            gate = ggml_cont(ctx_, ggml_view_2d(ctx_, gu, n_ff, gu->ne[1], gu->nb[1], 0));
            up = ggml_cont(ctx_, ggml_view_2d(ctx_, gu, n_ff, gu->ne[1], gu->nb[1], n_ff * gu->nb[0]));
            gate = add_adapters(il, Proj::Gate, gate, x);
            up = add_adapters(il, Proj::Up, up, x);
        } else {
            gate = linear(il, Proj::Gate, l.ffn_gate, x);
            up = linear(il, Proj::Up, l.ffn_up, x);
        }
        ggml_tensor *act = swiglu ? ggml_swiglu_split(ctx_, gate, up)
                           : train_ ? ggml_mul(ctx_, gelu(gate), up)
                                    : ggml_geglu_split(ctx_, gate, up);
        return linear(il, Proj::Down, l.ffn_down, act);
    }
    case FfnKind::Gelu:
        return linear(il, Proj::Down, l.ffn_down, gelu(linear(il, Proj::Up, l.ffn_up, x, l.ffn_up_b)), l.ffn_down_b);
    }
    return x;
}

ggml_tensor *Builder::mixture_of_experts(ggml_tensor *x, int il, ggml_tensor **choices) const {
    const LayerWeights &l = w_.layers[il];
    const int64_t n_tokens = x->ne[1];
    const int64_t k = c_.n_expert_used;
    ggml_tensor *router = named(ggml_mul_mat(ctx_, l.ffn_gate_inp, x), "ffn_moe_logits", il);  // [n_expert, T]
    ggml_tensor *probs = named(ggml_soft_max(ctx_, router), "ffn_moe_probs", il);
    ggml_tensor *selected = named(ggml_argsort_top_k(ctx_, probs, (int)k), "ffn_moe_topk", il);  // I32 [k, T]
    if (choices) *choices = selected;

    // weights of the chosen experts: [1, k, T]
    ggml_tensor *weights = ggml_get_rows(ctx_, ggml_reshape_3d(ctx_, probs, 1, c_.n_expert, n_tokens), selected);
    if (c_.expert_weights_norm) {
        weights = ggml_reshape_2d(ctx_, weights, k, n_tokens);
        ggml_tensor *sum = ggml_sum_rows(ctx_, weights);  // [1, T]
        sum = ggml_clamp(ctx_, sum, 6.103515625e-5f, INFINITY);
        weights = ggml_div(ctx_, weights, sum);
        weights = ggml_reshape_3d(ctx_, weights, 1, k, n_tokens);
    }
    named(weights, "ffn_moe_weights", il);

    ggml_tensor *x3 = ggml_reshape_3d(ctx_, x, x->ne[0], 1, n_tokens);
    ggml_tensor *up = ggml_mul_mat_id(ctx_, l.ffn_up_exps, x3, selected);      // [n_ff_exp, k, T]
    ggml_tensor *gate = ggml_mul_mat_id(ctx_, l.ffn_gate_exps, x3, selected);  // [n_ff_exp, k, T]
    ggml_tensor *act = ggml_swiglu_split(ctx_, gate, up);
    ggml_tensor *experts = ggml_mul_mat_id(ctx_, l.ffn_down_exps, act, selected);  // [n_embd, k, T]
    experts = ggml_mul(ctx_, experts, weights);

    // sum the k expert outputs
    ggml_tensor *out = nullptr;
    for (int64_t i = 0; i < k; ++i) {
        ggml_tensor *e = ggml_view_2d(ctx_, experts, experts->ne[0], n_tokens, experts->nb[2], i * experts->nb[1]);
        out = out ? ggml_add(ctx_, out, e) : e;
    }
    if (k == 1) out = ggml_cont(ctx_, out);
    return out;
}

}  // namespace toy::graph
