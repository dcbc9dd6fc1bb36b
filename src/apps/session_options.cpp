// CLI11's lexical_conversion for the pair-valued --lora-scaled option trips
// GCC 12's -Wmaybe-uninitialized inside the CLI11 header (a false positive in
// third-party code); kept out of this file's warnings only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "apps/session_options.h"

#include "core/error.h"
#include "core/ggml_log.h"
#include "core/lists.h"
#include "graph/packed_matmul.h"
#include "runtime/devices.h"
#include "runtime/kv_cache.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

namespace toy::cli {
namespace {

// "on", "off" or "auto" (also 1/true and 0/false, as llama.cpp takes them)
// as the enum's On, Off or Auto.
template <class Mode>
Mode parse_on_off_auto(const std::string &s, const char *flag) {
    if (s == "on" || s == "1" || s == "true") return Mode::On;
    if (s == "off" || s == "0" || s == "false") return Mode::Off;
    if (s == "auto") return Mode::Auto;
    fail("{}: expected on, off or auto, found '{}'", flag, s);
}

}  // namespace

SplitOptions SplitFlags::options() const {
    SplitOptions o;
    o.n_gpu_layers = n_gpu_layers;
    if (split_mode == "layer") {
        o.mode = SplitMode::Layer;
    } else if (split_mode == "none") {
        o.mode = SplitMode::None;
    } else if (split_mode == "row") {
        fail("--split-mode row: toy splits models by layer only (use layer or none)");
    } else {
        fail("--split-mode: expected none, layer or row, found '{}'", split_mode);
    }
    if (!tensor_split.empty()) {
        for (const std::string &part : split_list(tensor_split, ",/")) {  // llama.cpp also takes 3/1
            char *end = nullptr;
            const float v = std::strtof(part.c_str(), &end);
            if (part.empty() || *end != '\0') fail("--tensor-split: expected proportions such as 3,1, found '{}'", tensor_split);
            o.tensor_split.push_back(v);
        }
    }
    o.main_gpu = main_gpu;
    if (!device.empty()) {
        o.devices = split_list(device, ",");
        for (const std::string &d : o.devices)
            if (d.empty()) fail("--device: expected names such as RPC0,RPC1 (or none), found '{}'", device);
    }
    o.check();  // (also where nothing is offloaded, so a mistake is not silent)
    add_servers();
    return o;
}

void SplitFlags::add_servers() const {
    if (!(rpc_timeout >= 0 && rpc_timeout <= 1e6)) {
        fail("--rpc-timeout: expected seconds from 0 (wait forever) to 1000000, found {}", rpc_timeout);
    }
    if (rpc.empty()) return;
    add_rpc_servers(rpc, std::chrono::milliseconds((long long)std::ceil(rpc_timeout * 1000)));
}

void print_devices() {
    std::printf("Available devices:\n");
    for (const DeviceInfo &d : devices()) {
        std::printf("  %s: %s (%zu MiB, %zu MiB free)", d.name.c_str(), d.description.c_str(), d.total >> 20, d.free >> 20);
        if (d.type == "CPU") std::printf(" [toy kernels: %s]", graph::packed_kernels_name());
        if (d.type == "GPU") std::printf(" [GPU]");
        std::printf("\n");
    }
    // a backend that found nothing to run on (a CUDA build without a GPU)
    if (const std::string &notes = backend_start_notes(); !notes.empty()) std::printf("  (%s)\n", notes.c_str());
}

void SplitFlags::add_to(CLI::App &app) {
    app.add_option("--n-gpu-layers,--gpu-layers", n_gpu_layers,
                   "blocks on the offload devices (GPUs, --rpc servers), counted from the last; more than the model "
                   "has: the output head too; -1: all when there is a device; also -ngl")
        ->default_str(std::to_string(n_gpu_layers));
    app.add_option("--split-mode", split_mode, "how blocks share the offload devices: layer (by --tensor-split), none "
                                               "(all on --main-gpu); also -sm");
    app.add_option("--tensor-split", tensor_split,
                   "proportions of the offloaded blocks per device, e.g. 3,1 (default: by free memory); also -ts");
    app.add_option("--main-gpu", main_gpu, "split mode none: the offload device (0-based) that takes them; also -mg");
    app.add_option("--device", device, "offload devices by name, comma-separated, or none (see --list-devices); also -dev");
    app.add_option("--rpc", rpc, "ggml RPC servers host:port[,host:port...] (toy rpc-server, llama.cpp's rpc-server) "
                                 "to offload blocks to");
    app.add_option("--rpc-timeout", rpc_timeout,
                   "seconds to wait for an RPC server's answer before giving up with an error (0: forever)")
        ->default_str(fmt::format("{}", rpc_timeout));
    // after --rpc and --rpc-timeout, whose values it uses (CLI11 runs callbacks in this order)
    app.add_flag_callback(
        "--list-devices",
        [this] {
            add_servers();
            print_devices();
            throw CLI::Success();
        },
        "list the devices (with --rpc's servers) and exit");
}

void LoraFlags::add_to(CLI::App &app, const char *verb) {
    app.add_option("--lora", lora, fmt::format("{} this LoRA adapter (llama.cpp's GGUF format; repeatable)", verb));
    app.add_option("--lora-scaled", lora_scaled, fmt::format("{} this LoRA adapter with this scale (FILE SCALE; repeatable)", verb));
}

std::vector<std::pair<std::string, float>> LoraFlags::files() const {
    std::vector<std::pair<std::string, float>> files;
    for (const std::string &f : lora) files.emplace_back(f, 1.0f);
    files.insert(files.end(), lora_scaled.begin(), lora_scaled.end());
    return files;
}

LoraSet LoraFlags::load(const Model &model) const { return LoraSet::load(files(), model); }

void ModelFlags::add_to(CLI::App &app, bool with_trace) {
    app.add_option("-m,--model", model_path, "GGUF model file")->required();
    lora.add_to(app, "apply");
    app.add_flag("--no-mmap", no_mmap, "copy weights into memory instead of mapping the file");
    app.add_flag("--no-repack", no_repack, "keep matrices in the file's layout and mapping (no copies in ggml's AMX or repack layouts or toy's packed one; least memory)");
    app.add_flag("--no-fuse", no_fuse, "separate Q, K and V matmuls (and gate and up): no fusing at load");
    app.add_flag("--check-tensors", check_tensors,
                 "read every tensor of the model and its adapters back at load and refuse a NaN or an infinity in one (a "
                 "pass over the files)");
    app.add_option("--hugepages", hugepages,
                   fmt::format("transparent huge pages for copied weights, with the matrices that would stay mapped copied "
                               "onto them too: on, off, auto (on for toy serve, which loads once, and for a command that "
                               "decodes {} tokens or more: toy run -n, toy bench -n x -r; elsewhere on, unless a VM hands free "
                               "memory back to its host and either a probe finds 2 MiB pages fault in slower than 4 KiB ones "
                               "or the command decodes fewer than {} tokens: toy run -n, toy logits)",
                               kLongRunTokens, kShortRunTokens));
    app.add_option("--pack-cache", pack_cache,
                   "keep the matrices packed for toy's CPU kernels in this directory (one file per model and "
                   "options, about the model's size) and map them from there on later loads: no packing, "
                   "memory shared between processes (default: $TOY_PACK_CACHE, if set; \"\" turns it off)");
    app.add_option("--weight-type", weight_type,
                   "convert F32/F16 linear weights at load: q8_0, or bf16 (faster prompts on AVX512_BF16 CPUs, "
                   "bfloat16 precision)");
    app.add_option("-c,--ctx-size", n_ctx, "context size in tokens (0: the model's, at most 4096)");
    app.add_option("-b,--batch-size", n_batch, "logical batch size");
    app.add_option("--ubatch-size", n_ubatch, "physical batch size (tokens per graph); also -ub");
    app.add_option("-t,--threads", n_threads, "threads (0: all)");
    app.add_option("--cache-type-k", cache_type_k, fmt::format("K cache type: {}; also -ctk", kv_cache_type_names()));
    app.add_option("--cache-type-v", cache_type_v,
                   fmt::format("V cache type: {} (quantized ones turn flash attention on); also -ctv", kv_cache_type_names()));
    app.add_option("--flash-attn", flash_attn, "flash attention: on, off, auto (1/true, 0/false); also -fa");
    if (with_trace) app.add_flag("--trace", trace, "print statistics of named activations for every graph (stderr)");
    split.add_to(app);
}

LoadOptions ModelFlags::load_options(int64_t decode_tokens) const {
    LoadOptions o;
    o.decode_tokens = decode_tokens;
    o.use_mmap = !no_mmap;
    o.repack = !no_repack;
    o.fuse = !no_fuse;
    o.check_tensors = check_tensors;
    o.huge_pages = parse_on_off_auto<HugePages>(hugepages, "--hugepages");
    const char *env = std::getenv("TOY_PACK_CACHE");
    o.pack_cache_dir = pack_cache.value_or(env ? env : "");
    if (weight_type.empty()) {
        o.weight_type = GGML_TYPE_COUNT;
    } else if (weight_type == "q8_0") {
        o.weight_type = GGML_TYPE_Q8_0;
    } else if (weight_type == "bf16") {
        o.weight_type = GGML_TYPE_BF16;
    } else {
        fail("--weight-type: expected q8_0 or bf16, found '{}'", weight_type);
    }
    o.split = split.options();
    return o;
}

SessionOptions ModelFlags::session_options() const {
    return session_options(n_threads, flash_attn, cache_type_k, cache_type_v);
}

SessionOptions ModelFlags::session_options(int threads, const std::string &fa, const std::string &type_k,
                                           const std::string &type_v) const {
    SessionOptions o;
    o.n_ctx = n_ctx;
    o.n_batch = n_batch;
    o.n_ubatch = n_ubatch;
    o.n_threads = threads;
    o.type_k = parse_kv_cache_type(type_k, "-ctk");
    o.type_v = parse_kv_cache_type(type_v, "-ctv");
    o.flash_attn = parse_on_off_auto<FlashAttn>(fa, "-fa");
    if (n_ctx < 0) fail("-c: expected a size >= 0, found {}", n_ctx);
    o.trace = trace ? stderr : nullptr;
    o.adapters = &loras_.terms;
    return o;
}

std::unique_ptr<Model> ModelFlags::load(int64_t decode_tokens) const {
    auto model = Model::load(model_path, load_options(decode_tokens));
    if (model->split().offloads()) std::fprintf(stderr, "toy: split: %s\n", model->split().describe().c_str());
    if (check_tensors) {
        for (const auto &[file, scale] : lora.files()) check_tensor_values(*gguf::File::open(file));
    }
    loras_ = lora.load(*model);
    return model;
}

void DraftFlags::add_to(CLI::App &app) {
    app.add_option("--model-draft,--spec-draft-model", model_path,
                   "speculative decoding: a smaller model with the same vocabulary drafts tokens; also -md");
    app.add_option("--draft-max,--draft,--spec-draft-n-max", params.n_max,
                   "speculative decoding: tokens drafted per target pass at most");
    app.add_option("--draft-min,--spec-draft-n-min", params.n_min,
                   "speculative decoding: a shorter draft is not used");
    app.add_option("--draft-p-min,--spec-draft-p-min", params.p_min,
                   "speculative decoding: the draft model stops before a token it gives less probability");
    app.add_option("--lookup-ngram", lookup_ngram,
                   "prompt lookup decoding: draft the tokens that followed the latest earlier occurrence of the "
                   "context's last N tokens (0: off)");
}

std::unique_ptr<Drafter> DraftFlags::make_drafter(const Model &target, int64_t n_ctx, const ModelFlags &flags,
                                                  int64_t target_tokens) const {
    check_draft_params(params);
    if (lookup_ngram < 0) fail("--lookup-ngram: expected an n-gram size from 1 to 64 (0: off), found {}", lookup_ngram);
    if (!model_path.empty() && lookup_ngram > 0) fail("--model-draft and --lookup-ngram: choose one drafter");
    if (lookup_ngram > 0) return std::make_unique<PromptLookup>(lookup_ngram);
    if (model_path.empty()) return nullptr;
    const int64_t draft_tokens = target_tokens < 0 || target_tokens == kServingTokens
                                     ? target_tokens
                                     : std::min<int64_t>(target_tokens, INT32_MAX) * params.n_max;
    model_ = Model::load(model_path, flags.load_options(draft_tokens));
    check_same_vocab(target, *model_);
    SessionOptions so = flags.session_options();
    so.n_ctx = n_ctx;  // the draft follows the same context (its own default could be smaller)
    return std::make_unique<DraftModel>(*model_, so, params.p_min);
}

std::unique_ptr<Speculator> DraftFlags::make(Session &target, const ModelFlags &flags, int64_t target_tokens) const {
    std::unique_ptr<Drafter> drafter = make_drafter(target.model(), target.n_ctx(), flags, target_tokens);
    return drafter ? std::make_unique<Speculator>(target, std::move(drafter), params) : nullptr;
}

void print_notes(const Session &s) {
    for (const auto &n : s.notes()) std::fprintf(stderr, "toy: %s\n", n.c_str());
}

void print_notes(const text::Vocab &v) {
    for (const auto &n : v.notes()) std::fprintf(stderr, "toy: warning: %s\n", n.c_str());
}

}  // namespace toy::cli
