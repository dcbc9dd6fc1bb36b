#include "runtime/kv_cache.h"

#include "core/error.h"
#include "core/ggml_log.h"
#include "core/remote_wait.h"
#include "runtime/inputs.h"

#include <ggml-backend.h>

#include <algorithm>
#include <cmath>

namespace toy {
namespace {

void check_cache_type(ggml_type t, const char *flag) {
    const auto &types = kv_cache_types();
    if (std::find(types.begin(), types.end(), t) == types.end()) {
        fail("{}: expected one of {}, found {}", flag, kv_cache_type_names(), ggml_type_name(t));
    }
}

}  // namespace

const std::vector<ggml_type> &kv_cache_types() {
    // llama.cpp's choices for -ctk / -ctv
    static const std::vector<ggml_type> types = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,   GGML_TYPE_Q8_0,
                                                 GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0,
                                                 GGML_TYPE_Q5_1};
    return types;
}

std::string kv_cache_type_names() {
    std::string s;
    for (ggml_type t : kv_cache_types()) s += (s.empty() ? "" : ", ") + std::string(ggml_type_name(t));
    return s;
}

ggml_type parse_kv_cache_type(const std::string &name, const char *flag) {
    for (ggml_type t : kv_cache_types()) {
        if (name == ggml_type_name(t)) return t;
    }
    fail("{}: expected one of {}, found '{}'", flag, kv_cache_type_names(), name);
}

KvCache::KvCache(const Engine &engine, const Config &c, int64_t n_ctx, ggml_type type_k, ggml_type type_v, bool v_trans,
                 std::span<const ggml_backend_dev_t> layer_devices)
    : type_k_(type_k), type_v_(type_v) {
    check_cache_type(type_k, "-ctk");
    check_cache_type(type_v, "-ctv");
    // a cell's row of one head is the unit a quantized cache stores
    auto check_head_blocks = [](ggml_type t, int64_t head, const char *flag, const char *what) {
        if (ggml_is_quantized(t) && head % ggml_blck_size(t) != 0) {
            fail("{} {}: {} heads of {} values are not a multiple of its block size {}", flag, ggml_type_name(t), what, head,
                 ggml_blck_size(t));
        }
    };
    check_head_blocks(type_k, c.head_dim_k, "-ctk", "K");
    if (!v_trans) check_head_blocks(type_v, c.head_dim_v, "-ctv", "V");
    // one K and one V tensor per layer, in one zeroed buffer per device
    // (masked cells are multiplied by zero weights; they must not hold NaNs).
    // Each KV head's cells are contiguous ([head_dim, n_ctx, n_head_kv]): decoding
    // streams one head's rows per unit of work, which a layout of whole cells
    // ([n_embd_gqa, n_ctx]) strides across, a 4 KiB page every few cells
    // (two threads read 12-13 GB/s of cache that way, 18-21 GB/s head by head:
    // BENCHMARKS.md). A transposed V ([n_ctx, n_embd_v_gqa], for attention
    // without the flash kernel) already holds each head's values together.
    auto device_of = [&](int il) { return (size_t)il < layer_devices.size() ? layer_devices[(size_t)il] : nullptr; };
    std::vector<ggml_backend_dev_t> devices;
    for (int il = 0; il < c.n_layer; ++il) {
        if (std::find(devices.begin(), devices.end(), device_of(il)) == devices.end()) devices.push_back(device_of(il));
    }
    for (size_t d = 0; d < devices.size(); ++d) {
        ggml_init_params ip{(size_t)(2 * c.n_layer + 2) * ggml_tensor_overhead(), nullptr, true};
        ctxs_.push_back(ggml_init(ip));
    }
    kv_.kv_size = n_ctx;
    kv_.v_trans = v_trans;
    for (int il = 0; il < c.n_layer; ++il) {
        ggml_context *ctx = ctxs_[(size_t)(std::find(devices.begin(), devices.end(), device_of(il)) - devices.begin())];
        ggml_tensor *k = ggml_new_tensor_3d(ctx, type_k, c.head_dim_k, n_ctx, c.n_head_kv);
        ggml_tensor *v = v_trans ? ggml_new_tensor_2d(ctx, type_v, n_ctx, c.n_embd_v_gqa())
                                 : ggml_new_tensor_3d(ctx, type_v, c.head_dim_v, n_ctx, c.n_head_kv);
        ggml_format_name(k, "cache_k_l%d", il);
        ggml_format_name(v, "cache_v_l%d", il);
        kv_.k.push_back(k);
        kv_.v.push_back(v);
    }
    RemoteWait wait("allocating the KV cache");
    for (size_t d = 0; d < devices.size(); ++d) {
        ggml_backend_buffer_type_t buft = devices[d] ? ggml_backend_dev_buffer_type(devices[d]) : engine.buffer_type();
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctxs_[d], buft);
        if (!buf) {
            double bytes = 0;
            for (ggml_tensor *t = ggml_get_first_tensor(ctxs_[d]); t; t = ggml_get_next_tensor(ctxs_[d], t)) {
                bytes += (double)ggml_nbytes(t);
            }
            release();
            (void)take_held_ggml_error();  // its allocator's lines say the same in bytes
            fail("could not allocate the KV cache ({} cells, {:.1f} GiB) on {}: lower -c", n_ctx, bytes / (1 << 30),
                 devices[d] ? ggml_backend_dev_name(devices[d]) : "the CPU");
        }
        ggml_backend_buffer_clear(buf, 0);
        bufs_.push_back(buf);
    }
    cells_.resize((size_t)n_ctx);  // after the buffers: a context too large for them is their error, named
}

KvCache::~KvCache() { release(); }

void KvCache::release() {
    RemoteWait wait("freeing the KV cache");
    for (auto *b : bufs_) ggml_backend_buffer_free(b);
    for (auto *c : ctxs_) ggml_free(c);
    bufs_.clear();
    ctxs_.clear();
}

int64_t KvCache::n_used() const {
    return std::count_if(cells_.begin(), cells_.end(), [](const Cell &c) { return c.pos >= 0; });
}

size_t KvCache::bytes() const {
    size_t n = 0;
    for (auto *b : bufs_) n += ggml_backend_buffer_get_size(b);
    return n;
}

std::vector<int64_t> KvCache::find_slot(const Batch &b) const {
    std::vector<int64_t> out;
    out.reserve((size_t)b.size());
    for (int64_t j = 0; j < size() && (int64_t)out.size() < b.size(); ++j) {
        if (cells_[(size_t)j].pos < 0) out.push_back(j);
    }
    if ((int64_t)out.size() < b.size()) {
        fail("context overflow: {} tokens need cells, {} of the context's {} are free (raise -c)", b.size(), out.size(), size());
    }
    return out;
}

void KvCache::check(int32_t seq) {
    if (seq < 0 || seq >= kMaxSeqs) fail("sequence id {}: expected 0 to {}", seq, kMaxSeqs - 1);
}

void KvCache::check(const Batch &b) {
    for (int32_t s : b.seq) check(s);
}

void KvCache::store(const Batch &b, std::span<const int64_t> cells) {
    check(b);
    for (int64_t i = 0; i < b.size(); ++i) {
        Cell &c = cells_[(size_t)cells[i]];
        c.pos = b.pos[i];
        c.seqs = uint64_t{1} << b.seq[i];
    }
}

void KvCache::remove(int32_t seq, int32_t p0, int32_t p1) {
    for (Cell &c : cells_) {
        if (c.pos < p0 || c.pos >= p1) continue;
        c.seqs = seq < 0 ? 0 : c.seqs & ~(uint64_t{1} << seq);
        if (c.seqs == 0) c.pos = -1;
    }
}

void KvCache::copy(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    check(src);
    check(dst);
    for (Cell &c : cells_)
        if (c.pos >= p0 && c.pos < p1 && (c.seqs >> src & 1)) c.seqs |= uint64_t{1} << dst;
}

int32_t KvCache::pos_max(int32_t seq) const {
    int32_t p = -1;
    for (const Cell &c : cells_)
        if (c.pos >= 0 && (c.seqs >> seq & 1)) p = std::max(p, c.pos);
    return p;
}

int64_t KvCache::n_active(uint64_t seqs) const {
    for (int64_t j = size() - 1; j >= 0; --j)
        if (cells_[(size_t)j].pos >= 0 && (cells_[(size_t)j].seqs & seqs)) return j + 1;
    return 0;
}

int64_t KvCache::n_active() const { return n_active(~uint64_t{0}); }

int64_t KvCache::n_active(const Batch &b) const {
    uint64_t seqs = 0;
    for (int32_t s : b.seq) seqs |= uint64_t{1} << s;
    return n_active(seqs);
}

void KvCache::fill_mask(ggml_tensor *mask, const Batch &b, int64_t n_swa) const {
    const int64_t n_kv = mask->ne[0];
    std::vector<float> f((size_t)(n_kv * b.size()), -INFINITY);
    for (int64_t i = 0; i < b.size(); ++i) {
        const uint64_t bit = uint64_t{1} << b.seq[i];
        const int32_t p = b.pos[i];
        for (int64_t j = 0; j < n_kv; ++j) {
            const Cell &c = cells_[(size_t)j];
            const bool seen = c.pos >= 0 && (c.seqs & bit) && c.pos <= p && !(n_swa > 0 && p - c.pos >= n_swa);
            if (seen) f[(size_t)(i * n_kv + j)] = 0.0f;
        }
    }
    upload_mask(mask, f);
}

}  // namespace toy
