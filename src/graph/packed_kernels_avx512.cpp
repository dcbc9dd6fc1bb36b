// toy's packed kernels for CPUs with AVX-512 F/BW/VL and VNNI (and F16C):
// a group's 16 rows in one 512-bit register, VPDPBUSD for the integer types,
// up to 8 columns per weight load. Compiled for those instructions whatever
// the build's target (the functions below only run where the CPU has them).
#include "graph/packed_avx512_inline.h"
#include "graph/packed_kernels.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

TOY_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")


namespace toy::graph::packed {
namespace {

// GCC 12's AVX-512 reduction intrinsics start from an undefined vector and
// -Wmaybe-uninitialized reports it inside the compiler's own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Q8_0, or Q8_1 (kQ8_1): the same quants and scale, then ggml's fp16-rounded
// scale x sum of the quants (from the scale before rounding) in place of the bias.
template <bool kQ8_1 = false>
void quantize_column_q8_0(const float *x, int64_t n_in, uint8_t *out) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n_in; i += kQK, out += kColBlock) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        const float d_raw = amax / 127.f, d = _cvtsh_ss(_cvtss_sh(d_raw, 0));
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out + 16), _mm512_cvtepi32_epi8(q1));
        const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)), bias = -128 * sum;
        std::memcpy(out + kQK, &d, sizeof d);
        if constexpr (kQ8_1) {
            const float ds = _cvtsh_ss(_cvtss_sh(d_raw * (float)sum, 0));
            std::memcpy(out + kQK + 4, &ds, sizeof ds);
        } else {
            std::memcpy(out + kQK + 4, &bias, sizeof bias);
        }
    }
}

// ggml's Q8_K quantization of 256 values at a time (quantize_row_q8_K_ref):
// the scale from the value of largest magnitude (the first of equals), with
// its sign, -127 / that value; quants rounded to nearest even, at most 127.
void quantize_column_q8_k(const float *x, int64_t n_in, uint8_t *out) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n_in; i += kQKK, x += kQKK, out += kKColBlock) {
        __m512 m = _mm512_setzero_ps();
        for (int v = 0; v < 16; ++v) m = _mm512_max_ps(m, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * v)));
        const float amax = _mm512_reduce_max_ps(m);
        int16_t sum16[16] = {}, sum32[8] = {};
        float d = 0.0f;
        if (amax == 0.0f) {
            std::memset(out + kKQs, 0, kQKK);
        } else {
            float max = 0.0f;
            for (int v = 0; v < 16; ++v) {
                const __m512 a = _mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * v));
                const __mmask16 hit = _mm512_cmp_ps_mask(a, _mm512_set1_ps(amax), _CMP_EQ_OQ);
                if (hit) {
                    max = x[16 * v + __builtin_ctz(hit)];
                    break;
                }
            }
            const float iscale = -127.f / max;
            for (int v = 0; v < 16; ++v) {
                const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * v), _mm512_set1_ps(iscale));
                const __m512i q = _mm512_min_epi32(
                    _mm512_cvt_roundps_epi32(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), _mm512_set1_epi32(127));
                _mm_storeu_si128(reinterpret_cast<__m128i *>(out + kKQs + 16 * v), _mm512_cvtepi32_epi8(q));
                sum16[v] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
            }
            d = 1 / iscale;
            for (int p = 0; p < 8; ++p) sum32[p] = static_cast<int16_t>(sum16[2 * p] + sum16[2 * p + 1]);
        }
        std::memcpy(out + kKSum16, sum16, sizeof sum16);
        std::memcpy(out + kKSum32, sum32, sizeof sum32);
        std::memcpy(out + kKD, &d, sizeof d);
    }
}

// sum_k VPDPBUSD(w[k], the 4 bytes at x + 4k broadcast) for k < N, in two
// chains when few columns share the weights (one column alone is bound by the
// latency).
template <int N, bool kTwoChains>
inline __m512i dot_u8s8(__m512i s, const __m512i *w, const uint8_t *x) {
    if constexpr (kTwoChains) {
        __m512i s1 = _mm512_setzero_si512();
        for (int k = 0; k < N; k += 2) {
            s = _mm512_dpbusd_epi32(s, w[k], bcast4(x + 4 * k));
            s1 = _mm512_dpbusd_epi32(s1, w[k + 1], bcast4(x + 4 * k + 4));
        }
        return _mm512_add_epi32(s, s1);
    } else {
        for (int k = 0; k < N; ++k) s = _mm512_dpbusd_epi32(s, w[k], bcast4(x + 4 * k));
        return s;
    }
}

// y[c * ldy + r] for a group's 16 rows and C columns of prepared input;
// `depth` units (blocks, or inputs for F16) of the group at w. Any Block32
// (kType): the block's exact integer sum from the input's bias
// (block32_start), then Q8_0's float step, or with minimums (Q4_1, Q5_1)
// Q5_1's, the minimums times the Q8_1 input's scaled sums.
template <int C, bool kStream, Block32 kType = Block32::q8_0>
void q8_0_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    constexpr size_t kBlock = block32_bytes(kType);
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kBlock) {
        prefetch_block<kStream>(w, kBlock);
        const __m512 dw = load_f16x16(w), mw = has_min(kType) ? load_f16x16(w + kQ51M) : _mm512_setzero_ps();
        __m512i q[8];
        load_block32<kType>(w, q);
        for (int c = 0; c < C; ++c) {
            const uint8_t *xb = xq + c * x_stride + b * kColBlock;
            float dx;
            std::memcpy(&dx, xb + kQK, sizeof dx);
            const __m512i s = dot_u8s8<8, (C == 1)>(block32_start<kType>(xb + kQK + 4), q, xb);
            if constexpr (has_min(kType)) {
                float sx;  // the Q8_1 input's scaled sum
                std::memcpy(&sx, xb + kQK + 4, sizeof sx);
                acc[c] = q5_1_step(acc[c], s, dw, dx, mw, sx);
            } else {
                acc[c] = q8_0_step(acc[c], s, dw, dx);
            }
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

// A nibble type's blocks in its expansion's layout (Q8_0's, q5_1x's): the
// scales (and minimums) copied, the quants decoded once.
template <Block32 kType>
void expand_blocks(const uint8_t *w, int64_t nb, uint8_t *out) {
    constexpr Block32 kTo = block32_expansion(kType);
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(block32_expansion_offset(kType)));
    for (int64_t b = 0; b < nb; ++b, w += block32_bytes(kType), out += block32_bytes(kTo)) {
        std::memcpy(out, w, block32_quants(kType));  // d, and the minimums
        __m512i v[8];
        load_block32<kType>(w, v);
        for (int j = 0; j < 8; ++j) _mm512_storeu_si512(out + block32_quants(kTo) + 64 * j, _mm512_add_epi8(v[j], offset));
    }
}

void expand(ggml_type type, const uint8_t *w, int64_t nb, uint8_t *out) {
    with_nibble_type(type, [&](auto t) { expand_blocks<decltype(t)::value>(w, nb, out); });
}

// F16: the input columns are float32 already rounded through fp16
// (round_column), so each product is ggml's F16 x F16 product, exact in
// float32. Two partial sums per column hide the FMA latency when few columns
// share a load.
template <int C, bool kStream>
void f16_tile(const uint8_t *w, int64_t n_in, const uint8_t *x, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C][2];
    for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm512_setzero_ps();
    const float *xc[C];
    for (int c = 0; c < C; ++c) xc[c] = reinterpret_cast<const float *>(x + c * x_stride);
    int64_t k = 0;
    for (; k + 1 < n_in; k += 2) {
        prefetch_block<kStream>(w + 32 * k, 64);
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

// Q4_K, or Q5_K (kBlock kQ5Block: its fifth bits after Q4_K's layout, the
// same scales, mins and float steps).
template <int C, bool kStream, size_t kBlock = kQ4Block>
void q4_k_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    // At most 4 columns per pass: 8 kept the weights' 8 vectors, 8 integer
    // and 8 float sums live and spilled them (Llama-3.2-1B Q4_K_M pp512
    // 300-317 -> 409-416 t/s). Q8_0 and Q6_K gained nothing from the split.
    if constexpr (C > 4) {
        q4_k_tile<4, kStream, kBlock>(w, nb, xq, x_stride, y, ldy);
        q4_k_tile<C - 4, false, kBlock>(w, nb, xq + 4 * x_stride, x_stride, y + 4 * ldy, ldy);  // the weights are in cache
        return;
    }
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kBlock) {
        const uint8_t *xb[C];
        for (int c = 0; c < C; ++c) xb[c] = xq + c * x_stride + b * kKColBlock;
        __m512i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) {
            prefetch_part<kStream>(w, kBlock, j, 8);
            __m512i v[8];
            if constexpr (kBlock == kQ5Block) {
                load_q5_k_unit(w, j, v);
            } else {
                load_nibbles(w + kQ4Qs + 256 * j, v);
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(w + kQ4Sc + 16 * j)));
            for (int c = 0; c < C; ++c) {
                const __m512i s = dot_u8s8<8, (C <= 2)>(_mm512_setzero_si512(), v, xb[c] + kKQs + 32 * j);
                tot[c] = _mm512_add_epi32(tot[c], _mm512_mullo_epi32(s, sc));
            }
        }
        const __m512 dw = load_f16x16(w + kQ4D), dm = load_f16x16(w + kQ4Dmin);
        __m512i mins[4];
        load_q4_k_mins(w, mins);
        for (int c = 0; c < C; ++c) {
            float dy;
            std::memcpy(&dy, xb[c] + kKD, sizeof dy);
            __m512i summ = _mm512_setzero_si512();  // with the column's sums per 32, as int16 pairs
            for (int p = 0; p < 4; ++p) summ = _mm512_dpwssd_epi32(summ, mins[p], bcast4(xb[c] + kKSum32 + 4 * p));
            acc[c] = q4_k_step(acc[c], tot[c], summ, dw, dm, dy);
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

// The X4 types (IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS, IQ1_S): per unit, the exact sum of (t[q] + 128) x
// input from -128 x the input's sum of 32 (so sum t[q] x), times the unit's
// signed scale; per super-block Q8_0's float step with d (x4_d_factor) and
// the input's scale.
template <int C, bool kStream, X4 kType>
void x4_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    if constexpr (C > 4) {  // as Q4_K: 4 columns keep their sums in registers
        x4_tile<4, kStream, kType>(w, nb, xq, x_stride, y, ldy);
        x4_tile<C - 4, false, kType>(w, nb, xq + 4 * x_stride, x_stride, y + 4 * ldy, ldy);
        return;
    }
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kX4Block) {
        const uint8_t *xb[C];
        for (int c = 0; c < C; ++c) xb[c] = xq + c * x_stride + b * kKColBlock;
        __m512i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) {
            prefetch_part<kStream>(w, kX4Block, j, 8);
            __m512i v[8];
            load_x4_unit<kType>(w, j, v);
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(w + kX4Sc + 16 * j)));
            for (int c = 0; c < C; ++c) {
                int16_t sum32;
                std::memcpy(&sum32, xb[c] + kKSum32 + 2 * j, sizeof sum32);
                const __m512i s = dot_u8s8<8, (C <= 2)>(_mm512_set1_epi32(-128 * sum32), v, xb[c] + kKQs + 32 * j);
                tot[c] = _mm512_add_epi32(tot[c], _mm512_mullo_epi32(s, sc));
            }
        }
        const __m512 dw = load_f16x16(w + kX4D);
        for (int c = 0; c < C; ++c) {
            float dy;
            std::memcpy(&dy, xb[c] + kKD, sizeof dy);
            acc[c] = q8_0_step(acc[c], tot[c], dw, dy * x4_d_factor(kType));
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

// A K16 type (Q6_K, Q3_K, Q2_K, the IQ types): per unit, two sub-blocks of
// 16, each sum times its scale.
template <int C, bool kStream, K16 kType>
void k16_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    constexpr size_t kBlock = k16_block(kType);
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kBlock) {
        const uint8_t *xb[C];
        for (int c = 0; c < C; ++c) xb[c] = xq + c * x_stride + b * kKColBlock;
        __m512i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) {
            prefetch_part<kStream>(w, kBlock, j, 8);
            __m512i v[8];
            load_k16_unit<kType>(w, j, v);
            // the scales of the unit's two sub-blocks of 16 as int16 pairs per row,
            // and (Q6_K) each sign-extended to the row's lane
            const __m512i pr = load_k16_scale_pairs<kType>(w, j);
            const __m512i sa = _mm512_srai_epi32(_mm512_slli_epi32(pr, 16), 16), sb = _mm512_srai_epi32(pr, 16);
            for (int c = 0; c < C; ++c) {
                const uint8_t *x = xb[c] + kKQs + 32 * j;
                const __m512i s0 = dot_u8s8<4, false>(_mm512_setzero_si512(), v, x);
                const __m512i s1 = dot_u8s8<4, false>(_mm512_setzero_si512(), v + 4, x + 16);
                if constexpr (kType == K16::q6_k || k16_table(kType)) {  // sums past int16
                    tot[c] = _mm512_add_epi32(tot[c], _mm512_add_epi32(_mm512_mullo_epi32(s0, sa), _mm512_mullo_epi32(s1, sb)));
                } else {
                    // a 2- or 3-bit sub-block's sum fits int16 (|s| <= 16 x 7 x 127): the
                    // two sums as a pair per row, times the scales' pair, in one VPDPWSSD
                    const __m512i pair = _mm512_mask_blend_epi16(0xAAAAAAAA, s0, _mm512_slli_epi32(s1, 16));
                    tot[c] = _mm512_dpwssd_epi32(tot[c], pair, pr);
                }
            }
        }
        for (int c = 0; c < C; ++c) {
            float dy;
            std::memcpy(&dy, xb[c] + kKD, sizeof dy);
            // Q6_K, Q3_K, the IQ types: the scales (Q2_K: the mins) times the column's sums per 16
            __m512i corr = _mm512_setzero_si512();
            for (int j = 0; j < 8; ++j) {
                corr = _mm512_dpwssd_epi32(corr, load_k16_scale_pairs<kType, true>(w, j), bcast4(xb[c] + kKSum16 + 4 * j));
            }
            acc[c] = k16_step<kType>(acc[c], tot[c], corr, w, dy);
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

// x rounded through fp16, as ggml converts an F16 matmul's input.
void round_column(const float *x, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; ++i) out[i] = _cvtsh_ss(_cvtss_sh(x[i], 0));
}

#pragma GCC diagnostic pop

void prepare(ggml_type form, const float *x, int64_t n, uint8_t *out) {
    if (form == GGML_TYPE_Q8_0) {
        quantize_column_q8_0(x, n, out);
    } else if (form == GGML_TYPE_Q8_1) {
        quantize_column_q8_0<true>(x, n, out);
    } else if (form == GGML_TYPE_Q8_K) {
        quantize_column_q8_k(x, n, out);
    } else if (form == GGML_TYPE_BF16) {
        ggml_fp32_to_bf16_row_ref(x, reinterpret_cast<ggml_bf16_t *>(out), n);  // ggml's rounding: nearest even
    } else {
        round_column(x, n, reinterpret_cast<float *>(out));
    }
}

constexpr Tiles kQ8Tiles = TOY_TILES(q8_0_tile), kF16Tiles = TOY_TILES(f16_tile), kQ4KTiles = TOY_TILES(q4_k_tile),
                 kQ5KTiles = TOY_TILES_OF(q4_k_tile, kQ5Block), kQ6KTiles = TOY_TILES_OF(k16_tile, K16::q6_k),
                 kQ40Tiles = TOY_TILES_OF(q8_0_tile, Block32::q4_0), kQ41Tiles = TOY_TILES_OF(q8_0_tile, Block32::q4_1),
                 kQ50Tiles = TOY_TILES_OF(q8_0_tile, Block32::q5_0), kQ51Tiles = TOY_TILES_OF(q8_0_tile, Block32::q5_1),
                 kQ51xTiles = TOY_TILES_OF(q8_0_tile, Block32::q5_1x), kIq4nlTiles = TOY_TILES_OF(q8_0_tile, Block32::iq4_nl),
                 kQ3KTiles = TOY_TILES_OF(k16_tile, K16::q3_k), kQ2KTiles = TOY_TILES_OF(k16_tile, K16::q2_k),
                 kIq2Tiles = TOY_TILES_OF(k16_tile, K16::iq2), kIq1mTiles = TOY_TILES_OF(k16_tile, K16::iq1_m);
constexpr Tiles kX4Tiles[kX4Types] = TOY_X4_TILES(x4_tile);

}  // namespace
}  // namespace toy::graph::packed

TOY_TARGET_END

// BF16 needs AVX512_BF16 (Zen 4, Cooper Lake, Sapphire Rapids and later):
// compiled for it here, used only where the CPU has it.
TOY_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c")

namespace toy::graph::packed {
namespace {

#pragma GCC diagnostic push  // as above: GCC 12's header
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Each product of two bfloat16 is exact in float32, as in ggml's BF16 dot
// product; only the order of the float sums differs. Two partial sums per
// column hide VDPBF16PS's latency when few columns share a load.
template <int C, bool kStream>
void bf16_tile(const uint8_t *w, int64_t n_pairs, const uint8_t *x, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C][2];
    for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 1 < n_pairs; p += 2) {
        prefetch_block<kStream>(w + 64 * p, 128);
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + 64 * p);
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(w + 64 * (p + 1));
        for (int c = 0; c < C; ++c) {
            acc[c][0] = _mm512_dpbf16_ps(acc[c][0], w0, (__m512bh)bcast4(x + c * x_stride + 4 * p));
            acc[c][1] = _mm512_dpbf16_ps(acc[c][1], w1, (__m512bh)bcast4(x + c * x_stride + 4 * (p + 1)));
        }
    }
    if (p < n_pairs) {
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + 64 * p);
        for (int c = 0; c < C; ++c) acc[c][0] = _mm512_dpbf16_ps(acc[c][0], w0, (__m512bh)bcast4(x + c * x_stride + 4 * p));
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, _mm512_add_ps(acc[c][0], acc[c][1]));
}

#pragma GCC diagnostic pop

constexpr Tiles kBf16Tiles = TOY_TILES(bf16_tile);

// The AVX-512 set, with BF16 (where the CPU has AVX512_BF16) or without, and
// with AMX tiles for prompts (the amx set) or without.
constexpr KernelSet avx512_set(const char *name, bool with_bf16, const WideTiles *wide) {
    return {name, 8, 8, &kQ8Tiles, &kF16Tiles, &kQ4KTiles, &kQ6KTiles, &kQ5KTiles, &kQ40Tiles, &kQ41Tiles, &kQ50Tiles,
            &kQ51Tiles, &kQ51xTiles, &kIq4nlTiles, &kQ3KTiles, &kQ2KTiles, with_bf16 ? &kBf16Tiles : nullptr,
            TOY_X4_POINTERS(kX4Tiles), &kIq2Tiles, &kIq1mTiles, true, with_bf16, prepare, expand, wide};
}

}  // namespace

const KernelSet *avx512_kernels(bool with_bf16) {
    static const KernelSet plain = avx512_set("avx512", false, nullptr), bf16 = avx512_set("avx512", true, nullptr);
    return with_bf16 ? &bf16 : &plain;
}

const KernelSet *amx_kernels(bool with_bf16) {
    const WideTiles *wide = amx_tiles();
    if (!wide) return nullptr;
    static const KernelSet plain = avx512_set("amx", false, wide), bf16 = avx512_set("amx", true, wide);
    return with_bf16 ? &bf16 : &plain;
}

}  // namespace toy::graph::packed

TOY_TARGET_END

#else

namespace toy::graph::packed {
const KernelSet *avx512_kernels(bool) { return nullptr; }
const KernelSet *amx_kernels(bool) { return nullptr; }
}  // namespace toy::graph::packed

#endif
