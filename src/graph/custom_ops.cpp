#include "graph/custom_ops.h"

#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace toy::graph {
namespace {

#if defined(__AVX512F__)
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

ggml_tensor *sum_of_squares(ggml_context *ctx, ggml_tensor *x) {
    GGML_ASSERT(x->type == GGML_TYPE_F32 && ggml_is_contiguous(x));
    ggml_tensor *args[] = {x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, 1, 1, 1, 1, args, 1, sum_of_squares_kernel, 1, nullptr);
}

}  // namespace toy::graph
