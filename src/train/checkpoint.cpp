#include "train/checkpoint.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json.h"
#include "gguf/gguf_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace toy::train {
namespace {

constexpr uint32_t kVersion = 1;

std::vector<uint32_t> as_u32(const std::vector<int64_t> &v) { return {v.begin(), v.end()}; }

// "checkpoint-000123.gguf" -> 123, or -1 (also for a step past int64: no
// run of toy's wrote that name).
int64_t step_of(const fs::path &p) {
    const std::string n = p.filename().string();
    if (!n.starts_with("checkpoint-") || !n.ends_with(".gguf")) return -1;
    const std::string digits = n.substr(11, n.size() - 16);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    int64_t step = -1;
    if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec != std::errc()) return -1;
    return step;
}

// The file, once it is known to be a checkpoint this toy reads.
std::unique_ptr<gguf::File> open_checkpoint(const std::string &path) {
    auto f = gguf::File::open(path);
    if (f->opt_string("general.type").value_or("") != "toy.checkpoint") {
        fail("{}: not a toy training checkpoint (general.type is not toy.checkpoint)", path);
    }
    if (f->get_u32("toy.checkpoint.version") != kVersion) {
        fail("{}: checkpoint version {}, this toy reads version {}", path, f->get_u32("toy.checkpoint.version"), kVersion);
    }
    return f;
}

nlohmann::json settings_of(const gguf::File &f) {
    try {
        return parse_json(f.get_string("toy.checkpoint.settings"), f.path() + ": toy.checkpoint.settings");
    } catch (const nlohmann::json::exception &e) {
        fail("{}: toy.checkpoint.settings is not JSON ({})", f.path(), e.what());
    }
}

}  // namespace

nlohmann::json checkpoint_settings(const std::string &path) { return settings_of(*open_checkpoint(path)); }

std::string checkpoint_name(const std::string &dir, int64_t step) {
    return (fs::path(dir) / fmt::format("checkpoint-{:06d}.gguf", step)).string();
}

void save_checkpoint(const std::string &path, const ParamSet &params, const CheckpointState &st) {
    gguf::Writer w;
    w.set("general.type", gguf::Value::str("toy.checkpoint"));
    w.set("toy.checkpoint.version", gguf::Value::u32(kVersion));
    w.set("toy.checkpoint.step", gguf::Value::u64((uint64_t)st.step));
    w.set("toy.checkpoint.settings", gguf::Value::str(st.settings.dump()));
    w.set("toy.checkpoint.data_hash", gguf::Value::u64(st.data_hash));
    w.set("toy.checkpoint.train_loss", gguf::Value::f32_array(st.train_loss));
    w.set("toy.checkpoint.val_steps", gguf::Value::u32_array(as_u32(st.val_steps)));
    w.set("toy.checkpoint.val_loss", gguf::Value::f32_array(st.val_loss));
    std::vector<std::vector<float>> data;
    data.reserve(3 * params.params().size());
    for (const Param &p : params.params()) {
        const std::array<int64_t, 4> ne{p.value->ne[0], p.value->ne[1], p.value->ne[2], p.value->ne[3]};
        const int nd = ggml_n_dims(p.value);
        for (auto [t, suffix] : {std::pair{p.value, ""}, std::pair{p.m, ".adam_m"}, std::pair{p.v, ".adam_v"}}) {
            data.push_back(read_f32(t));
            w.add_tensor(p.name + suffix, GGML_TYPE_F32, ne, nd, data.back().data());
        }
    }
    w.write(path);
}

CheckpointState load_checkpoint(const std::string &path, ParamSet &params) {
    auto f = open_checkpoint(path);
    CheckpointState st;
    st.step = f->get_int("toy.checkpoint.step");
    st.settings = settings_of(*f);
    st.data_hash = (uint64_t)f->get_int("toy.checkpoint.data_hash");
    st.train_loss = f->get_float_array("toy.checkpoint.train_loss");
    st.val_steps = f->get_int_array("toy.checkpoint.val_steps");
    st.val_loss = f->get_float_array("toy.checkpoint.val_loss");
    if ((int64_t)st.train_loss.size() != st.step || st.val_steps.size() != st.val_loss.size()) {
        fail("{}: the loss history does not match step {}", path, st.step);
    }
    size_t expected = 0;
    for (Param &p : params.params()) {
        for (auto [t, suffix] : {std::pair{p.value, ""}, std::pair{p.m, ".adam_m"}, std::pair{p.v, ".adam_v"}}) {
            const std::string name = p.name + suffix;
            const gguf::TensorInfo *info = f->find_tensor(name);
            if (!info) fail("{}: the checkpoint has no tensor '{}': it belongs to another model or training mode", path, name);
            if (info->type != GGML_TYPE_F32) fail("{}: tensor '{}' is {}, expected f32", path, name, ggml_type_name(info->type));
            for (int d = 0; d < 4; ++d) {
                const int64_t have = d < (int)info->n_dims ? info->ne[d] : 1;
                if (have != t->ne[d]) {
                    fail("{}: tensor '{}' has shape {}, the model needs [{}, {}, {}, {}]", path, name, info->shape_string(),
                         t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
                }
            }
            ggml_backend_tensor_set(t, f->tensor_data(*info), 0, ggml_nbytes(t));
            ++expected;
        }
    }
    if (f->tensors().size() != expected) {
        fail("{}: the checkpoint has {} tensors, this run trains {}: it belongs to another model or training mode", path,
             f->tensors().size(), expected);
    }
    return st;
}

std::string latest_checkpoint(const std::string &dir) {
    std::error_code ec;
    fs::path best;
    int64_t best_step = -1;
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        const int64_t s = step_of(e.path());
        if (s > best_step) {
            best_step = s;
            best = e.path();
        }
    }
    return best.string();
}

void prune_checkpoints(const std::string &dir, int keep) {
    std::error_code ec;
    std::vector<std::pair<int64_t, fs::path>> found;
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        const int64_t s = step_of(e.path());
        if (s >= 0) found.emplace_back(s, e.path());
    }
    std::sort(found.begin(), found.end());
    for (size_t i = 0; i + keep < found.size(); ++i) fs::remove(found[i].second, ec);
    // a checkpoint whose writer was killed is never written again under that name
    remove_stale_temporaries(dir, [](std::string_view target) { return step_of(fs::path(target)) >= 0; });
}

}  // namespace toy::train
