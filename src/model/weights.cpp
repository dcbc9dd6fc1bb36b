#include "model/weights.h"

#include <fmt/format.h>

namespace toy {

std::vector<TensorSpec> tensor_specs(const Config &c, Weights *w) {
    std::vector<TensorSpec> specs;
    auto add = [&](std::string name, std::vector<int64_t> ne, TensorRole role, ggml_tensor **slot, bool required = true,
                   int layer = -1) {
        specs.push_back({std::move(name), std::move(ne), role, required, w ? slot : nullptr, layer});
    };
    Weights dummy;
    Weights &m = w ? *w : dummy;
    m.layers.resize(c.n_layer);
    using R = TensorRole;
    const int64_t E = c.n_embd;

    add("token_embd.weight", {E, c.n_vocab}, R::Embedding, &m.tok_embd);
    if (c.pos == PosKind::Learned) add("position_embd.weight", {E, c.n_ctx_train}, R::Positions, &m.pos_embd);
    if (c.pos == PosKind::Rope) add("rope_freqs.weight", {c.rope.n_rot / 2}, R::RopeFactors, &m.rope_freqs, false);
    add("output_norm.weight", {E}, R::Norm, &m.output_norm);
    if (c.norm == NormKind::Layer) add("output_norm.bias", {E}, R::NormBias, &m.output_norm_b);
    add("output.weight", {E, c.n_vocab}, R::Linear, &m.output, false);

    for (int il = 0; il < c.n_layer; ++il) {
        LayerWeights &l = m.layers[il];
        auto name = [&](const char *base) { return fmt::format("blk.{}.{}", il, base); };
        auto lay = [&](const char *base, std::vector<int64_t> ne, TensorRole role, ggml_tensor **slot, bool req = true) {
            add(name(base), std::move(ne), role, slot, req, il);
        };
        lay("attn_norm.weight", {E}, R::Norm, &l.attn_norm);
        if (c.norm == NormKind::Layer) lay("attn_norm.bias", {E}, R::NormBias, &l.attn_norm_b);
        if (c.fused_qkv) {
            const int64_t n = c.n_embd_q() + c.n_embd_k_gqa() + c.n_embd_v_gqa();
            lay("attn_qkv.weight", {E, n}, R::Linear, &l.wqkv);
            if (c.linear_bias) lay("attn_qkv.bias", {n}, R::Bias, &l.bqkv);
        } else {
            lay("attn_q.weight", {E, c.n_embd_q()}, R::Linear, &l.wq);
            lay("attn_k.weight", {E, c.n_embd_k_gqa()}, R::Linear, &l.wk);
            lay("attn_v.weight", {E, c.n_embd_v_gqa()}, R::Linear, &l.wv);
            if (c.qkv_bias || c.linear_bias) {
                lay("attn_q.bias", {c.n_embd_q()}, R::Bias, &l.bq);
                lay("attn_k.bias", {c.n_embd_k_gqa()}, R::Bias, &l.bk);
                lay("attn_v.bias", {c.n_embd_v_gqa()}, R::Bias, &l.bv);
            }
        }
        if (c.qk_norm == QkNormKind::PerHead) {
            lay("attn_q_norm.weight", {c.head_dim_k}, R::Norm, &l.q_norm);
            lay("attn_k_norm.weight", {c.head_dim_k}, R::Norm, &l.k_norm);
        } else if (c.qk_norm == QkNormKind::Full) {
            lay("attn_q_norm.weight", {c.n_embd_q()}, R::Norm, &l.q_norm);
            lay("attn_k_norm.weight", {c.n_embd_k_gqa()}, R::Norm, &l.k_norm);
        }
        lay("attn_output.weight", {c.n_head * c.head_dim_v, E}, R::Linear, &l.wo);
        if (c.linear_bias) lay("attn_output.bias", {E}, R::Bias, &l.bo);
        if (c.post_norms) lay("post_attention_norm.weight", {E}, R::Norm, &l.post_attn_norm);

        lay("ffn_norm.weight", {E}, R::Norm, &l.ffn_norm);
        if (c.norm == NormKind::Layer) lay("ffn_norm.bias", {E}, R::NormBias, &l.ffn_norm_b);
        if (c.is_moe()) {
            lay("ffn_gate_inp.weight", {E, c.n_expert}, R::Router, &l.ffn_gate_inp);
            lay("ffn_gate_exps.weight", {E, c.n_ff_exp, c.n_expert}, R::Experts, &l.ffn_gate_exps);
            lay("ffn_up_exps.weight", {E, c.n_ff_exp, c.n_expert}, R::Experts, &l.ffn_up_exps);
            lay("ffn_down_exps.weight", {c.n_ff_exp, E, c.n_expert}, R::Experts, &l.ffn_down_exps);
        } else {
            if (c.ffn != FfnKind::Gelu) lay("ffn_gate.weight", {E, c.n_ff}, R::Linear, &l.ffn_gate);
            lay("ffn_up.weight", {E, c.n_ff}, R::Linear, &l.ffn_up);
            lay("ffn_down.weight", {c.n_ff, E}, R::Linear, &l.ffn_down);
            if (c.linear_bias) {
                lay("ffn_up.bias", {c.n_ff}, R::Bias, &l.ffn_up_b);
                lay("ffn_down.bias", {E}, R::Bias, &l.ffn_down_b);
            }
        }
        if (c.post_norms) lay("post_ffw_norm.weight", {E}, R::Norm, &l.post_ffn_norm);
    }
    return specs;
}

}  // namespace toy
