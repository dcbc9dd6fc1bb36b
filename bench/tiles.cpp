// toy_tile_bench: one core, toy's packed tiles called directly, no graph and
// no threads. What a kernel change buys shows here within a few percent on a
// machine whose end-to-end numbers drift by 20% (BENCHMARKS.md, Zen 3).
//
//   toy_tile_bench TYPE N_IN N_OUT [COLUMNS] [MIB]
//     TYPE     a type the packed kernels take, by ggml's name in any case:
//              q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs, iq3_s, iq3_xxs, iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m,
//              f16, bf16 (where the set runs it) (a matrix [N_IN, N_OUT] of random values)
//     COLUMNS  input columns per product, 1-8 (1: decoding), or a
//              multiple of 16 on the amx set (its AMX tiles)        [1]
//     MIB      distinct copies of the matrix cycled through, at least this
//              many MiB in all, so the weights stream from memory; 0: one
//              copy, hot in cache after the first pass               [64]
//
//   toy_tile_bench attn CELLS N_HEAD_KV GROUP HEAD [THREADS] [MIB] [CACHE]
//     decoding attention (one query, flash attention on a cache of CELLS
//     cells, N_HEAD_KV KV heads of HEAD values, GROUP query heads per KV
//     head), as many layers as fill MIB (0: 64 layers over one cache, hot
//     in cache), on THREADS threads [1], the cache's K and V of type CACHE
//     (K's type, or K:V; any -ctk type: f16, q8_0, q4_0, ...) [f16]: GB/s
//     of cache read.
//
// Prints the best of 30 passes as GB/s of weights read; compare with what one
// core streams, `toy bench --roofline -t 1`. The weights are advised into huge
// pages, as toy's copies are where --hugepages lets them. The kernel set is
// the one toy would run on this CPU (TOY_PACKED_KERNELS=avx2 picks the AVX2
// set on an AVX-512 CPU).
#include "core/error.h"
#include "core/memory.h"
#include "graph/flash_attention.h"
#include "graph/packed_kernels.h"
#include "graph/packed_matmul.h"
#include "quant/quantize.h"
#include "runtime/kv_cache.h"

#include <ggml-cpu.h>
#include <ggml.h>
#include <strings.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace toy::graph;
using namespace toy::graph::packed;

[[noreturn]] void usage(const char *why) {
    std::fprintf(stderr, "toy_tile_bench: %s\nusage: toy_tile_bench TYPE (q8_0, q4_k, f16, ...) N_IN N_OUT [COLUMNS] [MIB]\n"
                 "       toy_tile_bench attn CELLS N_HEAD_KV GROUP HEAD [THREADS] [MIB] [K_TYPE[:V_TYPE]]\n", why);
    std::exit(1);
}

int64_t number(const char *s, const char *what) {
    char *end = nullptr;
    const long long v = std::strtoll(s, &end, 10);
    if (!end || *end || v < 0) usage((std::string(what) + ": expected a number >= 0, found '" + s + "'").c_str());
    return v;
}

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

const KernelSet *kernel_set() {
    const std::string_view name = packed_kernels_name();
    if (name == "avx2") return avx2_kernels();
#if defined(__x86_64__)
    if (name == "avx512") return avx512_kernels(__builtin_cpu_supports("avx512bf16"));
    if (name == "amx") return amx_kernels(__builtin_cpu_supports("avx512bf16"));
#endif
    return nullptr;
}

// Decoding attention over `layers` caches of CELLS cells, every cell seen.
int attention(int argc, char **argv) {
    if (argc < 6) usage("attn: expected CELLS N_HEAD_KV GROUP HEAD");
    const int64_t cells = number(argv[2], "CELLS"), n_head_kv = number(argv[3], "N_HEAD_KV"),
                  group = number(argv[4], "GROUP"), head = number(argv[5], "HEAD");
    const int threads = argc > 6 ? (int)number(argv[6], "THREADS") : 1;
    const size_t mib = argc > 7 ? (size_t)number(argv[7], "MIB") : 256;
    const std::string_view cache = argc > 8 ? argv[8] : "f16";
    auto cache_type = [](std::string_view name) {
        try {
            return toy::parse_kv_cache_type(std::string(name), "attn: CACHE (K_TYPE or K_TYPE:V_TYPE)");
        } catch (const toy::Error &e) {
            usage(e.what());
        }
    };
    const size_t colon = cache.find(':');
    const ggml_type k_type = cache_type(cache.substr(0, colon)),
                    v_type = colon == std::string_view::npos ? k_type : cache_type(cache.substr(colon + 1));
    if (cells < 1 || n_head_kv < 1 || group < 1 || head < 16 || head % 16 || threads < 1 ||
        head % ggml_blck_size(k_type) || head % ggml_blck_size(v_type))
        usage("attn: bad shape");
    const size_t layer_bytes = n_head_kv * cells * (ggml_row_size(k_type, head) + ggml_row_size(v_type, head));
    const bool hot = mib == 0;  // every layer over the same cache
    const int64_t layers = hot ? 64 : std::max<int64_t>(1, (int64_t)(((mib << 20) + layer_bytes - 1) / layer_bytes));
    const int64_t caches = hot ? 1 : layers;
    ggml_init_params params{caches * (layer_bytes + 64 * 1024) + layers * 64 * 1024 + (64 << 20), nullptr, false};
    ggml_context *ctx = ggml_init(params);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, head, 1, n_head_kv * group);
    for (int64_t i = 0; i < ggml_nelements(q); ++i) static_cast<float *>(q->data)[i] = normal(rng);
    ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, cells, 1);
    for (int64_t i = 0; i < cells; ++i) static_cast<ggml_fp16_t *>(mask->data)[i] = ggml_fp32_to_fp16(0.0f);
    ggml_cgraph *graph = ggml_new_graph_custom(ctx, 16 * layers + 64, false);
    ggml_tensor *kv[2];
    for (int64_t l = 0; l < layers; ++l) {
        for (int i = 0; i < 2 && l < caches; ++i) {  // hot: every layer reads the first layer's K and V
            const ggml_type type = i == 0 ? k_type : v_type;
            kv[i] = ggml_new_tensor_3d(ctx, type, head, cells, n_head_kv);  // as KvCache lays it out
            std::vector<float> values(ggml_nelements(kv[i]));
            for (float &x : values) x = normal(rng);
            ggml_quantize_chunk(type, values.data(), kv[i]->data, 0, cells * n_head_kv, head, nullptr);
        }
        if (!host_flash_attn_applies(q, kv[0], kv[1], mask, 0.0f)) usage("attn: toy's kernel does not take this shape on this CPU");
        ggml_build_forward_expand(graph, host_flash_attn(ctx, q, kv[0], kv[1], mask, 1.0f / std::sqrt((float)head)));
    }
    const double s = best_seconds([&] { ggml_graph_compute_with_ctx(ctx, graph, threads); });
    std::printf("attention, %lld cells x %lld KV heads x %lld dims (K %s, V %s), %lld query heads, %lld layers (%.1f MiB), %d thread%s: "
                "%.1f us per layer, %.2f GB/s of cache\n",
                (long long)cells, (long long)n_head_kv, (long long)head, ggml_type_name(k_type), ggml_type_name(v_type), (long long)(n_head_kv * group), (long long)layers,
                layer_bytes * caches / 1048576.0, threads, threads == 1 ? "" : "s", s / layers * 1e6,
                layer_bytes * layers / s / 1e9);
    ggml_free(ctx);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc > 1 && std::string_view(argv[1]) == "attn") return attention(argc, argv);
    if (argc < 4) usage("expected TYPE N_IN N_OUT");
    const std::string type_name = argv[1];
    const KernelSet *k = kernel_set();
    if (!k) usage("this CPU runs no packed kernel set");
    ggml_type type = GGML_TYPE_COUNT;
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char *name = ggml_type_name(static_cast<ggml_type>(t));
        if (name && strcasecmp(name, type_name.c_str()) == 0 && tiles_for(*k, static_cast<ggml_type>(t))) {
            type = static_cast<ggml_type>(t);
        }
    }
    if (type == GGML_TYPE_COUNT) usage(("TYPE: expected a type the " + std::string(k->name) + " set takes (q8_0, q4_k, f16, ...), found '" + type_name + "'").c_str());
    const int64_t n_in = number(argv[2], "N_IN"), n_out = number(argv[3], "N_OUT");
    const int columns = argc > 4 ? (int)number(argv[4], "COLUMNS") : 1;
    const size_t mib = argc > 5 ? (size_t)number(argv[5], "MIB") : 64;
    const int64_t unit = type == GGML_TYPE_F16 ? 1 : type == GGML_TYPE_BF16 ? 2 : ggml_blck_size(type) == kQK ? kQK : kQKK;
    if (n_in <= 0 || n_in % unit || n_out <= 0 || n_out % kRows) {
        usage(("N_IN must be a multiple of " + std::to_string(unit) + " and N_OUT of " + std::to_string(kRows)).c_str());
    }
    // the set's wide tiles (AMX) for their column count
    const WideTileFn wide = k->wide && columns > 0 && columns % k->wide->cols == 0 ? wide_tiles_for(*k->wide, type) : nullptr;
    if (!wide && (columns < 1 || columns > k->max_cols)) {
        usage(("COLUMNS: expected 1 to " + std::to_string(k->max_cols) +
               (k->wide ? " (or a multiple of " + std::to_string(k->wide->cols) + ")" : "")).c_str());
    }

    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> wf(n_in * n_out), xf(n_in);
    for (float &v : wf) v = normal(rng);
    for (float &v : xf) v = normal(rng);
    std::vector<uint8_t> rows(ggml_row_size(type, n_in) * n_out);
    toy::quant::quantize_rows(type, wf.data(), rows.data(), n_out, n_in);
    const size_t one = packed_size(type, n_in, n_out);
    const size_t copies = mib == 0 ? 1 : std::max<size_t>(1, ((mib << 20) + one - 1) / one);
    // untouched until packed into (the advice comes first), with room for the
    // last prefetches past the end
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t bytes = (one * copies + prefetch_reach() + kHuge - 1) / kHuge * kHuge;
    std::unique_ptr<uint8_t, decltype(&std::free)> w(static_cast<uint8_t *>(std::aligned_alloc(kHuge, bytes)), &std::free);
    if (!w) usage("could not allocate the weights");
    toy::advise_whole_blocks(w.get(), bytes, kHuge, MADV_HUGEPAGE);
    for (size_t c = 0; c < copies; ++c) pack_matrix(type, rows.data(), w.get() + c * one, n_in, n_out, 0);

    const ggml_type form = packed_input_type(type);
    const size_t x_stride = form == GGML_TYPE_Q8_0 || form == GGML_TYPE_Q8_1 ? n_in / kQK * kColBlock
                            : form == GGML_TYPE_Q8_K ? n_in / kQKK * kKColBlock
                            : form == GGML_TYPE_BF16 ? n_in * sizeof(uint16_t)
                                                     : n_in * sizeof(float);
    std::vector<uint8_t> x(x_stride * columns);
    for (int c = 0; c < columns; ++c) k->prepare(form, xf.data(), n_in, x.data() + c * x_stride);
    std::vector<float> y(n_out * columns);
    // streamed weights through the tiles that prefetch; hot ones (MIB 0) through those that do not
    const Tiles &type_tiles = *tiles_for(*k, type);
    const TileFn *tiles = mib > 0 ? type_tiles.stream : type_tiles.reuse;
    const int64_t depth = n_in / unit;
    const size_t group = one / (n_out / kRows);
    TileState saved;
    if (wide) k->wide->enter(&saved);
    const double s = best_seconds([&] {
        for (size_t c = 0; c < copies; ++c) {
            if (wide) {
                wide(w.get() + c * one, group, n_out / kRows, depth, x.data(), x_stride, columns, y.data(), n_out);
                continue;
            }
            for (int64_t g = 0; g < n_out / kRows; ++g) {
                tiles[columns](w.get() + c * one + g * group, depth, x.data(), x_stride, y.data() + g * kRows, n_out);
            }
        }
    });
    if (wide) k->wide->leave(&saved);
    std::printf("%s set%s, %s [%lld, %lld] x %d column%s, %zu cop%s (%.1f MiB): %.1f us per pass, %.2f GB/s of weights, "
                "%.1f GMAC/s\n", k->name, wide ? " (wide tiles)" : "", type_name.c_str(), (long long)n_in, (long long)n_out,
                columns, columns == 1 ? "" : "s", copies, copies == 1 ? "y" : "ies", one * copies / 1048576.0, s * 1e6,
                one * copies / s / 1e9, (double)n_in * n_out * columns * copies / s / 1e9);
    return 0;
}
