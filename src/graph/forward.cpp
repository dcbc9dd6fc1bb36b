#include "graph/forward.h"

#include "core/error.h"
#include "graph/blocks.h"

#include <cmath>

namespace toy::graph {
namespace {

// Everything one layer's attention needs besides its weights.
struct AttnContext {
    const Builder &b;
    const ForwardParams &p;
    ForwardGraph &g;
    ggml_cgraph *gf;
    ggml_tensor *rope_factors;
};

ggml_tensor *rope(ggml_context *ctx, ggml_tensor *x, const AttnContext &a) {
    const RopeConfig &r = a.b.config().rope;
    return ggml_rope_ext(ctx, x, a.g.pos, a.rope_factors, r.n_rot, r.mode, r.n_ctx_orig, r.freq_base, r.freq_scale,
                         r.ext_factor, r.attn_factor, r.beta_fast, r.beta_slow);
}

// [n_heads * head_dim, T] -> [head_dim, n_heads, T]: a reshape, or a strided
// view when x is itself a view into a wider (fused) projection.
ggml_tensor *split_heads(ggml_context *ctx, ggml_tensor *x, int64_t head_dim, int64_t n_heads) {
    if (ggml_is_contiguous(x)) return ggml_reshape_3d(ctx, x, head_dim, n_heads, x->ne[1]);
    return ggml_view_3d(ctx, x, head_dim, n_heads, x->ne[1], ggml_row_size(x->type, head_dim), x->nb[1], 0);
}

// Self-attention of one layer: projections, q/k norm, rope, cache write,
// attention, output projection. x: [n_embd, T] (normed). Returns [n_embd, T].
ggml_tensor *self_attention(ggml_tensor *x, int il, const AttnContext &a) {
    const Builder &b = a.b;
    ggml_context *ctx = b.ctx();
    const Config &c = b.config();
    const LayerWeights &l = b.weights().layers[il];
    const int64_t T = x->ne[1];
    // projections as [rows, T]: one fused matmul (views into its rows) or three
    ggml_tensor *q, *k, *v;
    if (l.wqkv) {
        ggml_tensor *qkv = b.linear(-1, Proj::Q, l.wqkv, x, l.bqkv);  // [n_q + n_k + n_v, T]
        const size_t es = ggml_element_size(qkv);
        q = ggml_view_2d(ctx, qkv, c.n_embd_q(), T, qkv->nb[1], 0);
        k = ggml_view_2d(ctx, qkv, c.n_embd_k_gqa(), T, qkv->nb[1], es * c.n_embd_q());
        v = ggml_view_2d(ctx, qkv, c.n_embd_v_gqa(), T, qkv->nb[1], es * (c.n_embd_q() + c.n_embd_k_gqa()));
        if (b.train()) {
            // ggml's backward needs contiguous gradients where the views' are strided
            q = ggml_cont(ctx, q);
            k = ggml_cont(ctx, k);
            v = ggml_cont(ctx, v);
        }
        // biases that could not be fused with each other (types differ)
        if (l.bq) q = ggml_add(ctx, q, l.bq);
        if (l.bk) k = ggml_add(ctx, k, l.bk);
        if (l.bv) v = ggml_add(ctx, v, l.bv);
        q = b.add_adapters(il, Proj::Q, q, x);
        k = b.add_adapters(il, Proj::K, k, x);
        v = b.add_adapters(il, Proj::V, v, x);
    } else {
        q = b.linear(il, Proj::Q, l.wq, x, l.bq);
        k = b.linear(il, Proj::K, l.wk, x, l.bk);
        v = b.linear(il, Proj::V, l.wv, x, l.bv);
    }
    if (c.qk_norm == QkNormKind::Full) {
        q = b.norm(q, l.q_norm, nullptr, NormKind::Rms);
        k = b.norm(k, l.k_norm, nullptr, NormKind::Rms);
    }
    q = split_heads(ctx, q, c.head_dim_k, c.n_head);
    k = split_heads(ctx, k, c.head_dim_k, c.n_head_kv);
    v = split_heads(ctx, v, c.head_dim_v, c.n_head_kv);
    if (c.qk_norm == QkNormKind::PerHead) {
        q = named(b.norm(q, l.q_norm, nullptr, NormKind::Rms), "Qcur_normed", il);
        k = named(b.norm(k, l.k_norm, nullptr, NormKind::Rms), "Kcur_normed", il);
    }
    if (c.pos == PosKind::Rope) {
        q = rope(ctx, q, a);
        k = rope(ctx, k, a);
    }
    if (c.query_scale != 0.0f) q = ggml_scale(ctx, q, c.query_scale);
    named(q, "Qcur", il);
    named(k, "Kcur", il);
    named(v, "Vcur", il);

    const ForwardParams &p = a.p;
    ggml_tensor *mask = c.layer_uses_swa(il) ? a.g.mask_swa : a.g.mask;
    AttentionOptions ao;
    ao.kq_scale = c.attn_scale != 0.0f ? c.attn_scale : 1.0f / std::sqrt((float)c.head_dim_k);
    ao.softcap = c.attn_softcap;
    ao.flash_attn = p.flash_attn;
    ggml_tensor *out;
    if (p.train || p.n_seqs > 1) {
        out = b.attention_batched(q, k, v, mask, p.n_seqs, ao);
    } else {
        ggml_tensor *k_all = k, *v_all = v;
        bool v_trans = false;
        if (p.kv) {
            // write this batch into the cache, then attend over n_kv cells of it
            const KvBinding &kv = *p.kv;
            ggml_tensor *kc = kv.k[il], *vc = kv.v[il];
            // k, v: [head_dim, n_head_kv, T]; the cache holds [head_dim, kv_size, n_head_kv]
            ggml_build_forward_expand(a.gf, ggml_set_rows(ctx, kc, ggml_permute(ctx, k, 0, 2, 1, 3), a.g.k_idxs));
            if (kv.v_trans) {
                ggml_tensor *v2 = ggml_reshape_2d(ctx, ggml_cont(ctx, v), 1, c.n_embd_v_gqa() * T);
                ggml_build_forward_expand(a.gf, ggml_set_rows(ctx, ggml_reshape_2d(ctx, vc, 1, ggml_nelements(vc)), v2, a.g.v_idxs));
            } else {
                ggml_build_forward_expand(a.gf, ggml_set_rows(ctx, vc, ggml_permute(ctx, v, 0, 2, 1, 3), a.g.k_idxs));
            }
            // the first n_kv cells as [head_dim, n_head_kv, n_kv], like k and v
            k_all = ggml_view_3d(ctx, kc, c.head_dim_k, c.n_head_kv, p.n_kv, kc->nb[2], kc->nb[1], 0);
            if (kv.v_trans) {
                // [n_kv, n_head_kv, head_dim_v] over rows of kv_size cells
                v_all = ggml_view_3d(ctx, vc, p.n_kv, c.n_head_kv, c.head_dim_v,
                                     ggml_row_size(vc->type, kv.kv_size * c.head_dim_v), ggml_row_size(vc->type, kv.kv_size), 0);
                v_trans = true;
            } else {
                v_all = ggml_view_3d(ctx, vc, c.head_dim_v, c.n_head_kv, p.n_kv, vc->nb[2], vc->nb[1], 0);
            }
        }
        out = b.attention(q, k_all, v_all, v_trans, mask, ao);
    }
    named(out, "kqv_out", il);
    return b.linear(il, Proj::O, l.wo, out, l.bo);
}

}  // namespace

ForwardGraph build_forward(ggml_context *ctx, ggml_cgraph *gf, const Config &c, const Weights &w,
                           const ForwardParams &p) {
    if (p.n_seqs < 1 || p.n_tokens % p.n_seqs != 0 || ((p.train || p.n_seqs > 1) && (p.kv || p.flash_attn))) {
        fail("internal: forward graph of {} tokens in {} sequences (cache {}, flash attention {})", p.n_tokens, p.n_seqs,
             p.kv != nullptr, p.flash_attn);
    }
    const Builder b(ctx, c, w, p.adapters, p.train);
    const int64_t T = p.n_tokens;
    const int64_t n_kv = p.kv ? p.n_kv : T / p.n_seqs;  // sequences share one [T, T] mask
    ForwardGraph g;

    g.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    ggml_set_input(named(g.tokens, "inp_tokens"));
    g.pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    ggml_set_input(named(g.pos, "inp_pos"));
    const ggml_type mask_type = p.flash_attn ? GGML_TYPE_F16 : GGML_TYPE_F32;
    g.mask = ggml_new_tensor_2d(ctx, mask_type, n_kv, T / p.n_seqs);
    ggml_set_input(named(g.mask, "kq_mask"));
    if (c.n_swa > 0) {
        g.mask_swa = ggml_new_tensor_2d(ctx, mask_type, n_kv, T / p.n_seqs);
        ggml_set_input(named(g.mask_swa, "kq_mask_swa"));
    }
    if (p.kv) {
        g.k_idxs = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, T);
        ggml_set_input(named(g.k_idxs, "inp_k_idxs"));
        if (p.kv->v_trans) {
            g.v_idxs = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, T * c.n_embd_v_gqa());
            ggml_set_input(named(g.v_idxs, "inp_v_idxs"));
        }
    }
    const int64_t n_out = p.n_outputs > 0 ? p.n_outputs : T;
    if (n_out < T) {
        g.out_ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_out);
        ggml_set_input(named(g.out_ids, "inp_out_ids"));
    }

    AttnContext a{b, p, g, gf, w.rope_freqs};
    ggml_tensor *rope_freqs_computed = nullptr;
    if (!a.rope_factors && !c.rope.freq_factors.empty()) {
        // Llama-3 factors derived from metadata: a small constant input
        rope_freqs_computed = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, (int64_t)c.rope.freq_factors.size());
        ggml_set_input(named(rope_freqs_computed, "inp_rope_freqs"));
        a.rope_factors = rope_freqs_computed;
        g.rope_freqs = rope_freqs_computed;
    }

    ggml_tensor *tok_embd = w.tok_embd;
    if (w.lens_proj) {
        tok_embd = named(ggml_mul_mat(ctx, w.lens_proj, w.lens_embd), "lens_embd");  // [n_embd, n_vocab]
        g.checkpoints.push_back(tok_embd);
    }
    ggml_tensor *x = b.embed(tok_embd, g.tokens);  // [n_embd, T]
    if (c.pos == PosKind::Learned) x = ggml_add(ctx, x, ggml_get_rows(ctx, w.pos_embd, g.pos));
    if (c.embd_scale != 1.0f) x = ggml_scale(ctx, x, c.embd_scale);
    named(x, "inp_embd");
    g.checkpoints.push_back(x);

    for (int il = 0; il < c.n_layer; ++il) {
        const LayerWeights &l = w.layers[il];
        ggml_tensor *residual = x;
        ggml_tensor *cur = named(b.norm(x, l.attn_norm, l.attn_norm_b, c.norm), "attn_norm", il);
        cur = self_attention(cur, il, a);
        named(cur, "attn_out", il);
        if (il == c.n_layer - 1 && g.out_ids) {
            // only the rows whose logits are read go on from here
            cur = ggml_get_rows(ctx, cur, g.out_ids);
            residual = ggml_get_rows(ctx, residual, g.out_ids);
        }
        if (c.post_norms) cur = named(b.norm(cur, l.post_attn_norm, nullptr, NormKind::Rms), "attn_post_norm", il);
        if (c.residual_scale != 1.0f) cur = ggml_scale(ctx, cur, c.residual_scale);
        ggml_tensor *ffn_inp = named(ggml_add(ctx, cur, residual), "ffn_inp", il);

        cur = named(b.norm(ffn_inp, l.ffn_norm, l.ffn_norm_b, c.norm), "ffn_norm", il);
        if (c.is_moe()) {
            ggml_tensor *choices = nullptr;
            cur = b.mixture_of_experts(cur, il, &choices);
            g.router_choices.push_back(choices);
        } else {
            cur = b.feed_forward(cur, il);
        }
        if (c.post_norms) cur = b.norm(cur, l.post_ffn_norm, nullptr, NormKind::Rms);
        named(cur, "ffn_out", il);
        if (c.residual_scale != 1.0f) cur = ggml_scale(ctx, cur, c.residual_scale);
        x = named(ggml_add(ctx, cur, ffn_inp), "l_out", il);
        g.checkpoints.push_back(x);
    }

    x = named(b.norm(x, w.output_norm, w.output_norm_b, c.norm), "result_norm");
    g.hidden = x;
    if (!p.logits) {
        ggml_build_forward_expand(gf, x);
        return g;
    }
    ggml_tensor *logits = b.output(w.output ? w.output : tok_embd, x);
    g.checkpoints.push_back(logits);
    if (c.logit_scale != 1.0f) logits = ggml_scale(ctx, logits, 1.0f / c.logit_scale);
    if (c.final_softcap > 0.0f) logits = b.softcap(logits, c.final_softcap);
    if (w.vocab_pad_mask) logits = ggml_add(ctx, logits, w.vocab_pad_mask);
    g.logits = named(logits, "result_output");
    g.checkpoints.push_back(g.logits);
    ggml_build_forward_expand(gf, g.logits);
    return g;
}

}  // namespace toy::graph
