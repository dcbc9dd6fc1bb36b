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

// Bits 2t..2t+1 of every byte of h moved to bits 4..5 (the rest cleared).
template <int T>
inline __m512i high_bits(__m512i h) {
    const __m512i m = _mm512_set1_epi8(0x30);
    if constexpr (T == 0) return _mm512_and_si512(_mm512_slli_epi16(h, 4), m);
    if constexpr (T == 1) return _mm512_and_si512(_mm512_slli_epi16(h, 2), m);
    if constexpr (T == 2) return _mm512_and_si512(h, m);
    return _mm512_and_si512(_mm512_srli_epi16(h, 2), m);
}

// The 8 vectors of Q6_K unit j (32 inputs) of the super-block at w: its
// 6-bit quants (stored + 32) as bytes, inputs 4k.. in v[k], 16 + 4k.. in v[4 + k].
inline void load_q6_k_unit(const uint8_t *w, int j, __m512i *v) {
    load_nibbles(w + kQ6Ql + 256 * j, v);
    const __m512i h0 = _mm512_loadu_si512(w + kQ6Qh + 128 * j), h1 = _mm512_loadu_si512(w + kQ6Qh + 128 * j + 64);
    v[0] = _mm512_or_si512(v[0], high_bits<0>(h0));
    v[1] = _mm512_or_si512(v[1], high_bits<1>(h0));
    v[2] = _mm512_or_si512(v[2], high_bits<2>(h0));
    v[3] = _mm512_or_si512(v[3], high_bits<3>(h0));
    v[4] = _mm512_or_si512(v[4], high_bits<0>(h1));
    v[5] = _mm512_or_si512(v[5], high_bits<1>(h1));
    v[6] = _mm512_or_si512(v[6], high_bits<2>(h1));
    v[7] = _mm512_or_si512(v[7], high_bits<3>(h1));
}

}  // namespace toy::graph::packed

TOY_TARGET_END

#endif
