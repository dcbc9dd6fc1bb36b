// toy_tile_bench: one core, toy's packed tiles called directly, no graph and
// no threads. What a kernel change buys shows here within a few percent on a
// machine whose end-to-end numbers drift by 20% (BENCHMARKS.md, Zen 3).
//
//   toy_tile_bench TYPE N_IN N_OUT [COLUMNS] [MIB]
//     TYPE     q8_0, q4_k, q6_k or f16 (a matrix [N_IN, N_OUT] of random values)
//     COLUMNS  input columns per product, 1-8 (1: decoding)      [1]
//     MIB      distinct copies of the matrix cycled through, at least this
//              many MiB in all, so the weights stream from memory; 0: one
//              copy, hot in cache after the first pass               [64]
//   toy_tile_bench read [MIB]
//     a plain read loop over MIB MiB (huge-page advised), without and with
//     software prefetch: what one core can stream here
//
// Prints the best of 30 passes as GB/s of weights read. The kernel set is the
// one toy would run on this CPU (TOY_PACKED_KERNELS=avx2 picks the AVX2 set on
// an AVX-512 CPU).
#include "graph/packed_kernels.h"
#include "graph/packed_matmul.h"

#include <ggml.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using namespace toy::graph;
using namespace toy::graph::packed;

[[noreturn]] void usage(const char *why) {
    std::fprintf(stderr, "toy_tile_bench: %s\nusage: toy_tile_bench q8_0|q4_k|q6_k|f16 N_IN N_OUT [COLUMNS] [MIB] | read [MIB]\n", why);
    std::exit(1);
}

int64_t number(const char *s, const char *what) {
    char *end = nullptr;
    const long long v = std::strtoll(s, &end, 10);
    if (!end || *end || v < 0) usage((std::string(what) + ": expected a number >= 0, found '" + s + "'").c_str());
    return v;
}

// A 2 MiB-aligned anonymous buffer advised into huge pages, as toy's copied
// weights are where --hugepages lets them.
struct Buffer {
    uint8_t *raw = nullptr, *p = nullptr;
    size_t bytes = 0;
    explicit Buffer(size_t n) : bytes(n + (size_t(2) << 20)) {
        void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) usage("could not map the buffer");
        raw = static_cast<uint8_t *>(m);
        p = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(raw) + (size_t(2) << 20) - 1) & ~((uintptr_t(2) << 20) - 1));
        madvise(p, n, MADV_HUGEPAGE);
    }
    ~Buffer() { munmap(raw, bytes); }
};

template <typename F>
double best_seconds(F &&pass) {
    double best = 1e30;
    for (int rep = 0; rep < 30; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        pass();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t read_loop(const uint8_t *d, size_t n, bool prefetch) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t o = 0; o + 128 <= n; o += 128) {
        if (prefetch) {
            asm volatile("prefetcht0 %0" : : "m"(d[o + kPrefetchAhead]));
            asm volatile("prefetcht0 %0" : : "m"(d[o + kPrefetchAhead + 64]));
        }
        a0 = _mm256_add_epi32(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(d + o)));
        a1 = _mm256_add_epi32(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(d + o + 32)));
        a2 = _mm256_add_epi32(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(d + o + 64)));
        a3 = _mm256_add_epi32(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(d + o + 96)));
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3));
    return static_cast<uint32_t>(_mm256_extract_epi32(s, 0));
}

int read_bench(size_t mib) {
    const size_t n = mib << 20;
    Buffer buf(n + kPrefetchAhead + 128);
    for (size_t o = 0; o < n; o += 4096) buf.p[o] = static_cast<uint8_t>(o >> 12);
    volatile uint64_t sink = 0;
    for (bool prefetch : {false, true}) {
        const double s = best_seconds([&] { sink = sink + read_loop(buf.p, n, prefetch); });
        std::printf("read %zu MiB, %s software prefetch: %.2f GB/s\n", mib, prefetch ? "with" : "without", n / s / 1e9);
    }
    return 0;
}
#else
int read_bench(size_t) { usage("the read loop is written for x86-64"); }
#endif

const KernelSet *kernel_set() {
    const std::string_view name = packed_kernels_name();
    if (name == "avx2") return avx2_kernels();
#if defined(__x86_64__)
    if (name == "avx512") return avx512_kernels(__builtin_cpu_supports("avx512bf16"));
#endif
    return nullptr;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) usage("expected a type or 'read'");
    const std::string type_name = argv[1];
    if (type_name == "read") return read_bench(argc > 2 ? (size_t)number(argv[2], "MIB") : 256);
    if (argc < 4) usage("expected TYPE N_IN N_OUT");
    const ggml_type type = type_name == "q8_0"   ? GGML_TYPE_Q8_0
                           : type_name == "q4_k" ? GGML_TYPE_Q4_K
                           : type_name == "q6_k" ? GGML_TYPE_Q6_K
                           : type_name == "f16"  ? GGML_TYPE_F16
                                                 : GGML_TYPE_COUNT;
    if (type == GGML_TYPE_COUNT) usage(("TYPE: expected q8_0, q4_k, q6_k or f16, found '" + type_name + "'").c_str());
    const int64_t n_in = number(argv[2], "N_IN"), n_out = number(argv[3], "N_OUT");
    const int columns = argc > 4 ? (int)number(argv[4], "COLUMNS") : 1;
    const size_t mib = argc > 5 ? (size_t)number(argv[5], "MIB") : 64;
    const int64_t unit = type == GGML_TYPE_F16 ? 1 : type == GGML_TYPE_Q8_0 ? kQK : kQKK;
    if (n_in <= 0 || n_in % unit || n_out <= 0 || n_out % kRows) {
        usage(("N_IN must be a multiple of " + std::to_string(unit) + " and N_OUT of " + std::to_string(kRows)).c_str());
    }
    const KernelSet *k = kernel_set();
    if (!k) usage("this CPU runs no packed kernel set");
    if (columns < 1 || columns > k->max_cols) usage(("COLUMNS: expected 1 to " + std::to_string(k->max_cols)).c_str());

    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> wf(n_in * n_out), xf(n_in);
    for (float &v : wf) v = normal(rng);
    for (float &v : xf) v = normal(rng);
    std::vector<uint8_t> rows(ggml_row_size(type, n_in) * n_out);
    ggml_quantize_chunk(type, wf.data(), rows.data(), 0, n_out, n_in, nullptr);
    const size_t one = packed_size(type, n_in, n_out);
    const size_t copies = mib == 0 ? 1 : std::max<size_t>(1, ((mib << 20) + one - 1) / one);
    Buffer w(one * copies + kPrefetchAhead);
    for (size_t c = 0; c < copies; ++c) pack_matrix(type, rows.data(), w.p + c * one, n_in, n_out, 0);

    const ggml_type form = packed_input_type(type);
    const size_t x_stride = form == GGML_TYPE_Q8_0   ? n_in / kQK * kColBlock
                            : form == GGML_TYPE_Q8_K ? n_in / kQKK * kKColBlock
                                                     : n_in * sizeof(float);
    std::vector<uint8_t> x(x_stride * columns);
    for (int c = 0; c < columns; ++c) k->prepare(form, xf.data(), n_in, x.data() + c * x_stride);
    std::vector<float> y(n_out * columns);
    const TileFn *tiles = type == GGML_TYPE_Q8_0 ? k->q8_0 : type == GGML_TYPE_Q4_K ? k->q4_k : type == GGML_TYPE_Q6_K ? k->q6_k : k->f16;
    const int64_t depth = n_in / unit;
    const size_t group = one / (n_out / kRows);
    const double s = best_seconds([&] {
        for (size_t c = 0; c < copies; ++c) {
            for (int64_t g = 0; g < n_out / kRows; ++g) {
                tiles[columns](w.p + c * one + g * group, depth, x.data(), x_stride, y.data() + g * kRows, n_out);
            }
        }
    });
    std::printf("%s set, %s [%lld, %lld] x %d column%s, %zu cop%s (%.1f MiB): %.1f us per pass, %.2f GB/s of weights\n", k->name,
                type_name.c_str(), (long long)n_in, (long long)n_out, columns, columns == 1 ? "" : "s", copies,
                copies == 1 ? "y" : "ies", one * copies / 1048576.0, s * 1e6, one * copies / s / 1e9);
    return 0;
}
