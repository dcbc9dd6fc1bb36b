#include "graph/flash_attention.h"

#include "graph/custom_ops.h"
#include "graph/packed_kernels.h"
#include "graph/packed_matmul.h"
#include "graph/simd_avx2.h"

#include <ggml-backend.h>
#include <ggml-cpu.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace toy::graph {
namespace {

constexpr int64_t kMaxHead = 256;
constexpr int64_t kPromptRows = 16;  // from this many queries on, K is converted into tiles first
// Decoding splits the cells into runs of this many, each run's K and V read
// once for all the query heads that share them.
constexpr int64_t kRunCells = 256, kMinUnits = 16;

// The cache's types the kernel reads (every type llama.cpp offers for -ctk
// and -ctv): F32, F16, BF16, and blocks of 32 values with an F16 scale d
// (and an F16 minimum m): Q8_0 (d, 32 int8: d q), Q4_0 (d, 16 bytes of two
// nibbles: d (q - 8)), Q4_1 (d, m, nibbles: d q + m), Q5_0 and Q5_1 (Q4's
// with the fifth bits of the 32 values in 4 bytes after the scales: d (q -
// 16), d q + m), IQ4_NL (d, nibbles indexing a table of 16 int8: d t[q]).
// Values [j, j + 16) of a block are the low nibbles of its bytes j..j+15
// (j < 16) or the high nibbles of bytes j-16.. (j >= 16). A value is
// converted to F32 in registers (exact: a product of a half and a small
// integer, plus a half).
template <ggml_type T>
constexpr bool kBlocked = T != GGML_TYPE_F32 && T != GGML_TYPE_F16 && T != GGML_TYPE_BF16;
constexpr int64_t kBlockValues = 32;

// bytes of one block (the ggml struct's size; reads_cache_type checks them
// against ggml_type_size), or of one value
template <ggml_type T>
constexpr size_t unit_bytes() {
    switch (T) {
        case GGML_TYPE_Q8_0: return 34;
        case GGML_TYPE_Q4_0: case GGML_TYPE_IQ4_NL: return 18;
        case GGML_TYPE_Q4_1: return 20;
        case GGML_TYPE_Q5_0: return 22;
        case GGML_TYPE_Q5_1: return 24;
        case GGML_TYPE_F32: return sizeof(float);
        default: return sizeof(ggml_fp16_t);  // F16, BF16
    }
}

// bytes of a cached row of d values (blocked types: whole blocks)
template <ggml_type T>
constexpr size_t row_bytes(int64_t d) {
    if constexpr (kBlocked<T>) return (d + kBlockValues - 1) / kBlockValues * unit_bytes<T>();
    return d * unit_bytes<T>();
}

// where value d of a cached row is (blocked types: its block)
template <ggml_type T>
constexpr size_t value_offset(int64_t d) {
    if constexpr (kBlocked<T>) return d / kBlockValues * unit_bytes<T>();
    return row_bytes<T>(d);
}

// f(std::integral_constant<ggml_type, T>{}) for a cache type t the kernel
// reads; false (f not called) for any other type.
template <typename F>
inline bool with_cache_type(ggml_type t, F &&f) {
    auto call = [&](auto type) {
        f(type);
        return true;
    };
    switch (t) {
        case GGML_TYPE_F32: return call(std::integral_constant<ggml_type, GGML_TYPE_F32>{});
        case GGML_TYPE_F16: return call(std::integral_constant<ggml_type, GGML_TYPE_F16>{});
        case GGML_TYPE_BF16: return call(std::integral_constant<ggml_type, GGML_TYPE_BF16>{});
        case GGML_TYPE_Q8_0: return call(std::integral_constant<ggml_type, GGML_TYPE_Q8_0>{});
        case GGML_TYPE_Q4_0: return call(std::integral_constant<ggml_type, GGML_TYPE_Q4_0>{});
        case GGML_TYPE_Q4_1: return call(std::integral_constant<ggml_type, GGML_TYPE_Q4_1>{});
        case GGML_TYPE_Q5_0: return call(std::integral_constant<ggml_type, GGML_TYPE_Q5_0>{});
        case GGML_TYPE_Q5_1: return call(std::integral_constant<ggml_type, GGML_TYPE_Q5_1>{});
        case GGML_TYPE_IQ4_NL: return call(std::integral_constant<ggml_type, GGML_TYPE_IQ4_NL>{});
        default: return false;
    }
}

// Whether the kernel reads t, laid out as ggml lays it out.
bool reads_cache_type(ggml_type t) {
    size_t unit = 0;
    return with_cache_type(t, [&](auto type) { unit = unit_bytes<decltype(type)::value>(); }) && unit == ggml_type_size(t) &&
           ggml_blck_size(t) == (ggml_is_quantized(t) ? kBlockValues : 1);
}

// How a product q.k becomes a score: scale times it, or, with a logit
// softcap (Gemma 2), softcap tanh(scale q.k / softcap) (`scale` holds
// scale / softcap then, as in ggml's kernel); the mask is added after.
struct Scores {
    float scale, softcap;  // softcap 0: none
    bool operator==(const Scores &) const = default;
};

// An attention op's Scores, where its kernel finds them (userdata): one
// slot per distinct value, kept for the process (a model has one or two).
const Scores *scores_slot(float scale, float softcap) {
    static std::mutex mu;
    static std::deque<Scores> slots;
    const Scores want{softcap > 0.0f ? scale / softcap : scale, softcap};
    std::lock_guard<std::mutex> lock(mu);
    for (const Scores &s : slots)
        if (s == want) return &s;
    return &slots.emplace_back(want);
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif

// Cephes' e^x polynomial, after x = n ln 2 + r (about 1 ulp)
#define TOY_EXP_POLY(V, mul, add, fma, set1, x, n)                                              \
    V r = fma(n, set1(-0.693359375f), x);                                                      \
    r = fma(n, set1(2.12194440e-4f), r);                                                       \
    V p = set1(1.9875691500e-4f);                                                              \
    p = fma(p, r, set1(1.3981999507e-3f));                                                     \
    p = fma(p, r, set1(8.3334519073e-3f));                                                     \
    p = fma(p, r, set1(4.1665795894e-2f));                                                     \
    p = fma(p, r, set1(1.6666665459e-1f));                                                     \
    p = fma(p, r, set1(5.0000001201e-1f));                                                     \
    p = fma(p, mul(r, r), add(r, set1(1.0f)));

TOY_TARGET_BEGIN("avx2,fma,f16c")
// The sums of eight vectors, lane j the sum of a[j]: pairwise horizontal adds,
// then the two 128-bit halves.
inline __m256 sum_each8(const __m256 *a) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
TOY_TARGET_END

TOY_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// 16 lanes: a tile of 16 cells, units of 16 queries (16 score registers of 32)
struct Avx512 {
    using V = __m512;
    static constexpr int W = 16, kRows = 16, kBlock = 4;  // kBlock: V vectors per row in O += P V
    static V zero() { return _mm512_setzero_ps(); }
    static V set1(float x) { return _mm512_set1_ps(x); }
    static V load(const float *p) { return _mm512_loadu_ps(p); }
    static void store(float *p, V v) { _mm512_storeu_ps(p, v); }
    static V add(V a, V b) { return _mm512_add_ps(a, b); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static float hmax(V v) { return _mm512_reduce_max_ps(v); }
    static float hsum(V v) { return _mm512_reduce_add_ps(v); }
    static V halves(const ggml_fp16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }
    // 16 bfloat16 as floats
    static V bfloats(const uint16_t *p) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))), 16));
    }
    // the 16 bytes at p; 16 signed bytes as floats
    static __m128i load_bytes(const char *p) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)); }
    static V from_i8(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
    // n halves (the rest of the vector -inf)
    static V halves_or_neg_inf(const ggml_fp16_t *p, int n) {
        const __mmask16 m = (__mmask16)((1u << n) - 1);
        return _mm512_mask_blend_ps(m, set1(-INFINITY), _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)));
    }
    static bool any_above_neg_inf(V v) { return _mm512_cmp_ps_mask(v, set1(-INFINITY), _CMP_NEQ_OQ) != 0; }
    static V max(V a, V b) { return _mm512_max_ps(a, b); }
    static V min(V a, V b) { return _mm512_min_ps(a, b); }
    static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
    static V div(V a, V b) { return _mm512_div_ps(a, b); }
    // x where the mask m lets a cell through, -inf where it hides it (whatever x is there)
    static V hide(V x, V m) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m, set1(-INFINITY), _CMP_EQ_OQ), x, set1(-INFINITY)); }
    // the sums of a[0..15], lane j the sum of a[j]: four rounds that each add
    // the two halves of pairs of vectors, one pair's halves side by side in
    // one vector (256-bit halves, 128, 64, 32): 45 instructions where sums
    // of 256-bit halves and horizontal adds took 72. Lane 4 q + e ends up
    // with the vector at quarter_base[q] + element_offset[e] of the inputs
    // as they go in, so they go in in that (self-inverse) order.
    static V sum_each(const V *a) {
#ifdef OLD_SUM
        __m256 lo[8], hi[8];
        for (int j = 0; j < 8; ++j) {
            lo[j] = _mm256_add_ps(_mm512_castps512_ps256(a[j]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[j]), 1)));
            hi[j] = _mm256_add_ps(_mm512_castps512_ps256(a[j + 8]),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[j + 8]), 1)));
        }
        return _mm512_insertf32x8(_mm512_castps256_ps512(sum_each8(lo)), sum_each8(hi), 1);
#endif
        static constexpr int order[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
        V b[8], c[4], d[2];
        for (int i = 0; i < 8; ++i) {  // quarters 0-1: input i's halves summed, 2-3: input i + 8's
            const V x = a[order[i]], y = a[order[i + 8]];
            b[i] = add(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
        }
        for (int i = 0; i < 4; ++i)  // quarter q: one input's four partial sums
            c[i] = add(_mm512_shuffle_f32x4(b[i], b[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(b[i], b[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
        for (int i = 0; i < 2; ++i)  // within each quarter: two inputs' two partial sums
            d[i] = add(_mm512_shuffle_ps(c[i], c[i + 2], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(c[i], c[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
        return add(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
    // a bit per lane: whether it is not zero (NaN counts)
    static uint32_t nonzero_lanes(V v) { return _mm512_cmp_ps_mask(v, zero(), _CMP_NEQ_UQ); }
    // e^x; exactly 0 below -110 (far under the smallest denormal), so a masked score weighs nothing
    static V exp(V x) {
        x = _mm512_max_ps(x, set1(-110.0f));
        const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
        TOY_EXP_POLY(V, mul, add, fma, set1, x, n)
        return _mm512_scalef_ps(p, n);
    }
};
TOY_TARGET_END

TOY_TARGET_BEGIN("avx2,fma,f16c")
// 8 lanes: a tile of 8 cells, units of 8 queries (8 score registers of 16)
struct Avx2 {
    using V = __m256;
    static constexpr int W = 8, kRows = 8, kBlock = 2;
    static V zero() { return _mm256_setzero_ps(); }
    static V set1(float x) { return _mm256_set1_ps(x); }
    static V load(const float *p) { return _mm256_loadu_ps(p); }
    static void store(float *p, V v) { _mm256_storeu_ps(p, v); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static float hmax(V v) { return simd::hmax_avx2(v); }
    static float hsum(V v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    }
    static V halves(const ggml_fp16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
    static V bfloats(const uint16_t *p) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 16));
    }
    // the 8 bytes at p (the rest 0); the low 8 signed bytes as floats
    static __m128i load_bytes(const char *p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)); }
    static V from_i8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }
    static V halves_or_neg_inf(const ggml_fp16_t *p, int n) {
        if (n == W) return halves(p);
        alignas(16) ggml_fp16_t h[W];
        for (int j = 0; j < W; ++j) h[j] = j < n ? p[j] : (ggml_fp16_t)0xFC00;  // -inf
        return halves(h);
    }
    static bool any_above_neg_inf(V v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, set1(-INFINITY), _CMP_NEQ_OQ)) != 0; }
    static V max(V a, V b) { return _mm256_max_ps(a, b); }
    static V min(V a, V b) { return _mm256_min_ps(a, b); }
    static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    static V div(V a, V b) { return _mm256_div_ps(a, b); }
    static V hide(V x, V m) { return _mm256_blendv_ps(x, set1(-INFINITY), _mm256_cmp_ps(m, set1(-INFINITY), _CMP_EQ_OQ)); }
    static V sum_each(const V *a) { return sum_each8(a); }
    static uint32_t nonzero_lanes(V v) { return (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v, zero(), _CMP_NEQ_UQ)); }
    // e^x; 0 below -87.3, where e^x leaves the normal floats
    static V exp(V x) {
        const V tiny = _mm256_cmp_ps(x, set1(-87.3f), _CMP_LT_OQ);
        x = _mm256_max_ps(x, set1(-87.3f));
        const V n = _mm256_round_ps(_mm256_mul_ps(x, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        TOY_EXP_POLY(V, mul, add, fma, set1, x, n)
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
    }
};
TOY_TARGET_END

#undef TOY_EXP_POLY

// K [head_dim, n_kv, n_head_kv] (any type the kernel reads, rows strided) -> F32 tiles
// [W cells, head_dim, n_tiles, n_head_kv] (W = dst->ne[0]): element (d, cell
// j) of a tile at d * W + j, so a tile's W scores of a query are one vector
// per d. Cells past n_kv are zero.
void k_tiles_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    const ggml_tensor *k = dst->src[0];
    const int64_t W = dst->ne[0], D = k->ne[0], n_kv = k->ne[1], n_tiles = dst->ne[2], units = n_tiles * dst->ne[3];
    float rows[16 * kMaxHead];
    for (int64_t u = ith; u < units; u += nth) {
        const int64_t hk = u / n_tiles, t = u % n_tiles;
        for (int64_t j = 0; j < W; ++j) {
            float *row = rows + j * D;
            const int64_t cell = t * W + j;
            if (cell >= n_kv) {
                std::fill(row, row + D, 0.0f);
                continue;
            }
            const char *src = static_cast<const char *>(k->data) + cell * k->nb[1] + hk * k->nb[2];
            if (k->type == GGML_TYPE_F32) {
                std::memcpy(row, src, D * sizeof(float));
            } else {
                ggml_get_type_traits(k->type)->to_float(src, row, D);
            }
        }
        float *out = reinterpret_cast<float *>(static_cast<char *>(dst->data) + t * dst->nb[2] + hk * dst->nb[3]);
        for (int64_t d = 0; d < D; ++d)
            for (int64_t j = 0; j < W; ++j) out[d * W + j] = rows[j * D + d];
    }
}

// Whether ggml's CPU attention rounds a query before its products with a K
// of type k_type: it converts the query to the type K's dot product takes
// (BF16 for BF16, Q8_0 or Q8_1 for the blocked types). For an F16 K it
// converts it to F16 too; toy keeps the query as it is there (its F16
// arithmetic matched llama.cpp within the fixtures' bounds before this
// rounding was needed; an F16 rounding moves a score by about 2^-11).
bool ggml_rounds_query(ggml_type k_type) {
    const ggml_type t = ggml_get_type_traits_cpu(k_type)->vec_dot_type;
    return t != GGML_TYPE_F32 && t != GGML_TYPE_F16;
}

// Query row q (D values) as ggml's CPU attention multiplies it with a K of
// type k_type, into out: where ggml_rounds_query, converted to K's
// dot-product type with ggml's own conversion and back, so that toy's float
// products give ggml's scores; else q as it is.
void query_as_ggml_sees_it(ggml_type k_type, const float *q, float *out, int64_t D) {
    if (!ggml_rounds_query(k_type)) {
        std::memcpy(out, q, D * sizeof(float));
        return;
    }
    const ggml_type dot_type = ggml_get_type_traits_cpu(k_type)->vec_dot_type;
    alignas(64) char blocks[kMaxHead * sizeof(float)];  // a row of D values of dot_type (at most 36 bytes per 32)
    ggml_get_type_traits_cpu(dot_type)->from_float(q, blocks, D);
    if (dot_type == GGML_TYPE_Q8_1) {  // (ggml has no to_float for it) per block: d, d times the quants' sum, 32 int8
        constexpr size_t kBlockBytes = 2 * sizeof(ggml_fp16_t) + kBlockValues;
        for (int64_t b = 0; b < D / kBlockValues; ++b) {
            const char *block = blocks + b * kBlockBytes;
            ggml_fp16_t d;
            std::memcpy(&d, block, sizeof d);
            const auto *qs = reinterpret_cast<const int8_t *>(block + 2 * sizeof(ggml_fp16_t));
            for (int64_t i = 0; i < kBlockValues; ++i) out[b * kBlockValues + i] = ggml_fp16_to_fp32(d) * qs[i];
        }
        return;
    }
    ggml_get_type_traits(dot_type)->to_float(blocks, out, D);
}

namespace avx512 {
TOY_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
using I = Avx512;
#include "graph/flash_attention_impl.inc"
TOY_TARGET_END
}  // namespace avx512

namespace avx2 {
TOY_TARGET_BEGIN("avx2,fma,f16c")
using I = Avx2;
#include "graph/flash_attention_impl.inc"
TOY_TARGET_END
}  // namespace avx2

void decode_kernel_avx512(ggml_tensor *dst, int ith, int nth, void *userdata) {
    avx512::decode(dst, ith, nth, *static_cast<const Scores *>(userdata));
}
void decode_kernel_avx2(ggml_tensor *dst, int ith, int nth, void *userdata) {
    avx2::decode(dst, ith, nth, *static_cast<const Scores *>(userdata));
}

void attention_kernel(ggml_tensor *dst, int ith, int nth, void *userdata) {
    const Scores &scores = *static_cast<const Scores *>(userdata);
    if (dst->src[1]->ne[0] == Avx512::W) {
        avx512::attention(dst, ith, nth, scores);
    } else {
        avx2::attention(dst, ith, nth, scores);
    }
}

#pragma GCC diagnostic pop
#endif  // __x86_64__

// The lanes of the kernel this process runs: 16 (AVX-512, with or without
// AMX), 8 (AVX2), 0
// (none: ggml's). It follows toy's packed kernel set (TOY_PACKED_KERNELS
// picks it for comparisons); TOY_FLASH_ATTN_KERNEL=ggml turns it off.
int kernel_lanes() {
    static const bool off = [] {
        const char *e = std::getenv("TOY_FLASH_ATTN_KERNEL");
        if (!e || !*e) return false;
        if (std::strcmp(e, "ggml") == 0) return true;
        std::fprintf(stderr, "toy: warning: TOY_FLASH_ATTN_KERNEL=%s: expected ggml (or nothing: toy's kernel); using toy's\n", e);
        return false;
    }();
    if (off) return 0;
    const std::string_view set = packed_kernels_name();
    return set == "avx512" || set == "amx" ? 16 : set == "avx2" ? 8 : 0;
}

// Where t's bytes are: in host memory, or not allocated yet (computed in this graph).
bool on_host(const ggml_tensor *t) {
    const ggml_tensor *base = t->view_src ? t->view_src : t;
    return !base->buffer || ggml_backend_buffer_is_host(base->buffer);
}

}  // namespace

bool host_flash_attn_applies(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v, const ggml_tensor *mask,
                             float softcap) {
    if (kernel_lanes() == 0 || !mask || !(softcap >= 0.0f && std::isfinite(softcap))) return false;
    // K and V of the types the kernel reads (each its own), the blocked ones in whole blocks per head (as
    // KvCache stores them)
    auto reads = [](const ggml_tensor *t) { return reads_cache_type(t->type) && t->ne[0] % ggml_blck_size(t->type) == 0; };
    const bool kv_types = reads(k) && reads(v);
    return kv_types && q->type == GGML_TYPE_F32 && mask->type == GGML_TYPE_F16 && q->ne[1] >= 1 &&
           q->ne[0] % 16 == 0 && q->ne[0] <= kMaxHead && v->ne[0] % 16 == 0 && v->ne[0] <= kMaxHead &&
           k->ne[0] == q->ne[0] && k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2] && q->ne[2] % k->ne[2] == 0 &&
           q->ne[3] == 1 && k->ne[3] == 1 && mask->ne[0] >= k->ne[1] && mask->ne[1] >= q->ne[1] &&
           q->nb[0] == sizeof(float) && k->nb[0] == ggml_type_size(k->type) && v->nb[0] == ggml_type_size(v->type) &&
           on_host(k) && on_host(v) && on_host(mask);
}

ggml_tensor *host_flash_attn(ggml_context *ctx, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, ggml_tensor *mask, float scale,
                             float softcap) {
#if defined(__x86_64__)
    const int64_t lanes = kernel_lanes(), n_tiles = (k->ne[1] + lanes - 1) / lanes;
    auto *scores = const_cast<Scores *>(scores_slot(scale, softcap));
    if (q->ne[1] < kPromptRows) {  // decoding: the cache as it is, in runs of cells, then merged
        ggml_tensor *args[] = {q, k, v, mask};
        // runs of at most kRunCells, and enough of them for kMinUnits units
        // (but not shorter than 16 cells)
        const int64_t n_kv = k->ne[1];
        const int64_t runs = std::max((n_kv + kRunCells - 1) / kRunCells,
                                      std::min((kMinUnits + k->ne[2] - 1) / k->ne[2], (n_kv + 15) / 16));
        ggml_tensor *part = ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0] + 2, q->ne[2], q->ne[1], runs, args, 4,
                                           lanes == 16 ? decode_kernel_avx512 : decode_kernel_avx2, GGML_N_TASKS_MAX, scores);
        ggml_tensor *merge_args[] = {part};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0], q->ne[2], q->ne[1], 1, merge_args, 1,
                              lanes == 16 ? avx512::decode_merge : avx2::decode_merge, GGML_N_TASKS_MAX, nullptr);
    }
    ggml_tensor *k_args[] = {k};
    ggml_tensor *kt =
        ggml_custom_4d(ctx, GGML_TYPE_F32, lanes, k->ne[0], n_tiles, k->ne[2], k_args, 1, k_tiles_kernel, GGML_N_TASKS_MAX, nullptr);
    ggml_tensor *v32 = v->type == GGML_TYPE_F32 ? ggml_cont(ctx, v) : ggml_cast(ctx, v, GGML_TYPE_F32);  // [head_dim_v, n_kv, n_head_kv]
    ggml_tensor *args[] = {q, kt, v32, mask};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0], q->ne[2], q->ne[1], 1, args, 4, attention_kernel, GGML_N_TASKS_MAX,
                          scores);
#else
    (void)ctx, (void)q, (void)k, (void)v, (void)mask, (void)scale, (void)softcap;
    return nullptr;
#endif
}

}  // namespace toy::graph
