// Small random models the training and adapter tests share, written once
// per process into a scratch directory.
#pragma once

#include "model/init.h"
#include "test_util.h"

#include <filesystem>
#include <string>

namespace toy::test {

// The process's scratch directory, shared by its tests and removed when it exits.
inline const std::filesystem::path &scratch_dir() {
    static const TempDir scratch;
    return scratch.path;
}

// F32 options of a small model of `arch` (custom preset).
inline toy::InitOptions small_f32(const std::string &arch, int64_t n_embd, int64_t n_head, int64_t n_head_kv, int64_t n_ff,
                      int64_t n_layer) {
    toy::InitOptions o = toy::preset_options("custom", arch);
    o.type = toy::InitType::F32;
    o.n_embd = n_embd;
    o.n_head = n_head;
    o.n_head_kv = n_head_kv;
    o.n_ff = n_ff;
    o.n_layer = n_layer;
    o.n_ctx = 64;
    return o;
}

// A tiny F32 model of `arch`, written once per process.
inline std::string tiny_model(const std::string &arch, int64_t n_swa = 0) {
    const std::filesystem::path path = scratch_dir() / (arch + (n_swa ? "-swa" : "") + ".gguf");
    if (std::filesystem::exists(path)) return path.string();
    toy::InitOptions o = small_f32(arch, 32, 4, arch == "gpt2" ? 4 : 2, 48, 2);
    o.n_vocab = arch == "gpt2" || arch == "qwen2" || arch == "qwen3" ? 300 : 280;
    o.seed = 7;
    if (n_swa) o.n_swa = n_swa;
    toy::init_model(o, path.string());
    return path.string();
}

}  // namespace toy::test
