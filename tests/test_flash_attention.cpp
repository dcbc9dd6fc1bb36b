// toy's flash attention for prompts (graph/flash_attention.h) against the
// exact attention, in double, over the same values (every cache type
// llama.cpp offers, K and V of one type or of two): head sizes 16
// to 256, grouped query heads, KV lengths that are not a multiple of its
// tiles, query counts that are not a multiple of its units, causal,
// two-sequence and fully masked rows, strided views as the KV cache gives
// them; prompts (16 queries or more, K converted into tiles first) and
// decoding (fewer, the cache read as it is in runs of cells, merged at the
// end); with the AVX-512 set (16-cell tiles, 16-query units) and the AVX2 set
// (8 and 8).
#include "graph/flash_attention.h"
#include "kernel_set_scope.h"

#include <fmt/format.h>
#include <ggml-cpu.h>
#include <ggml.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace toy;

namespace {

struct Case {
    int64_t head_dim, head_dim_v, n_head, n_head_kv, n_q, n_kv;
    ggml_type k_type;  // and V's, unless v_type
    int64_t tail = 0;    // cells at the end no query sees (a cache attended past its newest token, as decoding pads it)
    int64_t window = 0;  // > 0: each query sees only its last `window` positions (a sliding window)
    ggml_type v_type = GGML_TYPE_COUNT;  // V's type where it is not K's
    float softcap = 0.0f;                // > 0: scores softcap * tanh(score / softcap) (Gemma 2)
};

// Query q as ggml's CPU attention multiplies it with a K of type k_type:
// converted to the type K's dot product takes (BF16, Q8_0, Q8_1) and back;
// as it is for F32 and F16 K (toy's kernel keeps an F16 K's query exact).
std::vector<float> query_seen(ggml_type k_type, const float *q, int64_t n) {
    const ggml_type t = ggml_get_type_traits_cpu(k_type)->vec_dot_type;
    std::vector<float> out(q, q + n);
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16) return out;
    std::vector<char> row(ggml_row_size(t, n));
    ggml_get_type_traits_cpu(t)->from_float(q, row.data(), n);
    if (t != GGML_TYPE_Q8_1) {
        ggml_get_type_traits(t)->to_float(row.data(), out.data(), n);
        return out;
    }
    for (int64_t i = 0; i < n; ++i) {  // a Q8_1 block: d, s (F16), 32 int8
        const char *block = row.data() + i / 32 * 36;
        out[i] = ggml_fp16_to_fp32(*reinterpret_cast<const ggml_fp16_t *>(block)) * static_cast<int8_t>(block[4 + i % 32]);
    }
    return out;
}

// The mask row of query i over the cells: the queries are the last n_q
// positions before the case's hidden tail; queries of the first third see
// everything before them (causal), the rest only the cells from the middle
// of the cells before the tail on (a second sequence); query 5 sees nothing.
bool visible(const Case &c, int64_t i, int64_t j) {
    const int64_t pos = c.n_kv - c.tail - c.n_q + i;
    if (i == 5) return false;
    if (j > pos || (c.window > 0 && j <= pos - c.window)) return false;
    return i < c.n_q / 3 || j >= (c.n_kv - c.tail) / 2;
}

}  // namespace

class FlashAttentionWith : public ::testing::TestWithParam<std::string> {};

TEST_P(FlashAttentionWith, PromptKernelEqualsExactAttention) {
    KernelSetScope scope(GetParam());
    if (!scope.ok()) GTEST_SKIP() << "this CPU does not run the " << GetParam() << " kernels";
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const std::vector<Case> cases = {
        {64, 64, 9, 3, 48, 256, GGML_TYPE_F16},    // SmolLM2's heads, a 256-cell cache
        {64, 64, 9, 3, 37, 53, GGML_TYPE_F16},     // partial tiles and units
        {128, 128, 4, 1, 16, 16, GGML_TYPE_F32},   // one tile, one unit, F32 cache
        {16, 32, 2, 2, 100, 120, GGML_TYPE_F16},   // small K heads, V head larger (16-wide tail)
        {256, 256, 2, 1, 20, 40, GGML_TYPE_F16},   // the largest heads
        {32, 80, 6, 2, 33, 70, GGML_TYPE_F32},     // 64 + 16 values of V
        // decoding (fewer than 16 queries): the cache read as it is
        {64, 64, 9, 3, 1, 256, GGML_TYPE_F16},
        {64, 64, 9, 3, 3, 53, GGML_TYPE_F32},
        {128, 128, 4, 1, 15, 40, GGML_TYPE_F16},
        {32, 80, 6, 2, 7, 9, GGML_TYPE_F16},       // fewer cells than a tile
        // decoding a longer cache: several runs of cells, merged
        {64, 64, 9, 3, 1, 700, GGML_TYPE_F16},
        {128, 128, 8, 2, 4, 1030, GGML_TYPE_F32},
        {32, 80, 6, 2, 7, 1100, GGML_TYPE_F16},    // whole runs hidden from some queries, one query sees nothing
        // decoding a cache whose last cells no query sees yet (the runs split the cells seen), and a sliding window
        {64, 64, 9, 3, 1, 256, GGML_TYPE_F16, 192},
        {64, 64, 14, 2, 3, 1024, GGML_TYPE_F16, 300, 100},
        {128, 128, 8, 2, 1, 512, GGML_TYPE_F32, 0, 40},
        // decoding groups of every size a pass takes (AVX-512: up to 8 heads, AVX2: 4) and more
        {64, 64, 4, 4, 2, 300, GGML_TYPE_F16},     // 1 (no GQA)
        {96, 96, 4, 2, 1, 200, GGML_TYPE_F16},     // 2
        {64, 64, 10, 2, 3, 150, GGML_TYPE_F32},    // 5
        {32, 48, 6, 1, 1, 90, GGML_TYPE_F16},      // 6
        {64, 64, 16, 2, 2, 260, GGML_TYPE_F16},    // 8
        {128, 128, 12, 1, 5, 333, GGML_TYPE_F16, 20},  // 12: a pass of 8, one of 4
        // a Q8_0 cache (heads of whole blocks of 32), prompts and decoding
        {64, 64, 9, 3, 40, 300, GGML_TYPE_Q8_0},
        {128, 64, 8, 2, 17, 100, GGML_TYPE_Q8_0, 0, 30},
        {64, 64, 9, 3, 1, 700, GGML_TYPE_Q8_0},
        {32, 96, 14, 2, 3, 1030, GGML_TYPE_Q8_0, 100},
        {64, 64, 12, 12, 2, 90, GGML_TYPE_Q8_0, 0, 50},
        // the other types llama.cpp caches in (32-value blocks of nibbles, of nibbles and fifth bits, of
        // table indices; bfloat16), and K and V of different types
        {64, 64, 9, 3, 40, 300, GGML_TYPE_BF16},
        {64, 64, 9, 3, 1, 700, GGML_TYPE_BF16},
        {64, 64, 9, 3, 40, 300, GGML_TYPE_Q4_0},
        {128, 128, 8, 2, 1, 700, GGML_TYPE_Q4_0},
        {64, 64, 14, 2, 3, 1030, GGML_TYPE_Q4_1, 100},
        {32, 96, 6, 2, 20, 70, GGML_TYPE_Q4_1},
        {128, 64, 8, 2, 17, 100, GGML_TYPE_Q5_0, 0, 30},
        {64, 64, 9, 3, 1, 500, GGML_TYPE_Q5_0},
        {32, 96, 6, 2, 2, 260, GGML_TYPE_Q5_1},
        {64, 64, 4, 4, 16, 64, GGML_TYPE_Q5_1},
        {64, 64, 12, 12, 2, 90, GGML_TYPE_IQ4_NL, 0, 50},
        {64, 64, 9, 3, 20, 200, GGML_TYPE_IQ4_NL},
        {64, 64, 9, 3, 1, 700, GGML_TYPE_Q8_0, 0, 0, GGML_TYPE_F16},
        {64, 64, 9, 3, 40, 300, GGML_TYPE_F16, 0, 0, GGML_TYPE_Q4_0},
        {128, 128, 4, 1, 2, 333, GGML_TYPE_Q5_1, 20, 0, GGML_TYPE_BF16},
        {64, 64, 16, 2, 1, 260, GGML_TYPE_IQ4_NL, 0, 0, GGML_TYPE_Q8_0},
        {96, 32, 6, 2, 3, 150, GGML_TYPE_F32, 0, 0, GGML_TYPE_Q5_0},
        // a logit softcap: Gemma 2's heads and cap (prompts, decoding, its sliding window), and a cap
        // small enough that most scores saturate
        {256, 256, 8, 4, 20, 90, GGML_TYPE_F16, 0, 0, GGML_TYPE_COUNT, 50.0f},
        {256, 256, 8, 4, 1, 600, GGML_TYPE_F16, 0, 0, GGML_TYPE_COUNT, 50.0f},
        {256, 256, 8, 4, 2, 700, GGML_TYPE_Q8_0, 0, 64, GGML_TYPE_COUNT, 50.0f},
        {64, 64, 9, 3, 40, 300, GGML_TYPE_F16, 0, 0, GGML_TYPE_COUNT, 0.5f},
        {64, 64, 9, 3, 3, 300, GGML_TYPE_F32, 0, 0, GGML_TYPE_COUNT, 0.5f},
    };
    for (const Case &c : cases) {
        const ggml_type k_type = c.k_type, v_type = c.v_type == GGML_TYPE_COUNT ? c.k_type : c.v_type;
        SCOPED_TRACE(fmt::format("head {}/{} heads {}/{} queries {} cells {} K {} V {} softcap {}", c.head_dim, c.head_dim_v,
                                 c.n_head, c.n_head_kv, c.n_q, c.n_kv, ggml_type_name(k_type), ggml_type_name(v_type), c.softcap));
        const int64_t mask_rows = GGML_PAD(c.n_q, 64);
        ggml_init_params ip{(size_t)(c.head_dim * c.n_head * c.n_q * 4 +
                                     2 * (c.head_dim + c.head_dim_v) * c.n_head_kv * (c.n_kv + 8) * 4 +
                                     c.n_kv * mask_rows * 2 + c.head_dim_v * c.n_head * c.n_q * 8) +
                                (c.head_dim + c.head_dim_v) * c.n_head_kv * c.n_kv * 16 * 2 + 64 * ggml_tensor_overhead() +
                                ggml_graph_overhead() + (1 << 20),
                            nullptr, false};
        ggml_context *ctx = ggml_init(ip);
        // as the cache holds them: [head_dim * n_head_kv] per cell, 8 cells more than attended
        ggml_tensor *kc = ggml_new_tensor_2d(ctx, k_type, c.head_dim * c.n_head_kv, c.n_kv + 8);
        ggml_tensor *vc = ggml_new_tensor_2d(ctx, v_type, c.head_dim_v * c.n_head_kv, c.n_kv + 8);
        std::vector<float> kf(ggml_nelements(kc)), vf(ggml_nelements(vc));
        for (float &x : kf) x = g(rng);
        for (float &x : vf) x = g(rng);
        for (auto [t, f] : {std::pair{kc, &kf}, std::pair{vc, &vf}}) {
            if (t->type == GGML_TYPE_F32) {
                std::copy(f->begin(), f->end(), static_cast<float *>(t->data));
            } else {  // converted, then the values it holds
                ggml_quantize_chunk(t->type, f->data(), t->data, 0, t->ne[1], t->ne[0], nullptr);
                ggml_get_type_traits(t->type)->to_float(t->data, f->data(), (int64_t)f->size());
            }
        }
        auto view = [&](ggml_tensor *cache, int64_t d) {  // [d, n_kv, n_head_kv], strided
            ggml_tensor *v3 = ggml_view_3d(ctx, cache, d, c.n_head_kv, c.n_kv, ggml_row_size(cache->type, d), cache->nb[1], 0);
            return ggml_permute(ctx, v3, 0, 2, 1, 3);
        };
        ggml_tensor *k = view(kc, c.head_dim), *v = view(vc, c.head_dim_v);
        ggml_tensor *q3 = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c.head_dim, c.n_head, c.n_q);
        for (int64_t i = 0; i < ggml_nelements(q3); ++i) static_cast<float *>(q3->data)[i] = g(rng);
        ggml_tensor *q = ggml_permute(ctx, q3, 0, 2, 1, 3);  // [head_dim, n_q, n_head]
        ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, c.n_kv, mask_rows);
        for (int64_t i = 0; i < mask_rows; ++i)
            for (int64_t j = 0; j < c.n_kv; ++j) {
                static_cast<ggml_fp16_t *>(mask->data)[i * c.n_kv + j] =
                    ggml_fp32_to_fp16(i < c.n_q && visible(c, i, j) ? 0.0f : -INFINITY);
            }
        const float scale = 1.0f / std::sqrt((float)c.head_dim);
        ASSERT_TRUE(graph::host_flash_attn_applies(q, k, v, mask, c.softcap));
        ggml_tensor *out = graph::host_flash_attn(ctx, q, k, v, mask, scale, c.softcap);
        ASSERT_EQ(out->ne[0], c.head_dim_v);
        ASSERT_EQ(out->ne[1], c.n_head);
        ASSERT_EQ(out->ne[2], c.n_q);
        ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        ggml_graph_compute_with_ctx(ctx, gf, 2);

        double worst = 0;
        const int64_t group = c.n_head / c.n_head_kv;
        for (int64_t h = 0; h < c.n_head; ++h) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < c.n_q; ++i) {
                const float *qi = static_cast<const float *>(q3->data) + (i * c.n_head + h) * c.head_dim;
                // the query as ggml's attention sees it (llama.cpp's scores, not the exact ones)
                const std::vector<float> q_seen = query_seen(k_type, qi, c.head_dim);
                qi = q_seen.data();
                std::vector<double> s(c.n_kv, -INFINITY);
                double top = -INFINITY;
                for (int64_t j = 0; j < c.n_kv; ++j) {
                    if (!visible(c, i, j)) continue;
                    const float *kj = kf.data() + j * c.head_dim * c.n_head_kv + hk * c.head_dim;
                    double dot = 0;
                    for (int64_t d = 0; d < c.head_dim; ++d) dot += (double)qi[d] * kj[d];
                    s[j] = c.softcap > 0 ? c.softcap * std::tanh(dot * scale / c.softcap) : dot * scale;
                    top = std::max(top, s[j]);
                }
                double sum = 0;
                for (double &x : s) sum += x = std::isinf(x) ? 0.0 : std::exp(x - top);
                const float *oi = static_cast<const float *>(out->data) + (i * c.n_head + h) * c.head_dim_v;
                for (int64_t d = 0; d < c.head_dim_v; ++d) {
                    double want = 0;
                    for (int64_t j = 0; j < c.n_kv; ++j) want += s[j] * vf[j * c.head_dim_v * c.n_head_kv + hk * c.head_dim_v + d];
                    want = sum > 0 ? want / sum : 0.0;  // a row that sees nothing: 0, as ggml gives
                    worst = std::max(worst, std::fabs(oi[d] - want));
                }
            }
        }
        EXPECT_LE(worst, 2e-5);
        ggml_free(ctx);
    }
}

INSTANTIATE_TEST_SUITE_P(Sets, FlashAttentionWith, ::testing::Values("avx512", "avx2"));

TEST(FlashAttention, PromptKernelLeavesTheRestToGgml) {
    ggml_init_params ip{128 * ggml_tensor_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    auto q = [&](int64_t d, int64_t n_q) { return ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, n_q, 4); };
    auto kv = [&](ggml_type t, int64_t d) { return ggml_new_tensor_3d(ctx, t, d, 64, 2); };
    ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, 64, 64);
    ggml_tensor *k = kv(GGML_TYPE_F16, 64), *v = kv(GGML_TYPE_F16, 64);
    if (!graph::host_flash_attn_applies(q(64, 32), k, v, mask, 0.0f)) {
        ggml_free(ctx);
        GTEST_SKIP() << "this CPU runs neither of toy's kernel sets";
    }
    EXPECT_TRUE(graph::host_flash_attn_applies(q(64, 1), k, v, mask, 0.0f));     // decoding too
    EXPECT_TRUE(graph::host_flash_attn_applies(q(64, 32), k, v, mask, 50.0f));  // a logit softcap (Gemma 2)
    for (float cap : {-1.0f, INFINITY, NAN}) EXPECT_FALSE(graph::host_flash_attn_applies(q(64, 32), k, v, mask, cap)) << cap;
    EXPECT_FALSE(graph::host_flash_attn_applies(q(64, 32), k, v, nullptr, 0.0f));
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                        GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL}) {  // every cache type, K and V of one type or two
        SCOPED_TRACE(ggml_type_name(t));
        EXPECT_TRUE(graph::host_flash_attn_applies(q(64, 32), kv(t, 64), kv(t, 64), mask, 0.0f));
        EXPECT_TRUE(graph::host_flash_attn_applies(q(64, 1), kv(t, 64), kv(GGML_TYPE_F16, 64), mask, 0.0f));
        EXPECT_TRUE(graph::host_flash_attn_applies(q(64, 1), kv(GGML_TYPE_F16, 64), kv(t, 64), mask, 0.0f));
    }
    // a blocked type whose head is not whole blocks of 32; a type no cache holds
    EXPECT_FALSE(graph::host_flash_attn_applies(q(48, 32), kv(GGML_TYPE_Q4_0, 48), kv(GGML_TYPE_F16, 48), mask, 0.0f));
    EXPECT_FALSE(graph::host_flash_attn_applies(q(48, 32), kv(GGML_TYPE_F16, 48), kv(GGML_TYPE_Q5_1, 48), mask, 0.0f));
    EXPECT_FALSE(graph::host_flash_attn_applies(q(256, 1), kv(GGML_TYPE_Q4_K, 256), kv(GGML_TYPE_F16, 256), mask, 0.0f));
    EXPECT_FALSE(graph::host_flash_attn_applies(q(72, 32), kv(GGML_TYPE_F16, 72), kv(GGML_TYPE_F16, 72), mask, 0.0f));
    ggml_free(ctx);
}
