// toy inspect FILE [--json]: describes a GGUF file without dumping its large
// arrays: header, architecture, hyper-parameters, tokenizer summary, other
// metadata, a tensor table and totals by type.
// toy inspect FILE --diff OTHER: compares the tensors the two files share by
// name, value by value (dequantized), e.g. a model trained by toy against the
// same training done by llama-finetune, or a run against its resume.
#include "apps/cli.h"
#include "gguf/gguf_reader.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

namespace {

using toy::fail;
using toy::gguf::File;
using toy::gguf::Value;
using toy::gguf::ValueType;
using json = nlohmann::ordered_json;  // keeps the file's key order

constexpr size_t kMaxJsonArray = 16;
constexpr size_t kMaxTextString = 120;

struct Options {
    std::string path;
    std::string diff;  // the other file of --diff
    bool json = false;
    bool tensors = false;  // --tensors: the full list
};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool is_integer_elem(ValueType t) {
    return t != ValueType::FLOAT32 && t != ValueType::FLOAT64 && t != ValueType::BOOL && t != ValueType::STRING &&
           t != ValueType::ARRAY;
}

json scalar_json(const Value &v) {
    switch (v.type) {
        case ValueType::STRING: return v.s;
        case ValueType::BOOL: return v.u != 0;
        // A float32 as the shortest decimal that reads back as it (1e-05, not 9.99999974e-06).
        case ValueType::FLOAT32: return std::strtod(fmt::format("{}", (float)v.f).c_str(), nullptr);
        case ValueType::FLOAT64: return v.f;
        case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64: return v.i;
        default: return v.u;
    }
}

json value_json(const Value &v) {
    if (v.type != ValueType::ARRAY) return scalar_json(v);
    if (v.n > kMaxJsonArray) return json{{"type", toy::gguf::type_name(v.elem_type)}, {"count", v.n}};
    json arr = json::array();
    for (uint64_t k = 0; k < v.n; ++k) {
        if (v.elem_type == ValueType::STRING) {
            arr.push_back(v.strings[k]);
        } else if (v.elem_type == ValueType::BOOL) {
            arr.push_back(v.number_at(k) != 0);
        } else if (is_integer_elem(v.elem_type)) {
            arr.push_back((int64_t)v.number_at(k));
        } else if (v.elem_type == ValueType::FLOAT32) {
            arr.push_back(std::strtod(fmt::format("{}", (float)v.number_at(k)).c_str(), nullptr));
        } else {
            arr.push_back(v.number_at(k));
        }
    }
    return arr;
}

// One-line rendering for the text report: long strings and arrays are shortened.
std::string value_text(const Value &v) {
    if (v.type == ValueType::STRING && v.s.size() > kMaxTextString) {
        Value cut = Value::str(v.s.substr(0, kMaxTextString));
        return fmt::format("{}... ({} bytes)", cut.to_string(), v.s.size());
    }
    if (v.type == ValueType::ARRAY && v.n > kMaxJsonArray) {
        return fmt::format("[{} x {}]", v.n, toy::gguf::type_name(v.elem_type));
    }
    return v.to_string(kMaxJsonArray);
}

std::string human_bytes(uint64_t b) {
    if (b < 1024) return fmt::format("{} B", b);
    const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
    double x = (double)b;
    int u = -1;
    while (x >= 1024 && u < 3) {
        x /= 1024;
        ++u;
    }
    return fmt::format("{:.2f} {}", x, units[u]);
}

// The facts the text and JSON reports share.
struct Summary {
    std::string arch;
    std::vector<const toy::gguf::KeyValue *> hparams, tokenizer_other, general, other;
    struct TypeTotal {
        uint64_t count = 0, bytes = 0, params = 0;
    };
    std::map<std::string, TypeTotal> by_type;
    uint64_t params = 0, bytes = 0;
};

// tokenizer.ggml.* keys summarized in the tokenizer section rather than listed.
bool is_tokenizer_summary_key(std::string_view k) {
    return k == "tokenizer.ggml.model" || k == "tokenizer.ggml.pre" || k == "tokenizer.ggml.tokens" ||
           k == "tokenizer.ggml.scores" || k == "tokenizer.ggml.token_type" || k == "tokenizer.ggml.merges" ||
           k == "tokenizer.ggml.bos_token_id" || k == "tokenizer.ggml.eos_token_id" ||
           k == "tokenizer.ggml.unknown_token_id" || k == "tokenizer.ggml.padding_token_id" ||
           starts_with(k, "tokenizer.chat_template");
}

Summary summarize(const File &f) {
    Summary s;
    if (const Value *a = f.find("general.architecture"); a && a->type == ValueType::STRING) s.arch = a->s;
    std::string prefix = s.arch.empty() ? std::string("\x01") : s.arch + ".";
    for (const auto &kv : f.metadata()) {
        const std::string &k = kv.key;
        if (starts_with(k, prefix)) {
            s.hparams.push_back(&kv);
        } else if (starts_with(k, "tokenizer.")) {
            if (!is_tokenizer_summary_key(k)) s.tokenizer_other.push_back(&kv);
        } else if (starts_with(k, "general.")) {
            if (k != "general.architecture" && k != "general.name" && k != "general.alignment") {
                s.general.push_back(&kv);
            }
        } else {
            s.other.push_back(&kv);
        }
    }
    for (const auto &t : f.tensors()) {
        auto &tt = s.by_type[ggml_type_name(t.type)];
        tt.count++;
        tt.bytes += t.nbytes;
        tt.params += (uint64_t)t.n_elements();
        s.params += (uint64_t)t.n_elements();
        s.bytes += t.nbytes;
    }
    return s;
}

std::optional<uint64_t> count_of(const File &f, std::string_view key) {
    const Value *v = f.find(key);
    if (!v || v->type != ValueType::ARRAY) return std::nullopt;
    return v->n;
}

std::string strip(const std::string &key, const std::string &prefix) {
    return starts_with(key, prefix) ? key.substr(prefix.size()) : key;
}

const char *kTokenIdKeys[][2] = {
    {"bos", "tokenizer.ggml.bos_token_id"},
    {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"},
};

int chat_template_count(const File &f) {
    int n = 0;
    for (const auto &kv : f.metadata()) n += starts_with(kv.key, "tokenizer.chat_template");
    return n;
}

int run_json(const File &f, const Summary &s) {
    json j;
    j["file"] = f.path();
    j["version"] = f.version();
    j["size"] = f.file_size();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    if (f.n_files() > 1) {  // a split model: its files, the first above
        json files = json::array();
        for (size_t i = 0; i < f.n_files(); ++i) files.push_back({{"path", f.file(i).path()}, {"size", f.file(i).file_size()}});
        j["split_files"] = files;
    }
    j["n_kv"] = f.metadata().size();
    j["architecture"] = s.arch.empty() ? json(nullptr) : json(s.arch);
    const Value *name = f.find("general.name");
    j["name"] = name ? value_json(*name) : json(nullptr);

    json hp = json::object();
    for (auto *kv : s.hparams) hp[strip(kv->key, s.arch + ".")] = value_json(kv->value);
    j["hyperparameters"] = hp;

    json tok = json::object();
    if (const Value *v = f.find("tokenizer.ggml.model")) tok["model"] = value_json(*v);
    if (const Value *v = f.find("tokenizer.ggml.pre")) tok["pre"] = value_json(*v);
    if (auto n = count_of(f, "tokenizer.ggml.tokens")) tok["tokens"] = *n;
    for (auto &[label, key] : kTokenIdKeys) {
        if (const Value *v = f.find(key)) tok[std::string(label) + "_token_id"] = value_json(*v);
    }
    if (auto n = count_of(f, "tokenizer.ggml.merges")) tok["merges"] = *n;
    tok["chat_template"] = chat_template_count(f) > 0;
    json tok_other = json::object();
    for (auto *kv : s.tokenizer_other) tok_other[kv->key] = value_json(kv->value);
    if (!tok_other.empty()) tok["other"] = tok_other;
    j["tokenizer"] = tok;

    json gen = json::object();
    for (auto *kv : s.general) gen[kv->key] = value_json(kv->value);
    j["general"] = gen;
    json oth = json::object();
    for (auto *kv : s.other) oth[kv->key] = value_json(kv->value);
    j["other"] = oth;

    json tensors = json::array();
    for (const auto &t : f.tensors()) {
        json shape = json::array();
        for (int d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
        tensors.push_back({{"name", t.name}, {"type", ggml_type_name(t.type)}, {"shape", shape},
                           {"bytes", t.nbytes}, {"offset", t.offset}});
        if (f.n_files() > 1) tensors.back()["file"] = t.file;  // split_files' index
    }
    j["n_tensors"] = f.tensors().size();
    j["tensors"] = tensors;
    json types = json::object();
    for (auto &[type, tt] : s.by_type) types[type] = {{"count", tt.count}, {"bytes", tt.bytes}, {"params", tt.params}};
    j["types"] = types;
    j["total_params"] = s.params;
    j["total_bytes"] = s.bytes;
    std::string out = j.dump(2, ' ', false, json::error_handler_t::replace);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
}

void print_kv_block(const std::vector<const toy::gguf::KeyValue *> &kvs, const std::string &prefix) {
    size_t w = 0;
    for (auto *kv : kvs) w = std::max(w, strip(kv->key, prefix).size());
    for (auto *kv : kvs) fmt::print("  {:<{}}  {}\n", strip(kv->key, prefix), w, value_text(kv->value));
}

// Bytes per layer (blk.N.*) and of each tensor outside the layers.
void print_by_layer(const File &f) {
    std::map<int, std::pair<size_t, uint64_t>> layers;  // layer -> tensors, bytes
    std::vector<const toy::gguf::TensorInfo *> others;
    for (const auto &t : f.tensors()) {
        int layer = -1;
        if (t.name.rfind("blk.", 0) == 0) layer = std::atoi(t.name.c_str() + 4);
        if (layer >= 0) {
            layers[layer].first++;
            layers[layer].second += t.nbytes;
        } else {
            others.push_back(&t);
        }
    }
    fmt::print("\ntensors ({}) by layer (--tensors lists each one):\n", f.tensors().size());
    for (const auto *t : others) {
        fmt::print("  {:<24}  {:<7}  {:>10} bytes ({})\n", t->name, ggml_type_name(t->type), t->nbytes, human_bytes(t->nbytes));
    }
    for (const auto &[layer, cb] : layers) {
        fmt::print("  {:<24}  {:>3} tensors  {:>10} bytes ({})\n", fmt::format("blk.{}", layer), cb.first, cb.second,
                   human_bytes(cb.second));
    }
}

int run_text(const File &f, const Summary &s, bool list_tensors) {
    fmt::print("file:          {}\n", f.path());
    fmt::print("format:        GGUF v{}, {} bytes ({}), alignment {}, data at byte {}\n", f.version(), f.file_size(),
               human_bytes(f.file_size()), f.alignment(), f.data_offset());
    if (f.n_files() > 1) {
        uint64_t bytes = 0;
        std::string names;
        for (size_t i = 0; i < f.n_files(); ++i) {
            bytes += f.file(i).file_size();
            names += fmt::format("{}{}", i ? ", " : "", std::filesystem::path(f.file(i).path()).filename().string());
        }
        fmt::print("split:         {} files, {} bytes ({}) in all: {}\n", f.n_files(), bytes, human_bytes(bytes), names);
    }
    fmt::print("contents:      {} key-values, {} tensors\n", f.metadata().size(), f.tensors().size());
    fmt::print("architecture:  {}\n", s.arch.empty() ? "(missing general.architecture)" : s.arch);
    if (const Value *name = f.find("general.name")) fmt::print("name:          {}\n", value_text(*name));

    if (!s.hparams.empty()) {
        fmt::print("\nhyper-parameters ({}.*):\n", s.arch);
        print_kv_block(s.hparams, s.arch + ".");
    }

    fmt::print("\ntokenizer:\n");
    std::vector<std::pair<std::string, std::string>> lines;
    if (const Value *v = f.find("tokenizer.ggml.model")) lines.emplace_back("model", value_text(*v));
    if (const Value *v = f.find("tokenizer.ggml.pre")) lines.emplace_back("pre", value_text(*v));
    if (auto n = count_of(f, "tokenizer.ggml.tokens")) lines.emplace_back("tokens", std::to_string(*n));
    for (auto &[label, key] : kTokenIdKeys) {
        if (const Value *v = f.find(key)) lines.emplace_back(std::string(label) + " id", value_text(*v));
    }
    if (auto n = count_of(f, "tokenizer.ggml.merges")) lines.emplace_back("merges", std::to_string(*n));
    int n_templates = chat_template_count(f);
    if (n_templates == 0) {
        lines.emplace_back("chat template", "no");
    } else if (const Value *v = f.find("tokenizer.chat_template"); v && v->type == ValueType::STRING) {
        lines.emplace_back("chat template", fmt::format("yes ({} bytes){}", v->s.size(),
                                                        n_templates > 1 ? fmt::format(", {} named", n_templates - 1)
                                                                        : ""));
    } else {
        lines.emplace_back("chat template", fmt::format("yes ({} named)", n_templates));
    }
    for (auto *kv : s.tokenizer_other) lines.emplace_back(strip(kv->key, "tokenizer.ggml."), value_text(kv->value));
    size_t w = 0;
    for (auto &[label, value] : lines) w = std::max(w, label.size());
    for (auto &[label, value] : lines) fmt::print("  {:<{}}  {}\n", label, w, value);

    if (!s.general.empty()) {
        fmt::print("\ngeneral:\n");
        print_kv_block(s.general, "");
    }
    if (!s.other.empty()) {
        fmt::print("\nother metadata:\n");
        print_kv_block(s.other, "");
    }

    if (!list_tensors) {
        print_by_layer(f);
    } else {
        fmt::print("\ntensors ({}):\n", f.tensors().size());
        size_t wn = 4, ws = 5;
        for (const auto &t : f.tensors()) {
            wn = std::max(wn, t.name.size());
            ws = std::max(ws, t.shape_string().size());
        }
        if (!f.tensors().empty()) fmt::print("  {:<{}}  {:<7}  {:<{}}  {:>12}\n", "name", wn, "type", "shape", ws, "bytes");
        for (const auto &t : f.tensors()) {
            fmt::print("  {:<{}}  {:<7}  {:<{}}  {:>12}\n", t.name, wn, ggml_type_name(t.type), t.shape_string(), ws,
                       t.nbytes);
        }
    }
    if (!s.by_type.empty()) {
        fmt::print("\ntotals by type:\n");
        for (auto &[type, tt] : s.by_type) {
            fmt::print("  {:<7}  {:>6} tensors  {:>14} params  {:>14} bytes ({})\n", type, tt.count, tt.params,
                       tt.bytes, human_bytes(tt.bytes));
        }
    }
    fmt::print("\ntotal: {} tensors, {} params, {} bytes ({})\n", f.tensors().size(), s.params, s.bytes,
               human_bytes(s.bytes));
    return 0;
}

// Per tensor: the largest |a - b|, and ||a - b|| / ||b|| (b: the other file).
int run_diff(const File &a, const File &b, bool as_json) {
    json tensors = json::array();
    double worst_rel = 0;
    std::string worst;
    std::vector<std::string> only_a, only_b;
    if (!as_json) fmt::print("{:<40} {:>14} {:>14} {:>12}\n", "tensor", "max |a-b|", "|a-b|/|b|", "max |b|");
    for (const auto &ta : a.tensors()) {
        const auto *tb = b.find_tensor(ta.name);
        if (!tb) {
            only_a.push_back(ta.name);
            continue;
        }
        if (ta.ne != tb->ne) {
            fail("--diff: {} has shape {} in {} but {} in {}", ta.name, ta.shape_string(), a.path(), tb->shape_string(),
                 b.path());
        }
        const auto va = toy::gguf::to_f32(a.tensor_data(ta), ta.type, ta.n_elements());
        const auto vb = toy::gguf::to_f32(b.tensor_data(*tb), tb->type, tb->n_elements());
        double max_abs = 0, max_b = 0, d2 = 0, b2 = 0;
        for (size_t i = 0; i < va.size(); ++i) {
            const double d = (double)va[i] - vb[i];
            max_abs = std::max(max_abs, std::abs(d));
            max_b = std::max(max_b, std::abs((double)vb[i]));
            d2 += d * d;
            b2 += (double)vb[i] * vb[i];
        }
        const double rel = b2 > 0 ? std::sqrt(d2 / b2) : (d2 > 0 ? INFINITY : 0.0);
        if (rel >= worst_rel) worst_rel = rel, worst = ta.name;
        if (as_json) {
            tensors.push_back({{"name", ta.name}, {"max_abs", max_abs}, {"rel", rel}, {"max_b", max_b}});
        } else {
            fmt::print("{:<40} {:>14.6g} {:>14.6g} {:>12.6g}\n", ta.name, max_abs, rel, max_b);
        }
    }
    for (const auto &tb : b.tensors()) {
        if (!a.find_tensor(tb.name)) only_b.push_back(tb.name);
    }
    if (as_json) {
        fmt::print("{}\n", json{{"tensors", tensors}, {"only_in_a", only_a}, {"only_in_b", only_b},
                                {"worst_rel", worst_rel}, {"worst", worst}}
                               .dump(2));
        return 0;
    }
    for (const auto &n : only_a) fmt::print("only in {}: {}\n", a.path(), n);
    for (const auto &n : only_b) fmt::print("only in {}: {}\n", b.path(), n);
    fmt::print("largest relative difference: {:.6g} ({})\n", worst_rel, worst.empty() ? "no shared tensor" : worst);
    return 0;
}

int run_inspect(const Options &opts) {
    auto f = File::open_model(opts.path);
    if (!opts.diff.empty()) return run_diff(*f, *File::open_model(opts.diff), opts.json);
    Summary s = summarize(*f);
    return opts.json ? run_json(*f, s) : run_text(*f, s, opts.tensors);
}

toy::cli::Command reg("inspect", "Describe a GGUF file: metadata, tokenizer, tensors", [](CLI::App &app) {
    auto opts = std::make_shared<Options>();
    app.add_option("file", opts->path, "GGUF file")->required();
    app.add_flag("--json", opts->json, "Print one JSON object instead of text");
    app.add_flag("--tensors", opts->tensors, "List every tensor (name, type, shape, bytes) instead of bytes by layer");
    app.add_option("--diff", opts->diff,
                   "Compare the tensors shared by name with this file: largest |a-b| and |a-b|/|b| per tensor");
    return [opts] { return run_inspect(*opts); };
});

}  // namespace
