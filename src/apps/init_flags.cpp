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
        f.seed.add(app, "-s,--seed", "random seed (default 42)");
        f.threads.add(app, "-t,--threads", "threads for generating and quantizing (default: all)");
    }
    app.add_option("--name", f.name, "general.name (default: the preset, or toy-<arch>)");
    app.add_option("--vocab-from", f.vocab_from, "take the tokenizer (and vocabulary size) from this GGUF");
    f.n_embd.add(app, "--n-embd", "embedding size");
    f.n_layer.add(app, "--n-layer", "number of blocks");
    f.n_head.add(app, "--n-head", "attention heads");
    f.n_head_kv.add(app, "--n-head-kv", "key/value heads (a divisor of --n-head)");
    f.n_ff.add(app, "--n-ff", "feed-forward size");
    f.n_vocab.add(app, "--n-vocab", "vocabulary size");
    f.n_ctx.add(app, "--n-ctx", "training context length");
    f.head_dim.add(app, "--head-dim", "head size (default n_embd / n_head)");
    f.n_expert.add(app, "--n-expert", "experts per MoE layer (0: dense)");
    f.n_expert_used.add(app, "--n-expert-used", "experts used per token");
    f.n_ff_exp.add(app, "--n-ff-exp", "expert feed-forward size (default --n-ff)");
    f.norm_eps.add(app, "--norm-eps", "normalization epsilon");
    f.rope_base.add(app, "--rope-freq-base", "rope base frequency");
    f.rope_scaling.add(app, "--rope-scaling", "none|llama3");
    f.rope_scale.add(app, "--rope-scale", "Llama-3 rope scaling factor (default 8)");
    f.rope_low.add(app, "--rope-low-freq-factor", "Llama-3 low frequency factor (default 1)");
    f.rope_high.add(app, "--rope-high-freq-factor", "Llama-3 high frequency factor (default 4)");
    f.rope_orig_ctx.add(app, "--rope-orig-ctx", "Llama-3 original context (default 8192)");
    f.attn_softcap.add(app, "--attn-softcap", "gemma2 attention soft-cap (default 50)");
    f.final_softcap.add(app, "--final-softcap", "gemma2 final logit soft-cap (default 30)");
    f.n_swa.add(app, "--sliding-window", "gemma2 sliding window (default 4096)");
    f.embd_scale.add(app, "--embedding-scale", "granite embedding multiplier (default 12)");
    f.residual_scale.add(app, "--residual-scale", "granite residual multiplier (default 0.22)");
    f.logit_scale.add(app, "--logit-scale", "granite logit divisor (default 8)");
    f.attn_scale.add(app, "--attention-scale", "granite attention multiplier (default 1/head size)");
    app.add_flag("--tied", f.tied, "share the output projection with the token embeddings");
    app.add_flag("--untied", f.untied, "write a separate output.weight");
}

}  // namespace toy::cli
