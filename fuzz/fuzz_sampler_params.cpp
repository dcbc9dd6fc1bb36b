// fuzz_sampler_params: the sampler's parameters as a user types them. The
// input is a command line ('\0'-separated arguments) parsed by the `toy`
// commands' own sampling flags (add_sampling_flags in src/apps/cmd_run.cpp:
// --temp, --top-k, --samplers, --sampling-seq, -l/--logit-bias, --mirostat,
// DRY, XTC, ...); the first argument also goes straight to parse_stages and
// parse_logit_bias. Whatever parses must then sample: a Sampler built from
// those parameters draws tokens from fixed logits over a small vocabulary
// (gpt2 fixture, 384 tokens), and every token it returns must be inside it.
// Errors: toy::Error and CLI11's parse errors (CLI::Error).
#include "fuzz_common.h"

#include "apps/cli.h"
#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "text/generation.h"
#include "text/sampler.h"
#include "text/vocab.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace toy;

namespace {
std::unique_ptr<text::Vocab> g_vocab;
std::vector<float> g_logits;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    auto f = gguf::File::open(fuzz::shared_path("fixtures/gpt2.f32.gguf"));
    g_vocab = std::make_unique<text::Vocab>(text::Vocab::load(*f));
    uint32_t x = 12345;
    for (int32_t i = 0; i < g_vocab->n_tokens(); ++i) {
        x = x * 1664525u + 1013904223u;
        g_logits.push_back((float)(x >> 8) / (float)(1u << 24) * 20.0f - 10.0f);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Input in(data, size);
    std::vector<std::string> args;
    while (!in.empty() && args.size() < 32) args.emplace_back(in.until('\0'));

    if (!args.empty()) {
        try {
            (void)text::stage_names(text::parse_stages(args[0], "--samplers"));
        } catch (const Error &) {
        }
        try {
            (void)cli::parse_logit_bias(args[0]);
        } catch (const Error &) {
        }
    }

    text::SamplerParams p;
    try {
        CLI::App app("fuzz");
        cli::add_sampling_flags(app, p);
        cli::check_numeric_flags(app);  // (as main() does for every command)
        std::vector<std::string> argv(args.rbegin(), args.rend());  // CLI11 takes them last first
        app.parse(argv);
    } catch (const CLI::Error &) {
        return 0;
    } catch (const Error &) {
        return 0;
    }
    if (p.seed == 0xFFFFFFFFu) p.seed = 1;  // reproducible runs
    try {
        text::Sampler s(text::with_dry_breakers(p, *g_vocab));
        for (int i = 0; i < 6; ++i) {
            const int32_t id = s.sample(g_logits);
            if (id < 0 || id >= g_vocab->n_tokens()) {
                std::fprintf(stderr, "fuzz_sampler_params: sampled id %d outside the vocabulary\n", id);
                std::abort();
            }
            s.accept(id);
        }
    } catch (const Error &) {
    }
    return 0;
}
