// The flags that describe a random model (`toy init`, and `toy train
// --from-scratch`, which trains one): architecture, preset, sizes, rope,
// soft-caps, scales. Each flag overrides the preset only when given.
#pragma once

#include "model/init.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace toy::cli {

// A flag whose value overrides the preset only when it was given (its
// --help shows no "=0": when not given, the preset's value applies).
template <class T>
struct Flag {
    T value{};
    CLI::Option *opt = nullptr;
    void add(CLI::App &app, const std::string &name, const std::string &help) {
        opt = app.add_option(name, value, help)->default_str("");
    }
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
    std::string vocab_from;
};


// Registers the model-shape flags (everything but -o, -t and --type when
// `for_training`: training writes F32 and has its own -t).
void add_init_flags(CLI::App &app, InitFlags &f, bool for_training = false);
InitOptions init_options_from(const InitFlags &f);

}  // namespace toy::cli
