// toy's AMX tiles (Intel AMX-TILE and AMX-INT8, Sapphire Rapids and later):
// prompts through packed Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, K-quant, X4 (IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS, IQ1_S) and
// K16 IQ (IQ2_XS, IQ2_S, IQ1_M) matrices, 16 columns x 16 rows (BF16 and F16 ones with AMX-BF16, below)
// at a time. The packed Q8_0 layout is already what a TDPBSUD's B operand
// reads (per block, 8 rows of 64 bytes: inputs 4j..4j+3 of the 16 rows) and
// the prepared input columns are its A operand (16 columns, 32 signed
// quants each, read with the columns' stride), so neither is copied. Q4_0
// to Q5_1 and IQ4_NL decode their quants into that layout once per row group;
// the K-quants fold their integer sub-block scales into a staged copy of the
// weights (below). Every product's exact int32 sums then take the same float
// steps as the AVX-512 tiles, so the results are theirs, bit for bit (BF16's
// and F16's float tiles: theirs up to the order of float sums).
//
// Tiles are configured per thread. ggml's own AMX kernels (its buffer type,
// which still holds matrices of other types) configure a thread once and
// expect the configuration to stay, so a run of these tiles saves the
// thread's configuration and puts it back after (WideTiles::enter/leave).
#include "graph/packed_avx512_inline.h"
#include "graph/packed_kernels.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

TOY_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8,amx-bf16")

namespace toy::graph::packed {
namespace {

// GCC 12's AVX-512 conversion intrinsics start from an undefined vector and
// -Wmaybe-uninitialized reports it inside the compiler's own header.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// A tile configuration (palette 1): bytes per row and rows of each tile.
struct alignas(64) TileConfig {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64 && sizeof(TileState) == 64, "a tile configuration is 64 bytes");

constexpr TileConfig config(std::initializer_list<std::pair<int, int>> rows_colsb) {
    TileConfig c{};
    c.palette = 1;
    int t = 0;
    for (auto [rows, colsb] : rows_colsb) c.rows[t] = static_cast<uint8_t>(rows), c.colsb[t++] = static_cast<uint16_t>(colsb);
    return c;
}

// Q8_0, per block of 32 inputs: A (16 input columns x 32 quants), B (the
// group's block: 8 rows of 16 rows x 4 quants), C (16 columns x 16 rows of
// int32); tiles 0-2 and 3-5, so two blocks are in flight.
constexpr TileConfig kQ8Config = config({{16, kQK}, {kQK / 4, 64}, {16, 64}, {16, kQK}, {kQK / 4, 64}, {16, 64}});
// K-quants, per 64 inputs: A (16 columns x 64 quants), B low and high bytes
// of quant x scale (16 rows of 16 rows x 4), C for each, twice: tile 0 A,
// 1 and 4 B, 2 3 and 5 6 C.
constexpr TileConfig kKConfig = config({{16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}});

// The instructions by hand: GCC 12's _tile_loadconfig tells the compiler it
// reads 8 bytes, so stores filling the rest may be dropped (the same bug
// cmake/amx_tile_config.h mends in ggml); a tile's number is part of the
// instruction, hence a template argument printed by %c. Loads read only
// memory the tile code does not write while it runs (B's staging is written
// before, by ordinary stores that tile_fence orders); a store names what it
// writes.
template <int T>
inline void tile_load(const void *base, size_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(static_cast<long>(stride)), "i"(T));
}
template <int T, typename Out>
inline void tile_store(Out &out) {  // rows of 64 bytes
    asm volatile("tilestored %%tmm%c2, (%1,%3,1)" : "=m"(out) : "r"(&out), "i"(T), "r"(64L));
}
template <int T>
inline void tile_zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
}
inline void tile_fence() { asm volatile("" ::: "memory"); }
// C += A . B: A signed (the input's quants), B unsigned or (kSigned) signed
template <int C, int A, int B, bool kSigned = false>
inline void tile_dot() {
    if constexpr (kSigned) {
        asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
    } else {
        asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
    }
}

void load_config(const TileConfig &c) { asm volatile("ldtilecfg %0" ::"m"(c)); }

void enter(TileState *saved) { asm volatile("sttilecfg %0" : "=m"(*saved)); }

void leave(const TileState *saved) {
    if (saved->bytes[0] != 0) {
        asm volatile("ldtilecfg %0" ::"m"(*saved));
    } else {
        asm volatile("tilerelease" ::);  // the thread had none: back to the initial state
    }
}

// A tile's int32 sums as stored: [column][row].
struct Sums {
    alignas(64) int32_t c[16][16];
};

// ---- Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 ----

// Per block, 16 columns' scales and, side by side, the integer their sums
// start from (Q8_0's bias, -128 x the quants' sum, shifted: block32_bias_shift)
// or (Q4_1, Q5_1) the Q8_1 input's scaled sums as float bits.
struct Q8Columns {
    float dx[16];
    int32_t start[16];
};

// Block b's sums into the 16 columns' accumulators, as the AVX-512 tile
// takes its exact sums: + start, then acc += float(sum) x (weight scale x
// input scale); with minimums: then + minimum x scaled sum.
template <Block32 kType>
inline void q8_accumulate(__m512 *acc, const Sums &s, const uint8_t *w, const Q8Columns &x) {
    const __m512 dw = load_f16x16(w);
    if constexpr (has_min(kType)) {
        const __m512 mw = load_f16x16(w + kQ51M);
        for (int m = 0; m < 16; ++m) {
            float sx;
            std::memcpy(&sx, &x.start[m], sizeof sx);
            acc[m] = q5_1_step(acc[m], _mm512_load_si512(s.c[m]), dw, x.dx[m], mw, sx);
        }
    } else {
        for (int m = 0; m < 16; ++m) {
            const __m512i sum = _mm512_add_epi32(_mm512_load_si512(s.c[m]), _mm512_set1_epi32(x.start[m]));
            acc[m] = q8_0_step(acc[m], sum, dw, x.dx[m]);
        }
    }
}

// Block sums through tiles A, B and C: one TDPBSUD (B: 8 rows of 64 bytes at wq).
template <int A, int B, int C>
inline void q8_block(const uint8_t *xb, size_t x_stride, const uint8_t *wq, Sums &out) {
    tile_zero<C>();
    tile_load<A>(xb, x_stride);
    tile_load<B>(wq, 64);
    tile_dot<C, A, B>();
    tile_store<C>(out);
}

// A group's nibble blocks (Q4_0 to Q5_1) decoded to the 8 vectors of unsigned
// quants TDPBSUD's B reads (the Q8_0 layout's), once for all column sets.
struct alignas(64) Decoded32 {
    uint8_t q[8 * 64];
};

// One TDPBSUD per block. Block b-1's sums, stored the step before, are
// scaled after block b's tiles are issued (reading a tile's store at once
// waits for it: 5-10% slower). Q8_0's B is the packed weights themselves;
// the nibble types' (kType) their quants decoded per group (Decoded32).
template <Block32 kType>
void q8_0_tiles(const uint8_t *w, size_t group_bytes, int64_t groups, int64_t nb, const uint8_t *xq, size_t x_stride,
                int64_t cols, float *y, int64_t ldy) {
    constexpr size_t kBlock = block32_bytes(kType);
    constexpr bool kDecoded = nibbles(kType);
    load_config(kQ8Config);
    const int64_t sets = cols / 16;
    thread_local std::vector<Q8Columns> columns;
    thread_local std::vector<Decoded32> decoded;
    columns.resize(nb * sets);
    if (kDecoded) decoded.resize(nb);
    for (int64_t s = 0; s < sets; ++s) {
        for (int64_t b = 0; b < nb; ++b) {
            for (int m = 0; m < 16; ++m) {
                const uint8_t *xb = xq + (16 * s + m) * x_stride + b * kColBlock;
                int32_t tail;
                std::memcpy(&columns[s * nb + b].dx[m], xb + kQK, sizeof(float));
                std::memcpy(&tail, xb + kQK + 4, sizeof tail);
                columns[s * nb + b].start[m] = tail >> block32_bias_shift(kType);
            }
        }
    }
    Sums sums[2];
    for (int64_t g = 0; g < groups; ++g, w += group_bytes) {
        if constexpr (kDecoded) {
            for (int64_t b = 0; b < nb; ++b) {
                __m512i v[8];
                load_block32<kType>(w + b * kBlock, v);
                for (int j = 0; j < 8; ++j) _mm512_store_si512(decoded[b].q + 64 * j, v[j]);
            }
            tile_fence();
        }
        for (int64_t s = 0; s < sets; ++s) {
            const uint8_t *xs = xq + 16 * s * x_stride;
            const Q8Columns *xc = columns.data() + s * nb;
            __m512 acc[16];
            for (auto &a : acc) a = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *wb = w + b * kBlock, *xb = xs + b * kColBlock;
                const uint8_t *wq = kDecoded ? decoded[b].q : wb + block32_quants(kType);
                if (b % 2 == 0) {
                    q8_block<0, 1, 2>(xb, x_stride, wq, sums[0]);
                } else {
                    q8_block<3, 4, 5>(xb, x_stride, wq, sums[1]);
                }
                if (b > 0) q8_accumulate<kType>(acc, sums[(b - 1) % 2], wb - kBlock, xc[b - 1]);
            }
            q8_accumulate<kType>(acc, sums[(nb - 1) % 2], w + (nb - 1) * kBlock, xc[nb - 1]);
            float *yc = y + 16 * s * ldy + g * kRows;
            for (int m = 0; m < 16; ++m) _mm512_storeu_ps(yc + m * ldy, acc[m]);
        }
    }
}

// ---- the K-quants and the X4 types ----
//
// Their sub-block scales are small integers, so each is folded into the
// weights before the product: B holds quant x scale (at most 15 x 63 for
// Q4_K, 31 x 63 for Q5_K, 63 x -128..127 for Q6_K, 7 x -32..31 for Q3_K,
// 3 x 15 for Q2_K: 16 bits) as a low byte (unsigned) and a high byte
// (unsigned for Q4_K and Q5_K, signed for the others) in two tiles, and a
// super-block's 256 inputs sum up in their two C tiles, low + 256 x high:
// the same exact integer sum of quant x scale x input the AVX-512 tiles
// form, then the same float steps. The staged B of a group (per super-block
// 4 KiB of low and 4 KiB of high bytes, in the packed layout's order of 4
// inputs x 16 rows) serves all of a call's column sets.

constexpr size_t kStagedHalf = 8 * 8 * 64;  // per super-block: 8 units x 8 rows of 64 bytes
struct alignas(64) Staged {
    uint8_t lo[kStagedHalf], hi[kStagedHalf];
};

// Per row's 32-bit lane: its scale byte s in bytes 0 and 2 (the even inputs).
inline __m512i even_inputs(__m512i s) { return _mm512_or_si512(s, _mm512_slli_epi32(s, 16)); }

// Rows v[0..7] of a unit (bytes of 16 rows x 4 inputs) times the rows' scales
// (bytes, one per row and 4 inputs; s_lo for v[0..3], s_hi for v[4..7]) into
// the staged low and high bytes of that unit.
inline void stage_unit(const __m512i *v, __m512i s_lo, __m512i s_hi, uint8_t *lo, uint8_t *hi) {
    // the scales in bytes 0 and 2 of a row's lane (even inputs), or 1 and 3 (odd)
    const __m512i se[2] = {even_inputs(s_lo), even_inputs(s_hi)};
    const __m512i so[2] = {_mm512_slli_epi32(se[0], 8), _mm512_slli_epi32(se[1], 8)};
    const __m512i low_byte = _mm512_set1_epi16(0x00FF);
    for (int r = 0; r < 8; ++r) {
        const __m512i e = _mm512_maddubs_epi16(v[r], se[r / 4]);  // word i: input 2i's product
        const __m512i o = _mm512_maddubs_epi16(v[r], so[r / 4]);  // input 2i + 1's
        // low bytes in input order: e's low byte, then o's; high bytes the same
        const __m512i l = _mm512_ternarylogic_epi32(e, _mm512_slli_epi16(o, 8), low_byte, 0xE4);  // e & m | o' & ~m
        const __m512i h = _mm512_ternarylogic_epi32(_mm512_srli_epi16(e, 8), o, low_byte, 0xE4);
        _mm512_store_si512(lo + 64 * r, l);
        _mm512_store_si512(hi + 64 * r, h);
    }
}

// The super-block types k_tiles takes: Q4_K and Q5_K (below), an X4 type
// (one scale per 32 and a table) or a K16 type (a scale per 16), each with
// its block size and whether its products have a high byte (Q2_K's, at
// most 3 x 15, have none).
enum class Q45 { q4_k, q5_k };
constexpr size_t block_of(Q45 t) { return t == Q45::q5_k ? kQ5Block : kQ4Block; }
constexpr size_t block_of(X4) { return kX4Block; }
constexpr size_t block_of(K16 t) { return k16_block(t); }
constexpr bool high_bytes(Q45) { return true; }
constexpr bool high_bytes(X4) { return true; }
constexpr bool high_bytes(K16 t) { return t != K16::q2_k; }

// Q4_K, Q5_K (the fifth bits after Q4_K's layout) or an X4 type (its
// table): units with one byte of scale per row. IQ4_XS's B holds (t[q] +
// 128) x the signed scale (at most 241 x 32; IQ3_S's 143 x 31, IQ3_XXS's
// 190 x 31, IQ2_XXS's 171 x 31, IQ1_S's 137 x 15), its high byte signed as
// Q6_K's; x4_accumulate takes 128 x scale x the input's sums per 32 back.
template <auto kType>
void stage_q4_k(const uint8_t *w, int64_t nb, Staged *out) {
    constexpr bool kX4 = std::is_same_v<decltype(kType), X4>;
    constexpr size_t kSc = kX4 ? kX4Sc : kQ4Sc;
    for (int64_t b = 0; b < nb; ++b, w += block_of(kType)) {
        for (int j = 0; j < 8; ++j) {
            __m512i v[8];
            if constexpr (kX4) {
                load_x4_unit<kType>(w, j, v);
            } else if constexpr (kType == Q45::q5_k) {
                load_q5_k_unit(w, j, v);
            } else {
                load_nibbles(w + kQ4Qs + 256 * j, v);
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(w + kSc + 16 * j)));
            stage_unit(v, sc, sc, out[b].lo + 512 * j, out[b].hi + 512 * j);
        }
    }
}

// A K16 type: units with a byte of scale per row and sub-block of 16. The
// IQ types' B holds (t[q] + 128) x the scale 2 ls + 1 (at most 171 x 31),
// and k16_step takes the 128 back as it takes Q6_K's 32.
template <K16 kType>
void stage_k16(const uint8_t *w, int64_t nb, Staged *out) {
    constexpr size_t kSc = kType == K16::q2_k ? kQ2Sc : kQ6Sc;
    // Q2_K's byte holds its scale in the low nibble, its min in the high one
    const __m512i scale = _mm512_set1_epi32(kType == K16::q2_k ? 0x0F : 0xFF);
    for (int64_t b = 0; b < nb; ++b, w += k16_block(kType)) {
        for (int j = 0; j < 8; ++j) {
            __m512i v[8];
            load_k16_unit<kType>(w, j, v);
            // per row, the scales of the unit's inputs 0-15 and 16-31 (bytes)
            const __m512i pr = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + kSc + 32 * j)));
            stage_unit(v, _mm512_and_si512(pr, scale), _mm512_and_si512(_mm512_srli_epi32(pr, 8), scale), out[b].lo + 512 * j,
                       out[b].hi + 512 * j);
        }
    }
}

// Per super-block, 16 columns' scales and their sums per 32 (Q4_K's mins,
// as int16 pairs) or per 16 (the K16 types' offsets or mins) as stored in the prepared column.
struct KColumns {
    float d[16];
    uint32_t sums[8][16];
};

// low + 256 x high of a super-block's sums
inline __m512i k_total(const Sums &lo, const Sums &hi, int m) {
    return _mm512_add_epi32(_mm512_load_si512(lo.c[m]), _mm512_slli_epi32(_mm512_load_si512(hi.c[m]), 8));
}

// Super-block b's sums into the accumulators, as the AVX-512 Q4_K (and Q5_K) tile does.
inline void q4_k_accumulate(__m512 *acc, const Sums &lo, const Sums &hi, const uint8_t *w, const KColumns &x) {
    const __m512 dw = load_f16x16(w + kQ4D), dm = load_f16x16(w + kQ4Dmin);
    __m512i mins[4];
    load_q4_k_mins(w, mins);
    for (int m = 0; m < 16; ++m) {
        __m512i summ = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) summ = _mm512_dpwssd_epi32(summ, mins[p], _mm512_set1_epi32(static_cast<int32_t>(x.sums[p][m])));
        acc[m] = q4_k_step(acc[m], k_total(lo, hi, m), summ, dw, dm, x.d[m]);
    }
}

// Super-block b's sums into the accumulators, as the AVX-512 K16 tiles do.
template <K16 kType>
inline void k16_accumulate(__m512 *acc, const Sums &lo, const Sums &hi, const uint8_t *w, const KColumns &x) {
    __m512i pr[8];
    for (int j = 0; j < 8; ++j) pr[j] = load_k16_scale_pairs<kType, true>(w, j);
    for (int m = 0; m < 16; ++m) {
        __m512i corr = _mm512_setzero_si512();
        for (int j = 0; j < 8; ++j) corr = _mm512_dpwssd_epi32(corr, pr[j], _mm512_set1_epi32(static_cast<int32_t>(x.sums[j][m])));
        acc[m] = k16_step<kType>(acc[m], k_total(lo, hi, m), corr, w, x.d[m]);
    }
}

// Super-block b's sums into the accumulators, as the AVX-512 X4 tiles
// takes its exact total: low + 256 x high less 128 x the scales x the sums per 32.
template <X4 kTable>
inline void x4_accumulate(__m512 *acc, const Sums &lo, const Sums &hi, const uint8_t *w, const KColumns &x) {
    const __m512 dw = load_f16x16(w + kX4D);
    __m512i pairs[4];  // per row the scales of sub-blocks 2p and 2p + 1 as int16 pairs
    for (int p = 0; p < 4; ++p) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w + kX4Sc + 32 * p));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w + kX4Sc + 32 * p + 16));
        pairs[p] = _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(a, c), _mm_unpacklo_epi8(a, c)));
    }
    for (int m = 0; m < 16; ++m) {
        __m512i summ = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) summ = _mm512_dpwssd_epi32(summ, pairs[p], _mm512_set1_epi32(static_cast<int32_t>(x.sums[p][m])));
        acc[m] = q8_0_step(acc[m], _mm512_sub_epi32(k_total(lo, hi, m), _mm512_slli_epi32(summ, 7)), dw, x.d[m] * x4_d_factor(kTable));
    }
}

// A super-block's low and high sums through C tiles kLo and kHi (A in tile
// 0, B's low and high bytes in 1 and 4), 64 inputs per TDPBSUD. Q2_K's
// products (at most 3 x 15) have no high byte: its high sums stay zero.
template <int kLo, int kHi, bool kSignedHigh, bool kHigh>
inline void k_block(const uint8_t *xb, size_t x_stride, const Staged &st, Sums (&out)[2]) {
    tile_zero<kLo>();
    tile_zero<kHi>();
    for (int p = 0; p < 4; ++p) {
        tile_load<0>(xb + 64 * p, x_stride);
        tile_load<1>(st.lo + 1024 * p, 64);
        tile_dot<kLo, 0, 1>();
        if constexpr (kHigh) {
            tile_load<4>(st.hi + 1024 * p, 64);
            tile_dot<kHi, 0, 4, kSignedHigh>();  // the K16 and X4 types' high bytes are signed
        }
    }
    tile_store<kLo>(out[0]);
    tile_store<kHi>(out[1]);
}

// y for `groups` groups of a K-quant, an X4 or a K16 type (kType: a Q45,
// X4 or K16) and `cols` columns (a multiple of 16) of Q8_K-prepared input.
template <auto kType>
void k_tiles(const uint8_t *w, size_t group_bytes, int64_t groups, int64_t nb, const uint8_t *xq, size_t x_stride,
             int64_t cols, float *y, int64_t ldy) {
    load_config(kKConfig);
    // the K16 types take the input's sums per 16, the others its sums per 32
    constexpr bool kK16 = std::is_same_v<decltype(kType), K16>, kX4 = std::is_same_v<decltype(kType), X4>;
    constexpr bool kHigh = high_bytes(kType);
    const int64_t sets = cols / 16;
    const size_t block = block_of(kType);
    thread_local std::vector<KColumns> columns;
    thread_local std::vector<Staged> staged;
    columns.resize(nb * sets);
    staged.resize(nb);
    for (int64_t s = 0; s < sets; ++s) {
        for (int64_t b = 0; b < nb; ++b) {
            KColumns &c = columns[s * nb + b];
            for (int m = 0; m < 16; ++m) {
                const uint8_t *xb = xq + (16 * s + m) * x_stride + b * kKColBlock;
                std::memcpy(&c.d[m], xb + kKD, sizeof(float));
                for (int p = 0; p < 8; ++p) {
                    // Q4_K: int16 pairs of sums per 32 (4 of them); the K16 types: pairs per 16 (8)
                    if (kK16 || p < 4) std::memcpy(&c.sums[p][m], xb + (kK16 ? kKSum16 : kKSum32) + 4 * p, 4);
                }
            }
        }
    }
    Sums sums[2][2];  // [super-block parity][low, high]
    for (int64_t g = 0; g < groups; ++g, w += group_bytes) {
        if constexpr (kK16) {
            stage_k16<kType>(w, nb, staged.data());
        } else {
            stage_q4_k<kType>(w, nb, staged.data());
        }
        tile_fence();
        for (int64_t s = 0; s < sets; ++s) {
            const uint8_t *xs = xq + 16 * s * x_stride;
            const KColumns *xc = columns.data() + s * nb;
            __m512 acc[16];
            for (auto &a : acc) a = _mm512_setzero_ps();
            auto accumulate = [&](int64_t b) {
                if constexpr (kK16) {
                    k16_accumulate<kType>(acc, sums[b % 2][0], sums[b % 2][1], w + b * block, xc[b]);
                } else if constexpr (kX4) {
                    x4_accumulate<kType>(acc, sums[b % 2][0], sums[b % 2][1], w + b * block, xc[b]);
                } else {
                    q4_k_accumulate(acc, sums[b % 2][0], sums[b % 2][1], w + b * block, xc[b]);
                }
            };
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *xb = xs + b * kKColBlock + kKQs;
                if (b % 2 == 0) {
                    k_block<2, 3, kK16 || kX4, kHigh>(xb, x_stride, staged[b], sums[0]);
                } else {
                    k_block<5, 6, kK16 || kX4, kHigh>(xb, x_stride, staged[b], sums[1]);
                }
                if (b > 0) accumulate(b - 1);
            }
            accumulate(nb - 1);
            float *yc = y + 16 * s * ldy + g * kRows;
            for (int m = 0; m < 16; ++m) _mm512_storeu_ps(yc + m * ldy, acc[m]);
        }
    }
}

// ---- BF16 ----
//
// The packed BF16 layout is TDPBF16PS's B operand as it is (per pair of
// inputs, the group's 16 rows' two bfloat16 side by side: 16 pairs, 32
// inputs, a tile of 16 rows of 64 bytes) and the prepared columns
// (bfloat16) its A operand, so nothing is staged. Each product is exact in
// float32, as in the AVX-512 tile, but the tiles add them in their own
// order: the results are the AVX-512 set's up to float summation order, not
// bit for bit as the integer tiles'. Up to 2 column sets x 2 groups at a
// time (A tiles 0-1, B tiles 2-3, C tiles 4-7), the C tiles kept over the
// whole row and stored straight into y.
constexpr TileConfig kBf16Config = config({{16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}, {16, 64}});

template <int C, int A, int B>
inline void tile_dot_bf16() {
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
}
template <int T>
inline void tile_store_rows(float *base, int64_t ld) {  // row m at base + m * ld
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(ld * sizeof(float))), "i"(T) : "memory");
}

// A tile of 16 rows of 64 bytes, zero past what it was given: a row's last
// pairs (fewer than 16), so that the tile multiplies zeros beyond them.
struct alignas(64) Padded {
    uint8_t b[16 * 64];
};

// C tile 4 + 2 s + g += A tile s . B tile g, for the S column sets and G groups in use.
template <int S, int G>
inline void bf16_dots() {
    tile_dot_bf16<4, 0, 2>();
    if constexpr (G == 2) tile_dot_bf16<5, 0, 3>();
    if constexpr (S == 2) tile_dot_bf16<6, 1, 2>();
    if constexpr (S == 2 && G == 2) tile_dot_bf16<7, 1, 3>();
}

// S sets of 16 columns (x) times G groups (w): `steps` tiles of 32 inputs,
// then the padded tails (null: none).
template <int S, int G>
void bf16_block(const uint8_t *w, size_t group_bytes, int64_t steps, const uint8_t *x, size_t x_stride, const Padded *a_tail,
                const Padded *b_tail, float *y, int64_t ldy) {
    tile_zero<4>();
    if constexpr (G == 2) tile_zero<5>();
    if constexpr (S == 2) tile_zero<6>();
    if constexpr (S == 2 && G == 2) tile_zero<7>();
    for (int64_t k = 0; k < steps; ++k) {
        tile_load<0>(x + 64 * k, x_stride);
        if constexpr (S == 2) tile_load<1>(x + 16 * x_stride + 64 * k, x_stride);
        tile_load<2>(w + 1024 * k, 64);
        if constexpr (G == 2) tile_load<3>(w + group_bytes + 1024 * k, 64);
        bf16_dots<S, G>();
    }
    if (a_tail) {
        tile_load<0>(a_tail[0].b, 64);
        if constexpr (S == 2) tile_load<1>(a_tail[1].b, 64);
        tile_load<2>(b_tail[0].b, 64);
        if constexpr (G == 2) tile_load<3>(b_tail[1].b, 64);
        bf16_dots<S, G>();
    }
    tile_store_rows<4>(y, ldy);
    if constexpr (G == 2) tile_store_rows<5>(y + kRows, ldy);
    if constexpr (S == 2) tile_store_rows<6>(y + 16 * ldy, ldy);
    if constexpr (S == 2 && G == 2) tile_store_rows<7>(y + 16 * ldy + kRows, ldy);
}

// y for `groups` groups of packed BF16 (`n_pairs` pairs of inputs) and
// `cols` columns (a multiple of 16) of bfloat16 input.
void bf16_tiles(const uint8_t *w, size_t group_bytes, int64_t groups, int64_t n_pairs, const uint8_t *x, size_t x_stride,
                int64_t cols, float *y, int64_t ldy) {
    load_config(kBf16Config);
    const int64_t steps = n_pairs / 16, tail = n_pairs % 16, sets = cols / 16;
    thread_local std::vector<Padded> a_tail, b_tail;
    if (tail) {
        a_tail.assign(sets, Padded{});
        b_tail.assign(groups, Padded{});
        for (int64_t s = 0; s < sets; ++s) {
            for (int m = 0; m < 16; ++m) std::memcpy(a_tail[s].b + 64 * m, x + (16 * s + m) * x_stride + 64 * steps, 4 * tail);
        }
        for (int64_t g = 0; g < groups; ++g) std::memcpy(b_tail[g].b, w + g * group_bytes + 1024 * steps, 64 * tail);
        tile_fence();
    }
    for (int64_t g = 0; g < groups; g += 2) {
        const uint8_t *wg = w + g * group_bytes;
        const Padded *bt = tail ? &b_tail[g] : nullptr;
        for (int64_t s = 0; s < sets; s += 2) {
            const uint8_t *xs = x + 16 * s * x_stride;
            const Padded *at = tail ? &a_tail[s] : nullptr;
            float *ys = y + 16 * s * ldy + g * kRows;
            const bool two_groups = g + 1 < groups, two_sets = s + 1 < sets;
            if (two_groups && two_sets) {
                bf16_block<2, 2>(wg, group_bytes, steps, xs, x_stride, at, bt, ys, ldy);
            } else if (two_sets) {
                bf16_block<2, 1>(wg, group_bytes, steps, xs, x_stride, at, bt, ys, ldy);
            } else if (two_groups) {
                bf16_block<1, 2>(wg, group_bytes, steps, xs, x_stride, at, bt, ys, ldy);
            } else {
                bf16_block<1, 1>(wg, group_bytes, steps, xs, x_stride, at, bt, ys, ldy);
            }
        }
    }
}

// ---- F16 ----
//
// An F16 value (11 significant bits) is the sum of two bfloat16: hi, its
// float32 bits' upper half (8 significant bits), and lo = value - hi (at
// most the 3 bits left), both exact. So is an input rounded to F16 as ggml
// rounds it (round_column), and w x = hi hi + hi lo + lo hi + lo lo: four
// TDPBF16PS per tile of 32 inputs, each product exact in float32, where the
// AVX-512 tile takes one float32 FMA per product (with AMX-BF16 a quarter of
// the time). The sums' order differs, as BF16's does. A group's weights are
// staged as B (hi and lo pairs), the column sets' inputs as A, both padded
// with zeros to whole tiles of 32 inputs.

// The hi and lo bfloat16 of 16 float32 (F16 values), as 32-bit lanes of
// which `shift` picks the upper half (0) or moves it to the lower (16).
struct HiLo {
    __m512i hi, lo;
};
inline HiLo split_f16(__m512 v, int shift) {
    const __m512i bits = _mm512_castps_si512(v), hi = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    // lo: what hi leaves, exact (0 for an infinity or NaN, which hi carries)
    const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
    const __m512i lo = _mm512_maskz_mov_epi32(finite, _mm512_castps_si512(_mm512_sub_ps(v, _mm512_castsi512_ps(hi))));
    return {_mm512_srli_epi32(hi, shift), _mm512_srli_epi32(lo, shift)};
}

// A group's weights for the F16 tiles: per tile of 32 inputs, 16 rows of
// pairs (B's 1 KiB) of hi, then of lo.
struct alignas(64) F16Staged {
    uint8_t hi[1024], lo[1024];
};
void stage_f16(const uint8_t *w, int64_t n_in, int64_t steps, F16Staged *out) {
    for (int64_t k = 0; k < 32 * steps; k += 2) {
        uint8_t *hi = out[k / 32].hi + 64 * (k % 32 / 2), *lo = out[k / 32].lo + 64 * (k % 32 / 2);
        // the 16 rows' inputs k and k + 1 (zero past n_in)
        const __m512 a = k < n_in ? load_f16x16(w + 32 * k) : _mm512_setzero_ps();
        const __m512 b = k + 1 < n_in ? load_f16x16(w + 32 * (k + 1)) : _mm512_setzero_ps();
        const HiLo ea = split_f16(a, 16), ob = split_f16(b, 0);
        _mm512_store_si512(hi, _mm512_or_si512(ea.hi, ob.hi));
        _mm512_store_si512(lo, _mm512_or_si512(ea.lo, ob.lo));
    }
}

// A set of 16 columns for the F16 tiles: per tile of 32 inputs, the
// columns' hi (16 rows of 64 bytes), then their lo.
void stage_f16_columns(const uint8_t *x, size_t x_stride, int64_t n_in, int64_t steps, F16Staged *out) {
    for (int m = 0; m < 16; ++m) {
        const float *xc = reinterpret_cast<const float *>(x + m * x_stride);
        for (int64_t k = 0; k < 32 * steps; k += 16) {
            const __mmask16 in = n_in - k >= 16 ? __mmask16(0xFFFF) : k < n_in ? __mmask16((1u << (n_in - k)) - 1) : __mmask16(0);
            const HiLo v = split_f16(_mm512_maskz_loadu_ps(in, xc + k), 16);
            uint8_t *hi = out[k / 32].hi + 64 * m + 2 * (k % 32), *lo = out[k / 32].lo + 64 * m + 2 * (k % 32);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(hi), _mm512_cvtepi32_epi16(v.hi));
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(lo), _mm512_cvtepi32_epi16(v.lo));
        }
    }
}

// C tile 4 + 2 s += the four products of A's hi (tile 2 s) and lo (2 s + 1)
// with B's hi (6) and lo (7), for the S column sets in use.
template <int S>
inline void f16_dots() {
    tile_dot_bf16<4, 0, 6>();
    tile_dot_bf16<4, 0, 7>();
    tile_dot_bf16<4, 1, 6>();
    tile_dot_bf16<4, 1, 7>();
    if constexpr (S == 2) {
        tile_dot_bf16<5, 2, 6>();
        tile_dot_bf16<5, 2, 7>();
        tile_dot_bf16<5, 3, 6>();
        tile_dot_bf16<5, 3, 7>();
    }
}

// y for `groups` groups of packed F16 (`n_in` inputs) and `cols` columns (a
// multiple of 16) of input rounded to F16 (float32), 2 column sets a pass.
void f16_tiles(const uint8_t *w, size_t group_bytes, int64_t groups, int64_t n_in, const uint8_t *x, size_t x_stride, int64_t cols,
               float *y, int64_t ldy) {
    load_config(kBf16Config);
    const int64_t steps = (n_in + 31) / 32, sets = cols / 16;
    thread_local std::vector<F16Staged> staged_w, staged_x;
    staged_w.resize(steps);
    staged_x.resize(steps * sets);
    for (int64_t s = 0; s < sets; ++s) stage_f16_columns(x + 16 * s * x_stride, x_stride, n_in, steps, &staged_x[s * steps]);
    for (int64_t g = 0; g < groups; ++g, w += group_bytes) {
        stage_f16(w, n_in, steps, staged_w.data());
        tile_fence();
        for (int64_t s = 0; s < sets; s += 2) {
            const F16Staged *a0 = &staged_x[s * steps], *a1 = a0 + steps;
            const bool two = s + 1 < sets;
            tile_zero<4>();
            if (two) tile_zero<5>();
            for (int64_t k = 0; k < steps; ++k) {
                tile_load<0>(a0[k].hi, 64);
                tile_load<1>(a0[k].lo, 64);
                tile_load<6>(staged_w[k].hi, 64);
                tile_load<7>(staged_w[k].lo, 64);
                if (two) {
                    tile_load<2>(a1[k].hi, 64);
                    tile_load<3>(a1[k].lo, 64);
                    f16_dots<2>();
                } else {
                    f16_dots<1>();
                }
            }
            float *ys = y + 16 * s * ldy + g * kRows;
            tile_store_rows<4>(ys, ldy);
            if (two) tile_store_rows<5>(ys + 16 * ldy, ldy);
        }
    }
}

// Whether the CPU has AMX-TILE and AMX-INT8, the OS saves the tile state
// (XCR0 bits 17 and 18), and Linux lets this process use it
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), once per process).
bool amx_usable() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
    unsigned lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
}

// Whether the CPU has AMX-BF16 (every AMX CPU so far; asked after amx_usable).
bool amx_bf16() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
}

#pragma GCC diagnostic pop

}  // namespace

const WideTiles *amx_tiles() {
    static const WideTiles tiles{16,
                                 q8_0_tiles<Block32::q8_0>,
                                 k_tiles<Q45::q4_k>,
                                 k_tiles<K16::q6_k>,
                                 k_tiles<Q45::q5_k>,
                                 q8_0_tiles<Block32::q4_0>,
                                 q8_0_tiles<Block32::q4_1>,
                                 q8_0_tiles<Block32::q5_0>,
                                 q8_0_tiles<Block32::q5_1>,
                                 q8_0_tiles<Block32::iq4_nl>,
                                 k_tiles<K16::q3_k>,
                                 k_tiles<K16::q2_k>,
                                 {k_tiles<X4::iq4_xs>, k_tiles<X4::iq3_s>, k_tiles<X4::iq3_xxs>, k_tiles<X4::iq2_xxs>,
                                  k_tiles<X4::iq1_s>},
                                 k_tiles<K16::iq2>,
                                 k_tiles<K16::iq1_m>,
                                 amx_bf16() ? bf16_tiles : nullptr,
                                 amx_bf16() ? f16_tiles : nullptr,
                                 enter,
                                 leave};
    static const bool usable = amx_usable();
    return usable ? &tiles : nullptr;
}

}  // namespace toy::graph::packed

TOY_TARGET_END

#else

namespace toy::graph::packed {
const WideTiles *amx_tiles() { return nullptr; }
}  // namespace toy::graph::packed

#endif
