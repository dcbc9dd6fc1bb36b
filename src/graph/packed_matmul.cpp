#include "graph/packed_matmul.h"

#include "core/error.h"
#include "graph/custom_ops.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__F16C__)
#define TOY_PACKED_KERNELS 1
#include <immintrin.h>
#endif

namespace toy::graph {
namespace {

constexpr int kQK = 32;                       // values per Q8_0 block
constexpr int kRows = 16;                     // rows per packed group
constexpr size_t kGroupBlock = kRows * 2 + kRows * kQK;  // 16 fp16 scales + 512 quants
// One quantized input column: per block, 32 int8 quants, the fp16-rounded
// scale as float, and -128 times the quants' sum (an exact int32).
constexpr size_t kColBlock = kQK + 2 * sizeof(int32_t);

struct BlockQ8_0 {
    uint16_t d;  // fp16
    int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "ggml's block_q8_0 is 34 bytes");
static_assert(kGroupBlock == kRows * sizeof(BlockQ8_0), "the packed layout keeps Q8_0's size");

int64_t columns(const ggml_tensor *x) { return x->ne[1] * x->ne[2] * x->ne[3]; }

const float *column(const ggml_tensor *x, int64_t c) {
    const int64_t i1 = c % x->ne[1], i2 = (c / x->ne[1]) % x->ne[2], i3 = c / (x->ne[1] * x->ne[2]);
    return reinterpret_cast<const float *>(static_cast<const char *>(x->data) + i1 * x->nb[1] + i2 * x->nb[2] +
                                           i3 * x->nb[3]);
}

#if TOY_PACKED_KERNELS
// GCC 12's AVX-512 reduction intrinsics start from an undefined vector and
// -Wmaybe-uninitialized reports it inside the compiler's own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

void quantize_column(const float *x, int64_t n_in, uint8_t *out) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n_in; i += kQK, out += kColBlock) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        const float d = _cvtsh_ss(_cvtss_sh(amax / 127.f, 0));
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out + 16), _mm512_cvtepi32_epi8(q1));
        const int32_t bias = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        std::memcpy(out + kQK, &d, sizeof d);
        std::memcpy(out + kQK + 4, &bias, sizeof bias);
    }
}

// y[c * ldy + r] for the group's 16 rows and C columns of quantized input.
template <int C>
void group_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kGroupBlock) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w)));
        __m512i q[8];
        for (int j = 0; j < 8; ++j) q[j] = _mm512_loadu_si512(w + 32 + 64 * j);
        for (int c = 0; c < C; ++c) {
            const uint8_t *xb = xq + c * x_stride + b * kColBlock;
            int32_t x4[8], bias;
            float dx;
            std::memcpy(x4, xb, sizeof x4);
            std::memcpy(&dx, xb + kQK, sizeof dx);
            std::memcpy(&bias, xb + kQK + 4, sizeof bias);
            __m512i s = _mm512_set1_epi32(bias);
            if constexpr (C == 1) {
                // two chains of 4: one column alone is bound by VPDPBUSD's latency
                __m512i s1 = _mm512_setzero_si512();
                for (int j = 0; j < 8; j += 2) {
                    s = _mm512_dpbusd_epi32(s, q[j], _mm512_set1_epi32(x4[j]));
                    s1 = _mm512_dpbusd_epi32(s1, q[j + 1], _mm512_set1_epi32(x4[j + 1]));
                }
                s = _mm512_add_epi32(s, s1);
            } else {
                for (int j = 0; j < 8; ++j) s = _mm512_dpbusd_epi32(s, q[j], _mm512_set1_epi32(x4[j]));
            }
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

using TileFn = void (*)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t);
constexpr TileFn kTiles[9] = {nullptr,         group_tile<1>, group_tile<2>, group_tile<3>, group_tile<4>,
                              group_tile<5>, group_tile<6>, group_tile<7>, group_tile<8>};

// F16: a group is, for each input k, its 16 rows' fp16 weights (32 bytes);
// the input columns are float32 already rounded through fp16 (round_kernel),
// so each product is ggml's F16 x F16 product, exact in float32. Two partial
// sums per column hide the FMA latency when few columns share a load.
template <int C>
void f16_tile(const uint8_t *w, int64_t n_in, const uint8_t *x, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C][2];
    for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm512_setzero_ps();
    const float *xc[C];
    for (int c = 0; c < C; ++c) xc[c] = reinterpret_cast<const float *>(x + c * x_stride);
    int64_t k = 0;
    for (; k + 1 < n_in; k += 2) {
        const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 32 * k)));
        const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 32 * (k + 1))));
        for (int c = 0; c < C; ++c) {
            acc[c][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xc[c][k]), acc[c][0]);
            acc[c][1] = _mm512_fmadd_ps(w1, _mm512_set1_ps(xc[c][k + 1]), acc[c][1]);
        }
    }
    if (k < n_in) {
        const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 32 * k)));
        for (int c = 0; c < C; ++c) acc[c][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xc[c][k]), acc[c][0]);
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, _mm512_add_ps(acc[c][0], acc[c][1]));
}

constexpr TileFn kF16Tiles[9] = {nullptr,     f16_tile<1>, f16_tile<2>, f16_tile<3>, f16_tile<4>,
                                 f16_tile<5>, f16_tile<6>, f16_tile<7>, f16_tile<8>};

// x rounded through fp16, as ggml converts an F16 matmul's input.
void round_column(const float *x, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; ++i) out[i] = _cvtsh_ss(_cvtss_sh(x[i], 0));
}

#pragma GCC diagnostic pop
#endif

// The input prepared for the matrix type (userdata: the type).
void prepare_kernel(ggml_tensor *dst, int ith, int nth, void *type) {
#if TOY_PACKED_KERNELS
    const ggml_tensor *x = dst->src[0];
    const bool q8 = *static_cast<const ggml_type *>(type) == GGML_TYPE_Q8_0;
    const auto [c0, c1] = thread_share(columns(x), ith, nth);
    for (int64_t c = c0; c < c1; ++c) {
        auto *out = static_cast<uint8_t *>(dst->data) + c * dst->nb[1];
        if (q8) {
            quantize_column(column(x, c), x->ne[0], out);
        } else {
            round_column(column(x, c), x->ne[0], reinterpret_cast<float *>(out));
        }
    }
#else
    (void)dst, (void)ith, (void)nth, (void)type;
#endif
}

void matmul_kernel(ggml_tensor *dst, int ith, int nth, void *) {
#if TOY_PACKED_KERNELS
    const ggml_tensor *w = dst->src[0], *xq = dst->src[1];
    const bool q8 = w->type == GGML_TYPE_Q8_0;
    const int64_t n_out = w->ne[1], n_cols = xq->ne[1];
    // a tile's "depth": Q8_0 blocks, or inputs for F16
    const int64_t depth = q8 ? w->ne[0] / kQK : w->ne[0];
    const size_t group_bytes = q8 ? depth * kGroupBlock : depth * kRows * sizeof(uint16_t);
    const TileFn *tiles = q8 ? kTiles : kF16Tiles;
    const auto [g0, g1] = thread_share(n_out / kRows, ith, nth);
    const auto *wbase = static_cast<const uint8_t *>(w->data);
    const auto *xbase = static_cast<const uint8_t *>(xq->data);
    auto *y = static_cast<float *>(dst->data);
    // Columns in panels whose quantized inputs stay in L2 while the thread's
    // row groups pass over them; within a panel, 8 columns per weight load.
    constexpr int64_t kPanel = 64;
    for (int64_t p0 = 0; p0 < n_cols; p0 += kPanel) {
        const int64_t p1 = std::min(n_cols, p0 + kPanel);
        for (int64_t g = g0; g < g1; ++g) {
            for (int64_t c = p0; c < p1; c += 8) {
                const int n = (int)std::min<int64_t>(8, p1 - c);
                tiles[n](wbase + g * group_bytes, depth, xbase + c * xq->nb[1], xq->nb[1], y + c * n_out + g * kRows,
                         n_out);
            }
        }
    }
#else
    (void)dst, (void)ith, (void)nth;
#endif
}

}  // namespace

bool packed_matmul_supports(ggml_type type, const int64_t *ne, int n_dims) {
#if TOY_PACKED_KERNELS
    const bool matrix = n_dims == 2 || (n_dims > 2 && ne[2] == 1 && (n_dims < 4 || ne[3] == 1));
    return matrix && ne[1] % kRows == 0 &&
           ((type == GGML_TYPE_Q8_0 && ne[0] % kQK == 0) || type == GGML_TYPE_F16);
#else
    (void)type, (void)ne, (void)n_dims;
    return false;
#endif
}

void pack_q8_0(const void *src, void *dst, int64_t n_in, int64_t n_out) {
    const int64_t nb = n_in / kQK;
    const auto *in = static_cast<const BlockQ8_0 *>(src);
    auto *out = static_cast<uint8_t *>(dst);
    for (int64_t g = 0; g < n_out / kRows; ++g) {
        for (int64_t b = 0; b < nb; ++b, out += kGroupBlock) {
            for (int r = 0; r < kRows; ++r) {
                const BlockQ8_0 &blk = in[(g * kRows + r) * nb + b];
                std::memcpy(out + 2 * r, &blk.d, 2);
                uint32_t q4[8];  // the row's quants as 8 groups of 4, each byte + 128
                std::memcpy(q4, blk.qs, sizeof q4);
                for (int j = 0; j < 8; ++j) {
                    const uint32_t u = q4[j] ^ 0x80808080u;
                    std::memcpy(out + 32 + 64 * j + 4 * r, &u, 4);
                }
            }
        }
    }
}

void pack_f16(const void *src, void *dst, int64_t n_in, int64_t n_out) {
    const auto *in = static_cast<const uint16_t *>(src);
    auto *out = static_cast<uint16_t *>(dst);
    for (int64_t g = 0; g < n_out / kRows; ++g) {
        for (int64_t k = 0; k < n_in; ++k) {
            for (int r = 0; r < kRows; ++r) *out++ = in[(g * kRows + r) * n_in + k];
        }
    }
}

ggml_tensor *quantize_input(ggml_context *ctx, ggml_tensor *x, ggml_type type) {
    const bool q8 = type == GGML_TYPE_Q8_0;
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || (q8 && x->ne[0] % kQK != 0)) {
        fail("packed matmul: input must be float32 rows{}", q8 ? fmt::format(" of a multiple of {} values", kQK) : "");
    }
    static const ggml_type kQ8 = GGML_TYPE_Q8_0, kF16 = GGML_TYPE_F16;
    const int64_t bytes = q8 ? x->ne[0] / kQK * (int64_t)kColBlock : x->ne[0] * (int64_t)sizeof(float);
    ggml_tensor *args[] = {x};
    return ggml_custom_4d(ctx, GGML_TYPE_I8, bytes, columns(x), 1, 1, args, 1, prepare_kernel, GGML_N_TASKS_MAX,
                          const_cast<ggml_type *>(q8 ? &kQ8 : &kF16));
}

ggml_tensor *packed_mul_mat(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *xq) {
    if (w->ne[0] != x->ne[0]) fail("packed matmul: input has {} rows, the matrix {}", x->ne[0], w->ne[0]);
    if (!xq) xq = quantize_input(ctx, x, w->type);
    ggml_tensor *args[] = {w, xq};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], x->ne[2], x->ne[3], args, 2, matmul_kernel,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace toy::graph
