// toy init: write a model with random weights (model/init.h).
//
//   toy init --preset smollm2-135m --type q4_k_m -o smol.gguf
//   toy init --arch qwen3moe --n-embd 256 --n-expert 8 --n-expert-used 2 -o moe.gguf
#include "apps/cli.h"
#include "core/error.h"
#include "model/init.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

namespace toy::cli {
namespace {

// A flag whose value overrides the preset only when it was given.
template <class T>
struct Flag {
    T value{};
    CLI::Option *opt = nullptr;
    bool given() const { return opt && opt->count() > 0; }
    void apply(T &target) const {
        if (given()) target = value;
    }
};

struct InitFlags {
    std::string arch, preset = "custom", type = "f16", output, name;
    Flag<uint64_t> seed;
    Flag<int> threads;
    Flag<int64_t> n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx, head_dim, n_expert, n_expert_used, n_ff_exp;
    Flag<float> norm_eps, rope_base;
    Flag<std::string> rope_scaling;
    Flag<float> rope_scale, rope_low, rope_high;
    Flag<int64_t> rope_orig_ctx;
    Flag<float> attn_softcap, final_softcap;
    Flag<int64_t> n_swa;
    Flag<float> embd_scale, residual_scale, logit_scale, attn_scale;
    bool tied = false, untied = false;
};

std::string human_count(int64_t n) {
    if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
    if (n >= 1000000) return fmt::format("{:.2f}M", n / 1e6);
    if (n >= 1000) return fmt::format("{:.1f}K", n / 1e3);
    return std::to_string(n);
}

std::string human_bytes(uint64_t n) {
    if (n >= (1ull << 30)) return fmt::format("{:.2f} GiB", n / double(1ull << 30));
    if (n >= (1ull << 20)) return fmt::format("{:.1f} MiB", n / double(1ull << 20));
    if (n >= (1ull << 10)) return fmt::format("{:.1f} KiB", n / double(1ull << 10));
    return fmt::format("{} B", n);
}

InitOptions options_from(const InitFlags &f) {
    InitOptions o = preset_options(f.preset, f.arch);
    const InitOptions preset = o;
    o.type = parse_init_type(f.type);
    if (!f.name.empty()) o.name = f.name;
    f.seed.apply(o.seed);
    f.threads.apply(o.n_threads);
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
    return o;
}

int run_init(const InitFlags &f) {
    if (f.output.empty()) fail("-o: an output file is required");
    const InitOptions o = options_from(f);
    const auto t0 = std::chrono::steady_clock::now();
    const InitResult r = init_model(o, f.output);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::map<std::string, int> by_type;
    for (const auto &t : r.tensors) by_type[ggml_type_name(t.type)]++;
    std::string types;
    for (const auto &[name, n] : by_type) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", name, n);
    for (const auto &n : r.notes) std::fprintf(stderr, "toy: note: %s\n", n.c_str());
    std::fprintf(stderr, "toy: wrote %s: %s '%s', %s parameters, %s (general.file_type %d), %s, %zu tensors [%s], seed %llu, %.1f s\n",
                 f.output.c_str(), o.arch.c_str(), r.config.name.c_str(), human_count(r.n_params).c_str(),
                 init_type_name(o.type), init_file_type(o.type), human_bytes(r.file_bytes).c_str(), r.tensors.size(),
                 types.c_str(), (unsigned long long)o.seed, secs);
    return 0;
}

Command reg("init", "Write a model with random weights (any supported architecture, preset or custom sizes)", [](CLI::App &app) {
    auto f = std::make_shared<InitFlags>();
    app.add_option("--arch", f->arch, "architecture (" + [] {
        std::string s;
        for (const auto &a : supported_architectures()) s += (s.empty() ? "" : "|") + a;
        return s;
    }() + "); implied by a named preset");
    app.add_option("--preset", f->preset, "smollm2-135m|qwen2.5-0.5b|llama-3.2-1b|tinyllama-1.1b|custom (default custom)");
    app.add_option("--type", f->type, "f32|f16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m (default f16)");
    app.add_option("-o,--output", f->output, "output GGUF file");
    app.add_option("--name", f->name, "general.name (default: the preset, or toy-<arch>)");
    f->seed.opt = app.add_option("-s,--seed", f->seed.value, "random seed (default 42)");
    f->threads.opt = app.add_option("-t,--threads", f->threads.value, "threads for generating and quantizing (default: all)");
    f->n_embd.opt = app.add_option("--n-embd", f->n_embd.value, "embedding size");
    f->n_layer.opt = app.add_option("--n-layer", f->n_layer.value, "number of blocks");
    f->n_head.opt = app.add_option("--n-head", f->n_head.value, "attention heads");
    f->n_head_kv.opt = app.add_option("--n-head-kv", f->n_head_kv.value, "key/value heads (a divisor of --n-head)");
    f->n_ff.opt = app.add_option("--n-ff", f->n_ff.value, "feed-forward size");
    f->n_vocab.opt = app.add_option("--n-vocab", f->n_vocab.value, "vocabulary size");
    f->n_ctx.opt = app.add_option("--n-ctx", f->n_ctx.value, "training context length");
    f->head_dim.opt = app.add_option("--head-dim", f->head_dim.value, "head size (default n_embd / n_head)");
    f->n_expert.opt = app.add_option("--n-expert", f->n_expert.value, "experts per MoE layer (0: dense)");
    f->n_expert_used.opt = app.add_option("--n-expert-used", f->n_expert_used.value, "experts used per token");
    f->n_ff_exp.opt = app.add_option("--n-ff-exp", f->n_ff_exp.value, "expert feed-forward size (default --n-ff)");
    f->norm_eps.opt = app.add_option("--norm-eps", f->norm_eps.value, "normalization epsilon");
    f->rope_base.opt = app.add_option("--rope-freq-base", f->rope_base.value, "rope base frequency");
    f->rope_scaling.opt = app.add_option("--rope-scaling", f->rope_scaling.value, "none|llama3");
    f->rope_scale.opt = app.add_option("--rope-scale", f->rope_scale.value, "Llama-3 rope scaling factor (default 8)");
    f->rope_low.opt = app.add_option("--rope-low-freq-factor", f->rope_low.value, "Llama-3 low frequency factor (default 1)");
    f->rope_high.opt = app.add_option("--rope-high-freq-factor", f->rope_high.value, "Llama-3 high frequency factor (default 4)");
    f->rope_orig_ctx.opt = app.add_option("--rope-orig-ctx", f->rope_orig_ctx.value, "Llama-3 original context (default 8192)");
    f->attn_softcap.opt = app.add_option("--attn-softcap", f->attn_softcap.value, "gemma2 attention soft-cap (default 50)");
    f->final_softcap.opt = app.add_option("--final-softcap", f->final_softcap.value, "gemma2 final logit soft-cap (default 30)");
    f->n_swa.opt = app.add_option("--sliding-window", f->n_swa.value, "gemma2 sliding window (default 4096)");
    f->embd_scale.opt = app.add_option("--embedding-scale", f->embd_scale.value, "granite embedding multiplier (default 12)");
    f->residual_scale.opt = app.add_option("--residual-scale", f->residual_scale.value, "granite residual multiplier (default 0.22)");
    f->logit_scale.opt = app.add_option("--logit-scale", f->logit_scale.value, "granite logit divisor (default 8)");
    f->attn_scale.opt = app.add_option("--attention-scale", f->attn_scale.value, "granite attention multiplier (default 1/head size)");
    app.add_flag("--tied", f->tied, "share the output projection with the token embeddings");
    app.add_flag("--untied", f->untied, "write a separate output.weight");
    return [f] { return run_init(*f); };
});

}  // namespace
}  // namespace toy::cli
