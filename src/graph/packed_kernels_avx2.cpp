// toy's packed kernels for CPUs with AVX2, FMA and F16C but not AVX-512 VNNI:
// the same layouts as the AVX-512 kernels, a group of 16 rows taken as two
// halves of 8 (one 256-bit register each), up to 8 columns per weight load
// for F16 (in passes of 6) and 4 for the integer types (Q8_0, Q4_0-Q5_1, the K-quants).
// Without VPDPBUSD the byte products go through VPMADDUBSW (pairs of
// unsigned x signed bytes summed to int16, which cannot saturate here: the
// unsigned side is below 64, or Q8_0's |w| <= 128 against |x| <= 127) and
// VPMADDWD (pairs of int16 to int32), so every integer sum is exact, as in the
// AVX-512 kernels. Compiled for those instructions whatever the build's
// target; they only run where the CPU has them.
#include "graph/packed_kernels.h"
#include "graph/simd_avx2.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>

TOY_TARGET_BEGIN("avx2,fma,f16c")

namespace toy::graph::packed {
namespace {

float fp16_round(float v) { return _cvtsh_ss(_cvtss_sh(v, 0)); }

// x * scale rounded to the nearest integer, ties to even (nearbyint's rounding)
inline __m256i round_to_int(__m256 x, __m256 scale) {
    return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// 32 int32 quants in [-128, 127] as 32 bytes, in order
inline void store_bytes(__m256i q0, __m256i q1, __m256i q2, __m256i q3, uint8_t *out) {
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    // the packs work per 128-bit lane: 4-byte groups come out as 0 2 4 6 1 3 5 7
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out), _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// As the AVX-512 kernels prepare inputs (ggml's x86 rounding: nearest even).
// Q8_0, or Q8_1 (kQ8_1): the same quants and scale, then ggml's fp16-rounded
// scale x sum of the quants (from the scale before rounding) in place of the bias.
template <bool kQ8_1 = false>
void quantize_column_q8_0(const float *x, int64_t n_in, uint8_t *out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n_in; i += kQK, x += kQK, out += kColBlock) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k), m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        const float amax = simd::hmax_avx2(m);
        const float d_raw = amax / 127.f, d = fp16_round(d_raw);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; ++k) q[k] = round_to_int(v[k], id);
        store_bytes(q[0], q[1], q[2], q[3], out);
        const int32_t sum = simd::hsum_avx2(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        const int32_t bias = -128 * sum;
        std::memcpy(out + kQK, &d, sizeof d);
        if constexpr (kQ8_1) {
            const float ds = fp16_round(d_raw * (float)sum);
            std::memcpy(out + kQK + 4, &ds, sizeof ds);
        } else {
            std::memcpy(out + kQK + 4, &bias, sizeof bias);
        }
    }
}

// ggml's Q8_K (quantize_row_q8_K_ref) with its per-16 and per-32 sums: the
// scale from the value of largest magnitude (the first of equals), with its
// sign, -127 / that value; quants rounded to nearest even, at most 127.
void quantize_column_q8_k(const float *x, int64_t n_in, uint8_t *out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n_in; i += kQKK, x += kQKK, out += kKColBlock) {
        __m256 m = _mm256_setzero_ps();
        for (int v = 0; v < 32; ++v) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * v)));
        const float amax = simd::hmax_avx2(m);
        int16_t sum16[16] = {}, sum32[8] = {};
        float d = 0.0f;
        if (amax == 0.0f) {
            std::memset(out + kKQs, 0, kQKK);
        } else {
            float max = 0.0f;
            for (int v = 0; v < 32; ++v) {
                const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * v));
                const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
                if (hit) {
                    max = x[8 * v + __builtin_ctz(hit)];
                    break;
                }
            }
            const float iscale = -127.f / max;
            const __m256 scale = _mm256_set1_ps(iscale);
            const __m256i top = _mm256_set1_epi32(127);
            for (int v = 0; v < 8; ++v) {  // 32 values a pass: two sums per 16
                __m256i q[4];
                for (int k = 0; k < 4; ++k) {
                    q[k] = _mm256_min_epi32(round_to_int(_mm256_loadu_ps(x + 32 * v + 8 * k), scale), top);
                }
                store_bytes(q[0], q[1], q[2], q[3], out + kKQs + 32 * v);
                sum16[2 * v] = static_cast<int16_t>(simd::hsum_avx2(_mm256_add_epi32(q[0], q[1])));
                sum16[2 * v + 1] = static_cast<int16_t>(simd::hsum_avx2(_mm256_add_epi32(q[2], q[3])));
            }
            d = 1 / iscale;
            for (int p = 0; p < 8; ++p) sum32[p] = static_cast<int16_t>(sum16[2 * p] + sum16[2 * p + 1]);
        }
        std::memcpy(out + kKSum16, sum16, sizeof sum16);
        std::memcpy(out + kKSum32, sum32, sizeof sum32);
        std::memcpy(out + kKD, &d, sizeof d);
    }
}

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
        auto *o = reinterpret_cast<float *>(out);
        for (int64_t i = 0; i < n; ++i) o[i] = fp16_round(x[i]);
    }
}

// Every (half, block) of a group once, in the order that suits C columns.
// A product that streams the weights (kStream), and any of 1 or 2 columns,
// takes both halves of a block before the next, so the weights pass once
// and the prefetches never pause (3-8 columns streamed 7-31% faster than
// half by half); prompts take one half through all blocks, then the other
// (the columns' inputs stay in L1).
// The half reaches the body as a constant, so arrays indexed by it stay in
// registers; the bodies are inlined (TOY_INLINE: GCC 12 otherwise kept
// k16_tile<2>'s as calls).
#define TOY_INLINE __attribute__((always_inline))
// A loop over a register array unrolled first, so GCC keeps the array in
// registers (f16_tile<2> and <3> stored their sums every input without it).
#define TOY_UNROLL _Pragma("GCC unroll 32")
template <int C, bool kStream, typename F>
TOY_INLINE inline void halves_by_block(int64_t nb, F &&body) {
    constexpr std::integral_constant<int, 0> h0;
    constexpr std::integral_constant<int, 1> h1;
    if constexpr (C <= 2 || kStream) {
        for (int64_t b = 0; b < nb; ++b) body(h0, b), body(h1, b);
    } else {
        for (int64_t b = 0; b < nb; ++b) body(h0, b);
        for (int64_t b = 0; b < nb; ++b) body(h1, b);
    }
}

inline __m256i load(const uint8_t *p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }
inline __m128i load128(const uint8_t *p) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)); }
// The 4 bytes at p in every 32-bit lane, loaded straight into the register.
inline __m256i bcast4(const uint8_t *p) { return _mm256_broadcastd_epi32(_mm_loadu_si32(p)); }
inline float load_f32(const uint8_t *p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
// 8 lanes of sum over 4 bytes of u[i] * s[i] (u unsigned, s signed), exact here
inline __m256i dot4(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// An empty asm that takes v in a register and gives it back: the sums of an
// unrolled loop then run in the written order. Without it GCC 12 reassociates
// the integer sums, computes every product of the unrolled loop first and
// spills them to the stack (q8_0_tile<4>: 55 spills, 2-3x slower).
inline void in_register(__m256i &v) { asm("" : "+x"(v)); }

// F16 columns per pass (both halves of a group: 2 x 6 sums in registers).
constexpr int kF16Cols = 6;

// More columns than a tile keeps in 16 registers: in passes of `most` (4 for
// the integer tiles and BF16, kF16Cols for F16), the second over weights the
// first left in the cache. `depth` and `x` name the tile's depth and input
// parameters.
#define TOY_SPLIT_COLUMNS(tile, most, depth, x)                                              \
    if constexpr (C > most) {                                                                \
        tile<most, kStream>(w, depth, x, x_stride, y, ldy);                                   \
        tile<C - most, false>(w, depth, x + most * x_stride, x_stride, y + most * ldy, ldy); \
        return;                                                                              \
    }

// The kWidth bits of every byte of h from bit kFrom, moved to bit kTo (the
// rest cleared): a 16-bit shift lands a byte's field in the same byte, which
// the mask of its new place keeps. Bit k of a fifth-bit vector into bit 4,
// Q6_K's planes' bits 2t..2t+1 into 4..5, Q3_K's and Q2_K's into 0..1, Q3_K's
// third bit k into bit 2.
template <int kFrom, int kTo, int kWidth>
inline __m256i field(__m256i h) {
    const __m256i m = _mm256_set1_epi8(field_mask(kTo, kWidth));
    if constexpr (kTo > kFrom) return _mm256_and_si256(_mm256_slli_epi16(h, kTo - kFrom), m);
    if constexpr (kTo < kFrom) return _mm256_and_si256(_mm256_srli_epi16(h, kFrom - kTo), m);
    return _mm256_and_si256(h, m);
}

// Vectors K (lo: inputs 4K..) and K + 4 (hi: 16 + 4K..) of half h of a unit
// of nibbles at nib (Q4_K's, Q5_K's, IQ4_XS's; a nibble type's block), as
// bytes: the quants, with (kFifth) the fifth bits of hb, the half's
// fifth-bit vector.
template <bool kFifth, int K>
inline void unit_quants(const uint8_t *nib, int h, __m256i hb, __m256i &lo, __m256i &hi) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F), n = load(nib + 64 * K + 32 * h);
    lo = _mm256_and_si256(n, lo4);
    hi = _mm256_and_si256(_mm256_srli_epi16(n, 4), lo4);
    if constexpr (kFifth) {
        lo = _mm256_or_si256(lo, field<K, 4, 1>(hb));
        hi = _mm256_or_si256(hi, field<K + 4, 4, 1>(hb));
    }
}

// A 16-byte table (IQ4_NL's) in both 128-bit lanes, for VPSHUFB.
inline __m256i table16(const std::array<uint8_t, 16> &t) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(t.data())));
}

// Q8_0 (signed through the sign trick, whose |w| <= 128 pairs cannot
// saturate), or any other Block32 (kType: 4- and 5-bit quants decoded from
// their nibbles and fifth bits, unsigned, so VPMADDUBSW pairs of at most
// 2 x 31 x 128; sums from the input's bias shifted (block32_bias_shift);
// the minimums times the Q8_1 input's scaled sums; IQ4_NL's table values
// signed, through the sign trick).
template <int C, bool kStream, Block32 kType = Block32::q8_0>
void q8_0_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    if constexpr (C > 4) {
        q8_0_tile<4, kStream, kType>(w, nb, xq, x_stride, y, ldy);
        q8_0_tile<C - 4, false, kType>(w, nb, xq + 4 * x_stride, x_stride, y + 4 * ldy, ldy);
        return;
    }
    constexpr size_t kBlock = block32_bytes(kType), kQs = block32_quants(kType);
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256 acc[2][C];
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < C; ++c) acc[h][c] = _mm256_setzero_ps();
    halves_by_block<C, kStream>(nb, [&](auto h, int64_t b) TOY_INLINE {
        const uint8_t *wb = w + b * kBlock;
        if (h == 0) prefetch_block<kStream>(wb, kBlock);
        __m256i s[C];
        for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
        if constexpr (kType == Block32::q8_0) {
            for (int j = 0; j < 8; ++j) {
                const __m256i ws = _mm256_xor_si256(load(wb + kQs + 64 * j + 32 * h), flip);  // the signed quants
                const __m256i aw = _mm256_sign_epi8(ws, ws);
                for (int c = 0; c < C; ++c) {
                    const __m256i xv = bcast4(xq + c * x_stride + b * kColBlock + 4 * j);
                    s[c] = _mm256_add_epi32(s[c], dot4(aw, _mm256_sign_epi8(xv, ws)));
                    in_register(s[c]);
                }
            }
        } else if constexpr (kType == Block32::q5_1x) {  // unsigned quants as stored
            for (int j = 0; j < 8; ++j) {
                const __m256i wv = load(wb + kQs + 64 * j + 32 * h);
                for (int c = 0; c < C; ++c) {
                    s[c] = _mm256_add_epi32(s[c], dot4(wv, bcast4(xq + c * x_stride + b * kColBlock + 4 * j)));
                    in_register(s[c]);
                }
            }
        } else {
            const __m256i hb = has_fifth(kType) ? load(wb + block32_bits(kType) + 32 * h) : _mm256_setzero_si256();
            auto step = [&](auto kk) TOY_INLINE {  // inputs 4k.. (low nibbles) and 16 + 4k.. (high)
                constexpr int k = decltype(kk)::value;
                __m256i lo, hi;
                unit_quants<has_fifth(kType), k>(wb + kQs, h, hb, lo, hi);
                if constexpr (kType == Block32::iq4_nl) {
                    // the table's signed values, through Q8_0's sign trick (pairs up to 2 x 127 x 127)
                    const __m256i table = table16(kIq4nlSigned);
                    const __m256i wl = _mm256_shuffle_epi8(table, lo), wh = _mm256_shuffle_epi8(table, hi);
                    const __m256i al = _mm256_sign_epi8(wl, wl), ah = _mm256_sign_epi8(wh, wh);
                    for (int c = 0; c < C; ++c) {
                        const uint8_t *xb = xq + c * x_stride + b * kColBlock;
                        s[c] = _mm256_add_epi32(s[c], _mm256_add_epi32(dot4(al, _mm256_sign_epi8(bcast4(xb + 4 * k), wl)),
                                                                       dot4(ah, _mm256_sign_epi8(bcast4(xb + 16 + 4 * k), wh))));
                        in_register(s[c]);
                    }
                } else {
                    for (int c = 0; c < C; ++c) {
                        const uint8_t *xb = xq + c * x_stride + b * kColBlock;
                        // two pairs of at most 7936 add up in int16, one widening
                        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(xb + 4 * k)),
                                                           _mm256_maddubs_epi16(hi, bcast4(xb + 16 + 4 * k)));
                        s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
                        in_register(s[c]);
                    }
                }
            };
            step(std::integral_constant<int, 0>{});
            step(std::integral_constant<int, 1>{});
            step(std::integral_constant<int, 2>{});
            step(std::integral_constant<int, 3>{});
        }
        const __m256 dw = _mm256_cvtph_ps(load128(wb + 16 * h));
        for (int c = 0; c < C; ++c) {
            const uint8_t *xb = xq + c * x_stride + b * kColBlock;
            if constexpr (block32_bias_shift(kType) > 0) {
                int32_t bias;
                std::memcpy(&bias, xb + kQK + 4, sizeof bias);
                s[c] = _mm256_add_epi32(s[c], _mm256_set1_epi32(bias >> block32_bias_shift(kType)));  // -8 or -16 x the input's sum
            }
            acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), _mm256_mul_ps(dw, _mm256_set1_ps(load_f32(xb + kQK))), acc[h][c]);
            if constexpr (has_min(kType)) {
                const __m256 mw = _mm256_cvtph_ps(load128(wb + kQ51M + 16 * h));
                acc[h][c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(load_f32(xb + kQK + 4)), acc[h][c]);
            }
        }
    });
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + c * ldy + 8 * h, acc[h][c]);
}

// A nibble type's blocks in its expansion's layout (Q8_0's, q5_1x's): the
// scales (and minimums) copied, the quants decoded once.
template <Block32 kType>
void expand_blocks(const uint8_t *w, int64_t nb, uint8_t *out) {
    constexpr Block32 kTo = block32_expansion(kType);
    const __m256i offset = _mm256_set1_epi8(static_cast<char>(block32_expansion_offset(kType)));
    for (int64_t b = 0; b < nb; ++b, w += block32_bytes(kType), out += block32_bytes(kTo)) {
        std::memcpy(out, w, block32_quants(kType));  // d, and the minimums
        const uint8_t *nib = w + block32_quants(kType);
        uint8_t *q = out + block32_quants(kTo);
        for (int h = 0; h < 2; ++h) {
            const __m256i hb = has_fifth(kType) ? load(w + block32_bits(kType) + 32 * h) : _mm256_setzero_si256();
            auto put = [&](auto kk) TOY_INLINE {
                constexpr int k = decltype(kk)::value;
                __m256i lo, hi;
                unit_quants<has_fifth(kType), k>(nib, h, hb, lo, hi);
                if constexpr (kType == Block32::iq4_nl) {  // t[q] + 128, Q8_0's form
                    const __m256i table = table16(kIq4nlBiased);
                    lo = _mm256_shuffle_epi8(table, lo), hi = _mm256_shuffle_epi8(table, hi);
                }
                _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + 64 * k + 32 * h), _mm256_add_epi8(lo, offset));
                _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + 64 * (k + 4) + 32 * h), _mm256_add_epi8(hi, offset));
            };
            put(std::integral_constant<int, 0>{});
            put(std::integral_constant<int, 1>{});
            put(std::integral_constant<int, 2>{});
            put(std::integral_constant<int, 3>{});
        }
    }
}

void expand(ggml_type type, const uint8_t *w, int64_t nb, uint8_t *out) {
    with_nibble_type(type, [&](auto t) { expand_blocks<decltype(t)::value>(w, nb, out); });
}

// F16. Both halves of the group per input, so each weight vector is
// converted once per pass and feeds C FMAs. Prompts (4 columns or more): up
// to 6 columns per pass (12 sums in registers; more split into passes of 6,
// and the set asks for 6 at a time). On Zen 3 this runs 80-97 GFLOPS on one
// core where one half at a time against 8 columns ran 61-68, though it
// converted fewer weights per FMA: each input is broadcast once for 16 rows
// instead of 8, and 12 independent sums hide the FMA latency better than 8
// (which of the two matters most was not measured). Decoding (up
// to 3 columns): two partial sums per half (even and odd inputs) that hide
// the FMA latency and halve the rounding of long sums.
template <int C, bool kStream>
void f16_tile(const uint8_t *w, int64_t n_in, const uint8_t *x, size_t x_stride, float *y, int64_t ldy) {
    TOY_SPLIT_COLUMNS(f16_tile, kF16Cols, n_in, x)
    const float *xc[C];
    for (int c = 0; c < C; ++c) xc[c] = reinterpret_cast<const float *>(x + c * x_stride);
    if constexpr (C >= 4) {
        __m256 acc[C][2];
        TOY_UNROLL
        for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
        for (int64_t k = 0; k < n_in; ++k) {
            const __m256 w0 = _mm256_cvtph_ps(load128(w + 32 * k)), w1 = _mm256_cvtph_ps(load128(w + 32 * k + 16));
            TOY_UNROLL
            for (int c = 0; c < C; ++c) {
                const __m256 xv = _mm256_set1_ps(xc[c][k]);
                acc[c][0] = _mm256_fmadd_ps(w0, xv, acc[c][0]);
                acc[c][1] = _mm256_fmadd_ps(w1, xv, acc[c][1]);
            }
        }
        TOY_UNROLL
        for (int c = 0; c < C; ++c)
            TOY_UNROLL
            for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + c * ldy + 8 * h, acc[c][h]);
    } else {
        __m256 acc[C][2][2];
        TOY_UNROLL
        for (int c = 0; c < C; ++c)
            TOY_UNROLL
            for (int h = 0; h < 2; ++h) acc[c][h][0] = acc[c][h][1] = _mm256_setzero_ps();
        const auto step = [&](int64_t k, int p) TOY_INLINE {
            const __m256 w0 = _mm256_cvtph_ps(load128(w + 32 * k)), w1 = _mm256_cvtph_ps(load128(w + 32 * k + 16));
            TOY_UNROLL
            for (int c = 0; c < C; ++c) {
                const __m256 xv = _mm256_set1_ps(xc[c][k]);
                acc[c][0][p] = _mm256_fmadd_ps(w0, xv, acc[c][0][p]);
                acc[c][1][p] = _mm256_fmadd_ps(w1, xv, acc[c][1][p]);
            }
        };
        int64_t k = 0;
        for (; k + 1 < n_in; k += 2) {
            prefetch_block<kStream>(w + 32 * k, 64);
            step(k, 0);
            step(k + 1, 1);
        }
        if (k < n_in) step(k, 0);
        TOY_UNROLL
        for (int c = 0; c < C; ++c)
            TOY_UNROLL
            for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + c * ldy + 8 * h, _mm256_add_ps(acc[c][h][0], acc[c][h][1]));
    }
}

// BF16 without VDPBF16PS: a bfloat16 is the top half of a float32, so each
// 32-bit lane (inputs 2p, 2p+1 of one row) gives both as floats by a shift
// and a mask; exact products, as in ggml's BF16 dot product.
inline __m256 bf16_lo(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
inline __m256 bf16_hi(__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)))); }

template <int C, bool kStream>
void bf16_tile(const uint8_t *w, int64_t n_pairs, const uint8_t *x, size_t x_stride, float *y, int64_t ldy) {
    TOY_SPLIT_COLUMNS(bf16_tile, 4, n_pairs, x)
    for (int h = 0; h < 2; ++h) {
        __m256 acc[C][2];
        for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
        for (int64_t p = 0; p < n_pairs; ++p) {
            if (h == 0) prefetch_block<kStream>(w + 64 * p, 64);
            const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 64 * p + 32 * h));
            const __m256 w0 = bf16_lo(wv), w1 = bf16_hi(wv);
            for (int c = 0; c < C; ++c) {
                const __m256i xv = bcast4(x + c * x_stride + 4 * p);
                acc[c][0] = _mm256_fmadd_ps(w0, bf16_lo(xv), acc[c][0]);
                acc[c][1] = _mm256_fmadd_ps(w1, bf16_hi(xv), acc[c][1]);
            }
        }
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + c * ldy + 8 * h, _mm256_add_ps(acc[c][0], acc[c][1]));
    }
}

// The K-quant tiles' frame: y zeroed (they add each super-block's sums to
// it), then every (half, super-block) with the block's weights (prefetched
// when streamed) and each column's Q8_K input for it.
template <int C, bool kStream, size_t kBlock, typename F>
TOY_INLINE inline void k_quant_blocks(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y,
                                      int64_t ldy, F &&body) {
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + c * ldy + 8 * h, _mm256_setzero_ps());
    halves_by_block<C, kStream>(nb, [&](auto h, int64_t b) TOY_INLINE {
        const uint8_t *wb = w + b * kBlock;
        const uint8_t *xb[C];
        for (int c = 0; c < C; ++c) xb[c] = xq + c * x_stride + b * kKColBlock;
        body(h, wb, xb);
    });
}

// Q4_K and Q6_K keep their float sums in y (16 registers hold the integer
// sums of 4 columns, not those too): one load and store per super-block.
// Q4_K, or Q5_K (kBlock kQ5Block: its fifth bits after Q4_K's layout, the
// same scales, mins and float steps).
template <int C, bool kStream, size_t kBlock = kQ4Block>
void q4_k_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    if constexpr (C > 4) {  // with the int16 sums below 4 columns fit (2 before them)
        q4_k_tile<4, kStream, kBlock>(w, nb, xq, x_stride, y, ldy);
        q4_k_tile<C - 4, false, kBlock>(w, nb, xq + 4 * x_stride, x_stride, y + 4 * ldy, ldy);
        return;
    }
    constexpr bool kQ5 = kBlock == kQ5Block;
    k_quant_blocks<C, kStream, kBlock>(w, nb, xq, x_stride, y, ldy, [&](auto h, const uint8_t *wb, const uint8_t *const *xb) TOY_INLINE {
        __m256i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            prefetch_part<kStream>(wb, kBlock, 8 * h + j, 16);
            // A 4-bit quant times an int8 input (|q| <= 127, Q8_K) gives
            // VPMADDUBSW pairs of at most 3810: the unit's 8 products per
            // row add up in int16 (<= 30480), and one VPMADDWD against the
            // row's sub-block scale (< 64, in both halves of its lane) gives
            // the scaled int32 sum: no VPMULLD, one widening per unit. A
            // 5-bit quant's pairs reach 7874: widened every 4 products.
            const __m256i sc32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(wb + kQ4Sc + 16 * j + 8 * h)));
            const __m256i sc = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));
            const __m256i hb = kQ5 ? load(wb + kQ5Qh + 64 * j + 32 * h) : _mm256_setzero_si256();
            __m256i s[C];
            auto steps = [&](auto kc) TOY_INLINE {  // inputs 4k.. and 16 + 4k.. for k in kc, kc + 1 (Q5_K) or kc..kc + 3
                constexpr int k0 = decltype(kc)::value, kn = kQ5 ? 2 : 4;
                for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
                auto step = [&](auto kk) TOY_INLINE {
                    constexpr int k = decltype(kk)::value;
                    __m256i lo, hi;
                    unit_quants<kQ5, k>(wb + kQ4Qs + 256 * j, h, hb, lo, hi);
                    for (int c = 0; c < C; ++c) {
                        const uint8_t *q = xb[c] + kKQs + 32 * j;
                        s[c] = _mm256_add_epi16(s[c], _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(q + 4 * k)),
                                                                       _mm256_maddubs_epi16(hi, bcast4(q + 16 + 4 * k))));
                        in_register(s[c]);
                    }
                };
                step(std::integral_constant<int, k0>{});
                step(std::integral_constant<int, k0 + 1>{});
                if constexpr (kn == 4) {
                    step(std::integral_constant<int, k0 + 2>{});
                    step(std::integral_constant<int, k0 + 3>{});
                }
                for (int c = 0; c < C; ++c) tot[c] = _mm256_add_epi32(tot[c], _mm256_madd_epi16(s[c], sc));
            };
            steps(std::integral_constant<int, 0>{});
            if constexpr (kQ5) steps(std::integral_constant<int, 2>{});
        }
        const __m256 dw = _mm256_cvtph_ps(load128(wb + kQ4D + 16 * h)), dm = _mm256_cvtph_ps(load128(wb + kQ4Dmin + 16 * h));
        for (int c = 0; c < C; ++c) {
            __m256i summ = _mm256_setzero_si256();
            for (int p = 0; p < 4; ++p) {
                const __m256i mins = _mm256_cvtepu8_epi16(load128(wb + kQ4Min + 32 * p + 16 * h));
                summ = _mm256_add_epi32(summ, _mm256_madd_epi16(mins, bcast4(xb[c] + kKSum32 + 4 * p)));
            }
            const __m256 dy = _mm256_set1_ps(load_f32(xb[c] + kKD));
            float *yc = y + c * ldy + 8 * h;
            __m256 acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[c]), _mm256_mul_ps(dw, dy), _mm256_loadu_ps(yc));
            _mm256_storeu_ps(yc, _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_mul_ps(dm, dy), acc));
        }
    });
}

// The offset that makes an X4 type's table unsigned for VPMADDUBSW: 16 for
// tables within +-15 (IQ3_S, IQ1_S), 64 within +-63 (IQ3_XXS, IQ2_XXS); 0
// for IQ4_XS's (up to 127), which takes the sign trick instead.
constexpr int x4_offset(X4 t) {
    int most = 0;
    for (uint8_t v : x4_table(t, 0)) {
        const int value = static_cast<int8_t>(v);  // (std::abs is not constexpr in every standard library)
        most = std::max(most, value < 0 ? -value : value);
    }
    return most <= 15 ? 16 : most <= 63 ? 64 : 0;
}

// The X4 types (IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS, IQ1_S): per unit the
// exact sum of t[q] x input, times the unit's signed scale; per super-block
// d (x4_d_factor) times the input's scale. IQ4_XS's table goes through
// Q8_0's sign trick (pairs up to 2 x 127 x 127: two sign operations per 8
// products of a column); the others' t[q] + offset (x4_offset) are unsigned
// bytes against the signed input, offset x the input's sums of 32 taken back
// once per super-block: pairs of at most 2 x 126 x 127 (offset 64), or 2 x
// 31 x 127 (offset 16), four added in int16. The VPMADDWD that widens the
// pairs takes the rows' scales (at most 31 or 32 in magnitude) where ones
// would do: the sums come scaled, with no VPMULLD per unit and column
// (IQ4_XS's 8-column prompt tile 63 -> 66 GMAC/s on Zen 4 as an AVX2 CPU).
// Against the sign trick, Llama-3.2-1B's pp512 on this set: IQ3_M 126 ->
// 187 t/s, IQ1_S 121 -> 187, IQ2_XXS 124 -> 158; decoding level
// (BENCHMARKS.md).
template <int C, bool kStream, X4 kType>
void x4_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    if constexpr (C > 4) {
        x4_tile<4, kStream, kType>(w, nb, xq, x_stride, y, ldy);
        x4_tile<C - 4, false, kType>(w, nb, xq + 4 * x_stride, x_stride, y + 4 * ldy, ldy);
        return;
    }
    constexpr int kOffset = x4_offset(kType);
    static constexpr std::array<uint8_t, 16> kTable = x4_table(kType, kOffset);
    const __m256i table = table16(kTable);
    k_quant_blocks<C, kStream, kX4Block>(w, nb, xq, x_stride, y, ldy, [&](auto h, const uint8_t *wb, const uint8_t *const *xb) TOY_INLINE {
        // the signed scales of unit j's 8 rows (this half's), a byte each
        auto scales = [&](int j) TOY_INLINE { return _mm_loadl_epi64(reinterpret_cast<const __m128i *>(wb + kX4Sc + 16 * j + 8 * h)); };
        __m256i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            prefetch_part<kStream>(wb, kX4Block, 8 * h + j, 16);
            const __m128i sc8 = scales(j);
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc8, sc8));  // in both int16 halves of a row's lane
            // the table's values of inputs 4K.. (wl) and 16 + 4K.. (wh)
            auto weights = [&](auto kk, __m256i &wl, __m256i &wh) TOY_INLINE {
                __m256i lo, hi;
                unit_quants<false, decltype(kk)::value>(wb + kX4Qs + 256 * j, h, _mm256_setzero_si256(), lo, hi);
                wl = _mm256_shuffle_epi8(table, lo);
                wh = _mm256_shuffle_epi8(table, hi);
            };
            if constexpr (kOffset == 16) {
                // two steps' four pairs per column in int16 (<= 4 x 2 x 31 x 127), then one widening
                auto two_steps = [&](auto kk) TOY_INLINE {
                    constexpr int k = decltype(kk)::value;
                    __m256i al, ah, bl, bh;
                    weights(std::integral_constant<int, k>{}, al, ah);
                    weights(std::integral_constant<int, k + 1>{}, bl, bh);
                    for (int c = 0; c < C; ++c) {
                        const uint8_t *q = xb[c] + kKQs + 32 * j + 4 * k;
                        const __m256i p = _mm256_add_epi16(
                            _mm256_add_epi16(_mm256_maddubs_epi16(al, bcast4(q)), _mm256_maddubs_epi16(ah, bcast4(q + 16))),
                            _mm256_add_epi16(_mm256_maddubs_epi16(bl, bcast4(q + 4)), _mm256_maddubs_epi16(bh, bcast4(q + 20))));
                        tot[c] = _mm256_add_epi32(tot[c], _mm256_madd_epi16(p, sc));
                        in_register(tot[c]);
                    }
                };
                two_steps(std::integral_constant<int, 0>{});
                two_steps(std::integral_constant<int, 2>{});
            } else {
                auto step = [&](auto kk) TOY_INLINE {
                    constexpr int k = decltype(kk)::value;
                    __m256i wl, wh;
                    weights(kk, wl, wh);
                    // the unsigned side: t + offset, or (the sign trick) |t| against the input with t's signs
                    const __m256i ul = kOffset == 0 ? _mm256_sign_epi8(wl, wl) : wl, uh = kOffset == 0 ? _mm256_sign_epi8(wh, wh) : wh;
                    for (int c = 0; c < C; ++c) {
                        const uint8_t *q = xb[c] + kKQs + 32 * j + 4 * k;
                        __m256i xl = bcast4(q), xh = bcast4(q + 16);
                        if constexpr (kOffset == 0) {
                            xl = _mm256_sign_epi8(xl, wl);
                            xh = _mm256_sign_epi8(xh, wh);
                        }
                        tot[c] = _mm256_add_epi32(tot[c], _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ul, xl), sc),
                                                                           _mm256_madd_epi16(_mm256_maddubs_epi16(uh, xh), sc)));
                        in_register(tot[c]);
                    }
                };
                step(std::integral_constant<int, 0>{});
                step(std::integral_constant<int, 1>{});
                step(std::integral_constant<int, 2>{});
                step(std::integral_constant<int, 3>{});
            }
        }
        if constexpr (kOffset != 0) {
            // sum t x = sum (t + offset) x - offset x the input's sum of 32, per unit and
            // scaled: two units' scales per row against the input's two sums, in one VPMADDWD
            __m256i pairs[4];
            for (int p = 0; p < 4; ++p) pairs[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(scales(2 * p), scales(2 * p + 1)));
            for (int c = 0; c < C; ++c) {
                __m256i corr = _mm256_setzero_si256();
                for (int p = 0; p < 4; ++p) corr = _mm256_add_epi32(corr, _mm256_madd_epi16(pairs[p], bcast4(xb[c] + kKSum32 + 4 * p)));
                tot[c] = _mm256_sub_epi32(tot[c], _mm256_slli_epi32(corr, std::countr_zero(static_cast<unsigned>(kOffset))));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(load128(wb + kX4D + 16 * h));
        for (int c = 0; c < C; ++c) {
            float *yc = y + c * ldy + 8 * h;
            const __m256 dy = _mm256_set1_ps(load_f32(xb[c] + kKD) * x4_d_factor(kType));
            _mm256_storeu_ps(yc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[c]), _mm256_mul_ps(dw, dy), _mm256_loadu_ps(yc)));
        }
    });
}

// k16_offset_shift on this set: the IQ types' tables unsigned with x4_offset
// (64 for IQ2_XS's and IQ2_S's values up to 43, 16 for IQ1_M's up to 9).
constexpr int avx2_k16_offset_shift(K16 t) {
    return k16_offset_shift(t, std::countr_zero(static_cast<unsigned>(x4_offset(k16_values(t)))));
}

// A K16 type's quants of inputs 4K.. (a) and 16 + 4K.. (b) of unit j's half
// h, from its bit planes p0 and p1 (Q6_K's high bits, Q3_K's and Q2_K's low
// bits) and t: Q3_K's third bits, or an IQ type's table + offset (its quants
// are Q6_K's low nibbles, looked up).
template <K16 kType, int K>
TOY_INLINE inline void k16_vectors(const uint8_t *wb, int j, int h, __m256i p0, __m256i p1, __m256i t, __m256i &a, __m256i &b) {
    if constexpr (kType == K16::q6_k || k16_table(kType)) {
        const __m256i lo4 = _mm256_set1_epi8(0x0F), n = load(wb + kQ6Ql + 256 * j + 64 * K + 32 * h);
        a = _mm256_and_si256(n, lo4);
        b = _mm256_and_si256(_mm256_srli_epi16(n, 4), lo4);
        if constexpr (k16_table(kType)) {
            a = _mm256_shuffle_epi8(t, a);
            b = _mm256_shuffle_epi8(t, b);
        } else {
            a = _mm256_or_si256(a, field<2 * K, 4, 2>(p0));
            b = _mm256_or_si256(b, field<2 * K, 4, 2>(p1));
        }
    } else if constexpr (kType == K16::q3_k) {
        a = _mm256_or_si256(field<2 * K, 0, 2>(p0), field<K, 2, 1>(t));
        b = _mm256_or_si256(field<2 * K, 0, 2>(p1), field<K + 4, 2, 1>(t));
    } else {
        a = field<2 * K, 0, 2>(p0);
        b = field<2 * K, 0, 2>(p1);
    }
}

// A K16 type's scales of unit j's two sub-blocks of 16 as int16 per row (8
// rows: half h; Q2_K's low nibbles), or with kCorrection what multiplies the
// input's sums per 16 (Q2_K's mins, the high nibbles; the others' scales).
template <K16 kType, bool kCorrection>
TOY_INLINE inline __m256i k16_pairs(const uint8_t *wb, int j, int h) {
    const __m128i bytes = load128(wb + (kType == K16::q2_k ? kQ2Sc : kQ6Sc) + 32 * j + 16 * h);
    if constexpr (kType != K16::q2_k) return _mm256_cvtepi8_epi16(bytes);
    const __m256i p = _mm256_cvtepu8_epi16(bytes);
    return kCorrection ? _mm256_srli_epi16(p, 4) : _mm256_and_si256(p, _mm256_set1_epi16(15));
}

// Q6_K, Q3_K, Q2_K or an IQ type, four columns per pass. A 6-bit quant
// (stored + 32, below 64) times an int8 input gives VPMADDUBSW pairs of at
// most 16002: two of them add up in int16, and VPMADDWD against the
// sub-block's scale (in both halves of the row's lane) widens and scales
// them at once, no VPMULLD. IQ1_M's t[q] + 16 (at most 25) likewise; IQ2_XS's
// and IQ2_S's t[q] + 64 (at most 107) give pairs up to 27178, each widened
// and scaled alone.
template <int C, bool kStream, K16 kType>
void k16_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    if constexpr (C > 4) {
        k16_tile<4, kStream, kType>(w, nb, xq, x_stride, y, ldy);
        k16_tile<C - 4, false, kType>(w, nb, xq + 4 * x_stride, x_stride, y + 4 * ldy, ldy);  // the weights are in cache
        return;
    }
    constexpr size_t kBlock = k16_block(kType);
    constexpr size_t kPlanes = kType == K16::q6_k ? kQ6Qh : kType == K16::q3_k ? kQ3Ql : kQ2Qs;  // (none: the IQ types)
    constexpr bool kTable = k16_table(kType);
    constexpr bool kPairsAdd = kType != K16::iq2;  // quants below 64 (IQ2's t + 64 reach 107): two pairs add in int16
    const __m256i table = kTable ? table16(x4_table(k16_values(kType), 1 << avx2_k16_offset_shift(kType))) : _mm256_setzero_si256();
    k_quant_blocks<C, kStream, kBlock>(w, nb, xq, x_stride, y, ldy, [&](auto h, const uint8_t *wb, const uint8_t *const *xb) TOY_INLINE {
        __m256i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            prefetch_part<kStream>(wb, kBlock, 8 * h + j, 16);
            const __m256i none = _mm256_setzero_si256();  // (the IQ types have no planes)
            const __m256i p0 = kTable ? none : load(wb + kPlanes + 128 * j + 32 * h);
            const __m256i p1 = kTable ? none : load(wb + kPlanes + 128 * j + 64 + 32 * h);
            const __m256i t = kType == K16::q3_k ? load(wb + kQ3Qh + 64 * j + 32 * h) : table;
            // the unit's two scales (int16 per row: a low, b high), each in both halves
            const __m256i pr = k16_pairs<kType, false>(wb, j, h);
            const __m256i sca = _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pr, 0xA0), 0xA0);
            const __m256i scb = _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pr, 0xF5), 0xF5);
            // steps k and k+1 (inputs 4k.. of both halves of the unit) together:
            // their unpacked quants are shared by the columns, which keep only
            // their running sums (4 columns fit in 16 registers)
            auto steps = [&](auto kc) TOY_INLINE {
                constexpr int k = decltype(kc)::value;
                __m256i va0, vb0, va1, vb1;
                k16_vectors<kType, k>(wb, j, h, p0, p1, t, va0, vb0);
                k16_vectors<kType, k + 1>(wb, j, h, p0, p1, t, va1, vb1);
                for (int c = 0; c < C; ++c) {
                    const uint8_t *q = xb[c] + kKQs + 32 * j + 4 * k;
                    const __m256i qa0 = _mm256_maddubs_epi16(va0, bcast4(q)), qa1 = _mm256_maddubs_epi16(va1, bcast4(q + 4));
                    const __m256i qb0 = _mm256_maddubs_epi16(vb0, bcast4(q + 16)), qb1 = _mm256_maddubs_epi16(vb1, bcast4(q + 20));
                    if constexpr (kPairsAdd) {
                        tot[c] = _mm256_add_epi32(tot[c], _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(qa0, qa1), sca),
                                                                           _mm256_madd_epi16(_mm256_add_epi16(qb0, qb1), scb)));
                    } else {
                        tot[c] = _mm256_add_epi32(tot[c], _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(qa0, sca), _mm256_madd_epi16(qa1, sca)),
                                                                           _mm256_add_epi32(_mm256_madd_epi16(qb0, scb), _mm256_madd_epi16(qb1, scb))));
                    }
                    in_register(tot[c]);
                }
            };
            steps(std::integral_constant<int, 0>{});
            steps(std::integral_constant<int, 2>{});
        }
        const __m256 dw = _mm256_cvtph_ps(load128(wb + kQ6D + 16 * h));  // where all three keep d
        for (int c = 0; c < C; ++c) {
            // Q6_K's quants are stored + 32, Q3_K's + 4, the IQ types' + 64 or 16: take
            // back that x sum of scale x sum of the 16 inputs; Q2_K's mins x the sums go with dmin
            __m256i corr = _mm256_setzero_si256();
            for (int j = 0; j < 8; ++j) {
                corr = _mm256_add_epi32(corr, _mm256_madd_epi16(k16_pairs<kType, true>(wb, j, h), bcast4(xb[c] + kKSum16 + 4 * j)));
            }
            float *yc = y + c * ldy + 8 * h;
            const __m256 dy = _mm256_set1_ps(load_f32(xb[c] + kKD) * k16_d_factor(kType));
            if constexpr (kType == K16::q2_k) {
                const __m256 dm = _mm256_cvtph_ps(load128(wb + kQ2Dmin + 16 * h));
                const __m256 acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[c]), _mm256_mul_ps(dw, dy), _mm256_loadu_ps(yc));
                _mm256_storeu_ps(yc, _mm256_fnmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_mul_ps(dm, dy), acc));
            } else {
                const __m256i sum = _mm256_sub_epi32(tot[c], _mm256_slli_epi32(corr, avx2_k16_offset_shift(kType)));
                _mm256_storeu_ps(yc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, dy), _mm256_loadu_ps(yc)));
            }
        }
    });
}

#undef TOY_SPLIT_COLUMNS
#undef TOY_INLINE
#undef TOY_UNROLL

constexpr Tiles kQ8Tiles = TOY_TILES(q8_0_tile), kF16Tiles = TOY_TILES(f16_tile), kQ4KTiles = TOY_TILES(q4_k_tile),
                 kQ5KTiles = TOY_TILES_OF(q4_k_tile, kQ5Block), kQ6KTiles = TOY_TILES_OF(k16_tile, K16::q6_k),
                 kQ40Tiles = TOY_TILES_OF(q8_0_tile, Block32::q4_0), kQ41Tiles = TOY_TILES_OF(q8_0_tile, Block32::q4_1),
                 kQ50Tiles = TOY_TILES_OF(q8_0_tile, Block32::q5_0), kQ51Tiles = TOY_TILES_OF(q8_0_tile, Block32::q5_1),
                 kQ51xTiles = TOY_TILES_OF(q8_0_tile, Block32::q5_1x), kIq4nlTiles = TOY_TILES_OF(q8_0_tile, Block32::iq4_nl),
                 kQ3KTiles = TOY_TILES_OF(k16_tile, K16::q3_k),
                 kQ2KTiles = TOY_TILES_OF(k16_tile, K16::q2_k), kBf16Tiles = TOY_TILES(bf16_tile),
                 kIq2Tiles = TOY_TILES_OF(k16_tile, K16::iq2), kIq1mTiles = TOY_TILES_OF(k16_tile, K16::iq1_m);
constexpr Tiles kX4Tiles[kX4Types] = TOY_X4_TILES(x4_tile);

}  // namespace

const KernelSet *avx2_kernels() {
    // F16 is packed: with the tile above, SmolLM2-135M F16 on Zen 3 decodes
    // faster than over ggml's layout and its prompts are no slower than
    // ggml's tinyBLAS (BENCHMARKS.md). BF16 is not (not measured against
    // ggml's on an AVX2 CPU); its tiles run matrices the AVX-512 set packed.
    static const KernelSet set{"avx2", 8, kF16Cols, &kQ8Tiles, &kF16Tiles, &kQ4KTiles, &kQ6KTiles, &kQ5KTiles,
                               &kQ40Tiles, &kQ41Tiles, &kQ50Tiles, &kQ51Tiles, &kQ51xTiles, &kIq4nlTiles, &kQ3KTiles,
                               &kQ2KTiles, &kBf16Tiles, TOY_X4_POINTERS(kX4Tiles), &kIq2Tiles, &kIq1mTiles, true, false,
                               prepare, expand};
    return &set;
}

}  // namespace toy::graph::packed

TOY_TARGET_END

#else

namespace toy::graph::packed {
const KernelSet *avx2_kernels() { return nullptr; }
}  // namespace toy::graph::packed

#endif
