// Reductions of 256-bit vectors the AVX2 kernels share (packed_kernels_avx2.cpp,
// flash_attention.cpp), compiled for AVX2 whatever the build targets.
#pragma once

#include "graph/packed_kernels.h"  // TOY_TARGET_BEGIN

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

TOY_TARGET_BEGIN("avx2,fma,f16c")

namespace toy::graph::simd {

// The largest of 8 floats.
inline float hmax_avx2(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// The sum of 8 int32 lanes.
inline int32_t hsum_avx2(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

}  // namespace toy::graph::simd

TOY_TARGET_END

#endif
