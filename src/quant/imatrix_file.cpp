#include "quant/imatrix_file.h"

#include "core/error.h"
#include "core/read_file.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

#include <cmath>
#include <cstring>
#include <fstream>

namespace toy::quant {
namespace {

constexpr const char *kSums = ".in_sum2";
constexpr const char *kCounts = ".counts";

bool ends_with(const std::string &s, const char *suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

void check_values(const std::string &what, const char *field, const std::vector<float> &v) {
    for (size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) fail("{}: {}[{}]: expected a finite number, found {}", what, field, i, v[i]);
        if (v[i] < 0) fail("{}: {}[{}]: expected a value >= 0 (sums of squares and token counts), found {}", what, field, i, v[i]);
    }
}

// ------------------------------------------------------------ GGUF

int64_t u32_key(const gguf::File &f, const char *key) {
    const gguf::Value *v = f.find(key);
    if (!v) fail("{}: key '{}': expected an integer, found nothing (not an imatrix file?)", f.path(), key);
    if (!v->is_integer()) fail("{}: key '{}': expected an integer, found {}", f.path(), key, gguf::type_name(v->type));
    const int64_t n = f.get_int(key);
    if (n < 0 || n > (int64_t)UINT32_MAX) fail("{}: key '{}': expected 0..{}, found {}", f.path(), key, UINT32_MAX, n);
    return n;
}

std::vector<float> f32_data(const gguf::File &f, const gguf::TensorInfo &t) {
    std::vector<float> v((size_t)t.n_elements());
    std::memcpy(v.data(), f.tensor_data(t), v.size() * sizeof(float));
    return v;
}

Imatrix read_gguf(const std::string &path) {
    auto f = gguf::File::open(path);
    if (auto type = f->opt_string("general.type"); type && *type != "imatrix") {
        fail("{}: key 'general.type': expected 'imatrix', found '{}'", path, *type);
    }
    Imatrix m;
    const gguf::Value *ds = f->find("imatrix.datasets");
    if (!ds) fail("{}: key 'imatrix.datasets': expected an array of strings, found nothing (not an imatrix file?)", path);
    if (ds->type != gguf::ValueType::ARRAY || ds->elem_type != gguf::ValueType::STRING) {
        fail("{}: key 'imatrix.datasets': expected an array of strings, found {}", path, gguf::type_name(ds->type));
    }
    m.datasets = ds->strings;
    m.chunk_count = u32_key(*f, "imatrix.chunk_count");
    m.chunk_size = u32_key(*f, "imatrix.chunk_size");

    // Pair W.in_sum2 with W.counts; other tensors are not ours to judge (llama.cpp skips them too).
    std::map<std::string, std::pair<const gguf::TensorInfo *, const gguf::TensorInfo *>> pairs;
    for (const auto &t : f->tensors()) {
        if (ends_with(t.name, kSums)) {
            pairs[t.name.substr(0, t.name.size() - std::strlen(kSums))].first = &t;
        } else if (ends_with(t.name, kCounts)) {
            pairs[t.name.substr(0, t.name.size() - std::strlen(kCounts))].second = &t;
        }
    }
    if (pairs.empty()) fail("{}: expected at least one '<weight>.in_sum2' tensor, found none", path);
    for (const auto &[name, p] : pairs) {
        const auto [sums, counts] = p;
        if (!sums) fail("{}: tensor '{}{}' has no '{}{}' beside it", path, name, kCounts, name, kSums);
        if (!counts) fail("{}: tensor '{}{}' has no '{}{}' beside it", path, name, kSums, name, kCounts);
        for (const gguf::TensorInfo *t : {sums, counts}) {
            if (t->type != GGML_TYPE_F32) fail("{}: tensor '{}': expected type f32, found {}", path, t->name, ggml_type_name(t->type));
            if (t->ne[2] != 1 || t->ne[3] != 1) fail("{}: tensor '{}': expected 1 or 2 dimensions, found {}", path, t->name, t->shape_string());
        }
        // llama.cpp reads the counts as one per matrix and the sums as that many equal rows
        const int64_t n_mat = counts->n_elements(), n_vals = sums->n_elements();
        if (n_vals % n_mat != 0) {
            fail("{}: tensor '{}': {} values do not split into the {} matrices '{}' counts", path, sums->name, n_vals, n_mat, counts->name);
        }
        if (sums->ne[1] != 1 && sums->ne[1] != n_mat) {
            fail("{}: tensor '{}': expected [n_per_row, {}], found {}", path, sums->name, n_mat, sums->shape_string());
        }
        Imatrix::Entry e;
        e.n_mat = n_mat;
        e.n_per_row = n_vals / n_mat;
        e.in_sum2 = f32_data(*f, *sums);
        e.counts = f32_data(*f, *counts);
        validate_imatrix_entry(fmt::format("{}: entry '{}'", path, name), e);
        m.entries.emplace(name, std::move(e));
    }
    return m;
}

// ------------------------------------------------------------ legacy .dat

struct Cursor {
    const std::string &path;
    std::string_view bytes;
    size_t pos = 0;

    size_t left() const { return bytes.size() - pos; }
    int32_t i32(const char *what) {
        if (left() < 4) fail("{}: {}: expected 4 bytes at offset {}, found {} (truncated file)", path, what, pos, left());
        int32_t v;
        std::memcpy(&v, bytes.data() + pos, 4);
        pos += 4;
        return v;
    }
    std::string str(int32_t n, const char *what) {
        if (n < 0 || (size_t)n > left()) fail("{}: {}: expected a length of 0..{}, found {}", path, what, left(), n);
        std::string s(bytes.data() + pos, (size_t)n);
        pos += (size_t)n;
        return s;
    }
};

Imatrix read_legacy(const std::string &path, std::string_view bytes) {
    Cursor c{path, bytes};
    Imatrix m;
    m.legacy = true;
    const int32_t n_entries = c.i32("entry count");
    // each entry takes at least 17 bytes (lengths, a 1-byte name, one value): a bound before anything is allocated
    if (n_entries < 1 || (size_t)n_entries > (bytes.size() - 4) / 17) {
        fail("{}: expected a GGUF imatrix or a legacy .dat file starting with an entry count of 1..{}, found {}", path,
             (bytes.size() - 4) / 17, n_entries);
    }
    for (int32_t i = 0; i < n_entries; ++i) {
        const std::string what = fmt::format("entry {}", i);
        const int32_t len = c.i32(what.c_str());
        std::string name = c.str(len, (what + " name").c_str());
        if (name.empty() || name.find('\0') != std::string::npos) fail("{}: {}: expected a tensor name, found '{}'", path, what, name);
        const int32_t ncall = c.i32((what + " call count").c_str());
        if (ncall < 0) fail("{}: entry '{}': expected a call count >= 0, found {}", path, name, ncall);
        const int32_t nval = c.i32((what + " value count").c_str());
        if (nval < 1 || (size_t)nval > c.left() / 4) {
            fail("{}: entry '{}': expected 1..{} values, found {}", path, name, c.left() / 4, nval);
        }
        Imatrix::Entry e;
        e.n_per_row = nval;
        e.n_mat = 1;
        e.in_sum2.resize((size_t)nval);
        std::memcpy(e.in_sum2.data(), bytes.data() + c.pos, (size_t)nval * 4);
        c.pos += (size_t)nval * 4;
        e.counts = {(float)ncall};
        validate_imatrix_entry(fmt::format("{}: entry '{}'", path, name), e);
        if (!m.entries.emplace(name, std::move(e)).second) fail("{}: entry '{}' appears twice", path, name);
    }
    if (c.left() > 0) {  // optional trailer: chunk count, dataset name
        m.chunk_count = c.i32("chunk count");
        if (m.chunk_count < 0) fail("{}: chunk count: expected a value >= 0, found {}", path, m.chunk_count);
        if (c.left() > 0) {
            const std::string ds = c.str(c.i32("dataset name length"), "dataset name");
            if (!ds.empty()) m.datasets.push_back(ds);
        }
        if (c.left() > 0) fail("{}: expected the end of the file after the dataset name, found {} more bytes", path, c.left());
    }
    return m;
}

}  // namespace

void validate_imatrix_entry(const std::string &what, const Imatrix::Entry &e) {
    if (e.n_per_row < 1 || e.n_mat < 1) fail("{}: expected a positive row length and matrix count, found {} and {}", what, e.n_per_row, e.n_mat);
    if ((int64_t)e.in_sum2.size() != e.n_per_row * e.n_mat) {
        fail("{}: expected {} x {} sums, found {}", what, e.n_mat, e.n_per_row, e.in_sum2.size());
    }
    if ((int64_t)e.counts.size() != e.n_mat) fail("{}: expected {} counts, found {}", what, e.n_mat, e.counts.size());
    check_values(what, "in_sum2", e.in_sum2);
    check_values(what, "counts", e.counts);
}

std::vector<float> Imatrix::importance(const std::string &name) const {
    const auto it = entries.find(name);
    if (it == entries.end()) return {};
    const Entry &e = it->second;
    std::vector<float> out(e.in_sum2.size());
    if (legacy) {
        const int64_t ncall = (int64_t)e.counts[0];
        for (size_t i = 0; i < out.size(); ++i) out[i] = ncall > 0 ? e.in_sum2[i] / (float)ncall : e.in_sum2[i];
        return out;
    }
    for (int64_t j = 0; j < e.n_mat; ++j) {
        const float count = (float)std::lround(e.counts[(size_t)j]);
        for (int64_t i = 0; i < e.n_per_row; ++i) {
            const size_t k = (size_t)(j * e.n_per_row + i);
            out[k] = count > 0.0f ? e.in_sum2[k] / count : 1.0f;
        }
    }
    return out;
}

Imatrix read_imatrix(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open the imatrix file: {}", path, std::strerror(errno));
    char magic[4] = {};
    in.read(magic, 4);
    if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return read_gguf(path);
    in.close();
    return read_legacy(path, read_whole_file(path, "imatrix"));
}

void write_imatrix(const Imatrix &m, const std::string &path) {
    if (m.entries.empty()) fail("{}: an imatrix needs at least one entry, found none", path);
    if (m.chunk_count < 0 || m.chunk_count > (int64_t)UINT32_MAX || m.chunk_size < 0 || m.chunk_size > (int64_t)UINT32_MAX) {
        fail("{}: chunk count and size must be 0..{}, found {} and {}", path, UINT32_MAX, m.chunk_count, m.chunk_size);
    }
    gguf::Writer w;
    w.set("general.type", gguf::Value::str("imatrix"));
    w.set("imatrix.datasets", gguf::Value::str_array(m.datasets));
    w.set("imatrix.chunk_count", gguf::Value::u32((uint32_t)m.chunk_count));
    w.set("imatrix.chunk_size", gguf::Value::u32((uint32_t)m.chunk_size));
    for (const auto &[name, e] : m.entries) {  // std::map: sorted names, as llama-imatrix writes them
        if (name.empty()) fail("{}: an imatrix entry has an empty name", path);
        validate_imatrix_entry(fmt::format("{}: entry '{}'", path, name), e);
        // ggml drops trailing dimensions of 1, so a dense weight's tensors are 1-D
        const int n_dims = e.n_mat > 1 ? 2 : 1;
        w.add_tensor(name + kSums, GGML_TYPE_F32, {e.n_per_row, e.n_mat, 1, 1}, n_dims, e.in_sum2.data());
        w.add_tensor(name + kCounts, GGML_TYPE_F32, {1, e.n_mat, 1, 1}, n_dims, e.counts.data());
    }
    w.write(path);
}

}  // namespace toy::quant
