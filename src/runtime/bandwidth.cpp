#include "runtime/bandwidth.h"

#include "core/error.h"
#include "core/parallel.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TOY_X86 1
#endif

namespace toy {
namespace {

constexpr size_t kGiB = size_t(1) << 30;
constexpr size_t kAlign = size_t(2) << 20;  // 2 MiB: lets the kernel back the buffer with huge pages

// Each kernel reads [p, p + n) (n a multiple of 256 bytes) and folds it into a
// value the caller keeps, so the loads cannot be optimized away.
uint64_t read_scalar(const uint8_t *p, size_t n) {
    const uint64_t *q = reinterpret_cast<const uint64_t *>(p);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n / 8; i += 4) {
        a += q[i];
        b += q[i + 1];
        c += q[i + 2];
        d += q[i + 3];
    }
    return a ^ b ^ c ^ d;
}

#ifdef TOY_X86
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 128) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + i)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + i + 32)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + i + 64)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + i + 96)));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i *>(out), s);
    return out[0] ^ out[1] ^ out[2] ^ out[3];
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t *p, size_t n) {
    __m512i a = _mm512_set1_epi64(0), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 256) {
        a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
        c = _mm512_add_epi64(c, _mm512_loadu_si512(p + i + 128));
        d = _mm512_add_epi64(d, _mm512_loadu_si512(p + i + 192));
    }
    alignas(64) uint64_t out[8];
    _mm512_store_si512(out, _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d)));
    return out[0] ^ out[1] ^ out[2] ^ out[3] ^ out[4] ^ out[5] ^ out[6] ^ out[7];
}
#endif

using ReadFn = uint64_t (*)(const uint8_t *, size_t);

ReadFn pick_kernel(const char **name) {
#ifdef TOY_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) { *name = "avx512"; return read_avx512; }
    if (__builtin_cpu_supports("avx2")) { *name = "avx2"; return read_avx2; }
#endif
    *name = "scalar";
    return read_scalar;
}

size_t default_buffer_bytes() {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t want = std::max<size_t>(kGiB, l3 > 0 ? 4 * (size_t)l3 : 0);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) want = std::min(want, (size_t)pages * (size_t)page / 4);
    return std::max<size_t>(want, 64 << 20);
}

struct AlignedBuffer {
    uint8_t *p = nullptr;
    explicit AlignedBuffer(size_t n) { p = static_cast<uint8_t *>(std::aligned_alloc(kAlign, n)); }
    ~AlignedBuffer() { std::free(p); }
};

// Bytes a thread reads: whole multiples of every kernel's step (256 bytes).
struct Span {
    const uint8_t *p;
    size_t n;
};
constexpr size_t kStep = 256;

template <typename Fn>
void on_threads(int n_threads, Fn &&fn) {
    std::vector<std::thread> ts;
    for (int i = 0; i < n_threads; ++i) ts.emplace_back(fn, i);
    for (auto &t : ts) t.join();
}

// `runs` timed passes in which thread i reads its spans (`pieces[i]`) with the
// CPU's kernel, after `warmups` untimed ones: r's best and mean GB/s.
BandwidthResult time_passes(const std::vector<std::vector<Span>> &pieces, int runs, int warmups) {
    BandwidthResult r;
    r.n_threads = (int)pieces.size();
    r.runs = runs = std::max(runs, 1);
    for (const auto &spans : pieces)
        for (const Span &s : spans) r.buffer_bytes += s.n;
    ReadFn read = pick_kernel(&r.kernel);
    std::vector<uint64_t> sink(pieces.size());
    auto pass = [&] {
        on_threads(r.n_threads, [&](int i) {
            for (const Span &s : pieces[i]) sink[i] += read(s.p, s.n);
        });
    };
    for (int w = 0; w < warmups; ++w) pass();
    double sum = 0.0;
    for (int run = 0; run < runs; ++run) {
        auto t0 = std::chrono::steady_clock::now();
        pass();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double gbs = (double)r.buffer_bytes / s / 1e9;
        r.gb_per_s = std::max(r.gb_per_s, gbs);
        sum += gbs;
    }
    r.mean_gb_per_s = sum / runs;
    volatile uint64_t keep = 0;
    for (uint64_t v : sink) keep = keep ^ v;
    (void)keep;
    return r;
}

// Whether a decode step reads one row of a weight (get_rows) rather than all of it.
bool gathered(const Weights &w, const ggml_tensor *t) { return (t == w.tok_embd && w.output != w.tok_embd) || t == w.pos_embd; }

}  // namespace

BandwidthResult measure_read_bandwidth(int n_threads, size_t buffer_bytes, int runs) {
    n_threads = thread_count(n_threads);
    if (buffer_bytes == 0) buffer_bytes = default_buffer_bytes();
    // every thread's slice is a multiple of 2 MiB, so slices stay aligned for any kernel
    const size_t slice = std::max(kAlign, buffer_bytes / (size_t)n_threads / kAlign * kAlign);
    const size_t total = slice * (size_t)n_threads;
    AlignedBuffer buf(total);
    if (!buf.p) fail("--roofline: could not allocate a {} MiB buffer for the bandwidth probe", total >> 20);
    // first touch by the reading thread (pages land on its NUMA node); nonzero
    // bytes so no page can stay the shared zero page
    on_threads(n_threads, [&](int i) { std::memset(buf.p + slice * i, 0x5a, slice); });
    std::vector<std::vector<Span>> pieces(n_threads);
    for (int i = 0; i < n_threads; ++i) pieces[i] = {{buf.p + slice * i, slice}};
    return time_passes(pieces, runs, 0);
}

BandwidthResult measure_weight_bandwidth(const Model &model, int n_threads, int runs) {
    n_threads = thread_count(n_threads);
    std::vector<Span> spans;
    size_t total = 0;
    for (const ggml_tensor *t : model.bound_tensors()) {
        if (!t->data || !t->buffer || !ggml_backend_buffer_is_host(t->buffer)) return {};  // some on a device
        if (gathered(model.weights(), t)) continue;
        const size_t n = ggml_nbytes(t) / kStep * kStep;
        if (n > 0) spans.push_back({static_cast<const uint8_t *>(t->data), n}), total += n;
    }
    if (total == 0) return {};
    // thread i reads bytes [i, i + 1) x total / n_threads of the spans laid end to end
    std::vector<std::vector<Span>> pieces(n_threads);
    size_t at = 0;
    for (const Span &s : spans) {
        for (size_t o = 0; o < s.n;) {
            const int i = std::min<int>(n_threads - 1, (int)((at + o) * n_threads / total));
            const size_t end = ((size_t)(i + 1) * total / n_threads + kStep - 1) / kStep * kStep;
            const size_t n = std::min(s.n - o, std::max(kStep, end - (at + o)));
            pieces[i].push_back({s.p + o, n});
            o += n;
        }
        at += s.n;
    }
    // one pass first: mapped pages fault in, as they have by a decode's end
    return time_passes(pieces, runs, 1);
}

DecodeBytes decode_bytes_per_token(const Model &model, int64_t n_ctx_tokens, ggml_type type_k, ggml_type type_v) {
    const Config &c = model.config();
    const Weights &w = model.weights();
    DecodeBytes b;
    for (const ggml_tensor *t : model.bound_tensors()) {
        size_t n = ggml_nbytes(t);
        if (gathered(w, t)) {
            n = ggml_row_size(t->type, t->ne[0]);  // get_rows reads one row per token
        } else if (c.n_expert > 0 && ggml_n_dims(t) == 3) {
            n = n / (size_t)c.n_expert * (size_t)c.n_expert_used;  // stacked experts: only the chosen are read
        }
        b.weights += n;
    }
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const int64_t cells = c.layer_uses_swa(il) ? std::min(n_ctx_tokens, c.n_swa) : n_ctx_tokens;
        b.kv += (size_t)cells * (ggml_row_size(type_k, c.n_embd_k_gqa()) + ggml_row_size(type_v, c.n_embd_v_gqa()));
    }
    return b;
}

double measure_f32_matmul_gflops(const Engine &engine, int64_t n, int runs) {
    ggml_init_params ip{3 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
    ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
    ggml_tensor *c = ggml_mul_mat(ctx, a, b);
    ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, c);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, engine.backend());
    if (!buf) {
        ggml_free(ctx);
        fail("matmul probe: could not allocate {} MiB", 3 * n * n * 4 >> 20);
    }
    std::vector<float> v((size_t)(n * n));
    uint32_t x = 12345;
    for (float &f : v) f = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    ggml_backend_tensor_set(a, v.data(), 0, ggml_nbytes(a));
    ggml_backend_tensor_set(b, v.data(), 0, ggml_nbytes(b));
    double best = 0;
    for (int r = 0; r <= std::max(1, runs); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        ggml_backend_graph_compute(engine.backend(), gf);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) best = std::max(best, 2.0 * (double)n * n * n / s / 1e9);  // run 0 warms up
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return best;
}

}  // namespace toy
