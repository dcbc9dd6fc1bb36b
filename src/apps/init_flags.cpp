#include "apps/init_flags.h"

#include "core/error.h"
#include "core/parallel.h"
#include "model/config.h"

namespace toy::cli {

InitOptions init_options_from(const InitFlags &f) {
    InitOptions o = preset_options(f.preset, f.arch);
    const InitOptions preset = o;
    o.type = parse_init_type(f.type);
    if (!f.name.empty()) o.name = f.name;
    f.seed.apply(o.seed);
    f.threads.apply(o.n_threads);
    (void)thread_count(o.n_threads);  // -t out of range: an error before anything is written
    f.n_embd.apply(o.n_embd);
    f.n_layer.apply(o.n_layer);
    f.n_head.apply(o.n_head);
    f.n_head_kv.apply(o.n_head_kv);
    // A model with as many KV heads as heads keeps that when only --n-head changes.
    if (f.n_head.given() && !f.n_head_kv.given() && preset.n_head_kv == preset.n_head) o.n_head_kv = o.n_head;
    f.n_ff.apply(o.n_ff);
    f.n_vocab.apply(o.n_vocab);
    f.n_ctx.apply(o.n_ctx);
    f.head_dim.apply(o.head_dim);
    f.n_expert.apply(o.n_expert);
    if (f.n_expert.given() && !f.n_expert_used.given() && o.n_expert > 0 && o.n_expert_used == 0) {
        o.n_expert_used = std::min<int64_t>(2, o.n_expert);
    }
    if (f.n_expert.given() && o.n_expert == 0 && !f.n_expert_used.given()) o.n_expert_used = 0;
    f.n_expert_used.apply(o.n_expert_used);
    f.n_ff_exp.apply(o.n_ff_exp);
    f.norm_eps.apply(o.norm_eps);
    f.rope_base.apply(o.rope_base);
    if (f.tied && f.untied) fail("--tied/--untied: expected one of them, found both");
    if (f.tied) o.tied = true;
    if (f.untied) o.tied = false;

    if (f.rope_scaling.given()) {
        if (f.rope_scaling.value == "none") {
            o.rope_llama3_factor = 0.0f;
        } else if (f.rope_scaling.value == "llama3") {
            if (o.rope_llama3_factor == 0.0f) o.rope_llama3_factor = 8.0f;  // the converter's default factor
        } else {
            fail("--rope-scaling: expected none or llama3, found '{}'", f.rope_scaling.value);
        }
    }
    const bool llama3 = o.rope_llama3_factor > 0;
    if (!llama3 && (f.rope_scale.given() || f.rope_low.given() || f.rope_high.given() || f.rope_orig_ctx.given())) {
        fail("--rope-scale/--rope-low-freq-factor/--rope-high-freq-factor/--rope-orig-ctx: need --rope-scaling llama3");
    }
    f.rope_scale.apply(o.rope_llama3_factor);
    if (f.rope_scale.given() && !(o.rope_llama3_factor > 0)) {
        fail("--rope-scale: expected a positive factor, found {}", o.rope_llama3_factor);
    }
    f.rope_low.apply(o.rope_low_freq_factor);
    f.rope_high.apply(o.rope_high_freq_factor);
    f.rope_orig_ctx.apply(o.rope_orig_ctx);

    f.attn_softcap.apply(o.attn_softcap);
    f.final_softcap.apply(o.final_softcap);
    f.n_swa.apply(o.n_swa);
    f.embd_scale.apply(o.embd_scale);
    f.residual_scale.apply(o.residual_scale);
    f.logit_scale.apply(o.logit_scale);
    f.attn_scale.apply(o.attn_scale);
    o.vocab_from = f.vocab_from;
    return o;
}

void add_init_flags(CLI::App &app, InitFlags &f, bool for_training) {
    app.add_option("--arch", f.arch, "architecture (" + [] {
        std::string s;
        for (const auto &a : supported_architectures()) s += (s.empty() ? "" : "|") + a;
        return s;
    }() + "); implied by a named preset");
    app.add_option("--preset", f.preset, "smollm2-135m|qwen2.5-0.5b|llama-3.2-1b|tinyllama-1.1b|custom (default custom)");
    if (!for_training) {
        app.add_option("--type", f.type, "f32|f16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m (default f16)");
        app.add_option("-o,--output", f.output, "output GGUF file");
        f.seed.opt = app.add_option("-s,--seed", f.seed.value, "random seed (default 42)");
        f.threads.opt = app.add_option("-t,--threads", f.threads.value, "threads for generating and quantizing (default: all)");
    }
    app.add_option("--name", f.name, "general.name (default: the preset, or toy-<arch>)");
    app.add_option("--vocab-from", f.vocab_from, "take the tokenizer (and vocabulary size) from this GGUF");
    f.n_embd.opt = app.add_option("--n-embd", f.n_embd.value, "embedding size");
    f.n_layer.opt = app.add_option("--n-layer", f.n_layer.value, "number of blocks");
    f.n_head.opt = app.add_option("--n-head", f.n_head.value, "attention heads");
    f.n_head_kv.opt = app.add_option("--n-head-kv", f.n_head_kv.value, "key/value heads (a divisor of --n-head)");
    f.n_ff.opt = app.add_option("--n-ff", f.n_ff.value, "feed-forward size");
    f.n_vocab.opt = app.add_option("--n-vocab", f.n_vocab.value, "vocabulary size");
    f.n_ctx.opt = app.add_option("--n-ctx", f.n_ctx.value, "training context length");
    f.head_dim.opt = app.add_option("--head-dim", f.head_dim.value, "head size (default n_embd / n_head)");
    f.n_expert.opt = app.add_option("--n-expert", f.n_expert.value, "experts per MoE layer (0: dense)");
    f.n_expert_used.opt = app.add_option("--n-expert-used", f.n_expert_used.value, "experts used per token");
    f.n_ff_exp.opt = app.add_option("--n-ff-exp", f.n_ff_exp.value, "expert feed-forward size (default --n-ff)");
    f.norm_eps.opt = app.add_option("--norm-eps", f.norm_eps.value, "normalization epsilon");
    f.rope_base.opt = app.add_option("--rope-freq-base", f.rope_base.value, "rope base frequency");
    f.rope_scaling.opt = app.add_option("--rope-scaling", f.rope_scaling.value, "none|llama3");
    f.rope_scale.opt = app.add_option("--rope-scale", f.rope_scale.value, "Llama-3 rope scaling factor (default 8)");
    f.rope_low.opt = app.add_option("--rope-low-freq-factor", f.rope_low.value, "Llama-3 low frequency factor (default 1)");
    f.rope_high.opt = app.add_option("--rope-high-freq-factor", f.rope_high.value, "Llama-3 high frequency factor (default 4)");
    f.rope_orig_ctx.opt = app.add_option("--rope-orig-ctx", f.rope_orig_ctx.value, "Llama-3 original context (default 8192)");
    f.attn_softcap.opt = app.add_option("--attn-softcap", f.attn_softcap.value, "gemma2 attention soft-cap (default 50)");
    f.final_softcap.opt = app.add_option("--final-softcap", f.final_softcap.value, "gemma2 final logit soft-cap (default 30)");
    f.n_swa.opt = app.add_option("--sliding-window", f.n_swa.value, "gemma2 sliding window (default 4096)");
    f.embd_scale.opt = app.add_option("--embedding-scale", f.embd_scale.value, "granite embedding multiplier (default 12)");
    f.residual_scale.opt = app.add_option("--residual-scale", f.residual_scale.value, "granite residual multiplier (default 0.22)");
    f.logit_scale.opt = app.add_option("--logit-scale", f.logit_scale.value, "granite logit divisor (default 8)");
    f.attn_scale.opt = app.add_option("--attention-scale", f.attn_scale.value, "granite attention multiplier (default 1/head size)");
    app.add_flag("--tied", f.tied, "share the output projection with the token embeddings");
    app.add_flag("--untied", f.untied, "write a separate output.weight");
}

}  // namespace toy::cli
