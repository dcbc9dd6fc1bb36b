#include "convert/output.h"

#include "core/error.h"
#include "core/parallel.h"
#include "gguf/gguf_writer.h"
#include "quant/quantize.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

namespace toy::convert {
namespace {

struct OutTypeRow {
    OutType type;
    const char *name;
};
constexpr OutTypeRow kOutTypes[] = {
    {OutType::Auto, "auto"}, {OutType::F32, "f32"}, {OutType::F16, "f16"}, {OutType::BF16, "bf16"}, {OutType::Q8_0, "q8_0"},
};

// llama.cpp's general.file_type (LLAMA_FTYPE_*) of a file whose matrices are `t`.
uint32_t file_type_of(ggml_type t) {
    switch (t) {
        case GGML_TYPE_F32: return 0;
        case GGML_TYPE_F16: return 1;
        case GGML_TYPE_Q8_0: return 7;
        case GGML_TYPE_BF16: return 32;
        default: fail("no file type for {}", ggml_type_name(t));
    }
}

// Quantizes rows [0, n_rows) of `src` into `out` on n_threads threads, in
// chunks of about 64K values (each row is converted on its own, so the
// bytes do not depend on the chunking); throws where a value does not read
// back finite (a NaN in the source, a value past F16's range).
void quantize_rows(ggml_type type, const float *src, uint8_t *out, int64_t n_rows, int64_t n_per_row, int n_threads) {
    if (type != GGML_TYPE_F32) ggml_quantize_init(type);
    const int64_t chunk_rows = std::max<int64_t>(1, 65536 / n_per_row);
    const size_t row_size = ggml_row_size(type, n_per_row);
    const auto rows_of = [&](int64_t c) { return std::pair{c * chunk_rows, std::min(chunk_rows, n_rows - c * chunk_rows)}; };
    LowestIndex bad;
    parallel_for((n_rows + chunk_rows - 1) / chunk_rows, n_threads, [&](int64_t c) {
        const auto [r0, nr] = rows_of(c);
        uint8_t *dst = out + (size_t)r0 * row_size;
        if (type == GGML_TYPE_F32) {
            std::memcpy(dst, src + r0 * n_per_row, (size_t)(nr * n_per_row) * sizeof(float));
        } else {
            ggml_quantize_chunk(type, src + r0 * n_per_row, dst, 0, nr, n_per_row, nullptr);
        }
        if (!quant::reads_back_finite(type, dst, nr * n_per_row)) bad.report(c);
    });
    if (bad.any()) {
        const auto [r0, nr] = rows_of(bad.get());
        quant::fail_not_held(type, src, r0, nr, n_per_row);
    }
}

}  // namespace

std::optional<OutType> find_out_type(const std::string &name) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    for (const auto &r : kOutTypes) {
        if (lower == r.name) return r.type;
    }
    return std::nullopt;
}

OutType parse_out_type(const std::string &name) {
    if (auto t = find_out_type(name)) return *t;
    std::string names;
    for (const auto &r : kOutTypes) names += (names.empty() ? "" : ", ") + std::string(r.name);
    fail("--outtype: unknown type '{}' (expected one of {})", name, names);
}

const char *out_type_name(OutType t) {
    for (const auto &r : kOutTypes) {
        if (r.type == t) return r.name;
    }
    return "?";
}

void Converted::set(const std::string &key, gguf::Value v) {
    for (auto &kv : metadata) {
        if (kv.key == key) {
            kv.value = std::move(v);
            return;
        }
    }
    metadata.push_back({key, std::move(v)});
}

const gguf::Value *Converted::find(const std::string &key) const {
    for (const auto &kv : metadata) {
        if (kv.key == key) return &kv.value;
    }
    return nullptr;
}

ggml_type matrix_type(OutType t, const std::string &first_matrix_dtype) {
    switch (t) {
        case OutType::F32: return GGML_TYPE_F32;
        case OutType::F16: return GGML_TYPE_F16;
        case OutType::BF16: return GGML_TYPE_BF16;
        case OutType::Q8_0: return GGML_TYPE_Q8_0;
        case OutType::Auto: return first_matrix_dtype == "BF16" ? GGML_TYPE_BF16 : GGML_TYPE_F16;
    }
    return GGML_TYPE_F16;
}

ggml_type stored_type(const OutTensor &t, ggml_type matrix) {
    const std::string &n = t.name;
    const bool vector = t.ne.size() <= 1;
    const bool always_f32 = n.ends_with("_norm.weight") || n.ends_with(".ffn_gate_inp.weight") ||
                            n == "position_embd.weight" || !n.ends_with(".weight");
    if (vector || always_f32) return GGML_TYPE_F32;
    if (ggml_blck_size(matrix) > 1 && t.ne[0] % ggml_blck_size(matrix) != 0) return GGML_TYPE_F16;
    return matrix;
}

WriteResult write_converted(const Converted &m, OutType type, const std::string &path, int n_threads) {
    n_threads = thread_count(n_threads);
    WriteResult r;
    r.matrix_type = matrix_type(type, m.first_matrix_dtype);
    gguf::Writer w;
    for (const auto &kv : m.metadata) w.set(kv.key, kv.value);
    w.set("general.file_type", gguf::Value::u32(file_type_of(r.matrix_type)));
    w.set("general.quantization_version", gguf::Value::u32(GGML_QNT_VERSION));  // written whatever the type, as llama.cpp's converter does
    for (const OutTensor &t : m.tensors) {
        if (t.ne.empty() || t.ne.size() > 4) fail("tensor '{}': expected 1 to 4 dimensions, found {}", t.name, t.ne.size());
        const ggml_type st = stored_type(t, r.matrix_type);
        std::array<int64_t, 4> ne{1, 1, 1, 1};
        int64_t n = 1;
        for (size_t d = 0; d < t.ne.size(); ++d) ne[d] = t.ne[d], n *= t.ne[d];
        r.n_params += n;
        ++r.n_tensors;
        w.add_tensor(t.name, st, ne, (int)t.ne.size(), [&t, st, ne, n, n_threads](uint8_t *out, uint64_t nbytes) {
            const std::vector<float> v = t.values();
            if ((int64_t)v.size() != n) fail("produced {} values, its shape needs {}", v.size(), n);
            const int64_t n_rows = n / ne[0];
            if (ggml_row_size(st, ne[0]) * (uint64_t)n_rows != nbytes) fail("size mismatch");
            quantize_rows(st, v.data(), out, n_rows, ne[0], n_threads);
        });
    }
    r.bytes = w.write(path);
    return r;
}

}  // namespace toy::convert
