// Random models: `toy init` writes a GGUF of any supported architecture with
// random weights, a synthetic tokenizer and the metadata Config::from_gguf
// and llama.cpp read, so every later stage (run, train, export, comparisons
// with llama.cpp) has a model to work on without downloading one.
//
// The tensor list comes from tensor_specs(); the metadata is written first
// and read back through Config::from_gguf, so the file and the Config can
// never disagree. Each tensor is generated and quantized on demand while the
// file is written: only one tensor is in memory at a time.
#pragma once

#include "model/config.h"
#include "model/weights.h"
#include "quant/mix.h"

#include <ggml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace toy {

// How the matrices are stored. A single type applies to every matrix (like
// `llama-quantize --pure`), with llama.cpp's fallback where a row length is
// not a multiple of the type's block; Q4_K_M is llama.cpp's mix (mostly
// Q4_K; attn_v, ffn_down of some layers and the output projection Q6_K).
// Norms, biases, rope factors, learned positions and MoE routers stay F32.
enum class InitType { F32, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q4_K_M };

InitType parse_init_type(const std::string &name);  // "q4_k_m" -> Q4_K_M; throws toy::Error
const char *init_type_name(InitType t);             // "q4_k_m"
std::vector<std::string> init_type_names();
int init_file_type(InitType t);                     // general.file_type (llama.cpp's LLAMA_FTYPE_*)

// The quantization mix of a type (quant/mix.h: llama.cpp's rules, the one
// implementation `toy quantize` uses too): its file type, and whether it is
// pure (one type for every matrix).
quant::MixOptions init_mix(InitType t);
quant::MixModel init_mix_model(const Config &cfg);
// The types a model's tensors are stored in for `type`, for all of them at
// once (the mix looks at the whole model: a tied output, positions among the
// layers); `tensors` as they will be written, with the types they have now.
std::vector<quant::TypeChoice> storage_types(InitType type, const std::vector<quant::TensorDesc> &tensors, const Config &cfg);

struct InitOptions {
    std::string arch = "llama";
    std::string name;            // general.name; empty: the preset or "toy-<arch>"
    InitType type = InitType::F16;
    uint64_t seed = 42;
    int n_threads = 0;           // 0: all hardware threads

    // ---- sizes ----
    int64_t n_vocab = 512;
    int64_t n_ctx = 512;
    int64_t n_embd = 256;
    int64_t n_layer = 2;
    int64_t n_head = 4;
    int64_t n_head_kv = 2;
    int64_t n_ff = 512;
    int64_t head_dim = 0;        // 0: n_embd / n_head
    int64_t n_expert = 0;        // 0: dense FFN
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;        // 0: n_ff
    bool tied = true;            // output projection shares token_embd.weight
    // A GGUF whose tokenizer the model takes (its tokenizer.* keys; the
    // vocabulary size follows it). Empty: a synthetic tokenizer.
    std::string vocab_from;

    // ---- blocks ----
    float norm_eps = 1e-5f;
    float rope_base = 10000.0f;
    // Llama-3 rope scaling (written as rope_freqs.weight, like llama.cpp's
    // converter); factor 0 disables it.
    float rope_llama3_factor = 0.0f;
    float rope_low_freq_factor = 1.0f;
    float rope_high_freq_factor = 4.0f;
    int64_t rope_orig_ctx = 8192;

    // ---- gemma2 ----
    float attn_softcap = 0.0f;
    float final_softcap = 0.0f;
    int64_t n_swa = 0;

    // ---- granite ----
    float embd_scale = 0.0f;
    float residual_scale = 0.0f;
    float logit_scale = 0.0f;
    float attn_scale = 0.0f;     // 0: 1 / head size
};

// Preset names, "custom" last.
std::vector<std::string> init_presets();
// The options of a preset. `arch` may be empty (the preset's own) and must
// match a named preset's architecture; "custom" needs it and gives small
// sizes with that architecture's usual norm epsilon, rope base, softcaps,
// scales and expert counts. Throws toy::Error for unknown names.
InitOptions preset_options(const std::string &preset, const std::string &arch);

// Checks that the options describe a model (positive sizes, divisible heads,
// features the architecture has). Throws toy::Error naming the flag.
void validate_init_options(const InitOptions &o);

// The Config a file written with these options has (validates first).
Config init_config(const InitOptions &o);

struct InitTensor {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;
};

struct InitResult {
    Config config;
    std::vector<InitTensor> tensors;   // as written, in file order
    int64_t n_params = 0;              // elements of all tensors written
    uint64_t file_bytes = 0;
    std::vector<std::string> notes;    // fallbacks and other decisions worth telling the user
};

// Writes the random model to `path` (atomically). Throws toy::Error.
InitResult init_model(const InitOptions &o, const std::string &path);

}  // namespace toy
