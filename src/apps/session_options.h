// CLI flags shared by every command that loads a model and evaluates it
// (-m, --lora, --lora-scaled, -c, -b, -ub, -t, -ctk, -ctv, -fa, --no-mmap,
// --weight-type, --trace, and the device split: -ngl, -sm, -ts, -mg, -dev,
// --rpc, --list-devices).
#pragma once

#include "model/lora_adapter.h"
#include "model/model.h"
#include "runtime/devices.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "text/vocab.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

namespace toy::cli {

// --lora FILE and --lora-scaled FILE SCALE (repeatable, as in llama.cpp).
struct LoraFlags {
    std::vector<std::string> lora;                           // scale 1
    std::vector<std::pair<std::string, float>> lora_scaled;

    // `verb` says what the command does with them ("apply", "merge").
    void add_to(CLI::App &app, const char *verb);
    // The adapter files, each with its scale, in the order given.
    std::vector<std::pair<std::string, float>> files() const;
    // The adapters, checked against the model they adapt.
    LoraSet load(const Model &model) const;
};

// The device split (model/split.h) as llama.cpp spells it: -ngl, -sm, -ts,
// -mg, -dev, --rpc, and --list-devices (lists and exits).
struct SplitFlags {
    // -ngl's default: every block when a device exists (inference), or 0
    // (toy train, where a block goes to a device only when asked)
    explicit SplitFlags(int default_layers = SplitOptions::kAllLayers) : n_gpu_layers(default_layers) {}
    int n_gpu_layers;
    std::string split_mode = "layer";
    std::string tensor_split;
    int main_gpu = 0;
    std::string device;
    std::string rpc;
    double rpc_timeout = (double)kRpcTimeoutDefault.count();  // seconds; 0: wait forever

    void add_to(CLI::App &app);
    // The split, checked (an error names its flag); adds the --rpc servers
    // first (once), so that their devices can take blocks.
    SplitOptions options() const;

private:
    void add_servers() const;  // --rpc's servers, with --rpc-timeout
};

struct ModelFlags {
    std::string model_path;
    bool no_mmap = false;
    bool no_repack = false;
    bool check_tensors = false;
    bool no_fuse = false;
    std::string hugepages = "auto";
    std::optional<std::string> pack_cache;  // --pack-cache DIR ("": none), else $TOY_PACK_CACHE
    std::string weight_type;   // "" or q8_0
    int64_t n_ctx = 0;
    int64_t n_batch = 2048;
    int64_t n_ubatch = 512;
    int n_threads = 0;
    std::string cache_type_k = "f16";
    std::string cache_type_v = "f16";
    std::string flash_attn = "auto";
    bool trace = false;
    LoraFlags lora;
    SplitFlags split;

    void add_to(CLI::App &app, bool with_trace = true);
    // decode_tokens: what the command means to decode (LoadOptions), -1 unknown
    LoadOptions load_options(int64_t decode_tokens = -1) const;
    // Sessions made with these options apply the adapters load() loaded.
    SessionOptions session_options() const;
    // The same with other threads, flash attention and cache types (toy
    // bench's lists): each checked, an error naming its flag.
    SessionOptions session_options(int threads, const std::string &fa, const std::string &type_k,
                                   const std::string &type_v) const;
    // The model, and the adapters of --lora / --lora-scaled checked against
    // it; they live as long as these flags.
    std::unique_ptr<Model> load(int64_t decode_tokens = -1) const;

private:
    mutable LoraSet loras_;
};

// Speculative decoding (toy run): --model-draft / -md FILE, --draft-max,
// --draft-min, --draft-p-min as llama.cpp spells them, and --lookup-ngram N
// (prompt lookup, no second model).
struct DraftFlags {
    std::string model_path;
    int lookup_ngram = 0;  // 0: off
    DraftParams params;

    void add_to(CLI::App &app);
    // The speculator for the target's session, or null when no drafter is
    // asked for. Loads the draft model (kept with these flags) with the
    // target's load and session options, checked to share its vocabulary.
    // target_tokens: what the target means to decode (-1: unknown,
    // kServingTokens: a server's, passed on as it is); the draft model
    // decodes at most --draft-max tokens for each of them, which is what its
    // load is told (LoadOptions::decode_tokens).
    std::unique_ptr<Speculator> make(Session &target, const ModelFlags &flags, int64_t target_tokens = -1) const;
    // The drafter alone (toy serve batches the target itself), or null. A
    // draft model's session gets n_ctx cells.
    std::unique_ptr<Drafter> make_drafter(const Model &target, int64_t n_ctx, const ModelFlags &flags,
                                          int64_t target_tokens = -1) const;

private:
    mutable std::unique_ptr<Model> model_;
};

// "Available devices:" and one line per device ggml knows (toy devices,
// --list-devices).
void print_devices();

// Prints the session's notes (e.g. flash attention switched on) to stderr.
void print_notes(const Session &s);
// ... and the tokenizer's (e.g. a special-token id out of range).
void print_notes(const text::Vocab &v);

}  // namespace toy::cli
