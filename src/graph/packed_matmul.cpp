#include "graph/packed_matmul.h"

#include "core/error.h"
#include "core/parallel.h"
#include "graph/custom_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__F16C__)
#define TOY_PACKED_KERNELS 1
#include <immintrin.h>
#endif

namespace toy::graph {
namespace {

constexpr int kRows = 16;  // rows per packed group
constexpr int kQK = 32;    // values per Q8_0 block
constexpr int kQKK = 256;  // values per K-quant super-block

// Q8_0: per block, 16 fp16 scales + 16 x 32 quants.
constexpr size_t kGroupBlock = kRows * 2 + kRows * kQK;
// One Q8_0-quantized input column: per block, 32 int8 quants, the
// fp16-rounded scale as float, and -128 times the quants' sum (an exact int32).
constexpr size_t kColBlock = kQK + 2 * sizeof(int32_t);

// One Q8_K-quantized input column (the input of Q4_K and Q6_K): per 256
// values, the int8 quants, their sums per 16 and per 32 (int16), the scale.
constexpr size_t kKQs = 0, kKSum16 = 256, kKSum32 = 288, kKD = 304, kKColBlock = 308;

// Q4_K, per group and super-block: 16 fp16 d, 16 fp16 dmin, the 8 sub-block
// scales as bytes (16 per sub-block), the mins as byte pairs per row (sub-blocks
// 2p and 2p+1: 32 bytes per p), then per sub-block 4 vectors of 16 rows x 4
// inputs whose low nibbles are inputs 4k.. and high nibbles inputs 16 + 4k..
constexpr size_t kQ4D = 0, kQ4Dmin = 32, kQ4Sc = 64, kQ4Min = 192, kQ4Qs = 320, kQ4Block = 2368;
// Q6_K, per group and super-block: 16 fp16 d, the 16 scales as byte pairs
// per row (32 bytes per 32 inputs), the low 4 bits as Q4_K's, then per 32
// inputs two planes of the high 2 bits (plane h, bits 2t: inputs 16h + 4t..).
constexpr size_t kQ6D = 0, kQ6Sc = 32, kQ6Ql = 288, kQ6Qh = 2336, kQ6Block = 3360;

struct BlockQ8_0 {
    uint16_t d;  // fp16
    int8_t qs[kQK];
};
struct BlockQ4K {
    uint16_t d, dmin;  // fp16
    uint8_t scales[12];
    uint8_t qs[kQKK / 2];
};
struct BlockQ6K {
    uint8_t ql[kQKK / 2];
    uint8_t qh[kQKK / 4];
    int8_t scales[kQKK / 16];
    uint16_t d;  // fp16
};
static_assert(sizeof(BlockQ8_0) == 34, "ggml's block_q8_0 is 34 bytes");
static_assert(sizeof(BlockQ4K) == 144, "ggml's block_q4_K is 144 bytes");
static_assert(sizeof(BlockQ6K) == 210, "ggml's block_q6_K is 210 bytes");
static_assert(kGroupBlock == kRows * sizeof(BlockQ8_0), "the packed layout keeps Q8_0's size");
static_assert(kQ6Block == kRows * sizeof(BlockQ6K), "the packed layout keeps Q6_K's size");
static_assert(kQ4Qs + kRows * kQKK / 2 == kQ4Block && kQ6Qh + kRows * kQKK / 4 == kQ6Block, "layout sizes");

// A packed type: inputs per unit of depth (a block, or one input for F16),
// bytes per group and unit, and the input form it multiplies.
struct Format {
    int64_t unit;
    size_t group_unit_bytes;
    ggml_type input;
};

bool format_of(ggml_type type, Format *f) {
    switch (type) {
    case GGML_TYPE_Q8_0: *f = {kQK, kGroupBlock, GGML_TYPE_Q8_0}; return true;
    case GGML_TYPE_F16: *f = {1, kRows * sizeof(uint16_t), GGML_TYPE_F16}; return true;
    case GGML_TYPE_Q4_K: *f = {kQKK, kQ4Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_Q6_K: *f = {kQKK, kQ6Block, GGML_TYPE_Q8_K}; return true;
    default: return false;
    }
}

// Bytes of one prepared input column of n_in values for an input form.
size_t column_bytes(ggml_type input, int64_t n_in) {
    switch (input) {
    case GGML_TYPE_Q8_0: return n_in / kQK * kColBlock;
    case GGML_TYPE_Q8_K: return n_in / kQKK * kKColBlock;
    default: return n_in * sizeof(float);
    }
}

int64_t columns(const ggml_tensor *x) { return x->ne[1] * x->ne[2] * x->ne[3]; }

// Up to this many input columns (decoding), every thread of a product
// prepares the input itself instead of a separate op doing it once.
constexpr int64_t kInlineColumns = 4;
// Decoding: how far ahead of the weights being multiplied to prefetch.
constexpr size_t kPrefetchAhead = 4096;

const float *column(const ggml_tensor *x, int64_t c) {
    const int64_t i1 = c % x->ne[1], i2 = (c / x->ne[1]) % x->ne[2], i3 = c / (x->ne[1] * x->ne[2]);
    return reinterpret_cast<const float *>(static_cast<const char *>(x->data) + i1 * x->nb[1] + i2 * x->nb[2] +
                                           i3 * x->nb[3]);
}

// The 6-bit scale and min of Q4_K sub-block j (ggml's packing of 12 bytes).
void q4k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// The 4-bit quants of 32 inputs (a sub-block, unit j) as 4 vectors of 16
// rows x 4 inputs: row r's byte i of vector k holds input 4k + i in its low
// nibble and input 16 + 4k + i in its high one.
void put_nibbles(const uint8_t *q, int r, uint8_t *out) {
    for (int k = 0; k < 4; ++k) {
        for (int i = 0; i < 4; ++i) out[64 * k + 4 * r + i] = (q[4 * k + i] & 15) | (q[16 + 4 * k + i] & 15) << 4;
    }
}

void pack_q8_0_group(const BlockQ8_0 *in, int64_t nb, uint8_t *out) {
    for (int64_t b = 0; b < nb; ++b, out += kGroupBlock) {
        for (int r = 0; r < kRows; ++r) {
            const BlockQ8_0 &blk = in[r * nb + b];
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

void pack_f16_group(const uint16_t *in, int64_t n_in, uint16_t *out) {
    for (int64_t k = 0; k < n_in; ++k) {
        for (int r = 0; r < kRows; ++r) *out++ = in[r * n_in + k];
    }
}

void pack_q4_k_group(const BlockQ4K *in, int64_t nb, uint8_t *out) {
    for (int64_t b = 0; b < nb; ++b, out += kQ4Block) {
        for (int r = 0; r < kRows; ++r) {
            const BlockQ4K &blk = in[r * nb + b];
            std::memcpy(out + kQ4D + 2 * r, &blk.d, 2);
            std::memcpy(out + kQ4Dmin + 2 * r, &blk.dmin, 2);
            uint8_t q[kQKK];  // values in order: sub-block j is 32j..32j+31
            for (int c = 0; c < 4; ++c) {
                for (int l = 0; l < 32; ++l) {
                    q[64 * c + l] = blk.qs[32 * c + l] & 15;
                    q[64 * c + 32 + l] = blk.qs[32 * c + l] >> 4;
                }
            }
            for (int j = 0; j < 8; ++j) {
                uint8_t sc, m;
                q4k_scale_min(blk.scales, j, &sc, &m);
                out[kQ4Sc + 16 * j + r] = sc;
                out[kQ4Min + 32 * (j / 2) + 2 * r + j % 2] = m;
                put_nibbles(q + 32 * j, r, out + kQ4Qs + 256 * j);
            }
        }
    }
}

void pack_q6_k_group(const BlockQ6K *in, int64_t nb, uint8_t *out) {
    for (int64_t b = 0; b < nb; ++b, out += kQ6Block) {
        for (int r = 0; r < kRows; ++r) {
            const BlockQ6K &blk = in[r * nb + b];
            std::memcpy(out + kQ6D + 2 * r, &blk.d, 2);
            uint8_t q[kQKK];  // values 0..63 in order
            for (int n = 0; n < kQKK; n += 128) {
                const uint8_t *ql = blk.ql + n / 2, *qh = blk.qh + n / 4;
                for (int l = 0; l < 32; ++l) {
                    q[n + l] = (ql[l] & 15) | ((qh[l] >> 0) & 3) << 4;
                    q[n + 32 + l] = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4;
                    q[n + 64 + l] = (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4;
                    q[n + 96 + l] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
                }
            }
            for (int j = 0; j < 8; ++j) {
                out[kQ6Sc + 32 * j + 2 * r] = static_cast<uint8_t>(blk.scales[2 * j]);
                out[kQ6Sc + 32 * j + 2 * r + 1] = static_cast<uint8_t>(blk.scales[2 * j + 1]);
                const uint8_t *qj = q + 32 * j;
                put_nibbles(qj, r, out + kQ6Ql + 256 * j);
                for (int h = 0; h < 2; ++h) {
                    for (int i = 0; i < 4; ++i) {
                        uint8_t bits = 0;
                        for (int t = 0; t < 4; ++t) bits |= ((qj[16 * h + 4 * t + i] >> 4) & 3) << (2 * t);
                        out[kQ6Qh + 128 * j + 64 * h + 4 * r + i] = bits;
                    }
                }
            }
        }
    }
}

#if TOY_PACKED_KERNELS
// GCC 12's AVX-512 reduction intrinsics start from an undefined vector and
// -Wmaybe-uninitialized reports it inside the compiler's own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

void quantize_column_q8_0(const float *x, int64_t n_in, uint8_t *out) {
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

// sum_k VPDPBUSD(w[k], broadcast x4[k]) for k < N, in two chains when few
// columns share the weights (one column alone is bound by the latency).
template <int N, bool kTwoChains>
inline __m512i dot_u8s8(__m512i s, const __m512i *w, const int32_t *x4) {
    if constexpr (kTwoChains) {
        __m512i s1 = _mm512_setzero_si512();
        for (int k = 0; k < N; k += 2) {
            s = _mm512_dpbusd_epi32(s, w[k], _mm512_set1_epi32(x4[k]));
            s1 = _mm512_dpbusd_epi32(s1, w[k + 1], _mm512_set1_epi32(x4[k + 1]));
        }
        return _mm512_add_epi32(s, s1);
    } else {
        for (int k = 0; k < N; ++k) s = _mm512_dpbusd_epi32(s, w[k], _mm512_set1_epi32(x4[k]));
        return s;
    }
}

// Decoding streams each weight once: ask for the bytes `ahead` on. The
// hardware prefetcher alone left the kernels waiting on loads (Llama-3.2-1B
// Q4_K_M tg 33 -> 47-51 t/s, Qwen2.5-0.5B Q8_0 57-63 -> 66-72, SmolLM2 F16 +4-8%).
template <int C>
inline void prefetch_block(const uint8_t *w, size_t bytes, size_t ahead) {
    if constexpr (C <= 2) {
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char *>(w + ahead + o), _MM_HINT_T0);
    }
}

// y[c * ldy + r] for a group's 16 rows and C columns of prepared input;
// `depth` units (blocks, or inputs for F16) of the group at w.
template <int C>
void q8_0_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kGroupBlock) {
        prefetch_block<C>(w, kGroupBlock, kPrefetchAhead);
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
            const __m512i s = dot_u8s8<8, (C == 1)>(_mm512_set1_epi32(bias), q, x4);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

// F16: the input columns are float32 already rounded through fp16
// (round_column), so each product is ggml's F16 x F16 product, exact in
// float32. Two partial sums per column hide the FMA latency when few columns
// share a load.
template <int C>
void f16_tile(const uint8_t *w, int64_t n_in, const uint8_t *x, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C][2];
    for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm512_setzero_ps();
    const float *xc[C];
    for (int c = 0; c < C; ++c) xc[c] = reinterpret_cast<const float *>(x + c * x_stride);
    int64_t k = 0;
    for (; k + 1 < n_in; k += 2) {
        prefetch_block<C>(w + 32 * k, 64, kPrefetchAhead);
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

// The 8 vectors of unit j's 4-bit quants: low nibbles inputs 4k.., high 16 + 4k..
inline void load_nibbles(const uint8_t *p, __m512i *v) {
    const __m512i lo = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
        const __m512i n = _mm512_loadu_si512(p + 64 * k);
        v[k] = _mm512_and_si512(n, lo);
        v[k + 4] = _mm512_and_si512(_mm512_srli_epi16(n, 4), lo);
    }
}

template <int C>
void q4_k_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kQ4Block) {
        prefetch_block<C>(w, kQ4Block, kPrefetchAhead);
        const uint8_t *xb[C];
        for (int c = 0; c < C; ++c) xb[c] = xq + c * x_stride + b * kKColBlock;
        __m512i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) {
            __m512i v[8];
            load_nibbles(w + kQ4Qs + 256 * j, v);
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(w + kQ4Sc + 16 * j)));
            for (int c = 0; c < C; ++c) {
                int32_t x4[8];
                std::memcpy(x4, xb[c] + kKQs + 32 * j, sizeof x4);
                const __m512i s = dot_u8s8<8, (C <= 2)>(_mm512_setzero_si512(), v, x4);
                tot[c] = _mm512_add_epi32(tot[c], _mm512_mullo_epi32(s, sc));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kQ4D)));
        const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kQ4Dmin)));
        __m512i mins[4];  // int16 pairs per row: the mins of sub-blocks 2p and 2p + 1
        for (int p = 0; p < 4; ++p) {
            mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kQ4Min + 32 * p)));
        }
        for (int c = 0; c < C; ++c) {
            int32_t s32[4];  // the column's sums per 32, as int16 pairs
            float dy;
            std::memcpy(s32, xb[c] + kKSum32, sizeof s32);
            std::memcpy(&dy, xb[c] + kKD, sizeof dy);
            __m512i summ = _mm512_setzero_si512();
            for (int p = 0; p < 4; ++p) summ = _mm512_dpwssd_epi32(summ, mins[p], _mm512_set1_epi32(s32[p]));
            const __m512 dyv = _mm512_set1_ps(dy);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[c]), _mm512_mul_ps(dw, dyv), acc[c]);
            acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dm, dyv), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
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

template <int C>
void q6_k_tile(const uint8_t *w, int64_t nb, const uint8_t *xq, size_t x_stride, float *y, int64_t ldy) {
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, w += kQ6Block) {
        prefetch_block<C>(w, kQ6Block, kPrefetchAhead);
        const uint8_t *xb[C];
        for (int c = 0; c < C; ++c) xb[c] = xq + c * x_stride + b * kKColBlock;
        __m512i tot[C];
        for (int c = 0; c < C; ++c) tot[c] = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) {
            __m512i v[8];
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
            // the scales of the unit's two sub-blocks of 16, sign-extended per row
            const __m512i pr = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kQ6Sc + 32 * j)));
            const __m512i sa = _mm512_srai_epi32(_mm512_slli_epi32(pr, 16), 16), sb = _mm512_srai_epi32(pr, 16);
            for (int c = 0; c < C; ++c) {
                int32_t x4[8];
                std::memcpy(x4, xb[c] + kKQs + 32 * j, sizeof x4);
                const __m512i s0 = dot_u8s8<4, false>(_mm512_setzero_si512(), v, x4);
                const __m512i s1 = dot_u8s8<4, false>(_mm512_setzero_si512(), v + 4, x4 + 4);
                tot[c] = _mm512_add_epi32(tot[c], _mm512_add_epi32(_mm512_mullo_epi32(s0, sa), _mm512_mullo_epi32(s1, sb)));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kQ6D)));
        for (int c = 0; c < C; ++c) {
            // the quants are stored + 32: take back 32 * sum of scale x sum of the 16 inputs
            int32_t s16[8];
            float dy;
            std::memcpy(s16, xb[c] + kKSum16, sizeof s16);
            std::memcpy(&dy, xb[c] + kKD, sizeof dy);
            __m512i corr = _mm512_setzero_si512();
            for (int j = 0; j < 8; ++j) {
                const __m512i pr = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kQ6Sc + 32 * j)));
                corr = _mm512_dpwssd_epi32(corr, pr, _mm512_set1_epi32(s16[j]));
            }
            const __m512i sum = _mm512_sub_epi32(tot[c], _mm512_slli_epi32(corr, 5));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(dy)), acc[c]);
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

using TileFn = void (*)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t);
#define TOY_TILES(f) {nullptr, f<1>, f<2>, f<3>, f<4>, f<5>, f<6>, f<7>, f<8>}
constexpr TileFn kQ8Tiles[9] = TOY_TILES(q8_0_tile);
constexpr TileFn kF16Tiles[9] = TOY_TILES(f16_tile);
constexpr TileFn kQ4KTiles[9] = TOY_TILES(q4_k_tile);
constexpr TileFn kQ6KTiles[9] = TOY_TILES(q6_k_tile);
#undef TOY_TILES

const TileFn *tiles_for(ggml_type type) {
    switch (type) {
    case GGML_TYPE_Q8_0: return kQ8Tiles;
    case GGML_TYPE_F16: return kF16Tiles;
    case GGML_TYPE_Q4_K: return kQ4KTiles;
    default: return kQ6KTiles;
    }
}
#endif

#if TOY_PACKED_KERNELS
// Column c of x prepared for an input form, at out (column_bytes long).
void prepare_column(ggml_type form, const ggml_tensor *x, int64_t c, uint8_t *out) {
    if (form == GGML_TYPE_Q8_0) {
        quantize_column_q8_0(column(x, c), x->ne[0], out);
    } else if (form == GGML_TYPE_Q8_K) {
        quantize_column_q8_k(column(x, c), x->ne[0], out);
    } else {
        round_column(column(x, c), x->ne[0], reinterpret_cast<float *>(out));
    }
}
#endif

// The input prepared for the matrix's input form (userdata: that form).
void prepare_kernel(ggml_tensor *dst, int ith, int nth, void *input) {
#if TOY_PACKED_KERNELS
    const ggml_tensor *x = dst->src[0];
    const ggml_type form = *static_cast<const ggml_type *>(input);
    const auto [c0, c1] = thread_share(columns(x), ith, nth);
    for (int64_t c = c0; c < c1; ++c) prepare_column(form, x, c, static_cast<uint8_t *>(dst->data) + c * dst->nb[1]);
#else
    (void)dst, (void)ith, (void)nth, (void)input;
#endif
}

void matmul_kernel(ggml_tensor *dst, int ith, int nth, void *) {
#if TOY_PACKED_KERNELS
    const ggml_tensor *w = dst->src[0], *xs = dst->src[1];
    Format f{};
    format_of(w->type, &f);
    const int64_t n_out = w->ne[1], n_cols = columns(xs);
    // the prepared input: quantize_input's result, or (a few float columns)
    // prepared by every thread for itself, which saves the graph an op and
    // its threads a barrier per matrix when decoding
    const uint8_t *xbase = static_cast<const uint8_t *>(xs->data);
    size_t x_stride = xs->nb[1];
    if (xs->type == GGML_TYPE_F32) {
        thread_local std::vector<uint8_t> own;
        x_stride = column_bytes(f.input, xs->ne[0]);
        own.resize(x_stride * n_cols);
        for (int64_t c = 0; c < n_cols; ++c) prepare_column(f.input, xs, c, own.data() + c * x_stride);
        xbase = own.data();
    }
    const int64_t depth = w->ne[0] / f.unit;  // a tile's units: blocks, or inputs for F16
    const size_t group_bytes = depth * f.group_unit_bytes;
    const TileFn *tiles = tiles_for(w->type);
    const auto [g0, g1] = thread_share(n_out / kRows, ith, nth);
    const auto *wbase = static_cast<const uint8_t *>(w->data);
    auto *y = static_cast<float *>(dst->data);
    // Columns in panels whose prepared inputs stay in L2 while the thread's
    // row groups pass over them; within a panel, 8 columns per weight load.
    constexpr int64_t kPanel = 64;
    for (int64_t p0 = 0; p0 < n_cols; p0 += kPanel) {
        const int64_t p1 = std::min(n_cols, p0 + kPanel);
        for (int64_t g = g0; g < g1; ++g) {
            for (int64_t c = p0; c < p1; c += 8) {
                const int n = (int)std::min<int64_t>(8, p1 - c);
                tiles[n](wbase + g * group_bytes, depth, xbase + c * x_stride, x_stride, y + c * n_out + g * kRows, n_out);
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
    Format f{};
    const bool matrix = n_dims == 2 || (n_dims > 2 && ne[2] == 1 && (n_dims < 4 || ne[3] == 1));
    return matrix && format_of(type, &f) && ne[1] % kRows == 0 && ne[0] % f.unit == 0;
#else
    (void)type, (void)ne, (void)n_dims;
    return false;
#endif
}

size_t packed_size(ggml_type type, int64_t n_in, int64_t n_out) {
    Format f{};
    if (!format_of(type, &f)) fail("packed matmul: no packed layout for {}", ggml_type_name(type));
    return n_out / kRows * (n_in / f.unit) * f.group_unit_bytes;
}

void pack_matrix(ggml_type type, const void *src, void *dst, int64_t n_in, int64_t n_out, int n_threads) {
    Format f{};
    if (!format_of(type, &f) || n_out % kRows != 0 || n_in % f.unit != 0) {
        fail("packed matmul: cannot pack a {} matrix [{}, {}]", ggml_type_name(type), n_in, n_out);
    }
    const int64_t depth = n_in / f.unit;
    const size_t src_group = ggml_row_size(type, n_in) * kRows, dst_group = depth * f.group_unit_bytes;
    const auto *in = static_cast<const uint8_t *>(src);
    auto *out = static_cast<uint8_t *>(dst);
    parallel_for(n_out / kRows, n_threads, [&](int64_t g) {
        const uint8_t *s = in + g * src_group;
        uint8_t *d = out + g * dst_group;
        switch (type) {
        case GGML_TYPE_Q8_0: pack_q8_0_group(reinterpret_cast<const BlockQ8_0 *>(s), depth, d); break;
        case GGML_TYPE_F16:
            pack_f16_group(reinterpret_cast<const uint16_t *>(s), n_in, reinterpret_cast<uint16_t *>(d));
            break;
        case GGML_TYPE_Q4_K: pack_q4_k_group(reinterpret_cast<const BlockQ4K *>(s), depth, d); break;
        default: pack_q6_k_group(reinterpret_cast<const BlockQ6K *>(s), depth, d); break;
        }
    });
}

ggml_type packed_input_type(ggml_type type) {
    Format f{};
    return format_of(type, &f) ? f.input : type;
}

ggml_tensor *quantize_input(ggml_context *ctx, ggml_tensor *x, ggml_type type) {
    Format f{};
    if (!format_of(type, &f)) fail("packed matmul: no packed layout for {}", ggml_type_name(type));
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || x->ne[0] % f.unit != 0) {
        fail("packed matmul: input must be float32 rows{}",
             f.unit > 1 ? fmt::format(" of a multiple of {} values", f.unit) : "");
    }
    static const ggml_type kForms[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q8_K, GGML_TYPE_F16};
    const ggml_type *form = std::find(std::begin(kForms), std::end(kForms), f.input);
    ggml_tensor *args[] = {x};
    return ggml_custom_4d(ctx, GGML_TYPE_I8, (int64_t)column_bytes(f.input, x->ne[0]), columns(x), 1, 1, args, 1,
                          prepare_kernel, GGML_N_TASKS_MAX, const_cast<ggml_type *>(form));
}

bool packed_input_inline(const ggml_tensor *x) { return columns(x) <= kInlineColumns; }

ggml_tensor *packed_mul_mat(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *xq) {
    if (w->ne[0] != x->ne[0]) fail("packed matmul: input has {} rows, the matrix {}", x->ne[0], w->ne[0]);
    if (!xq && packed_input_inline(x)) {
        Format f{};
        if (!format_of(w->type, &f)) fail("packed matmul: no packed layout for {}", ggml_type_name(w->type));
        if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float)) fail("packed matmul: input must be float32 rows");
        xq = x;  // prepared inside the product
    }
    if (!xq) xq = quantize_input(ctx, x, w->type);
    ggml_tensor *args[] = {w, xq};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], x->ne[2], x->ne[3], args, 2, matmul_kernel,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace toy::graph
