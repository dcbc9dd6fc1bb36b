#include "model/model.h"

#include "core/ggml_log.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "core/remote_wait.h"
#include "graph/packed_matmul.h"
#include "model/pack_cache.h"
#include "quant/quantize.h"

#include <ggml-alloc.h>

#include <ggml-cpu.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include <sys/mman.h>

namespace toy {
namespace {

// Packed weights start on cache-line boundaries (the kernel streams them).
constexpr size_t kPackedAlign = 64;

std::string shape_str(const std::vector<int64_t> &ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

bool is_matrix_role(TensorRole r) {
    return r == TensorRole::Linear || r == TensorRole::Embedding || r == TensorRole::Experts ||
           r == TensorRole::Router || r == TensorRole::Positions;
}

// Types a tensor of this role may have in a file: matrices any type ggml's
// CPU backend can multiply; vectors (norms, biases, rope factors) F32 or F16.
void check_type(const gguf::File &f, const TensorSpec &spec, ggml_type type) {
    if (is_matrix_role(spec.role)) {
        const auto *cpu = ggml_get_type_traits_cpu(type);
        if (type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || (cpu && cpu->vec_dot)) return;
    } else if (type == GGML_TYPE_F32 || type == GGML_TYPE_F16) {
        return;
    }
    fail("{}: tensor '{}' has type {}, which toy cannot use for a {} tensor", f.path(), spec.name, ggml_type_name(type),
         is_matrix_role(spec.role) ? "matrix" : "vector");
}

// Per-head checkpoints store blk.N.attn_{q,k,v}.head_H.weight, each
// [n_embd, head_dim]. Returns the per-head infos in head order, or empty when
// the file has none for this projection.
std::vector<const gguf::TensorInfo *> find_heads(const gguf::File &f, const std::string &fused_name, int64_t n_heads,
                                                  int64_t n_embd, int64_t head_dim) {
    // "blk.3.attn_q.weight" -> "blk.3.attn_q.head_"
    const std::string stem = fused_name.substr(0, fused_name.size() - std::string(".weight").size()) + ".head_";
    if (!f.has_tensor(stem + "0.weight")) return {};
    std::vector<const gguf::TensorInfo *> heads;
    for (int64_t h = 0; h < n_heads; ++h) {
        const std::string name = stem + std::to_string(h) + ".weight";
        const auto *t = f.find_tensor(name);
        if (!t) fail("{}: per-head checkpoint is missing tensor '{}' ({} heads expected)", f.path(), name, n_heads);
        if (t->ne[0] != n_embd || t->ne[1] != head_dim || t->n_dims > 2) {
            fail("{}: tensor '{}': expected shape [{}, {}], found {}", f.path(), name, n_embd, head_dim, t->shape_string());
        }
        if (!heads.empty() && t->type != heads[0]->type) {
            fail("{}: tensor '{}' has type {} but head 0 has {}", f.path(), name, ggml_type_name(t->type),
                 ggml_type_name(heads[0]->type));
        }
        heads.push_back(t);
    }
    if (f.has_tensor(stem + std::to_string(n_heads) + ".weight")) {
        fail("{}: per-head checkpoint has more than {} heads for '{}'", f.path(), n_heads, fused_name);
    }
    return heads;
}

// The CPU backend's extra buffer types (AMX, repack, ...) in its order of
// preference; empty when this build has none. (AMX works only because
// cmake/amx_tile_config.h fixes a GCC miscompilation of ggml's tile kernel.)
std::vector<ggml_backend_buffer_type_t> cpu_extra_bufts() {
    std::vector<ggml_backend_buffer_type_t> out;
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!dev) return out;
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    if (!get_extra) return out;
    for (ggml_backend_buffer_type_t *b = get_extra(dev); b && *b; ++b) out.push_back(*b);
    return out;
}

// Asks the kernel to back a weight buffer with transparent huge pages before
// its bytes are written: loading takes one page fault per 2 MiB instead of per
// 4 KiB, and decoding, which streams every weight once per token, crosses far
// fewer page boundaries (hardware prefetchers stop at each) and TLB entries:
// tg +25-32% on Llama-3.2-1B Q4_K_M and SmolLM2 F16 on an AMX Xeon VM with
// the prefetching tiles (BENCHMARKS.md). Advice only; nothing changes where
// THP is off.
// For buffers of the CPU device (AMX and repack buffers are not "host" to
// ggml, as their layout is private, but live in CPU memory all the same).
// The options are asked only when there is a buffer: a load that copies
// nothing never runs auto's probe.
void advise_huge_pages(ggml_backend_buffer_t buf, const LoadOptions &opts) {
    if (buf && want_huge_pages(opts.huge_pages, opts.decode_tokens)) {
        advise_whole_blocks(ggml_backend_buffer_get_base(buf), ggml_backend_buffer_get_size(buf), 2u << 20, MADV_HUGEPAGE);
    }
}

// On a VM that hands free memory back to its host, whether fresh 2 MiB pages
// fault in no slower than 4 KiB pages do right now: it depends on what the
// host still backs (measured: 0.25-2.7 ms per 2 MiB huge, 1.2-1.6 ms small,
// on one VM within a minute). 8 MiB of each, twice, the faster of each pair,
// all four mapped at once (fault_in_seconds: no probe reuses the pages
// another just gave back): 10-60 ms once per process, and only on such VMs.
// A probe this small meets the memory the host still backs; a load of
// hundreds of MiB runs past it: on the Zen 3 VM, 5 s after the last process,
// the probe's huge pages took 0.2-2 ms per 2 MiB and the load's 6 ms, so
// auto chose huge pages and one-shot runs took 1.7-2x as long as with
// --hugepages off (BENCHMARKS.md; --pack-cache avoids the fresh memory).
bool huge_pages_fault_in_cheaply() {
    constexpr size_t kProbe = size_t(8) << 20;
    const std::vector<double> t = fault_in_seconds(kProbe, {false, true, false, true});
    if (std::any_of(t.begin(), t.end(), [](double s) { return s < 0; })) return false;
    return std::min(t[1], t[3]) <= std::min(t[0], t[2]);
}

// Whether the CPU backend can multiply by a weight of this type and shape
// when it lives in `buft` (asks the device with a throw-away op).
bool buft_supports_matmul(ggml_backend_buffer_type_t buft, ggml_type type, const int64_t *ne, int n_dims) {
    ggml_init_params ip{4 * ggml_tensor_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *w = ggml_new_tensor(ctx, type, n_dims, ne);
    ggml_tensor *op;
    if (n_dims == 3) {
        ggml_tensor *x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne[0], 1, 8);
        ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, 8);
        op = ggml_mul_mat_id(ctx, w, x, ids);
    } else {
        op = ggml_mul_mat(ctx, w, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne[0], 8));
    }
    ggml_backend_buffer_t dummy = ggml_backend_buft_alloc_buffer(buft, 0);
    w->buffer = dummy;
    const bool ok = ggml_backend_dev_supports_op(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), op);
    w->buffer = nullptr;
    ggml_backend_buffer_free(dummy);
    ggml_free(ctx);
    return ok;
}

// One weight on its way to a ggml tensor.
struct Entry {
    std::string name;
    std::vector<int64_t> ne;
    TensorRole role;
    ggml_tensor **slot;
    Model::Source src;
    ggml_type type;  // the bound type (the source's, or Q8_0 when requantized)
    int layer = -1;  // the block it belongs to, -1 for none
};

// Replaces the entries bound to `parts` (in that order) by one entry whose
// rows are theirs stacked: [ne0, sum of ne1]. Only when all are present and
// share their source and bound types and ne0.
void fuse_rows(std::vector<Entry> &entries, std::initializer_list<ggml_tensor **> parts, ggml_tensor **slot,
               const std::string &name) {
    std::vector<std::vector<Entry>::iterator> found;
    for (ggml_tensor **p : parts) {
        auto it = std::find_if(entries.begin(), entries.end(), [&](const Entry &e) { return e.slot == p; });
        if (it == entries.end()) return;
        const bool matrix = it->ne.size() > 1;  // matrices stack rows of equal length; vectors just append
        if (!found.empty() && (it->type != found[0]->type || it->src.type != found[0]->src.type ||
                               it->ne.size() != found[0]->ne.size() || (matrix && it->ne[0] != found[0]->ne[0]))) {
            return;
        }
        found.push_back(it);
    }
    Entry fused{name, found[0]->ne, found[0]->role, slot, {}, found[0]->type, found[0]->layer};
    fused.src.type = found[0]->src.type;
    int64_t rows = 0;
    for (auto it : found) {
        rows += it->ne.size() > 1 ? it->ne[1] : it->ne[0];
        fused.src.parts.insert(fused.src.parts.end(), it->src.parts.begin(), it->src.parts.end());
        fused.src.part_bytes.insert(fused.src.part_bytes.end(), it->src.part_bytes.begin(), it->src.part_bytes.end());
    }
    if (fused.ne.size() > 1) {
        fused.ne[1] = rows;
    } else {
        fused.ne[0] = rows;  // biases: vectors stacked end to end
    }
    std::sort(found.begin(), found.end(), [](auto a, auto b) { return a > b; });  // erase from the back
    for (auto it : found) entries.erase(it);
    entries.push_back(std::move(fused));
}

}  // namespace

std::vector<uint8_t> Model::Source::joined() const {
    std::vector<uint8_t> out;
    for (size_t i = 0; i < parts.size(); ++i) {
        const auto *b = static_cast<const uint8_t *>(parts[i]);
        out.insert(out.end(), b, b + part_bytes[i]);
    }
    return out;
}

// The bytes to store for a tensor of type `type`: its source, joined and,
// when the types differ, requantized row by row from float32.
static std::vector<uint8_t> convert_source(const Model::Source &src, ggml_type type, const int64_t *ne, int64_t n) {
    std::vector<uint8_t> bytes = src.joined();
    if (type == src.type) return bytes;
    std::vector<float> f32 = gguf::to_f32(bytes.data(), src.type, n);
    std::vector<uint8_t> q(ggml_row_size(type, ne[0]) * (n / ne[0]));
    ggml_quantize_chunk(type, f32.data(), q.data(), 0, n / ne[0], ne[0], nullptr);
    return q;
}

Model::~Model() {
    RemoteWait wait("freeing the weights");
    for (auto *b : extra_bufs_) ggml_backend_buffer_free(b);
    for (auto *b : device_bufs_) ggml_backend_buffer_free(b);
    if (packed_buf_) ggml_backend_buffer_free(packed_buf_);
    if (copy_buf_) ggml_backend_buffer_free(copy_buf_);
    for (auto *b : mmap_bufs_) {
        if (b) ggml_backend_buffer_free(b);
    }
    if (ctx_) ggml_free(ctx_);
}

void check_tensor_values(const gguf::File &f, int n_threads) {
    // (tensor, first row, rows) pieces of about 64K values, in file order
    struct Piece {
        const gguf::TensorInfo *t;
        int64_t r0, nr;
    };
    std::vector<Piece> pieces;
    for (const gguf::TensorInfo &t : f.tensors()) {
        if (t.type != GGML_TYPE_F32 && !ggml_get_type_traits(t.type)->to_float) continue;  // integers, F64: not weights
        const int64_t n_rows = t.n_elements() / t.ne[0], rows = std::max<int64_t>(1, 65536 / t.ne[0]);
        for (int64_t r0 = 0; r0 < n_rows; r0 += rows) pieces.push_back({&t, r0, std::min(rows, n_rows - r0)});
    }
    // whether rows [r, r + n_rows) of a piece's tensor read back finite
    const auto finite = [&](const Piece &p, int64_t r, int64_t n_rows) {
        const auto *data = static_cast<const uint8_t *>(f.tensor_data(*p.t)) + (size_t)r * ggml_row_size(p.t->type, p.t->ne[0]);
        return quant::reads_back_finite(p.t->type, data, n_rows * p.t->ne[0]);
    };
    LowestIndex bad;
    parallel_for((int64_t)pieces.size(), n_threads, [&](int64_t i) {
        const Piece &p = pieces[(size_t)i];
        if (!finite(p, p.r0, p.nr)) bad.report(i);
    });
    if (!bad.any()) return;
    const Piece &p = pieces[(size_t)bad.get()];
    int64_t r = 0;
    while (r + 1 < p.nr && finite(p, p.r0 + r, 1)) ++r;
    fail("{}: tensor '{}' ({}) holds a non-finite value in row {} (--check-tensors)", f.path(), p.t->name,
         ggml_type_name(p.t->type), p.r0 + r);
}

std::unique_ptr<Model> Model::load(const std::string &path, const LoadOptions &opts) {
    route_ggml_logs();
    std::unique_ptr<Model> m(new Model());
    m->file_ = gguf::File::open_model(path);
    const gguf::File &f = *m->file_;
    if (opts.check_tensors) check_tensor_values(f);
    m->cfg_ = Config::from_gguf(f);
    const Config &c = m->cfg_;
    if (opts.weight_type != GGML_TYPE_COUNT && opts.weight_type != GGML_TYPE_Q8_0 && opts.weight_type != GGML_TYPE_BF16) {
        fail("weight type {}: toy can requantize weights to q8_0 or bf16 only", ggml_type_name(opts.weight_type));
    }

    if ((size_t)c.n_layer > f.tensors().size()) {
        fail("{}: {} blocks, but the file holds only {} tensors", path, c.n_layer, f.tensors().size());
    }
    std::vector<TensorSpec> specs = tensor_specs(c, &m->w_);
    ggml_init_params ip{(specs.size() + 8) * ggml_tensor_overhead(), nullptr, true};
    m->ctx_ = ggml_init(ip);
    if (!m->ctx_) fail("out of memory creating the weight context");

    // 1. Find each tensor's bytes, check them, decide the bound type.
    std::vector<Entry> entries;
    for (const TensorSpec &spec : specs) {
        Model::Source src;
        if (const auto *info = f.find_tensor(spec.name)) {
            std::vector<int64_t> found(info->ne.begin(), info->ne.begin() + std::max(info->n_dims, 1));
            while (found.size() < spec.ne.size()) found.push_back(1);
            while (found.size() > spec.ne.size() && found.back() == 1) found.pop_back();
            if (found != spec.ne) {
                fail("{}: tensor '{}': expected shape {}, found {}", f.path(), spec.name, shape_str(spec.ne),
                     info->shape_string());
            }
            src.type = info->type;
            src.parts.push_back(f.tensor_data(*info));
            src.part_bytes.push_back(info->nbytes);
        } else {
            std::vector<const gguf::TensorInfo *> heads;
            const LayerWeights *l = spec.layer >= 0 ? &m->w_.layers[spec.layer] : nullptr;
            if (l && (spec.slot == &l->wq || spec.slot == &l->wk || spec.slot == &l->wv)) {
                const int64_t nh = spec.slot == &l->wq ? c.n_head : c.n_head_kv;
                const int64_t hd = spec.slot == &l->wv ? c.head_dim_v : c.head_dim_k;
                heads = find_heads(f, spec.name, nh, c.n_embd, hd);
            }
            if (heads.empty()) {
                if (!spec.required) continue;
                fail("{}: missing tensor '{}' (expected {} for architecture {})", f.path(), spec.name,
                     shape_str(spec.ne), c.arch);
            }
            m->per_head_ = true;
            src.type = heads[0]->type;
            for (const auto *h : heads) {
                src.parts.push_back(f.tensor_data(*h));
                src.part_bytes.push_back(h->nbytes);
            }
        }
        check_type(f, spec, src.type);
        const bool requant = opts.weight_type != GGML_TYPE_COUNT &&
                             (spec.role == TensorRole::Linear || spec.role == TensorRole::Experts) &&
                             (src.type == GGML_TYPE_F32 || src.type == GGML_TYPE_F16) &&
                             spec.ne[0] % ggml_blck_size(opts.weight_type) == 0;
        Entry e{spec.name,      spec.ne, spec.role, spec.slot, std::move(src), requant ? opts.weight_type : GGML_TYPE_COUNT,
                spec.layer};
        if (!requant) e.type = e.src.type;
        std::array<int64_t, 4> ne4{1, 1, 1, 1};
        std::copy(e.ne.begin(), e.ne.end(), ne4.begin());
        m->stored_[e.name] = {e.src, e.type, ne4};
        entries.push_back(std::move(e));
    }

    // 2. Where a matrix's kernel is: a block's on its device when the model
    // is split (model/split.h); on the CPU, the first extra buffer type whose
    // kernel takes the matrix, else toy's packed layout where its kernel takes
    // it, else in place in the mapping, else a copy (step 4).
    m->split_ = plan_split(opts.split, c.n_layer);
    Weights &w = m->w_;
    auto device_of = [&](const Entry &e) { return m->split_.device_of(e.layer, w.is_head_slot(e.slot)); };
    const std::vector<ggml_backend_buffer_type_t> extra_bufts =
        opts.repack ? cpu_extra_bufts() : std::vector<ggml_backend_buffer_type_t>{};
    // toy's own packed layout, where its kernel takes the matrix. The
    // layouts of the IQ types below IQ4_XS are much larger than the types'
    // own (1.25x for IQ3_S to 2.76x for IQ1_S: packed_kernels.h), and a model in such a type
    // was chosen to be small: those matrices are packed only where all of
    // the model's packed matrices fit in half the memory available, as the
    // huge-page copies below; elsewhere they stay in the mapping on ggml's
    // kernels, and a note says so.
    auto packable = [&](const Entry &e) {
        return opts.repack && e.role == TensorRole::Linear && !device_of(e) &&
               graph::packed_matmul_supports(e.type, e.ne.data(), (int)e.ne.size());
    };
    auto own_bytes = [](const Entry &e) { return ggml_row_size(e.type, e.ne[0]) * (size_t)e.ne[1]; };
    auto grows = [&](const Entry &e) {  // by more than an eighth (not Q3_K's 3.6%, Q5_K's 2.3%, IQ4_XS's 1.5%)
        return graph::packed_size(e.type, e.ne[0], e.ne[1]) > own_bytes(e) + own_bytes(e) / 8;
    };
    size_t packed_total = 0, grown_extra = 0;
    for (const Entry &e : entries) {
        if (!packable(e)) continue;
        const size_t packed = graph::packed_size(e.type, e.ne[0], e.ne[1]);
        packed_total += packed;
        if (grows(e)) grown_extra += packed - own_bytes(e);
    }
    auto memory_available = [&] { return opts.available_memory > 0 ? opts.available_memory : available_memory_bytes(); };
    const size_t memory = grown_extra > 0 ? memory_available() : 0;
    const bool pack_grown = grown_extra == 0 || (memory > 0 && packed_total <= memory / 2);
    if (!pack_grown) {
        const std::string why = memory == 0 ? std::string("the memory available is unknown")
                                            : fmt::format("over half of the {:.1f} MiB available", memory / 1048576.0);
        std::fprintf(stderr,
                     "toy: note: %s: its low-bit IQ matrices stay in the file's layout on ggml's kernels: packed for toy's "
                     "(faster) they would take %.1f MiB more, and all packed matrices %.1f MiB, %s\n",
                     f.path().c_str(), grown_extra / 1048576.0, packed_total / 1048576.0, why.c_str());
    }
    auto packed_for = [&](const Entry &e) { return packable(e) && (pack_grown || !grows(e)); };
    // An extra buffer type goes first, except where toy's kernel takes the
    // matrix and is the faster: ggml's generic CPU repack (its x86 kernels
    // for the types toy packs, Q4_K, are 256-bit), and AMX for F16 and the
    // K-quants, which AMX decodes at half to two thirds of toy's speed on a
    // Sapphire-Rapids-class Xeon (Llama-3.2-1B Q4_K_M tg64 10.6-14.7 vs
    // 19.7-26.4 t/s; SmolLM2 F16 tg64 57 vs 92-96, its prompt 556-701 vs
    // 727-779 t/s: BENCHMARKS.md), and for Q8_0, Q4_0 and Q4_1 where toy's
    // set has AMX tiles of its own (prompts through SmolLM2 Q8_0 10-23%
    // faster, decoding 7-17%; Q4_0 8% and 5%, Q4_1 13% and 10%; ggml's AMX
    // kept only where toy's set lacks them).
    auto toy_kernel_first = [&](ggml_backend_buffer_type_t b, const Entry &e) {
        const char *name = ggml_backend_buft_name(b);
        const bool amx_slower = e.type == GGML_TYPE_F16 || e.type == GGML_TYPE_Q4_K || e.type == GGML_TYPE_Q5_K ||
                                e.type == GGML_TYPE_Q6_K || graph::packed_wide_tiles(e.type);
        return packed_for(e) && (std::strcmp(name, "CPU_REPACK") == 0 || (std::strcmp(name, "AMX") == 0 && amx_slower));
    };
    auto extra_for = [&](const Entry &e) -> ggml_backend_buffer_type_t {
        if ((e.role != TensorRole::Linear && e.role != TensorRole::Experts) || device_of(e)) return nullptr;
        for (auto *b : extra_bufts) {
            if (toy_kernel_first(b, e)) continue;
            if (buft_supports_matmul(b, e.type, e.ne.data(), (int)e.ne.size())) return b;
        }
        return nullptr;
    };
    // 3. Fuse projections one matmul can compute together: Q|K|V everywhere;
    // gate|up for a block on an offload device, where a decode step is
    // mostly kernel launches (on an H200 fusing Q|K|V took decoding from
    // llama.cpp's speed to 1.2-1.3x; gate|up then added 1-18% on a model
    // where only they fuse: BENCHMARKS.md), and on the CPU where toy's packed
    // kernel takes them: one product and its thread barrier fewer per block
    // (SmolLM2 Q8_0 on Zen 3: pp512 591 -> 607, tg64 187 -> 190 t/s, medians
    // of alternating runs). Not into ggml's AMX buffer, whose prompt kernel
    // ran 5-16% slower on the wide result.
    auto fuses_gate_up = [&](int il) {
        if (m->split_.device_of(il, false)) return true;
        const LayerWeights &l = w.layers[il];
        auto gate = std::find_if(entries.begin(), entries.end(), [&](const Entry &e) { return e.slot == &l.ffn_gate; });
        return gate != entries.end() && packed_for(*gate) && !extra_for(*gate);
    };
    if (opts.fuse) {
        for (int il = 0; il < c.n_layer; ++il) {
            LayerWeights &l = w.layers[il];
            fuse_rows(entries, {&l.wq, &l.wk, &l.wv}, &l.wqkv, fmt::format("blk.{}.attn_qkv.weight", il));
            fuse_rows(entries, {&l.bq, &l.bk, &l.bv}, &l.bqkv, fmt::format("blk.{}.attn_qkv.bias", il));
            if (fuses_gate_up(il)) {
                fuse_rows(entries, {&l.ffn_gate, &l.ffn_up}, &l.ffn_gate_up, fmt::format("blk.{}.ffn_gate_up.weight", il));
            }
        }
    }

    // 4. Place each tensor.
    const bool tied = std::none_of(entries.begin(), entries.end(), [&](const Entry &e) { return e.slot == &w.output; });
    if (tied) {
        // A tied output projection reads the whole embedding every token,
        // while the lookup reads one row. When an extra buffer type has a
        // faster kernel for it, or the head runs on another device, the
        // projection gets its own copy and the embedding stays mapped for the
        // lookup (costs one more copy of the embedding). Otherwise both use
        // the one tensor.
        auto embd = std::find_if(entries.begin(), entries.end(), [&](const Entry &e) { return e.slot == &w.tok_embd; });
        if (embd != entries.end()) {
            Entry out{"output.weight", embd->ne, TensorRole::Linear, &w.output, embd->src, embd->type};
            if (extra_for(out) || packed_for(out) || device_of(out)) entries.push_back(std::move(out));
        }
    }
    struct Plan {
        ggml_tensor *t;
        const Entry *e;
        bool zero_copy;
        // a buffer type of its own: a CPU extra one (AMX, repack), or an
        // offload device's; null for the mapping and plain copies
        ggml_backend_buffer_type_t buft;
        bool packed;  // in toy's packed layout
    };
    std::vector<Plan> plans;
    for (const Entry &e : entries) {
        ggml_tensor *t = ggml_new_tensor(m->ctx_, e.type, (int)e.ne.size(), e.ne.data());
        ggml_set_name(t, e.name.c_str());
        *e.slot = t;
        ggml_backend_dev_t dev = device_of(e);
        ggml_backend_buffer_type_t buft = dev ? ggml_backend_dev_buffer_type(dev) : extra_for(e);
        const bool packed = !buft && packed_for(e);
        const bool zero_copy = opts.use_mmap && e.type == e.src.type && !buft && !packed && e.src.parts.size() == 1;
        plans.push_back({t, &e, zero_copy, buft, packed});
        if (packed) w.packed.insert(t);
    }
    // The matrices that would stay mapped (F16 on AVX2 CPUs, types no packed
    // or extra kernel takes, a tied embedding that is also the output
    // projection) are copied too where huge pages are on: mapped, they sit in
    // the file's 4 KiB pages, and decoding, which streams them every token,
    // waits at each page (SmolLM2 F16 on Zen 3: tg64 52-57 -> 63-69 t/s
    // copied, BENCHMARKS.md). Not with --no-repack (everything stays
    // mapped), nor when the copies would take more than half the memory
    // available: a mapping runs a model larger than memory, copies do not.
    const bool head_reads_embd =
        tied && std::none_of(entries.begin(), entries.end(), [&](const Entry &e) { return e.slot == &w.output; });
    auto streamed = [&](const Plan &p) {
        const TensorRole role = p.e->role;
        return p.zero_copy && (role == TensorRole::Linear || role == TensorRole::Experts || (head_reads_embd && p.e->slot == &w.tok_embd));
    };
    size_t streamed_bytes = 0;
    for (const Plan &p : plans) streamed_bytes += streamed(p) ? ggml_nbytes(p.t) : 0;
    if (streamed_bytes > 0 && opts.repack) {
        const size_t available = memory_available();
        if (available > 0 && streamed_bytes <= available / 2 && want_huge_pages(opts.huge_pages, opts.decode_tokens)) {
            for (Plan &p : plans) {
                if (streamed(p)) p.zero_copy = false;
            }
        }
    }
    w.tied_output = tied;
    if (!w.output) w.output = w.tok_embd;

    // 5. Bind: mapped tensors in place, then one buffer per buffer type of
    // its own (binding selects the layout, setting the bytes converts them),
    // then one plain buffer for the remaining copies.
    bool any_mapped = false;
    for (const Plan &p : plans) any_mapped |= p.zero_copy;
    if (any_mapped) {
        m->mmap_bufs_.assign(f.n_files(), nullptr);
        for (const Plan &p : plans) {
            if (!p.zero_copy) continue;
            const size_t i = f.file_holding(p.e->src.parts[0]);
            ggml_backend_buffer_t &buf = m->mmap_bufs_[i];
            if (!buf) {  // the first tensor in place in this file
                const gguf::File &in = f.file(i);
                buf = ggml_backend_cpu_buffer_from_ptr(const_cast<uint8_t *>(in.mapping()), in.file_size());
                if (!buf) fail("{}: could not wrap the file mapping in a ggml buffer", in.path());
                ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
            }
            if (ggml_backend_tensor_alloc(buf, p.t, const_cast<void *>(p.e->src.parts[0])) != GGML_STATUS_SUCCESS) {
                fail("{}: could not bind tensor '{}' in place", f.path(), p.e->name);
            }
        }
    }
    // each buffer type of its own and the bytes its tensors take there, asked
    // once (an RPC device answers some sizes over the network)
    std::optional<RemoteWait> allocating(std::in_place, "allocating the weights");
    std::vector<std::pair<ggml_backend_buffer_type_t, size_t>> own_bufts;
    for (const Plan &p : plans) {
        if (!p.buft) continue;
        auto it = std::find_if(own_bufts.begin(), own_bufts.end(), [&](const auto &b) { return b.first == p.buft; });
        if (it == own_bufts.end()) it = own_bufts.insert(own_bufts.end(), {p.buft, 0});
        it->second += GGML_PAD(ggml_backend_buft_get_alloc_size(p.buft, p.t), ggml_backend_buft_get_alignment(p.buft));
    }
    auto buft_bytes = [&](ggml_backend_buffer_type_t buft) {
        auto it = std::find_if(own_bufts.begin(), own_bufts.end(), [&](const auto &b) { return b.first == buft; });
        return it == own_bufts.end() ? size_t{0} : it->second;
    };
    // an offload device must hold its blocks: say so before copying anything
    for (ggml_backend_dev_t dev : m->split_.devices) {
        const size_t need = buft_bytes(ggml_backend_dev_buffer_type(dev));
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(dev, &free, &total);
        if (need > free) {
            fail("{}: the weights split to {} need {:.1f} MiB, it has {:.1f} MiB free (lower -ngl, or shift --tensor-split)",
                 f.path(), ggml_backend_dev_name(dev), need / 1048576.0, free / 1048576.0);
        }
    }
    for (const auto &[buft, size] : own_bufts) {
        const bool device = std::find(extra_bufts.begin(), extra_bufts.end(), buft) == extra_bufts.end();
        ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, size);
        if (!buf) fail("{}: could not allocate {} bytes for {} weights", f.path(), size, ggml_backend_buft_name(buft));
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        if (!device) advise_huge_pages(buf, opts);
        (device ? m->device_bufs_ : m->extra_bufs_).push_back(buf);
        ggml_tallocr alloc = ggml_tallocr_new(buf);
        for (const Plan &p : plans) {
            if (p.buft == buft && ggml_tallocr_alloc(&alloc, p.t) != GGML_STATUS_SUCCESS) {
                fail("{}: could not bind tensor '{}' in a {} buffer", f.path(), p.e->name, ggml_backend_buft_name(buft));
            }
        }
    }
    allocating.reset();
    // The packed matrices, one after another in one buffer: fresh memory they
    // are packed into, or (--pack-cache) a file that holds them packed.
    std::vector<PackCache::Tensor> packed_tensors;
    size_t packed_size = 0;
    for (const Plan &p : plans) {
        if (!p.packed) continue;
        packed_tensors.push_back({p.e->name, p.t->type, p.t->ne[0], p.t->ne[1], packed_size});
        packed_size += GGML_PAD(graph::packed_size(p.t->type, p.t->ne[0], p.t->ne[1]), kPackedAlign);
    }
    std::optional<PackCache> cache;
    if (packed_size > 0 && !opts.pack_cache_dir.empty()) {
        std::vector<std::string> paths;
        for (size_t i = 0; i < f.n_files(); ++i) paths.push_back(f.file(i).path());
        cache.emplace(opts.pack_cache_dir, paths, packed_tensors, packed_size);
    }
    // (the page cache's huge folios are not fresh memory at every load, so
    // no probe: only --hugepages off keeps them small)
    if (cache && opts.use_mmap && (m->packed_map_ = cache->map(opts.huge_pages != HugePages::Off))) {
        m->packed_buf_ = ggml_backend_cpu_buffer_from_ptr(const_cast<void *>(m->packed_map_->data()), packed_size);
        if (!m->packed_buf_) fail("{}: could not wrap the packed weights of {} in a ggml buffer", f.path(), cache->path());
        m->packed_cached_ = true;
    } else if (packed_size > 0) {
        m->packed_buf_ = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), packed_size);
        if (!m->packed_buf_) fail("{}: could not allocate {} bytes for packed weights", f.path(), packed_size);
        advise_huge_pages(m->packed_buf_, opts);
        m->packed_cached_ = cache && cache->read_into(ggml_backend_buffer_get_base(m->packed_buf_));
    }
    if (m->packed_buf_) {
        ggml_backend_buffer_set_usage(m->packed_buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        auto *base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(m->packed_buf_));
        size_t i = 0;
        for (const Plan &p : plans) {
            if (!p.packed) continue;
            if (ggml_backend_tensor_alloc(m->packed_buf_, p.t, base + packed_tensors[i++].offset) != GGML_STATUS_SUCCESS) {
                fail("{}: could not bind tensor '{}' in the packed buffer", f.path(), p.e->name);
            }
        }
    }
    m->copy_buf_ = ggml_backend_alloc_ctx_tensors_from_buft(m->ctx_, ggml_backend_cpu_buffer_type());
    if (m->copy_buf_) {
        ggml_backend_buffer_set_usage(m->copy_buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        advise_huge_pages(m->copy_buf_, opts);
    }
    // Fill the copies largest first, releasing each source's mapped pages
    // right after: the peak resident set is then the copies plus at most one
    // source (the largest before the copies grow, not after). The sources are
    // mapped in small pages for that (gguf::File::will_copy).
    std::vector<const Plan *> to_fill;
    for (const Plan &p : plans) {
        if (!p.zero_copy && !(p.packed && m->packed_cached_)) to_fill.push_back(&p);
    }
    std::stable_sort(to_fill.begin(), to_fill.end(),
                     [](const Plan *a, const Plan *b) { return ggml_nbytes(a->t) > ggml_nbytes(b->t); });
    uint64_t fill_bytes = 0;
    for (const Plan *pp : to_fill) {
        fill_bytes += ggml_nbytes(pp->t);
        for (size_t i = 0; i < pp->e->src.parts.size(); ++i) f.will_copy(pp->e->src.parts[i], pp->e->src.part_bytes[i]);
    }
    Progress progress("loading " + std::filesystem::path(f.path()).filename().string(), fill_bytes);
    for (const Plan *pp : to_fill) {
        const Plan &p = *pp;
        // the bound type's bytes: the mapped source as it is, or joined / requantized
        const bool as_is = p.e->src.parts.size() == 1 && p.e->src.type == p.t->type;
        std::vector<uint8_t> bytes;
        if (!as_is) bytes = convert_source(p.e->src, p.t->type, p.t->ne, ggml_nelements(p.t));
        const void *src = as_is ? p.e->src.parts[0] : bytes.data();
        if (!p.packed && ggml_backend_buffer_is_host(p.t->buffer)) {
            // in 4 MiB pieces on every thread (a copy of a mapped file is
            // mostly page faults, of the mapping and of the fresh memory)
            constexpr size_t kPiece = size_t(4) << 20;
            const size_t n = ggml_nbytes(p.t);
            parallel_for((int64_t)((n + kPiece - 1) / kPiece), 0, [&](int64_t i) {
                const size_t at = (size_t)i * kPiece;
                std::memcpy(static_cast<uint8_t *>(p.t->data) + at, static_cast<const uint8_t *>(src) + at, std::min(kPiece, n - at));
            });
        } else if (!p.packed) {
            RemoteWait copying("copying the weights");
            ggml_backend_tensor_set(p.t, src, 0, ggml_nbytes(p.t));
        } else {
            graph::pack_matrix(p.t->type, src, p.t->data, p.t->ne[0], p.t->ne[1], /*all threads*/ 0);
        }
        for (size_t i = 0; i < p.e->src.parts.size(); ++i) f.release(p.e->src.parts[i], p.e->src.part_bytes[i]);
        progress.add(ggml_nbytes(p.t));
    }
    if (cache && !m->packed_cached_) {
        // a cache that cannot be written costs the next load its time, not this one its result
        try {
            cache->store(ggml_backend_buffer_get_base(m->packed_buf_));
            std::fprintf(stderr, "toy: packed weights kept in %s (%.1f MiB) for later loads\n", cache->path().c_str(),
                         packed_size / 1048576.0);
        } catch (const Error &e) {
            std::fprintf(stderr, "toy: warning: packed weights not kept: %s\n", e.what());
        }
    }
    return m;
}

bool want_huge_pages(HugePages mode, int64_t decode_tokens) {
    if (mode != HugePages::Auto) return mode == HugePages::On;
    if (decode_tokens >= kLongRunTokens) return true;  // a server's (kServingTokens) too
    static const bool host_takes_free = free_pages_go_to_host();
    if (host_takes_free && decode_tokens >= 0 && decode_tokens < kShortRunTokens) return false;
    static const bool cheap = !host_takes_free || huge_pages_fault_in_cheaply();
    return cheap;
}

bool Model::has_weight(const std::string &name) const {
    return stored_.count(name) > 0 || (name == "output.weight" && w_.tied_output);
}

std::vector<uint8_t> Model::read_weight_bytes(const std::string &name, ggml_type *type) const {
    auto it = stored_.find(name == "output.weight" && w_.tied_output ? "token_embd.weight" : name);
    if (it == stored_.end()) fail("{}: no weight named '{}'", path(), name);
    const Stored &s = it->second;
    *type = s.type;
    return convert_source(s.src, s.type, s.ne.data(), s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3]);
}

std::array<int64_t, 4> Model::weight_shape(const std::string &name) const {
    auto it = stored_.find(name == "output.weight" && w_.tied_output ? "token_embd.weight" : name);
    if (it == stored_.end()) fail("{}: no weight named '{}'", path(), name);
    return it->second.ne;
}

ggml_type Model::file_type(const std::string &name) const {
    auto it = stored_.find(name == "output.weight" && w_.tied_output ? "token_embd.weight" : name);
    if (it == stored_.end()) fail("{}: no weight named '{}'", path(), name);
    return it->second.src.type;
}

std::vector<float> Model::read_weight(const std::string &name, std::array<int64_t, 4> *ne) const {
    auto it = stored_.find(name == "output.weight" && w_.tied_output ? "token_embd.weight" : name);
    if (it == stored_.end()) fail("{}: no weight named '{}'", path(), name);
    const Stored &s = it->second;
    const int64_t n = s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3];
    std::vector<uint8_t> raw = convert_source(s.src, s.type, s.ne.data(), n);
    if (ne) *ne = s.ne;
    return gguf::to_f32(raw.data(), s.type, n);
}

std::vector<const ggml_tensor *> Model::bound_tensors() const {
    std::vector<const ggml_tensor *> out;
    for (ggml_tensor *t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) out.push_back(t);
    return out;
}

size_t Model::weight_bytes() const {
    size_t n = 0;
    for (ggml_tensor *t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) n += ggml_nbytes(t);
    return n;
}

size_t Model::copied_bytes() const {
    size_t n = copy_buf_ ? ggml_backend_buffer_get_size(copy_buf_) : 0;
    for (auto *b : device_bufs_) n += ggml_backend_buffer_get_size(b);
    return n + repacked_bytes();
}

std::vector<std::pair<std::string, size_t>> Model::placement() const {
    std::vector<std::pair<std::string, size_t>> out;
    size_t mapped = 0;
    for (ggml_tensor *t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) {
        if (t->buffer && std::find(mmap_bufs_.begin(), mmap_bufs_.end(), t->buffer) != mmap_bufs_.end()) mapped += ggml_nbytes(t);
    }
    if (const auto used = std::find_if(mmap_bufs_.begin(), mmap_bufs_.end(), [](auto *b) { return b != nullptr; }); used != mmap_bufs_.end()) {
        out.emplace_back(ggml_backend_buffer_name(*used), mapped);
    }
    for (auto *b : extra_bufs_) out.emplace_back(ggml_backend_buffer_name(b), ggml_backend_buffer_get_size(b));
    for (auto *b : device_bufs_) out.emplace_back(ggml_backend_buffer_name(b), ggml_backend_buffer_get_size(b));
    if (packed_buf_) out.emplace_back(packed_map_ ? "TOY_PACKED (mapped cache)" : "TOY_PACKED", ggml_backend_buffer_get_size(packed_buf_));
    if (copy_buf_) out.emplace_back(ggml_backend_buffer_name(copy_buf_), ggml_backend_buffer_get_size(copy_buf_));
    return out;
}

size_t Model::repacked_bytes() const {
    size_t n = 0;
    for (auto *b : extra_bufs_) n += ggml_backend_buffer_get_size(b);
    return n + (packed_buf_ ? ggml_backend_buffer_get_size(packed_buf_) : 0);
}

}  // namespace toy
