// Small AVX-512 steps the packed kernels share (packed_kernels_avx512.cpp and
// its AMX tiles, packed_kernels_amx.cpp): compiled for AVX-512 F/BW/VL
// wherever it is included, used only where the CPU has them.
#pragma once

#include "graph/packed_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

TOY_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace toy::graph::packed {

// The 4 bytes at p in every 32-bit lane, loaded straight into the register
// (a broadcast through a general register costs two more instructions).
inline __m512i bcast4(const uint8_t *p) { return _mm512_broadcastd_epi32(_mm_loadu_si32(p)); }

// The 8 vectors of unit j's 4-bit quants: low nibbles inputs 4k.., high 16 + 4k..
inline void load_nibbles(const uint8_t *p, __m512i *v) {
    const __m512i lo = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
        const __m512i n = _mm512_loadu_si512(p + 64 * k);
        v[k] = _mm512_and_si512(n, lo);
        v[k + 4] = _mm512_and_si512(_mm512_srli_epi16(n, 4), lo);
    }
}

// h with every byte's bits from bit kFrom moved to bit kTo by a 16-bit
// shift: a field of a byte's bits lands in the same byte, which a mask of
// the field's new place keeps (field, with_field).
template <int kFrom, int kTo>
inline __m512i shifted(__m512i h) {
    if constexpr (kTo > kFrom) return _mm512_slli_epi16(h, kTo - kFrom);
    if constexpr (kTo < kFrom) return _mm512_srli_epi16(h, kFrom - kTo);
    return h;
}

// The kWidth bits of every byte of h from bit kFrom, moved to bit kTo (the rest cleared).
template <int kFrom, int kTo, int kWidth>
inline __m512i field(__m512i h) {
    return _mm512_and_si512(shifted<kFrom, kTo>(h), _mm512_set1_epi8(field_mask(kTo, kWidth)));
}

// v | field<kFrom, kTo, kWidth>(h), in one instruction.
template <int kFrom, int kTo, int kWidth>
inline __m512i with_field(__m512i v, __m512i h) {
    // clang defines the intrinsic as a macro, which would split a template call at its comma
    const __m512i moved = shifted<kFrom, kTo>(h);
    return _mm512_ternarylogic_epi32(v, moved, _mm512_set1_epi8(field_mask(kTo, kWidth)), 0xF8);
}

// The 8 vectors of a unit of 5-bit quants (32 inputs of 16 rows: Q5_K's
// sub-blocks, Q5_0's and Q5_1's blocks) from its 4 vectors of nibbles at nib
// and its fifth bits at bits: the quants as bytes, inputs 4k.. in v[k]
// (Q4_K's nibbles with bit k of the fifth-bit vector in bit 4).
inline void load_five_bit_unit(const uint8_t *nib, const uint8_t *bits, __m512i *v) {
    load_nibbles(nib, v);
    const __m512i h = _mm512_loadu_si512(bits);
    v[0] = with_field<0, 4, 1>(v[0], h), v[1] = with_field<1, 4, 1>(v[1], h);
    v[2] = with_field<2, 4, 1>(v[2], h), v[3] = with_field<3, 4, 1>(v[3], h);
    v[4] = with_field<4, 4, 1>(v[4], h), v[5] = with_field<5, 4, 1>(v[5], h);
    v[6] = with_field<6, 4, 1>(v[6], h), v[7] = with_field<7, 4, 1>(v[7], h);
}

// The 8 vectors of Q5_K unit j of the super-block at w.
inline void load_q5_k_unit(const uint8_t *w, int j, __m512i *v) {
    load_five_bit_unit(w + kQ4Qs + 256 * j, w + kQ5Qh + 64 * j, v);
}

// 8 vectors of nibbles looked up in a table of 16 bytes (PSHUFB, the table
// in every 128-bit lane).
inline void look_up(const std::array<uint8_t, 16> &t, __m512i *v) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(t.data())));
    for (int j = 0; j < 8; ++j) v[j] = _mm512_shuffle_epi8(table, v[j]);
}

// The 8 vectors of an X4 type's unit j of the
// super-block at w: t[q] + 128.
template <X4 kType>
inline void load_x4_unit(const uint8_t *w, int j, __m512i *v) {
    static constexpr std::array<uint8_t, 16> kTable = x4_table(kType, 128);
    load_nibbles(w + kX4Qs + 256 * j, v);
    look_up(kTable, v);
}

// The 8 vectors of 16 rows x 4 unsigned quants of a 32-value block at w
// (packed_kernels.h): Q8_0's (+128) and q5_1x's as stored, the others
// decoded from their nibbles (and fifth bits).
template <Block32 kType>
inline void load_block32(const uint8_t *w, __m512i *v) {
    if constexpr (!nibbles(kType)) {
        for (int j = 0; j < 8; ++j) v[j] = _mm512_loadu_si512(w + block32_quants(kType) + 64 * j);
    } else if constexpr (has_fifth(kType)) {
        load_five_bit_unit(w + block32_quants(kType), w + block32_bits(kType), v);
    } else {
        load_nibbles(w + block32_quants(kType), v);
        if constexpr (kType == Block32::iq4_nl) look_up(kIq4nlBiased, v);  // t[q] + 128
    }
}

// The 8 vectors of Q6_K unit j (32 inputs) of the super-block at w: its
// 6-bit quants (stored + 32) as bytes, inputs 4k.. in v[k], 16 + 4k.. in
// v[4 + k] (the nibbles with bits 2t..2t+1 of the planes in bits 4..5).
inline void load_q6_k_unit(const uint8_t *w, int j, __m512i *v) {
    load_nibbles(w + kQ6Ql + 256 * j, v);
    const __m512i h0 = _mm512_loadu_si512(w + kQ6Qh + 128 * j), h1 = _mm512_loadu_si512(w + kQ6Qh + 128 * j + 64);
    v[0] = with_field<0, 4, 2>(v[0], h0), v[1] = with_field<2, 4, 2>(v[1], h0);
    v[2] = with_field<4, 4, 2>(v[2], h0), v[3] = with_field<6, 4, 2>(v[3], h0);
    v[4] = with_field<0, 4, 2>(v[4], h1), v[5] = with_field<2, 4, 2>(v[5], h1);
    v[6] = with_field<4, 4, 2>(v[6], h1), v[7] = with_field<6, 4, 2>(v[7], h1);
}

// The 8 vectors of a K16 type's unit j (32 inputs) of the super-block at w:
// its quants as bytes (Q6_K's stored + 32, Q3_K's + 4, the IQ types' t[q] +
// 128), inputs 4k.. in v[k].
// The K16 IQ types' tables + 128 (1 << kK16IqShift) on this set: unsigned, as VPDPBUSD takes them.
constexpr int kK16IqShift = 7;
template <K16 kType>
inline void load_k16_unit(const uint8_t *w, int j, __m512i *v) {
    if constexpr (kType == K16::q6_k) {
        load_q6_k_unit(w, j, v);
    } else if constexpr (k16_table(kType)) {
        static constexpr std::array<uint8_t, 16> kTable = x4_table(k16_values(kType), 1 << kK16IqShift);
        load_nibbles(w + kI16Qs + 256 * j, v);
        look_up(kTable, v);
    } else {
        const uint8_t *planes = w + (kType == K16::q3_k ? kQ3Ql : kQ2Qs) + 128 * j;
        const __m512i p0 = _mm512_loadu_si512(planes), p1 = _mm512_loadu_si512(planes + 64);
        v[0] = field<0, 0, 2>(p0), v[1] = field<2, 0, 2>(p0), v[2] = field<4, 0, 2>(p0), v[3] = field<6, 0, 2>(p0);
        v[4] = field<0, 0, 2>(p1), v[5] = field<2, 0, 2>(p1), v[6] = field<4, 0, 2>(p1), v[7] = field<6, 0, 2>(p1);
        if constexpr (kType == K16::q3_k) {  // bit k of the third-bit vector into bit 2
            const __m512i h = _mm512_loadu_si512(w + kQ3Qh + 64 * j);
            v[0] = with_field<0, 2, 1>(v[0], h), v[1] = with_field<1, 2, 1>(v[1], h);
            v[2] = with_field<2, 2, 1>(v[2], h), v[3] = with_field<3, 2, 1>(v[3], h);
            v[4] = with_field<4, 2, 1>(v[4], h), v[5] = with_field<5, 2, 1>(v[5], h);
            v[6] = with_field<6, 2, 1>(v[6], h), v[7] = with_field<7, 2, 1>(v[7], h);
        }
    }
}

// 16 fp16 values at p as float32. (The zero-masked form with every lane set
// is the same vcvtph2ps; GCC 12's _mm512_cvtph_ps starts from an undefined
// register that its -Wuninitialized flags once inlined, as in the ASan build.)
inline __m512 load_f16x16(const uint8_t *p) {
    return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}

// The float steps after a tile's exact integer sums, shared by the AVX-512
// tiles and the AMX tiles so that both give the same bits.

// Q8_0, per block: acc + float(sum) x (weight scales x the column's scale).
inline __m512 q8_0_step(__m512 acc, __m512i sum, __m512 dw, float dx) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc);
}

// Q5_1, per block: Q8_0's step (no bias: its quants are unsigned as they
// are), then + the weights' minimums x the Q8_1 input's scaled sum sx.
inline __m512 q5_1_step(__m512 acc, __m512i sum, __m512 dw, float dx, __m512 mw, float sx) {
    return _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), q8_0_step(acc, sum, dw, dx));
}

// The integer a block's sums start from, from the input column's bias at p
// (block32_bias_shift).
template <Block32 kType>
inline __m512i block32_start(const uint8_t *p) {
    if constexpr (has_min(kType)) return _mm512_setzero_si512();
    if constexpr (block32_bias_shift(kType) > 0) return _mm512_srai_epi32(bcast4(p), block32_bias_shift(kType));
    return bcast4(p);
}

// Q4_K, the mins of a super-block's sub-blocks 2p and 2p + 1 as int16 pairs per row.
inline void load_q4_k_mins(const uint8_t *w, __m512i *mins) {
    for (int p = 0; p < 4; ++p) mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kQ4Min + 32 * p)));
}

// Q4_K, per super-block: the scaled sums (tot) times d, less the mins' sums
// (summ) times dmin, both times the column's scale dy.
inline __m512 q4_k_step(__m512 acc, __m512i tot, __m512i summ, __m512 dw, __m512 dm, float dy) {
    const __m512 dyv = _mm512_set1_ps(dy);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(dw, dyv), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dm, dyv), acc);
}

// A K16 type, the scales of unit j's two sub-blocks of 16 as int16 pairs per
// row (sign-extended; Q2_K's low nibbles), or with kCorrection what
// multiplies the input's sums per 16 (k16_step): Q2_K's mins (its high
// nibbles), the others' scales again.
template <K16 kType, bool kCorrection = false>
inline __m512i load_k16_scale_pairs(const uint8_t *w, int j) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + (kType == K16::q2_k ? kQ2Sc : kQ6Sc) + 32 * j));
    if constexpr (kType != K16::q2_k) return _mm512_cvtepi8_epi16(bytes);
    const __m512i pairs = _mm512_cvtepu8_epi16(bytes);
    return kCorrection ? _mm512_srli_epi16(pairs, 4) : _mm512_and_si512(pairs, _mm512_set1_epi16(15));
}

// Q6_K, Q3_K and the IQ types, per super-block: the quants are stored + 32
// (+ 4, + 128), so that x (sum of scale x sum of 16 inputs) = corr <<
// k16_offset_shift comes off the scaled sums (tot); d times the IQ types'
// 1/8. Q2_K takes Q4_K's step (corr: mins x sums of 16).
template <K16 kType>
inline __m512 k16_step(__m512 acc, __m512i tot, __m512i corr, const uint8_t *w, float dy) {
    const __m512 dw = load_f16x16(w + kQ6D);  // where they all keep d
    if constexpr (kType == K16::q2_k) return q4_k_step(acc, tot, corr, dw, load_f16x16(w + kQ2Dmin), dy);
    const __m512i sum = _mm512_sub_epi32(tot, _mm512_slli_epi32(corr, k16_offset_shift(kType, kK16IqShift)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(dy * k16_d_factor(kType))), acc);
}

}  // namespace toy::graph::packed

TOY_TARGET_END

#endif
