// toy's packed Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, F16, Q2_K ... Q6_K, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M and BF16 kernels against ggml's own matmul: the
// same products up to float summation order, for every column count the kernel tiles
// differently (1-8 per pass, 16 at a time on the amx set, partial passes, several
// 64-column panels) and for inputs that are views with strides.
#include "graph/packed_kernels.h"
#include "graph/packed_matmul.h"
#include "quant/quantize.h"
#include "kernel_set_scope.h"

#include <fmt/format.h>
#include <ggml-cpu.h>
#include <ggml.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace toy;

namespace {

struct Case {
    int64_t n_in, n_out, cols;
    bool strided;  // x a view of every other column of a wider tensor
};

}  // namespace

class PackedMatmulOf : public ::testing::TestWithParam<std::tuple<ggml_type, std::string>> {};

TEST_P(PackedMatmulOf, EqualsGgmlsMatmulForEveryTiling) {
    const auto &[type, set] = GetParam();
    KernelSetScope scope(set);
    if (!scope.ok()) GTEST_SKIP() << "this CPU does not run the " << set << " kernels";
    const int64_t shape[2] = {256, 16};
    // (both sets pack F16; the AVX2 set runs packed BF16 but does not pack
    // it at load; the AVX-512 set packs BF16 where the CPU has AVX512_BF16)
    const bool packs = graph::packed_matmul_supports(type, shape, 2);
    if (type == GGML_TYPE_BF16 && set != "avx2" && !packs) GTEST_SKIP() << "this CPU has no AVX512_BF16";
    ASSERT_TRUE(packs || (type == GGML_TYPE_BF16 && set == "avx2"));
    if (type == GGML_TYPE_BF16 && set == "avx2") {
        // its tiles run what the AVX-512 set packed: only where that packs BF16
        KernelSetScope native("avx512");
        if (!native.ok() || !graph::packed_matmul_supports(type, shape, 2)) GTEST_SKIP() << "no packed BF16 on this CPU";
    }
    // the amx set has AMX tiles for every type's prompts (F16's and BF16's with AMX-BF16, which every AMX CPU has)
    if (set == "amx") {
        EXPECT_TRUE(graph::packed_wide_tiles(type));
    }
    std::mt19937 rng(11);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (const Case &k : std::vector<Case>{{32, 16, 1, false},
                                           {33, 16, 3, false},  // F16 only: an odd input count
                                           {64, 16, 2, false},
                                           {96, 48, 3, false},
                                           {576, 64, 7, false},
                                           {576, 64, 8, false},
                                           {576, 64, 9, false},
                                           {128, 32, 17, true},
                                           {256, 80, 64, false},
                                           {256, 80, 70, false},
                                           {64, 32, 130, true},
                                           {1536, 16, 5, false},
                                           {512, 32, 1, false},
                                           {512, 32, 2, false},
                                           {768, 48, 8, false},
                                           {512, 16, 11, false},
                                           {256, 32, 130, true},
                                           {34, 16, 3, false},  // F16, BF16: an odd number of input pairs
                                           // the amx set's wide tiles (16 columns, 8 groups a pass):
                                           // one block, an odd count, more groups than a pass
                                           {32, 160, 16, false},
                                           {96, 160, 33, true},
                                           {1024, 144, 48, false},
                                           {100, 160, 32, false}}) {  // F16, BF16: 50 pairs, a tile's 16 and a tail of 2
        const int64_t block = type == GGML_TYPE_BF16 ? 2 : ggml_blck_size(type);  // BF16 packs pairs of inputs
        if (k.n_in % block != 0) continue;
        SCOPED_TRACE(fmt::format("n_in {} n_out {} columns {}{}", k.n_in, k.n_out, k.cols, k.strided ? " strided" : ""));
        const int64_t wide = k.strided ? 2 * k.cols : k.cols;
        ggml_init_params ip{(size_t)(k.n_in * k.n_out * 4 + k.n_in * wide * 8 + k.n_out * k.cols * 16) +
                                32 * ggml_tensor_overhead() + ggml_graph_overhead() + 65536,
                            nullptr, false};
        ggml_context *ctx = ggml_init(ip);
        ggml_tensor *w = ggml_new_tensor_2d(ctx, type, k.n_in, k.n_out);
        // the packed layout may be larger than the type's rows (Q4_K): its own bytes
        std::vector<uint8_t> packed_bytes(graph::packed_size(type, k.n_in, k.n_out));
        ggml_tensor *packed = ggml_new_tensor_2d(ctx, type, k.n_in, k.n_out);
        packed->data = packed_bytes.data();
        std::vector<float> wf(k.n_in * k.n_out);
        // rows of very different sizes, a zero block, a block with one large value
        for (int64_t r = 0; r < k.n_out; ++r) {
            for (int64_t i = 0; i < k.n_in; ++i) wf[r * k.n_in + i] = g(rng) * std::exp2f((float)(r % 7) - 3.0f);
        }
        for (int64_t i = 0; i < 32; ++i) wf[i] = 0.0f;
        wf[k.n_in + 3] = 1000.0f;
        // a row of largest quants (with its minimum at 0), against a column of
        // largest inputs below: the integer sums at their bounds
        if (k.n_out > 2) {
            for (int64_t i = 0; i < k.n_in; ++i) wf[2 * k.n_in + i] = i % 32 == 0 ? 0.0f : 1.0f;
        }
        if (type == GGML_TYPE_F16) {
            ggml_fp32_to_fp16_row(wf.data(), static_cast<ggml_fp16_t *>(w->data), (int64_t)wf.size());
        } else if (type == GGML_TYPE_BF16) {
            ggml_fp32_to_bf16_row_ref(wf.data(), static_cast<ggml_bf16_t *>(w->data), (int64_t)wf.size());
        } else {
            quant::quantize_rows(type, wf.data(), w->data, k.n_out, k.n_in);
        }
        graph::pack_matrix(type, w->data, packed->data, k.n_in, k.n_out, 2);

        ggml_tensor *xs = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k.n_in, wide);
        for (int64_t i = 0; i < ggml_nelements(xs); ++i) ((float *)xs->data)[i] = g(rng);
        for (int64_t i = 0; i < 32; ++i) ((float *)xs->data)[i] = 0.0f;  // an all-zero input block
        if (ggml_nelements(xs) >= 2 * k.n_in) {
            for (int64_t i = 0; i < k.n_in; ++i) ((float *)xs->data)[k.n_in + i] = i % 2 ? 1.0f : 0.999f;
        }
        ggml_tensor *x = k.strided ? ggml_view_2d(ctx, xs, k.n_in, k.cols, 2 * xs->nb[1], 0) : xs;

        ggml_tensor *ours = graph::packed_mul_mat(ctx, packed, x);
        ggml_tensor *ref = ggml_mul_mat(ctx, w, x);
        ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, ours);
        ggml_build_forward_expand(gf, ref);
        ggml_graph_compute_with_ctx(ctx, gf, 2);

        ASSERT_EQ(ours->ne[0], k.n_out);
        ASSERT_EQ(ours->ne[1], k.cols);
        // F16 (BF16): the exact sum of the products of the fp16 (bf16) weights
        // and the inputs rounded the same way, in double (ggml's F16 paths for
        // many columns round differently, so each is held to the exact value)
        std::vector<float> wd(wf.size());
        ggml_get_type_traits(type)->to_float(w->data, wd.data(), (int64_t)wd.size());
        auto exact = [&](int64_t r, int64_t c, double *mag) {
            const float *xc = (const float *)((const char *)x->data + c * x->nb[1]);
            double sum = 0;
            *mag = 0;
            for (int64_t i = 0; i < k.n_in; ++i) {
                const double xi = type == GGML_TYPE_BF16 ? ggml_bf16_to_fp32(ggml_fp32_to_bf16(xc[i]))
                                                         : ggml_fp16_to_fp32(ggml_fp32_to_fp16(xc[i]));
                sum += (double)wd[r * k.n_in + i] * xi;
                *mag += std::fabs((double)wd[r * k.n_in + i] * xi);
            }
            return sum;
        };
        // sum w x (and sum |w x|) with x as ggml quantizes it for the K-quants
        auto exact_q8_k = [&](int64_t r, int64_t c, double *mag) {
            const float *xc = (const float *)((const char *)x->data + c * x->nb[1]);
            std::vector<uint8_t> q(ggml_row_size(GGML_TYPE_Q8_K, k.n_in));
            std::vector<float> xd(k.n_in);
            ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(xc, q.data(), k.n_in);
            const size_t block = ggml_type_size(GGML_TYPE_Q8_K);  // float d, int8 qs[256], int16 sums
            for (int64_t i = 0; i < k.n_in; ++i) {
                float d;
                std::memcpy(&d, q.data() + i / 256 * block, sizeof d);
                xd[i] = d * (float)(int8_t)q[i / 256 * block + 4 + i % 256];
            }
            double sum = 0;
            *mag = 0;
            for (int64_t i = 0; i < k.n_in; ++i) {
                sum += (double)wd[r * k.n_in + i] * xd[i];
                *mag += std::fabs((double)wd[r * k.n_in + i] * xd[i]);
            }
            return sum;
        };
        double worst = 0.0;
        for (int64_t c = 0; c < k.cols; ++c) {
            for (int64_t r = 0; r < k.n_out; ++r) {
                const float a = ((float *)ours->data)[c * k.n_out + r];
                const float b = ((float *)((char *)ref->data + c * ref->nb[1]))[r];
                if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1) {
                    // both take the same exact block products and the same minimum x the Q8_1
                    // input's fp16 scaled sum, only in another order; the two terms of a block,
                    // d q . x and m sum(x), may cancel, so the bound is on their magnitudes
                    const float *xc = (const float *)((const char *)x->data + c * x->nb[1]);
                    double mag = 0;
                    for (int64_t i = 0; i < k.n_in; ++i) {
                        ggml_fp16_t m16;  // block_q4_1, block_q5_1: fp16 d, fp16 m, ...
                        std::memcpy(&m16, (const uint8_t *)w->data + (r * k.n_in + i) / 32 * ggml_type_size(type) + 2, sizeof m16);
                        const double m = ggml_fp16_to_fp32(m16);
                        mag += (std::fabs(wd[r * k.n_in + i] - m) + std::fabs(m)) * std::fabs(xc[i]);
                    }
                    const double tol = 1e-5 * (1.0 + mag);
                    worst = std::max(worst, std::fabs(a - b) / tol);
                    ASSERT_NEAR(a, b, tol) << "row " << r << " column " << c;
                } else if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_IQ4_NL) {
                    // both sum the same exact block products (Q4_0, Q5_0: q x - 8 or 16 sum(x) for
                    // ggml's (q - 8 or 16) x, against the same Q8_0 input; IQ4_NL: its table's values);
                    // only the order of the float sums differs
                    const double tol = 1e-5 * (1.0 + std::fabs(b)) * std::sqrt((double)k.n_in / 32);
                    worst = std::max(worst, std::fabs(a - b) / tol);
                    ASSERT_NEAR(a, b, tol) << "row " << r << " column " << c;
                } else if (type != GGML_TYPE_F16 && type != GGML_TYPE_BF16) {
                    // the K-quants and the X4 types: the exact sum of the products with the input as
                    // ggml quantizes it (Q8_K). ggml converts partial integer sums to
                    // float and adds them, where they may cancel (Q2_K's and Q4_K's scale
                    // and min terms, Q6_K's offset 32), so it is held to a looser bound.
                    double mag = 0;
                    const double e = exact_q8_k(r, c, &mag);
                    const double tol = 1e-5 * (1.0 + mag);
                    worst = std::max(worst, std::fabs(a - e) / tol);
                    ASSERT_NEAR(a, e, tol) << "row " << r << " column " << c;
                    ASSERT_NEAR(b, e, 100 * tol) << "ggml, row " << r << " column " << c;
                } else {
                    // float32 sums of n products in another order: about
                    // sqrt(n) roundings of the magnitude's size
                    double mag = 0;
                    const double e = exact(r, c, &mag);
                    const double tol = 1.2e-7 * std::sqrt((double)k.n_in) * mag + 1e-7;
                    worst = std::max(worst, std::fabs(a - e) / tol);
                    ASSERT_NEAR(a, e, tol) << "row " << r << " column " << c;
                    ASSERT_NEAR(b, e, 1e3 * tol) << "ggml, row " << r << " column " << c;
                }
            }
        }
        EXPECT_LE(worst, 1.0);
        ggml_free(ctx);
    }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedMatmulOf,
                         ::testing::Combine(::testing::Values(GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                                              GGML_TYPE_IQ4_NL, GGML_TYPE_F16,
                                                              GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS,
                                                              GGML_TYPE_Q3_K, GGML_TYPE_Q2_K, GGML_TYPE_IQ3_S, GGML_TYPE_IQ3_XXS,
                                                              GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ1_S,
                                                              GGML_TYPE_IQ1_M, GGML_TYPE_BF16),
                                            ::testing::Values(std::string("amx"), std::string("avx512"), std::string("avx2"))),
                         [](const auto &info) {
                             return std::string(ggml_type_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
                         });

// The inputs each set prepares for Q8_0, Q5_1 (Q8_1) and K-quant matrices are ggml's own
// quantization of them (ggml-cpu's, nearest even), bit for bit: random
// values, an all-zero block, and blocks whose scaled values fall on halves
// (ties), where rounding to nearest even and away from zero differ.
TEST(PackedMatmul, PreparedInputsAreGgmlsQuantization) {
    const int64_t n = 1024;
    std::vector<float> x(n);
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (float &v : x) v = g(rng);
    for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;  // Q8_0 block 1: zero
    for (int i = 0; i < 32; ++i) x[64 + i] = i == 0 ? 127.0f : (i % 2 ? 1 : -1) * (i + 0.5f);  // Q8_0 ties (scale 1)
    for (int i = 0; i < 256; ++i) x[256 + i] = i == 7 ? -127.0f : (i % 3 ? -1 : 1) * (i % 120 + 0.5f);  // Q8_K ties (scale -1)
    for (const std::string set : {"avx2", "avx512"}) {
        SCOPED_TRACE(set);
        KernelSetScope scope(set);
        if (!scope.ok()) continue;
        const graph::packed::KernelSet *k = set == "avx2" ? graph::packed::avx2_kernels() : graph::packed::avx512_kernels(false);
        ASSERT_NE(k, nullptr);
        // x prepared by the set (ours: our_bytes) and quantized by ggml (ref) for an input form
        std::vector<uint8_t> ours, ref;
        auto prepare_both = [&](ggml_type form, size_t our_bytes) {
            ours.assign(our_bytes, 0);
            ref.assign(ggml_row_size(form, n), 0);
            k->prepare(form, x.data(), n, ours.data());
            ggml_get_type_traits_cpu(form)->from_float(x.data(), ref.data(), n);
        };
        // Q8_0: per block 32 int8, the fp16-rounded scale as float, -128 x the quants' sum
        prepare_both(GGML_TYPE_Q8_0, n / graph::packed::kQK * graph::packed::kColBlock);
        for (int64_t b = 0; b < n / 32; ++b) {
            const uint8_t *o = ours.data() + b * graph::packed::kColBlock, *r = ref.data() + b * ggml_type_size(GGML_TYPE_Q8_0);
            ggml_fp16_t d16;
            std::memcpy(&d16, r, sizeof d16);
            float d;
            int32_t bias, sum = 0;
            std::memcpy(&d, o + 32, sizeof d);
            std::memcpy(&bias, o + 36, sizeof bias);
            for (int i = 0; i < 32; ++i) sum += (int8_t)r[2 + i];
            ASSERT_EQ(std::memcmp(o, r + 2, 32), 0) << "Q8_0 block " << b;
            ASSERT_EQ(d, ggml_fp16_to_fp32(d16)) << "Q8_0 block " << b;
            ASSERT_EQ(bias, -128 * sum) << "Q8_0 block " << b;
        }
        // Q8_1: Q8_0's quants and scale, then ggml's fp16 scaled sum (block_q8_1: fp16 d, fp16 s, int8 qs[32])
        prepare_both(GGML_TYPE_Q8_1, n / graph::packed::kQK * graph::packed::kColBlock);
        for (int64_t b = 0; b < n / 32; ++b) {
            const uint8_t *o = ours.data() + b * graph::packed::kColBlock, *r = ref.data() + b * ggml_type_size(GGML_TYPE_Q8_1);
            ggml_fp16_t d16, s16;
            std::memcpy(&d16, r, sizeof d16);
            std::memcpy(&s16, r + 2, sizeof s16);
            float d, s;
            std::memcpy(&d, o + 32, sizeof d);
            std::memcpy(&s, o + 36, sizeof s);
            ASSERT_EQ(std::memcmp(o, r + 4, 32), 0) << "Q8_1 block " << b;
            ASSERT_EQ(d, ggml_fp16_to_fp32(d16)) << "Q8_1 block " << b;
            ASSERT_EQ(s, ggml_fp16_to_fp32(s16)) << "Q8_1 block " << b;
        }
        // Q8_K: per 256 the int8 quants, their sums per 16 and per 32, the scale
        prepare_both(GGML_TYPE_Q8_K, n / graph::packed::kQKK * graph::packed::kKColBlock);
        for (int64_t b = 0; b < n / 256; ++b) {
            const uint8_t *o = ours.data() + b * graph::packed::kKColBlock, *r = ref.data() + b * ggml_type_size(GGML_TYPE_Q8_K);
            float d_ours, d_ref;  // block_q8_K: float d, int8 qs[256], int16 bsums[16]
            std::memcpy(&d_ours, o + graph::packed::kKD, sizeof d_ours);
            std::memcpy(&d_ref, r, sizeof d_ref);
            ASSERT_EQ(std::memcmp(o + graph::packed::kKQs, r + 4, 256), 0) << "Q8_K block " << b;
            ASSERT_EQ(std::memcmp(o + graph::packed::kKSum16, r + 4 + 256, 32), 0) << "Q8_K block " << b;
            ASSERT_EQ(d_ours, d_ref) << "Q8_K block " << b;
            for (int p = 0; p < 8; ++p) {
                int16_t s32, a, c;
                std::memcpy(&s32, o + graph::packed::kKSum32 + 2 * p, 2);
                std::memcpy(&a, o + graph::packed::kKSum16 + 4 * p, 2);
                std::memcpy(&c, o + graph::packed::kKSum16 + 4 * p + 2, 2);
                ASSERT_EQ(s32, a + c) << "Q8_K block " << b << " pair " << p;
            }
        }
    }
}

TEST(PackedMatmul, SupportsItsTypesInMatricesOfWholeRowGroupsAndBlocks) {
    const int64_t ok[2] = {64, 32}, odd_rows[2] = {64, 40}, stacked[3] = {64, 32, 2}, k_ok[2] = {256, 32};
    const bool here = graph::packed_matmul_supports(GGML_TYPE_Q8_0, ok, 2);
    EXPECT_FALSE(graph::packed_matmul_supports(GGML_TYPE_F32, ok, 2));
    EXPECT_FALSE(graph::packed_matmul_supports(GGML_TYPE_TQ2_0, k_ok, 2));
    EXPECT_FALSE(graph::packed_matmul_supports(GGML_TYPE_Q4_K, ok, 2));  // 64 inputs: not a whole super-block
    EXPECT_FALSE(graph::packed_matmul_supports(GGML_TYPE_Q8_0, odd_rows, 2));
    EXPECT_FALSE(graph::packed_matmul_supports(GGML_TYPE_Q8_0, stacked, 3));
    if (!here) GTEST_SKIP() << "this CPU runs none of toy's kernel sets";
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_F16, ok, 2));  // both sets pack F16
    const int64_t vocab[2] = {576, 49152};
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q8_0, vocab, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q4_K, k_ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q6_K, k_ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q5_K, k_ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q3_K, k_ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q2_K, k_ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_IQ3_S, k_ok, 2));
    // IQ3_S in IQ4_XS's layout (110 bytes per row and super-block grow to 138)
    EXPECT_EQ(graph::packed_size(GGML_TYPE_IQ3_S, 512, 32), 2 * 32 * 138u);
    // IQ3_XXS likewise (98 bytes grow to 138)
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_IQ3_XXS, k_ok, 2));
    EXPECT_EQ(graph::packed_size(GGML_TYPE_IQ3_XXS, 512, 32), 2 * 32 * 138u);
    // IQ2_XXS likewise (66 bytes grow to 138)
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_IQ2_XXS, k_ok, 2));
    EXPECT_EQ(graph::packed_size(GGML_TYPE_IQ2_XXS, 512, 32), 2 * 32 * 138u);
    // IQ1_S likewise (50 bytes grow to 138)
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_IQ1_S, k_ok, 2));
    EXPECT_EQ(graph::packed_size(GGML_TYPE_IQ1_S, 512, 32), 2 * 32 * 138u);
    // IQ2_XS, IQ2_S and IQ1_M in Q6_K's layout of scales per 16 and low nibbles (74, 82, 56 bytes grow to 146)
    for (const ggml_type t : {GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ1_M}) {
        EXPECT_TRUE(graph::packed_matmul_supports(t, k_ok, 2)) << ggml_type_name(t);
        EXPECT_EQ(graph::packed_size(t, 512, 32), 2 * 32 * 146u) << ggml_type_name(t);
        EXPECT_EQ(graph::packed_input_type(t), graph::packed_input_type(GGML_TYPE_Q6_K)) << ggml_type_name(t);
    }
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q5_0, ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q5_1, ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q4_0, ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_Q4_1, ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_IQ4_NL, ok, 2));
    EXPECT_TRUE(graph::packed_matmul_supports(GGML_TYPE_IQ4_XS, k_ok, 2));
    EXPECT_FALSE(graph::packed_matmul_supports(GGML_TYPE_IQ4_XS, ok, 2));  // 64 inputs: not a whole super-block
    EXPECT_EQ(graph::packed_size(GGML_TYPE_Q6_K, 256, 32), ggml_row_size(GGML_TYPE_Q6_K, 256) * 32);
    EXPECT_EQ(graph::packed_size(GGML_TYPE_Q2_K, 256, 32), ggml_row_size(GGML_TYPE_Q2_K, 256) * 32);
    // Q3_K: its 12 bytes of 6-bit scales per row and super-block as 16 bytes (110 -> 114)
    EXPECT_EQ(graph::packed_size(GGML_TYPE_Q3_K, 512, 32), 2 * 32 * 114u);
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q3_K), graph::packed_input_type(GGML_TYPE_Q6_K));
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q2_K), graph::packed_input_type(GGML_TYPE_Q6_K));
    // Q4_0 to Q5_1 keep their sizes; their inputs are ggml's (Q8_0, or Q8_1 with minimums)
    for (const ggml_type t : {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL}) {
        EXPECT_EQ(graph::packed_size(t, 64, 32), ggml_row_size(t, 64) * 32) << ggml_type_name(t);
    }
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q4_0), GGML_TYPE_Q8_0);
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q5_0), GGML_TYPE_Q8_0);
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q4_1), GGML_TYPE_Q8_1);
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q5_1), GGML_TYPE_Q8_1);
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q4_K), graph::packed_input_type(GGML_TYPE_Q6_K));
    EXPECT_EQ(graph::packed_input_type(GGML_TYPE_Q5_K), graph::packed_input_type(GGML_TYPE_Q6_K));
    // Q5_K: Q4_K's layout and a bit per input (176 bytes per row and super-block grow to 180)
    EXPECT_EQ(graph::packed_size(GGML_TYPE_Q5_K, 512, 32), 2 * 32 * 180u);
    // a set by name: the one in use, not an unknown one, and never "off" once in use
    const std::string in_use = graph::packed_kernels_name();
    EXPECT_TRUE(graph::use_packed_kernels(in_use));
    EXPECT_FALSE(graph::use_packed_kernels("avx1024"));
    EXPECT_FALSE(graph::use_packed_kernels("off"));
    EXPECT_EQ(graph::packed_kernels_name(), in_use);
}

// The amx set's wide tiles (Q8_0, Q4_0 to Q5_1, IQ4_NL, Q2_K to Q6_K and every IQ type) take the same float steps as
// the AVX-512 tiles after the same exact integer sums, so a prompt's products
// are the AVX-512 set's bit for bit (the graph's results do not depend on
// which of the two a CPU runs). F16's and BF16's tiles add their exact float
// products in another order than the AVX-512 set's FMAs: EqualsGgmlsMatmulForEveryTiling checks them.
TEST(PackedMatmul, AmxTilesGiveTheAvx512Results) {
    {
        KernelSetScope amx("amx");
        if (!amx.ok()) GTEST_SKIP() << "this CPU (or kernel) gives this process no AMX tiles";
    }
    for (const ggml_type type : {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL,
                                 GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q3_K, GGML_TYPE_Q2_K,
                                 GGML_TYPE_IQ3_S, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ1_S, GGML_TYPE_IQ2_XS,
                                 GGML_TYPE_IQ2_S, GGML_TYPE_IQ1_M}) {
        SCOPED_TRACE(ggml_type_name(type));
        // 3 wide passes and 2 columns for the 8-column tiles; 10 row groups
        const int64_t n_in = 1024, n_out = 160, cols = 50;
        std::mt19937 rng(3);
        std::normal_distribution<float> g(0.0f, 1.0f);
        std::vector<float> wf(n_in * n_out), xf(n_in * cols);
        for (float &v : wf) v = g(rng);
        for (float &v : xf) v = g(rng) * 4.0f;
        std::vector<uint8_t> rows(ggml_row_size(type, n_in) * n_out), packed(graph::packed_size(type, n_in, n_out));
        quant::quantize_rows(type, wf.data(), rows.data(), n_out, n_in);
        graph::pack_matrix(type, rows.data(), packed.data(), n_in, n_out);
        auto run = [&](const std::string &set) {
            KernelSetScope scope(set);
            EXPECT_TRUE(scope.ok()) << set;
            EXPECT_EQ(graph::packed_wide_tiles(type), set == "amx");
            ggml_init_params ip{size_t(n_in * cols * 8 + n_out * cols * 4) + 16 * ggml_tensor_overhead() + ggml_graph_overhead() + 65536,
                                nullptr, false};
            ggml_context *ctx = ggml_init(ip);
            ggml_tensor *w = ggml_new_tensor_2d(ctx, type, n_in, n_out);
            w->data = packed.data();
            ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_in, cols);
            std::memcpy(x->data, xf.data(), xf.size() * sizeof(float));
            ggml_tensor *y = graph::packed_mul_mat(ctx, w, x);
            ggml_cgraph *gf = ggml_new_graph(ctx);
            ggml_build_forward_expand(gf, y);
            ggml_graph_compute_with_ctx(ctx, gf, 2);
            std::vector<float> out((const float *)y->data, (const float *)y->data + n_out * cols);
            ggml_free(ctx);
            return out;
        };
        const std::vector<float> amx = run("amx"), avx512 = run("avx512");
        ASSERT_EQ(amx.size(), avx512.size());
        EXPECT_EQ(std::memcmp(amx.data(), avx512.data(), amx.size() * sizeof(float)), 0);
    }
}
