// The order of work: options -> imatrix (filtered) -> every tensor's type
// (quant/mix) and every check -> metadata -> per tensor, while the file is
// written: source bytes -> F32 (several threads) -> ggml_quantize_chunk
// (several threads, chunks of whole rows within one expert) -> validated.
#include "quant/quantize.h"

#include "core/error.h"
#include "core/parallel.h"
#include "gguf/gguf_writer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>
#include <tuple>

namespace toy::quant {
namespace {

namespace fs = std::filesystem;

// general.file_type of a file that has none: llama.cpp names it after its most
// common tensor type and marks it as guessed.
constexpr int kGuessed = 1024;
struct GuessRow {
    ggml_type type;
    FileType ftype;
};
constexpr GuessRow kGuess[] = {
    {GGML_TYPE_F32, FileType::F32},         {GGML_TYPE_F16, FileType::F16},       {GGML_TYPE_BF16, FileType::BF16},
    {GGML_TYPE_Q4_0, FileType::Q4_0},       {GGML_TYPE_Q4_1, FileType::Q4_1},     {GGML_TYPE_Q5_0, FileType::Q5_0},
    {GGML_TYPE_Q5_1, FileType::Q5_1},       {GGML_TYPE_Q8_0, FileType::Q8_0},     {GGML_TYPE_Q2_K, FileType::Q2_K},
    {GGML_TYPE_Q3_K, FileType::Q3_K_M},     {GGML_TYPE_Q4_K, FileType::Q4_K_M},   {GGML_TYPE_Q5_K, FileType::Q5_K_M},
    {GGML_TYPE_Q6_K, FileType::Q6_K},       {GGML_TYPE_TQ1_0, FileType::TQ1_0},   {GGML_TYPE_TQ2_0, FileType::TQ2_0},
    {GGML_TYPE_IQ2_XXS, FileType::IQ2_XXS}, {GGML_TYPE_IQ2_XS, FileType::IQ2_XS}, {GGML_TYPE_IQ2_S, FileType::IQ2_S},
    {GGML_TYPE_IQ3_XXS, FileType::IQ3_XXS}, {GGML_TYPE_IQ1_S, FileType::IQ1_S},   {GGML_TYPE_IQ1_M, FileType::IQ1_M},
    {GGML_TYPE_IQ4_NL, FileType::IQ4_NL},   {GGML_TYPE_IQ4_XS, FileType::IQ4_XS}, {GGML_TYPE_IQ3_S, FileType::IQ3_S},
    {GGML_TYPE_Q1_0, FileType::Q1_0},       {GGML_TYPE_Q2_0, FileType::Q2_0},
};

int file_type_of(const gguf::File &f, const std::vector<size_t> &order) {
    if (auto ft = f.opt_int("general.file_type")) return (int)*ft;
    std::map<ggml_type, int> n;
    int best = 0;
    ggml_type most = GGML_TYPE_F32;
    for (size_t k : order) {  // the first type to reach the highest count wins, in llama.cpp's order
        const ggml_type t = f.tensors()[k].type;
        if (++n[t] > best) {
            best = n[t];
            most = t;
        }
    }
    int ft = (int)FileType::F32;
    for (const auto &g : kGuess) {
        if (g.type == most) ft = (int)g.ftype;
    }
    return ft | kGuessed;
}

int layer_of(const std::string &name) {
    int il = -1;
    if (std::sscanf(name.c_str(), "blk.%d.", &il) != 1) return -1;
    return il;
}

bool contains_any(const std::string &s, const std::vector<std::string> &parts) {
    return std::any_of(parts.begin(), parts.end(), [&](const std::string &p) { return s.find(p) != std::string::npos; });
}

// One tensor's plan.
struct Job {
    const gguf::TensorInfo *src;
    ggml_type type;
    std::vector<float> importance;  // empty: quantized without; else n_mat x ne[0]
};

// Why quantizing rows [r0, r0 + nr) of `values` gave non-finite scales, as an
// error: importance that overflows the quantizer's sums (the rows quantize
// cleanly with even importance; llama-quantize writes such a tensor full of
// NaN), else what fail_not_held finds in the source.
[[noreturn]] void explain_non_finite(const Job &job, const float *values, std::tuple<int64_t, int64_t, const float *> rows) {
    const auto [r0, nr, imatrix] = rows;
    const int64_t n_per_row = job.src->ne[0];
    const float *v = values + r0 * n_per_row;
    const bool source_finite = std::all_of(v, v + nr * n_per_row, [](float x) { return std::isfinite(x); });
    if (imatrix && source_finite) {
        const std::vector<float> even((size_t)n_per_row, 1.0f);
        std::vector<uint8_t> q(ggml_row_size(job.type, n_per_row) * (size_t)nr);
        ggml_quantize_chunk(job.type, v, q.data(), 0, nr, n_per_row, even.data());
        if (reads_back_finite(job.type, q.data(), nr * n_per_row)) {
            fail("its importance (imatrix values up to {:g}) overflows {}'s quantizer: the scales of rows {}..{} came out "
                 "non-finite; expected the sums of squared activations a calibration run gives",
                 *std::max_element(imatrix, imatrix + n_per_row), ggml_type_name(job.type), r0, r0 + nr - 1);
        }
    }
    fail_not_held(job.type, values, r0, nr, n_per_row);
}

// src [ne0, ne1, ne2] of any convertible type -> dst in `type`, rows
// quantized in chunks that never cross from one expert (ne2) to the next,
// each expert with its own slice of the importance.
void convert(const Job &job, const uint8_t *src, uint8_t *dst, uint64_t nbytes, int n_threads) {
    const gguf::TensorInfo &t = *job.src;
    const int64_t n_per_row = t.ne[0], rows_per_mat = t.ne[1];
    const int64_t n_rows = t.ne[1] * t.ne[2] * t.ne[3];
    // ~16K values per chunk (llama.cpp's granularity); the bytes do not depend on it
    const int64_t chunk_rows = std::max<int64_t>(1, 16384 / n_per_row);
    const int64_t chunks_per_mat = (rows_per_mat + chunk_rows - 1) / chunk_rows;
    const int64_t n_mats = n_rows / rows_per_mat;

    // to F32 first (the source mapping is read once)
    std::vector<float> f32;
    const float *values = reinterpret_cast<const float *>(src);
    if (t.type != GGML_TYPE_F32) {
        f32.resize((size_t)(n_rows * n_per_row));
        const auto *traits = ggml_get_type_traits(t.type);
        const size_t src_row = ggml_row_size(t.type, n_per_row);
        parallel_for((n_rows + chunk_rows - 1) / chunk_rows, n_threads, [&](int64_t c) {
            const int64_t r0 = c * chunk_rows, nr = std::min(chunk_rows, n_rows - r0);
            traits->to_float(src + r0 * src_row, f32.data() + r0 * n_per_row, nr * n_per_row);
        });
        values = f32.data();
    }
    const size_t dst_row = ggml_row_size(job.type, n_per_row);
    if (dst_row * (size_t)n_rows != nbytes) fail("planned {} bytes, the type needs {}", nbytes, dst_row * (size_t)n_rows);
    if (grid_quantizer(job.type)) {
        const float *end = values + n_rows * n_per_row;
        const float *out = std::find_if(values, end, [](float v) { return !(std::fabs(v) <= kMaxGridValue); });
        if (out != end) {
            fail("row {} holds {:g}; toy quantizes to {} finite values up to {:g} (ggml's quantizer aborts past float's range)",
                 (out - values) / n_per_row, *out, ggml_type_name(job.type), kMaxGridValue);
        }
    }
    // chunk c: its first row, row count and importance (null: none)
    const auto chunk = [&](int64_t c) {
        const int64_t mat = c / chunks_per_mat;
        const int64_t r0 = mat * rows_per_mat + (c % chunks_per_mat) * chunk_rows;
        const int64_t nr = std::min(chunk_rows, (mat + 1) * rows_per_mat - r0);
        const float *imatrix = job.importance.empty() ? nullptr : job.importance.data() + (size_t)(mat * n_per_row);
        return std::tuple{r0, nr, imatrix};
    };
    LowestIndex bad;  // the first chunk whose scales came out non-finite
    parallel_for(n_mats * chunks_per_mat, n_threads, [&](int64_t c) {
        const auto [r0, nr, imatrix] = chunk(c);
        uint8_t *out = dst + (size_t)r0 * dst_row;
        ggml_quantize_chunk(job.type, values + r0 * n_per_row, out, 0, nr, n_per_row, imatrix);
        if (!reads_back_finite(job.type, out, nr * n_per_row)) bad.report(c);
    });
    if (bad.any()) explain_non_finite(job, values, chunk(bad.get()));
}

}  // namespace

QuantizeResult quantize_model(const std::string &in, const std::string &out, const QuantizeOptions &o) {
    const QuantTypeName &qt = parse_quant_type(o.type);
    if (!fs::exists(in)) fail("{}: no such input file", in);
    {
        std::error_code ec;
        if (in == out || fs::equivalent(in, out, ec)) fail("{}: the output would overwrite the input", out);
    }
    if (!o.include_weights.empty() && !o.exclude_weights.empty()) {
        fail("--include-weights and --exclude-weights: expected one of them, found both");
    }
    auto file = gguf::File::open_model(in);
    const gguf::File &f = *file;
    QuantizeResult res;
    res.type = qt.name;

    // ---- the imatrix, filtered by --include/--exclude-weights
    Imatrix imatrix;
    if (o.imatrix) {
        imatrix = *o.imatrix;
        for (auto it = imatrix.entries.begin(); it != imatrix.entries.end();) {
            const bool drop = (!o.exclude_weights.empty() && contains_any(it->first, o.exclude_weights)) ||
                              (!o.include_weights.empty() && !contains_any(it->first, o.include_weights));
            it = drop ? imatrix.entries.erase(it) : std::next(it);
        }
    }
    const bool have_imatrix = !imatrix.entries.empty();
    res.n_imatrix_entries = (int64_t)imatrix.entries.size();

    // ---- types, in llama.cpp's tensor order (by layer, then name), which the output keeps
    const auto &tensors = f.tensors();
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
        return la != lb ? la < lb : tensors[a].name < tensors[b].name;
    });
    std::vector<TensorDesc> descs;
    for (const auto &t : tensors) descs.push_back({t.name, t.type, t.ne});
    MixOptions mo;
    mo.ftype = qt.ftype;
    mo.pure = o.pure;
    mo.copy = qt.copy;
    mo.quantize_output = !o.leave_output;
    mo.output_type = o.output_type;
    mo.token_embd_type = o.token_embd_type;
    mo.imatrix = have_imatrix;
    const std::vector<TypeChoice> choices = choose_types(descs, MixModel::from_gguf(f), mo);

    // ---- every check before anything is written
    std::vector<Job> jobs;
    int64_t n_imatrix_gaps = 0;
    const std::string imatrix_name = o.imatrix_file.empty() ? "--imatrix" : o.imatrix_file;  // for errors
    for (size_t k : order) {
        const gguf::TensorInfo &t = tensors[k];
        const TypeChoice &c = choices[k];
        Job job{&t, c.type, {}};
        if (c.quantizable && c.needs_imatrix && !have_imatrix) {
            fail("{}: tensor '{}' would be {} in a {} file, which needs an importance matrix: pass --imatrix FILE "
                 "(toy imatrix or llama-imatrix make one)", in, t.name, ggml_type_name(c.type), qt.name);
        }
        if (c.type != t.type) {
            if (ggml_is_quantized(t.type) && !o.allow_requantize) {
                fail("{}: tensor '{}' is already {}; requantizing loses quality, pass --allow-requantize to do it anyway", in,
                     t.name, ggml_type_name(t.type));
            }
            const auto *traits = ggml_get_type_traits(t.type);
            if (t.type != GGML_TYPE_F32 && (!traits || !traits->to_float)) {
                fail("{}: tensor '{}': cannot convert from {}", in, t.name, ggml_type_name(t.type));
            }
            if (t.ne[0] % ggml_blck_size(c.type) != 0) {
                fail("{}: tensor '{}': rows of {} are not a multiple of {}'s block of {}", in, t.name, t.ne[0],
                     ggml_type_name(c.type), ggml_blck_size(c.type));
            }
            if (have_imatrix) {
                job.importance = imatrix.importance(t.name);
                if (t.ne[3] > 1) job.importance.clear();  // per-expert slices are defined for 3-D weights only
                const size_t want = (size_t)(t.ne[0] * t.ne[2]);
                if (!job.importance.empty() && job.importance.size() != want) {
                    // a tied embedding's entry describes its use as the output projection: not an error
                    if (t.name != "token_embd.weight" && t.name != "per_layer_token_embd.weight") {
                        fail("{}: imatrix entry '{}' holds {} values, the tensor needs {} ({} per row x {} experts)",
                             imatrix_name, t.name, job.importance.size(), want,
                             t.ne[0], t.ne[2]);
                    }
                    job.importance.clear();
                }
                for (float v : job.importance) {
                    if (!std::isfinite(v)) fail("{}: imatrix entry '{}' has a non-finite value", imatrix_name, t.name);
                    if (v > kMaxImportance) {
                        fail("{}: imatrix entry '{}' weighs a column {:g}, above the {:g} toy takes (a calibration run's mean "
                             "squared activations stay far below; ggml's quantizers overflow past it)",
                             imatrix_name, t.name, v, kMaxImportance);
                    }
                }
                // ggml quantizes a matrix whose every column weighs 0 to zeros,
                // and one whose weights are all tiny to zeros or noise (its sums underflow)
                for (int64_t m = 0; m < t.ne[2] && !job.importance.empty(); ++m) {
                    const auto first = job.importance.begin() + m * t.ne[0];
                    const float top = *std::max_element(first, first + t.ne[0]);
                    if (top < kMinImportance) {
                        fail("{}: imatrix entry '{}': every value{} is below {:g} (the largest: {:g}), which would quantize the "
                             "weights to zeros or noise; expected mean squared activations (a calibration run's are near 1)",
                             imatrix_name, t.name,
                             t.ne[2] > 1 ? fmt::format(" of expert {}", m) : std::string(), kMinImportance, top);
                    }
                }
                if (job.importance.empty()) {
                    if (c.needs_imatrix) {
                        fail("{}: tensor '{}' would be {}, which needs importance data, and the imatrix has no entry for it",
                             in, t.name, ggml_type_name(c.type));
                    }
                    ++n_imatrix_gaps;
                }
            }
            if (ggml_quantize_requires_imatrix(c.type) && job.importance.empty()) {
                fail("{}: tensor '{}': ggml cannot make {} without importance data; pass --imatrix FILE or choose another type",
                     in, t.name, ggml_type_name(c.type));
            }
            res.n_converted++;
            res.n_imatrix += !job.importance.empty();
        }
        res.n_fallback += c.quantizable && c.type != c.wanted;
        jobs.push_back(std::move(job));
    }

    // ---- metadata: the input's, with the new file type and where the importance came from
    gguf::Writer w(f.alignment());
    w.copy_metadata(f);  // (a split input's split.* keys stay behind: the output is one file)
    w.set("general.quantization_version", gguf::Value::u32(GGML_QNT_VERSION));
    res.file_type = qt.copy ? file_type_of(f, order) : (int)qt.ftype;
    w.set("general.file_type", gguf::Value::u32((uint32_t)res.file_type));
    if (have_imatrix) {
        // llama-quantize stores these as overrides of at most 127 bytes
        w.set("quantize.imatrix.file", gguf::Value::str(o.imatrix_file.substr(0, 127)));
        if (!imatrix.datasets.empty()) w.set("quantize.imatrix.dataset", gguf::Value::str(imatrix.datasets[0].substr(0, 127)));
        w.set("quantize.imatrix.entries_count", gguf::Value::u32((uint32_t)imatrix.entries.size()));
        if (imatrix.chunk_count > 0) w.set("quantize.imatrix.chunks_count", gguf::Value::u32((uint32_t)imatrix.chunk_count));
    }

    // ---- tensors, converted one at a time as the writer asks for them
    const int n_threads = thread_count(o.n_threads);
    const gguf::File *fp = file.get();
    for (const Job &job : jobs) {
        const gguf::TensorInfo &t = *job.src;
        w.add_tensor(t.name, job.type, t.ne, t.n_dims, [fp, &job, n_threads](uint8_t *dst, uint64_t nbytes) {
            const auto *src = static_cast<const uint8_t *>(fp->tensor_data(*job.src));
            if (job.type == job.src->type) {
                std::memcpy(dst, src, nbytes);
            } else {
                convert(job, src, dst, nbytes, n_threads);
            }
            fp->release(src, job.src->nbytes);  // one source tensor resident at a time
        });
        res.bytes_in += t.nbytes;
        res.bytes_out += ggml_row_size(job.type, t.ne[0]) * (uint64_t)(t.ne[1] * t.ne[2] * t.ne[3]);
        res.n_elements += t.n_elements();
        res.types[ggml_type_name(job.type)]++;
        ++res.n_tensors;
    }
    if (res.n_fallback > 0) {
        res.notes.push_back(fmt::format("{} of {} tensors use another type: their rows are not a multiple of the type's block (llama.cpp's fallback)",
                                        res.n_fallback, res.n_tensors));
    }
    if (n_imatrix_gaps > 0) {
        res.notes.push_back(fmt::format("{} quantized tensor{} no imatrix entry and {} quantized without one", n_imatrix_gaps,
                                        n_imatrix_gaps == 1 ? " has" : "s have", n_imatrix_gaps == 1 ? "was" : "were"));
    }
    res.file_bytes = w.write(out);
    return res;
}

Imatrix uniform_imatrix(const std::string &path) {
    Imatrix m;
    const auto file = gguf::File::open_model(path);
    for (const auto &t : file->tensors()) {
        if (t.n_dims != 2) continue;
        Imatrix::Entry &e = m.entries[t.name];
        e.n_per_row = t.ne[0];
        e.in_sum2.assign(t.ne[0], 1.0f);
        e.counts = {1};
    }
    return m;
}

bool grid_quantizer(ggml_type type) {
    switch (type) {
    case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M:
        return true;
    default:
        return false;
    }
}

bool reads_back_finite(ggml_type type, const void *q, int64_t n) {
    const auto finite = [](float x) { return std::isfinite(x); };
    if (type == GGML_TYPE_F32) return std::all_of(static_cast<const float *>(q), static_cast<const float *>(q) + n, finite);
    thread_local std::vector<float> back;
    back.resize((size_t)n);
    ggml_get_type_traits(type)->to_float(q, back.data(), n);  // every type toy stores but F32 has one (parse_ggml_type)
    return std::all_of(back.begin(), back.end(), finite);
}

void fail_not_held(ggml_type type, const float *src, int64_t r0, int64_t n_rows, int64_t n_per_row) {
    const float *v = src + r0 * n_per_row;
    const int64_t n = n_rows * n_per_row;
    const int64_t bad = std::find_if(v, v + n, [](float x) { return !std::isfinite(x); }) - v;
    if (bad < n) fail("row {} holds a non-finite value ({}); {} needs finite ones", r0 + bad / n_per_row, v[bad], ggml_type_name(type));
    float top = 0.0f;
    for (int64_t i = 0; i < n; ++i) top = std::max(top, std::fabs(v[i]));
    fail("rows {}..{} hold values up to {:g}, beyond what {} can hold (they read back non-finite)", r0, r0 + n_rows - 1, top,
         ggml_type_name(type));
}

void quantize_rows(ggml_type type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row) {
    const std::vector<float> ones(ggml_quantize_requires_imatrix(type) ? n_per_row : 0, 1.0f);
    ggml_quantize_chunk(type, src, dst, 0, n_rows, n_per_row, ones.empty() ? nullptr : ones.data());
}

}  // namespace toy::quant
