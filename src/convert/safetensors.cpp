#include "convert/safetensors.h"

#include "convert/json_file.h"
#include "core/error.h"
#include "core/json.h"
#include "core/memory.h"

#include <ggml.h>
#include <nlohmann/json.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace toy::convert {
namespace fs = std::filesystem;

namespace {

// Bytes per element of the dtypes a checkpoint may hold; 0: unknown.
size_t dtype_size(const std::string &d) {
    static const std::map<std::string, size_t> sizes = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1},  {"U8", 1},  {"U16", 2}, {"U32", 4},  {"U64", 8}, {"BOOL", 1},
        {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    auto it = sizes.find(d);
    return it == sizes.end() ? 0 : it->second;
}

}  // namespace

int64_t StTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string StTensor::shape_string() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

Safetensors::~Safetensors() = default;

std::unique_ptr<Safetensors> Safetensors::open_file(const std::string &path) {
    std::unique_ptr<Safetensors> st(new Safetensors());
    st->where_ = path;
    st->add_file(path, nullptr);
    return st;
}

std::unique_ptr<Safetensors> Safetensors::open_dir(const std::string &dir) {
    std::unique_ptr<Safetensors> st(new Safetensors());
    st->where_ = dir;
    const fs::path d(dir);
    const fs::path index = d / "model.safetensors.index.json";
    if (fs::exists(index)) {
        const nlohmann::json j = read_json_file(index.string());
        if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
            fail("{}: expected an object \"weight_map\" (tensor name -> shard file)", index.string());
        }
        // shard -> the tensors the index puts there, in first-seen order
        std::vector<std::string> shards;
        std::map<std::string, std::vector<std::string>> names;
        for (const auto &[name, file] : j["weight_map"].items()) {
            if (!file.is_string()) fail("{}: weight_map[\"{}\"]: expected a file name", index.string(), name);
            const std::string f = file.get<std::string>();
            if (f.find('/') != std::string::npos || f == "..") {
                fail("{}: weight_map[\"{}\"]: expected a file in the same directory, found '{}'", index.string(), name, f);
            }
            if (!names.count(f)) shards.push_back(f);
            names[f].push_back(name);
        }
        if (shards.empty()) fail("{}: weight_map lists no tensors", index.string());
        for (const std::string &f : shards) {
            const fs::path p = d / f;
            if (!fs::exists(p)) fail("{}: shard {} is missing (the index lists {} tensors in it)", dir, f, names[f].size());
            st->add_file(p.string(), &names[f]);
        }
        return st;
    }
    const fs::path single = d / "model.safetensors";
    if (fs::exists(single)) {
        st->add_file(single.string(), nullptr);
        return st;
    }
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(d, ec)) {
        if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    }
    if (ec) fail("{}: cannot list the directory ({})", dir, ec.message());
    if (files.empty()) fail("{}: no model.safetensors, model.safetensors.index.json or *.safetensors file", dir);
    std::sort(files.begin(), files.end());
    for (const auto &f : files) st->add_file(f, nullptr);
    return st;
}

void Safetensors::add_file(const std::string &path, const std::vector<std::string> *expected_names) {
    maps_.push_back(std::make_unique<MappedFile>(path));
    const uint8_t *base = maps_.back()->data();
    const uint64_t size = maps_.back()->size();
    if (size < 8) fail("{}: truncated: {} bytes, a safetensors file has at least an 8-byte header length", path, size);

    uint64_t n_header = 0;
    std::memcpy(&n_header, base, 8);
    if (n_header > size - 8) {
        fail("{}: header claims {} bytes of JSON but the file holds {} after the length (truncated or not safetensors)",
             path, n_header, size - 8);
    }
    nlohmann::json header;
    try {
        header = parse_json(std::string_view((const char *)base + 8, n_header), path + ": header");
    } catch (const nlohmann::json::exception &e) {
        fail("{}: header is not valid JSON ({})", path, e.what());
    }
    if (!header.is_object()) fail("{}: header: expected a JSON object", path);
    const uint64_t data_start = 8 + n_header, data_size = size - data_start;

    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::set<std::string> seen;
    for (const auto &item : header.items()) {
        // named copies, not a structured binding: clang before 16 cannot
        // capture those in the lambda below (Debian 12's clang is 14)
        const std::string &name = item.key();
        const nlohmann::json &info = item.value();
        if (name == "__metadata__") continue;
        auto bad = [&](const std::string &what) { fail("{}: tensor '{}': {}", path, name, what); };
        if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets")) {
            bad("expected an object with dtype, shape and data_offsets");
        }
        StTensor t;
        t.name = name;
        t.file = path;
        if (!info["dtype"].is_string()) bad("dtype: expected a string");
        t.dtype = info["dtype"].get<std::string>();
        const size_t es = dtype_size(t.dtype);
        if (es == 0) bad(fmt::format("unknown dtype '{}'", t.dtype));
        if (!info["shape"].is_array() || info["shape"].size() > 8) bad("shape: expected an array of at most 8 sizes");
        uint64_t n = 1;
        for (const auto &d : info["shape"]) {
            if (!d.is_number_unsigned()) bad("shape: expected non-negative integers");
            const uint64_t v = d.get<uint64_t>();
            if (v > (uint64_t)1 << 40 || (v && n > ((uint64_t)1 << 62) / v)) bad("shape: sizes out of range");
            n *= v;
            t.shape.push_back((int64_t)v);
        }
        const auto &off = info["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
            bad("data_offsets: expected [begin, end]");
        }
        const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
        if (b > e || e > data_size) {
            bad(fmt::format("data_offsets [{}, {}] outside the {} data bytes of the file (truncated?)", b, e, data_size));
        }
        if (e - b != n * es) bad(fmt::format("holds {} bytes, {} {} x {} needs {}", e - b, t.dtype, t.shape_string(), es, n * es));
        if (index_.count(name) || !seen.insert(name).second) bad("appears twice in the checkpoint");
        t.data = base + data_start + b;
        t.nbytes = e - b;
        if (e > b) ranges.emplace_back(b, e);
        index_[name] = tensors_.size();
        tensors_.push_back(std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
        if (ranges[i].first < ranges[i - 1].second) fail("{}: two tensors overlap at data offset {}", path, ranges[i].first);
    }
    if (expected_names) {
        for (const std::string &n : *expected_names) {
            if (!seen.count(n)) fail("{}: the index puts tensor '{}' in this shard, but it is not there", path, n);
        }
    }
}

const StTensor *Safetensors::find(const std::string &name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const StTensor &Safetensors::get(const std::string &name) const {
    const StTensor *t = find(name);
    if (!t) fail("{}: tensor '{}' is missing", where_, name);
    return *t;
}

std::vector<float> Safetensors::read_f32(const StTensor &t) {
    const size_t n = (size_t)t.n_elements();
    std::vector<float> out(n);
    const uint8_t *p = t.data;
    auto each = [&](auto load) {
        for (size_t i = 0; i < n; ++i) out[i] = load(i);
    };
    auto get = [p](size_t i, auto zero) {
        decltype(zero) v;
        std::memcpy(&v, p + i * sizeof(v), sizeof(v));
        return v;
    };
    if (t.dtype == "F32") {
        std::memcpy(out.data(), p, n * 4);
    } else if (t.dtype == "F16" || t.dtype == "BF16") {
        // a file whose header length is not a multiple of 8 leaves the data
        // unaligned; ggml's row converters read 2-byte elements in place
        std::vector<uint16_t> aligned;
        const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
        if (reinterpret_cast<uintptr_t>(p) % alignof(uint16_t) != 0) {
            aligned.resize(n);
            std::memcpy(aligned.data(), p, n * 2);
            h = aligned.data();
        }
        if (t.dtype == "F16") ggml_fp16_to_fp32_row(reinterpret_cast<const ggml_fp16_t *>(h), out.data(), (int64_t)n);
        else ggml_bf16_to_fp32_row(reinterpret_cast<const ggml_bf16_t *>(h), out.data(), (int64_t)n);
    } else if (t.dtype == "F64") {
        each([&](size_t i) { return (float)get(i, 0.0); });
    } else if (t.dtype == "I64") {
        each([&](size_t i) { return (float)get(i, int64_t{}); });
    } else if (t.dtype == "I32") {
        each([&](size_t i) { return (float)get(i, int32_t{}); });
    } else if (t.dtype == "I16") {
        each([&](size_t i) { return (float)get(i, int16_t{}); });
    } else if (t.dtype == "I8") {
        each([&](size_t i) { return (float)get(i, int8_t{}); });
    } else if (t.dtype == "U8" || t.dtype == "BOOL") {
        each([&](size_t i) { return (float)p[i]; });
    } else {
        fail("{}: tensor '{}': cannot convert dtype {} to float", t.file, t.name, t.dtype);
    }
    advise_whole_blocks(t.data, t.nbytes, (size_t)sysconf(_SC_PAGESIZE), MADV_DONTNEED);
    return out;
}

}  // namespace toy::convert
