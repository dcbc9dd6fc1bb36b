// toy init: write a model with random weights (model/init.h).
//
//   toy init --preset smollm2-135m --type q4_k_m -o smol.gguf
//   toy init --arch qwen3moe --n-embd 256 --n-expert 8 --n-expert-used 2 -o moe.gguf
#include "apps/cli.h"
#include "apps/init_flags.h"
#include "core/error.h"
#include "model/init.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

namespace toy::cli {
namespace {

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

int run_init(const InitFlags &f) {
    if (f.output.empty()) fail("-o: an output file is required");
    const InitOptions o = init_options_from(f);
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
    add_init_flags(app, *f);
    return [f] { return run_init(*f); };
});

}  // namespace
}  // namespace toy::cli
