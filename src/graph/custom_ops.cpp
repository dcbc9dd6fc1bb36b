#include "graph/custom_ops.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <numeric>
#include <vector>
#include <utility>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace toy::graph {
namespace {

#if defined(__AVX512F__)
// GCC 12's AVX-512 unpack intrinsics pass an undefined vector as their merge
// source and -Wuninitialized reports it inside the compiler's own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// out[c * ld_out + r] = in[r * ld_in + c] for a 16 x 16 block, in registers.
inline void transpose16x16(const float *in, int64_t ld_in, float *out, int64_t ld_out) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(in + i * ld_in);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    // r[4q + j] holds, in each 128-bit lane L, column 4L + j of rows 4q..4q+3
    for (int j = 0; j < 4; ++j) {
        const __m512 a = r[j], b = r[4 + j], c = r[8 + j], d = r[12 + j];
        const __m512 ab_lo = _mm512_shuffle_f32x4(a, b, 0x44), ab_hi = _mm512_shuffle_f32x4(a, b, 0xEE);
        const __m512 cd_lo = _mm512_shuffle_f32x4(c, d, 0x44), cd_hi = _mm512_shuffle_f32x4(c, d, 0xEE);
        t[j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);       // lane 0 of each: column j
        t[4 + j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xDD);   // lane 1: column 4 + j
        t[8 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);   // lane 2: column 8 + j
        t[12 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xDD);  // lane 3: column 12 + j
    }
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(out + i * ld_out, t[i]);
}
#pragma GCC diagnostic pop
#endif

void transpose_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0];
    const int64_t rows = x->ne[1], cols = x->ne[0];  // each plane of dst: [rows, cols] with ne0 = rows
    constexpr int64_t kTile = 32;
    // work units: (plane, band of kTile rows), dealt round-robin to the threads
    const int64_t bands = (rows + kTile - 1) / kTile, planes = x->ne[2] * x->ne[3];
    for (int64_t unit = ith; unit < planes * bands; unit += nth) {
        const int64_t plane = unit / bands, i2 = plane % x->ne[2], i3 = plane / x->ne[2];
        const int64_t r0 = (unit % bands) * kTile, r1 = std::min(r0 + kTile, rows);
        const char *src = static_cast<const char *>(x->data) + i2 * x->nb[2] + i3 * x->nb[3];
        float *out = reinterpret_cast<float *>(static_cast<char *>(dst->data) + i2 * dst->nb[2] + i3 * dst->nb[3]);
        for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
            const int64_t c1 = std::min(c0 + kTile, cols);
#if defined(__AVX512F__)
            if (x->nb[0] == sizeof(float) && r1 - r0 == kTile && c1 - c0 == kTile) {
                const float *in = reinterpret_cast<const float *>(src + r0 * x->nb[1]) + c0;
                const int64_t ld = x->nb[1] / sizeof(float);
                for (int64_t i = 0; i < kTile; i += 16)
                    for (int64_t j = 0; j < kTile; j += 16) transpose16x16(in + i * ld + j, ld, out + (c0 + j) * rows + r0 + i, rows);
                continue;
            }
#endif
            for (int64_t r = r0; r < r1; ++r) {
                const char *row = src + r * x->nb[1];
                for (int64_t c = c0; c < c1; ++c) out[c * rows + r] = *reinterpret_cast<const float *>(row + c * x->nb[0]);
            }
        }
    }
}

// ---- out_prod: dst[i, j] = sum_k a[i, k] b[j, k] ----
//
// The products of training's backward pass: a weight's gradient (x dy^T, the
// sum running over the tokens) and an input's (W dy, over the outputs). a's
// rows i are contiguous, so the kernel keeps a block of i in vector registers
// and broadcasts b's scalars: C += a[:, k] * b[j, k], an outer product per k.
// No horizontal sums (the cost of a dot-product kernel when k is a short
// token count) and no transposed copies of a or b.
#if defined(__AVX512F__)
struct Simd {
    using V = __m512;
    static constexpr int kWidth = 16, kRowVecs = 4, kCols = 6;  // 24 accumulators of 32 registers
    static V zero() { return _mm512_setzero_ps(); }
    static V set1(float x) { return _mm512_set1_ps(x); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static V load(const float *p, int n) {
        return n == kWidth ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
    }
    static void store(float *p, V v, int n) {
        if (n == kWidth) {
            _mm512_storeu_ps(p, v);
        } else {
            _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v);
        }
    }
};
#elif defined(__AVX2__) && defined(__FMA__)
struct Simd {
    using V = __m256;
    static constexpr int kWidth = 8, kRowVecs = 2, kCols = 6;  // 12 accumulators of 16 registers
    static V zero() { return _mm256_setzero_ps(); }
    static V set1(float x) { return _mm256_set1_ps(x); }
    static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static __m256i mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
    static V load(const float *p, int n) { return n == kWidth ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(n)); }
    static void store(float *p, V v, int n) {
        if (n == kWidth) {
            _mm256_storeu_ps(p, v);
        } else {
            _mm256_maskstore_ps(p, mask(n), v);
        }
    }
};
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
constexpr bool kHasOutProd = true;

struct Panel {
    const float *a;      // a[i, k0]
    int64_t lda;         // floats from a[i, k] to a[i, k + 1]
    const char *b;       // b[j, k0]
    size_t bj, bk;       // bytes from b[j, k] to b[j + 1, k] and to b[j, k + 1]
    float *c;            // dst[i, j]
    int64_t ldc;         // floats from dst[i, j] to dst[i, j + 1]
    int64_t n_k;
    int last;            // lanes used in the last row vector
    bool accumulate;     // add to dst (a later block of k) or overwrite it
};

// dst[i.., j..j+RN) for RV row vectors, the last one holding p.last lanes.
template <int RV, int RN>
void out_prod_tile(const Panel &p) {
    using V = typename Simd::V;
    constexpr int W = Simd::kWidth;
    V acc[RN][RV];
    for (int j = 0; j < RN; ++j)
        for (int r = 0; r < RV; ++r)
            acc[j][r] = p.accumulate ? Simd::load(p.c + j * p.ldc + r * W, r == RV - 1 ? p.last : W) : Simd::zero();
    const float *a = p.a;
    const char *b = p.b;
    for (int64_t k = 0; k < p.n_k; ++k, a += p.lda, b += p.bk) {
        V av[RV];
        for (int r = 0; r < RV; ++r) av[r] = Simd::load(a + r * W, r == RV - 1 ? p.last : W);
        for (int j = 0; j < RN; ++j) {
            const V bv = Simd::set1(*reinterpret_cast<const float *>(b + j * p.bj));
            for (int r = 0; r < RV; ++r) acc[j][r] = Simd::fma(av[r], bv, acc[j][r]);
        }
    }
    for (int j = 0; j < RN; ++j)
        for (int r = 0; r < RV; ++r) Simd::store(p.c + j * p.ldc + r * W, acc[j][r], r == RV - 1 ? p.last : W);
}

using TileFn = void (*)(const Panel &);

template <int RV, int... RN>
constexpr std::array<TileFn, sizeof...(RN)> tiles_of_rows(std::integer_sequence<int, RN...>) {
    return {out_prod_tile<RV, RN + 1>...};
}

template <int... RV>
constexpr auto tile_table(std::integer_sequence<int, RV...>) {
    return std::array{tiles_of_rows<RV + 1>(std::make_integer_sequence<int, Simd::kCols>{})...};
}

// kTiles[rv - 1][rn - 1]: rv row vectors by rn columns
constexpr auto kTiles = tile_table(std::make_integer_sequence<int, Simd::kRowVecs>{});

void out_prod_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    constexpr int W = Simd::kWidth;
    constexpr int64_t kRows = W * Simd::kRowVecs, kDepth = 256;
    const int64_t n = a->ne[0], m = b->ne[0], K = a->ne[1];
    // F32 a is read in place, in units of kRows rows by kColChunk columns. Any
    // other type (a frozen F16 or quantized weight under LoRA) is dequantized
    // per unit and depth block into a panel of this thread: units of whole
    // quantization blocks, spanning all columns so each element of a is
    // converted once.
    const bool f32 = a->type == GGML_TYPE_F32;
    const int64_t blck = ggml_blck_size(a->type);
    const int64_t seg = f32 ? kRows : std::lcm(kRows, blck), chunk = f32 ? 8 * Simd::kCols : m;
    const int64_t row_segs = (n + seg - 1) / seg, col_chunks = (m + chunk - 1) / chunk;
    const int64_t per_plane = row_segs * col_chunks, planes = dst->ne[2] * dst->ne[3];
    thread_local std::vector<float> panel;
    // the units shared out as the threads run (share_work: a VM's vCPUs fall
    // out of step, and a training step waited 11% of its time at barriers)
    share_work(dst, planes * per_plane, ith, nth, [&](int64_t u0, int64_t u1) {
        for (int64_t unit = u0; unit < u1; ++unit) {
            const int64_t plane = unit / per_plane, i2 = plane % dst->ne[2], i3 = plane / dst->ne[2];
            const int64_t s0 = (unit % per_plane) / col_chunks * seg, j0 = (unit % col_chunks) * chunk;
            const int64_t seg_rows = std::min(seg, n - s0), cols_end = std::min(m, j0 + chunk);
            Panel p;
            p.bj = b->nb[0];
            p.bk = b->nb[1];
            p.ldc = dst->nb[1] / sizeof(float);
            // a broadcast over b's planes (grouped-query attention), as ggml_out_prod does
            const int64_t a2 = i2 / (b->ne[2] / a->ne[2]), a3 = i3 / (b->ne[3] / a->ne[3]);
            const char *a_plane = static_cast<const char *>(a->data) + a2 * a->nb[2] + a3 * a->nb[3];
            const char *b_plane = static_cast<const char *>(b->data) + i2 * b->nb[2] + i3 * b->nb[3];
            char *c_plane = static_cast<char *>(dst->data) + i2 * dst->nb[2] + i3 * dst->nb[3];
            for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
                p.n_k = std::min(kDepth, K - k0);
                p.accumulate = k0 > 0;
                const float *a_seg;  // a[s0, k0]
                if (f32) {
                    a_seg = reinterpret_cast<const float *>(a_plane + k0 * a->nb[1]) + s0;
                    p.lda = a->nb[1] / sizeof(float);
                } else {
                    const ggml_to_float_t to_float = ggml_get_type_traits(a->type)->to_float;
                    panel.resize((size_t)(seg * kDepth));
                    for (int64_t k = 0; k < p.n_k; ++k) {
                        to_float(a_plane + (k0 + k) * a->nb[1] + ggml_row_size(a->type, s0), panel.data() + k * seg_rows,
                                 seg_rows);
                    }
                    a_seg = panel.data();
                    p.lda = seg_rows;
                }
                for (int64_t i0 = 0; i0 < seg_rows; i0 += kRows) {
                    const int64_t rows = std::min(kRows, seg_rows - i0);
                    const int rv = (int)((rows + W - 1) / W);
                    p.last = (int)(rows - (rv - 1) * W);
                    p.a = a_seg + i0;
                    for (int64_t j = j0; j < cols_end; j += Simd::kCols) {
                        const int rn = (int)std::min<int64_t>(Simd::kCols, cols_end - j);
                        p.b = b_plane + j * b->nb[0] + k0 * b->nb[1];
                        p.c = reinterpret_cast<float *>(c_plane + j * dst->nb[1]) + s0 + i0;
                        kTiles[rv - 1][rn - 1](p);
                    }
                }
            }
        }
    });
}
#else
constexpr bool kHasOutProd = false;
void out_prod_kernel(ggml_tensor *, int, int, void *) {}
#endif

// ---- cross-entropy over integer targets ----

// max and log(sum(exp(x - max))) of one row, the sum in double
std::pair<float, double> log_sum_exp(const float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)std::exp(x[i] - mx);
    return {mx, std::log(sum)};
}

void cross_entropy_rows_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    const ggml_tensor *logits = dst->src[0], *targets = dst->src[1];
    const int64_t n = logits->ne[0], rows = logits->ne[1];
    for (int64_t r = ith; r < rows; r += nth) {
        const int32_t t = static_cast<const int32_t *>(targets->data)[r];
        const float *x = reinterpret_cast<const float *>(static_cast<const char *>(logits->data) + r * logits->nb[1]);
        float loss = 0.0f;
        if (t >= 0) {
            const auto [mx, lse] = log_sum_exp(x, n);
            loss = (float)(lse - (double)(x[t] - mx));
        }
        static_cast<float *>(dst->data)[r] = loss;
    }
}

void cross_entropy_grad_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    // dst is src[0], the logits, overwritten row by row with their gradient
    const ggml_tensor *grad = dst->src[1], *targets = dst->src[2];
    const int64_t n = dst->ne[0], rows = dst->ne[1];
    const float scale = *static_cast<const float *>(grad->data) / (float)rows;
    for (int64_t r = ith; r < rows; r += nth) {
        const int32_t t = static_cast<const int32_t *>(targets->data)[r];
        float *x = reinterpret_cast<float *>(static_cast<char *>(dst->data) + r * dst->nb[1]);
        if (t < 0) {
            std::fill(x, x + n, 0.0f);
            continue;
        }
        const auto [mx, lse] = log_sum_exp(x, n);
        for (int64_t i = 0; i < n; ++i) x[i] = (float)std::exp((double)(x[i] - mx) - lse) * scale;
        x[t] -= scale;
    }
}

void sum_of_squares_kernel(ggml_tensor *dst, int ith, int, void *) {
    if (ith != 0) return;
    const ggml_tensor *x = dst->src[0];
    const auto *v = static_cast<const float *>(x->data);
    const int64_t n = ggml_nelements(x);
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += (double)v[i + k] * v[i + k];
    for (; i < n; ++i) acc[0] += (double)v[i] * v[i];
    double s = 0;
    for (double a : acc) s += a;
    *static_cast<float *>(dst->data) = (float)s;
}

}  // namespace

ggml_tensor *transpose_f32(ggml_context *ctx, ggml_tensor *x) {
    GGML_ASSERT(x->type == GGML_TYPE_F32);
    ggml_tensor *args[] = {x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[1], x->ne[0], x->ne[2], x->ne[3], args, 1, transpose_kernel,
                          GGML_N_TASKS_MAX, nullptr);
}

bool out_prod_f32_supported(const ggml_tensor *a, const ggml_tensor *b) {
    const bool rows_convert = a->type == GGML_TYPE_F32 ? a->nb[0] == sizeof(float)
                                                       : ggml_get_type_traits(a->type)->to_float && a->nb[0] == ggml_type_size(a->type) &&
                                                             a->ne[0] % ggml_blck_size(a->type) == 0;
    return kHasOutProd && rows_convert && b->type == GGML_TYPE_F32 &&
           a->ne[1] == b->ne[1] && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0;
}

ggml_tensor *out_prod_f32(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) {
    GGML_ASSERT(out_prod_f32_supported(a, b));
    ggml_tensor *args[] = {a, b};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[0], b->ne[0], b->ne[2], b->ne[3], args, 2, out_prod_kernel,
                          GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor *cross_entropy_rows(ggml_context *ctx, ggml_tensor *logits, ggml_tensor *targets) {
    GGML_ASSERT(logits->type == GGML_TYPE_F32 && logits->nb[0] == sizeof(float) && ggml_nrows(logits) == logits->ne[1]);
    GGML_ASSERT(targets->type == GGML_TYPE_I32 && ggml_nelements(targets) == logits->ne[1]);
    ggml_tensor *args[] = {logits, targets};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, logits->ne[1], 1, 1, 1, args, 2, cross_entropy_rows_kernel, GGML_N_TASKS_MAX,
                          nullptr);
}

ggml_tensor *cross_entropy_grad_inplace(ggml_context *ctx, ggml_tensor *grad, ggml_tensor *logits, ggml_tensor *targets) {
    GGML_ASSERT(ggml_is_scalar(grad) && ggml_is_contiguous(logits) && ggml_nrows(logits) == logits->ne[1]);
    GGML_ASSERT(targets->type == GGML_TYPE_I32 && ggml_nelements(targets) == logits->ne[1]);
    ggml_tensor *args[] = {grad, targets};
    return ggml_custom_inplace(ctx, logits, args, 2, cross_entropy_grad_kernel, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor *sum_of_squares(ggml_context *ctx, ggml_tensor *x) {
    GGML_ASSERT(x->type == GGML_TYPE_F32 && ggml_is_contiguous(x));
    ggml_tensor *args[] = {x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, 1, 1, 1, 1, args, 1, sum_of_squares_kernel, 1, nullptr);
}

}  // namespace toy::graph
