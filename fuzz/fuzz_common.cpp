#include "fuzz_common.h"

#include "core/error.h"
#include "core/ggml_log.h"
#include "gguf/gguf_writer.h"
#include "model/init.h"
#include "train/trainable.h"

#include <ggml.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace toy::fuzz {

std::string shared_path(const std::string &rel) {
    const char *env = std::getenv("TOY_SHARED_DIR");
    return std::string(env && *env ? env : TOY_SHARED_DIR) + "/" + rel;
}

std::string llama_path(const std::string &rel) { return std::string(TOY_LLAMA_SOURCE_DIR) + "/" + rel; }

std::string read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "fuzz: cannot read %s\n", path.c_str());
        std::abort();  // a setup error, not a finding: say so loudly
    }
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

namespace {
std::string g_scratch;
void remove_scratch() {
    std::error_code ec;
    if (!g_scratch.empty()) std::filesystem::remove_all(g_scratch, ec);
}
}  // namespace

const std::string &scratch_dir() {
    if (g_scratch.empty()) {
        // /dev/shm when there is one: the targets rewrite their input file every run
        const char *base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
        g_scratch = std::string(base) + "/toy-fuzz-" + std::to_string(getpid());
        std::filesystem::create_directories(g_scratch);
        std::atexit(remove_scratch);
    }
    return g_scratch;
}

ScratchFile::ScratchFile(const std::string &name) : path_(scratch_dir() + "/" + name) {}

const std::string &ScratchFile::write(const uint8_t *data, size_t size) {
    FILE *f = std::fopen(path_.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
        std::fprintf(stderr, "fuzz: cannot write %s\n", path_.c_str());
        std::abort();
    }
    return path_;
}

std::string_view Input::until(char sep) {
    std::string_view all(p_, n_);
    const size_t k = all.find(sep);
    const size_t take = k == std::string_view::npos ? n_ : k;
    std::string_view s(p_, take);
    const size_t used = k == std::string_view::npos ? n_ : k + 1;
    p_ += used;
    n_ -= used;
    return s;
}

std::string tiny_model(const std::string &arch, bool f16) {
    static std::map<std::string, std::string> made;
    const std::string key = arch + (f16 ? ".f16" : ".f32");
    auto it = made.find(key);
    if (it != made.end()) return it->second;
    InitOptions o = preset_options("custom", arch);
    o.type = f16 ? InitType::F16 : InitType::F32;
    o.n_threads = 1;
    o.n_embd = 16;
    o.n_layer = 1;
    o.n_head = 2;
    o.n_head_kv = o.n_head_kv == o.n_head || o.n_head_kv == 0 ? 2 : 1;
    o.n_ff = 32;
    o.n_ctx = 64;
    o.n_vocab = 320;
    if (o.n_expert > 0) {
        o.n_expert = 2;
        o.n_expert_used = 1;
        o.n_ff_exp = 16;
    }
    if (o.n_swa > 0) o.n_swa = 16;
    const std::string path = scratch_dir() + "/tiny-" + key + ".gguf";
    init_model(o, path);
    made[key] = path;
    return path;
}

void write_split_pair(const std::string &model, const std::string &first, const std::string &second) {
    auto f = gguf::File::open(model);
    const size_t n = f->tensors().size();
    gguf::write_split(*f, {first, second}, {n > 3 ? n - 3 : 0, 3});
}

std::unique_ptr<train::TrainableModel> tiny_trainable(const Model &base, int kind) {
    if (kind == 0) return train::TrainableModel::full(base);
    train::LoraOptions lo;
    lo.rank = 2;
    lo.targets = train::parse_lora_targets("all");
    lo.per_head = kind == 2;
    if (lo.per_head) lo.targets = train::parse_lora_targets("q,v");
    return train::TrainableModel::lora(base, lo);
}

namespace {
void no_log(ggml_log_level, const char *, void *) {}
}  // namespace

void quiet_ggml() {
    route_ggml_logs();  // Model::load calls it again: let its once-only setup happen now
    ggml_log_set(no_log, nullptr);
}

}  // namespace toy::fuzz
