#include "graph/packed_matmul.h"

#include "core/error.h"
#include "core/parallel.h"
#include "graph/custom_ops.h"
#include "graph/packed_kernels.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace toy::graph {
namespace {

using namespace packed;

struct BlockQ8_0 {
    uint16_t d;  // fp16
    int8_t qs[kQK];
};
// Q5_0: 32 values d (q - 16), q of 5 bits: the low 4 in qs (values j and
// j + 16 in byte j's low and high nibble), the fifth in bit j of qh.
struct BlockQ5_0 {
    uint16_t d;  // fp16
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};
// Q4_0 and Q4_1: 32 values d (q - 8) or d q + m, q of 4 bits (values j
// and j + 16 in byte j's low and high nibble). IQ4_NL is Q4_0's block.
struct BlockQ4_0 {
    uint16_t d;  // fp16
    uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
    uint16_t d, m;  // fp16
    uint8_t qs[kQK / 2];
};
// Q5_1: 32 values d q + m, q of 5 bits stored as Q5_0's.
struct BlockQ5_1 {
    uint16_t d, m;  // fp16
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};
struct BlockQ4K {
    uint16_t d, dmin;  // fp16
    uint8_t scales[12];
    uint8_t qs[kQKK / 2];
};
struct BlockQ5K {
    uint16_t d, dmin;  // fp16
    uint8_t scales[12];
    uint8_t qh[kQKK / 8];
    uint8_t qs[kQKK / 2];
};
// IQ4_XS: per 256 values d, 8 sub-block scales ls of 6 bits (low 4 in
// scales_l, high 2 in scales_h), nibbles indexing ggml's table: d (ls - 32) t[q].
struct BlockIQ4XS {
    uint16_t d;  // fp16
    uint16_t scales_h;
    uint8_t scales_l[kQKK / 64];
    uint8_t qs[kQKK / 2];
};
struct BlockQ6K {
    uint8_t ql[kQKK / 2];
    uint8_t qh[kQKK / 4];
    int8_t scales[kQKK / 16];
    uint16_t d;  // fp16
};
// Q3_K: per 256 values d (sc - 32) (q - 4), q of 3 bits (the low 2 in qs,
// the third in hmask), 16 scales sc of 6 bits packed into 12 bytes.
struct BlockQ3K {
    uint8_t hmask[kQKK / 8];
    uint8_t qs[kQKK / 4];
    uint8_t scales[12];
    uint16_t d;  // fp16
};
// Q2_K: per 256 values d sc q - dmin m, q of 2 bits, per 16 a byte sc | m << 4.
struct BlockQ2K {
    uint8_t scales[kQKK / 16];
    uint8_t qs[kQKK / 4];
    uint16_t d, dmin;  // fp16
};
// IQ3_S: per 256 values d (2 sc + 1) s g, g a grid value picked by 9 bits
// (qs and qh), s a sign (signs), a 4-bit sc per 32 values (scales).
struct BlockIQ3S {
    uint16_t d;  // fp16
    uint8_t qs[kQKK / 4];
    uint8_t qh[kQKK / 32];
    uint8_t signs[kQKK / 8];
    uint8_t scales[kQKK / 64];
};
static_assert(sizeof(BlockIQ3S) == 110, "ggml's block_iq3_s is 110 bytes");
// IQ3_XXS: per 256 values d / 4 (2 ls + 1) s g, g a grid value picked by a
// byte (qs); per 32 values a word of four 7-bit sign patterns (the eighth
// sign makes the number of minus signs even) and ls in its top 4 bits.
struct BlockIQ3XXS {
    uint16_t d;  // fp16
    uint8_t qs[kQKK / 4];
    uint8_t signs_scales[kQKK / 8];
};
static_assert(sizeof(BlockIQ3XXS) == 98, "ggml's block_iq3_xxs is 98 bytes");
// IQ2_XXS: per 256 values d / 8 (2 ls + 1) s g, g a grid value (8, 25 or
// 43) of an 8-value grid entry picked by a byte; per 32 values 8 bytes: the
// 4 entries' bytes, then IQ3_XXS's word of four 7-bit sign patterns and ls.
struct BlockIQ2XXS {
    uint16_t d;  // fp16
    uint8_t qs[kQKK / 4];
};
static_assert(sizeof(BlockIQ2XXS) == 66, "ggml's block_iq2_xxs is 66 bytes");
// IQ1_S: per 256 values d (2 ls + 1) (g + delta), g in {-1, 0, 1} from an
// 8-value grid entry picked by 11 bits (a byte of qs, 3 bits of qh); per 32
// values a word qh: the 4 entries' high bits, ls (bits 12-14), delta's sign
// (bit 15: -1/8, else +1/8).
struct BlockIQ1S {
    uint16_t d;  // fp16
    uint8_t qs[kQKK / 8];
    uint16_t qh[kQKK / 32];
};
static_assert(sizeof(BlockIQ1S) == 50, "ggml's block_iq1_s is 50 bytes");
// IQ2_XS: per 256 values d / 8 (2 ls + 1) s g, g a grid value (8, 25 or 43)
// of an 8-value grid entry picked by the low 9 bits of a word of qs, whose
// top 7 are the entry's sign pattern (the eighth sign makes the number of
// minus signs even); a 4-bit ls per 16 values (scales: values 32j.. in
// byte j's low nibble, 32j + 16.. in its high one).
struct BlockIQ2XS {
    uint16_t d;  // fp16
    uint16_t qs[kQKK / 8];
    uint8_t scales[kQKK / 32];
};
static_assert(sizeof(BlockIQ2XS) == 74, "ggml's block_iq2_xs is 74 bytes");
// IQ2_S: as IQ2_XS, the entry picked by 10 bits (a byte of qs, 2 bits of
// qh: entry l of sub-block j's in bits 2l.. of qh[j]), the signs a byte per
// entry (qs[32 + 4j + l]).
struct BlockIQ2S {
    uint16_t d;  // fp16
    uint8_t qs[kQKK / 4];
    uint8_t qh[kQKK / 32];
    uint8_t scales[kQKK / 32];
};
static_assert(sizeof(BlockIQ2S) == 82, "ggml's block_iq2_s is 82 bytes");
// IQ1_M: per 256 values d (2 ls + 1) (g + delta), IQ1_S's grid entries of 8
// picked by 11 bits (a byte of qs, 3 bits of a nibble of qh, whose fourth
// bit is that entry's delta sign: -1/8, else +1/8); a 3-bit ls per 16
// values, 12 bits of 4 scales in each of the 4 words of scales, whose top 4
// bits together are the fp16 d.
struct BlockIQ1M {
    uint8_t qs[kQKK / 8];
    uint8_t qh[kQKK / 16];
    uint8_t scales[kQKK / 32];
};
static_assert(sizeof(BlockIQ1M) == 56, "ggml's block_iq1_m is 56 bytes");
static_assert(sizeof(BlockQ3K) == 110 && sizeof(BlockQ2K) == 84, "ggml's block_q3_K and block_q2_K are 110 and 84 bytes");
static_assert(sizeof(BlockQ8_0) == 34, "ggml's block_q8_0 is 34 bytes");
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20, "ggml's block_q4_0 and block_q4_1 are 18 and 20 bytes");
static_assert(sizeof(BlockQ5_0) == 22, "ggml's block_q5_0 is 22 bytes");
static_assert(sizeof(BlockQ5_1) == 24, "ggml's block_q5_1 is 24 bytes");
static_assert(sizeof(BlockQ4K) == 144, "ggml's block_q4_K is 144 bytes");
static_assert(sizeof(BlockQ5K) == 176, "ggml's block_q5_K is 176 bytes");
static_assert(sizeof(BlockIQ4XS) == 136, "ggml's block_iq4_xs is 136 bytes");
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
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_IQ4_NL: *f = {kQK, block32_bytes(block32_of(type)), GGML_TYPE_Q8_0}; return true;
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_1: *f = {kQK, block32_bytes(block32_of(type)), GGML_TYPE_Q8_1}; return true;
    case GGML_TYPE_F16: *f = {1, kRows * sizeof(uint16_t), GGML_TYPE_F16}; return true;
    case GGML_TYPE_Q4_K: *f = {kQKK, kQ4Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_Q5_K: *f = {kQKK, kQ5Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_IQ4_XS:
    case GGML_TYPE_IQ3_S:
    case GGML_TYPE_IQ3_XXS:
    case GGML_TYPE_IQ2_XXS:
    case GGML_TYPE_IQ1_S: *f = {kQKK, kX4Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_Q6_K: *f = {kQKK, kQ6Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_Q3_K: *f = {kQKK, kQ3Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_Q2_K: *f = {kQKK, kQ2Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S:
    case GGML_TYPE_IQ1_M: *f = {kQKK, kI16Block, GGML_TYPE_Q8_K}; return true;
    case GGML_TYPE_BF16: *f = {2, kRows * 2 * sizeof(uint16_t), GGML_TYPE_BF16}; return true;
    default: return false;
    }
}

// Bytes of one prepared input column of n_in values for an input form.
size_t column_bytes(ggml_type input, int64_t n_in) {
    switch (input) {
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q8_1: return n_in / kQK * kColBlock;
    case GGML_TYPE_Q8_K: return n_in / kQKK * kKColBlock;
    case GGML_TYPE_BF16: return n_in * sizeof(uint16_t);
    default: return n_in * sizeof(float);
    }
}

int64_t columns(const ggml_tensor *x) { return x->ne[1] * x->ne[2] * x->ne[3]; }

// Up to this many input columns (decoding), every thread of a product
// prepares the input itself instead of a separate op doing it once.
constexpr int64_t kInlineColumns = 4;

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

// Bit `shift` of the 32 bytes at src (a unit's inputs in order: the fifth
// bit of 5-bit quants, Q3_K's hmask bit of unit j) as row r's vector of
// bits: byte i of the row's 4 holds in bit k that of input 4k + i
// (packed_kernels.h). Four bytes at a time a 32-bit word (each at most 1,
// shifted at most 7).
void put_bit_vector(const uint8_t *src, int shift, int r, uint8_t *out) {
    uint32_t w[8], bits = 0;  // w[k]: inputs 4k..4k + 3
    std::memcpy(w, src, sizeof w);
    for (int k = 0; k < 8; ++k) bits |= ((w[k] >> shift) & 0x01010101u) << k;
    std::memcpy(out + 4 * r, &bits, 4);
}

// Bits shift..shift + 1 of the 32 bytes at src (a unit's inputs in order:
// Q6_K's high 2 bits, Q3_K's and Q2_K's 2-bit fields) as row r's part of two
// planes of 64 bytes: plane h's byte 4r + i holds in bits 2k..2k+1 those of
// input 16h + 4k + i. Four bytes at a time (each at most 3, shifted at most 6).
void put_bit_pairs(const uint8_t *src, int shift, int r, uint8_t *out) {
    for (int h = 0; h < 2; ++h) {
        uint32_t w[4], plane = 0;  // w[k]: inputs 16h + 4k..16h + 4k + 3
        std::memcpy(w, src + 16 * h, sizeof w);
        for (int k = 0; k < 4; ++k) plane |= ((w[k] >> shift) & 0x03030303u) << (2 * k);
        std::memcpy(out + 64 * h + 4 * r, &plane, 4);
    }
}

// A Q5_0 or Q5_1 block's 5-bit quants q as bytes, eight at a time in a
// 64-bit word (a load packs every such matrix of a model): values
// 8 part .. 8 part + 7, each its low nibble with the fifth bit as 16.
uint64_t five_bit_quants(const uint8_t *qh, const uint8_t *qs, int part) {
    constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0Full, kOnes = 0x0101010101010101ull;
    uint32_t high;
    std::memcpy(&high, qh, sizeof high);
    uint64_t nibs;
    std::memcpy(&nibs, qs + 8 * (part % 2), sizeof nibs);
    nibs = part < 2 ? nibs & kLow : (nibs >> 4) & kLow;
    // bit i of the 8 fifth bits into byte i (0 or 1): repeat the byte, keep bit i of byte i, set bit 7 where kept
    const uint64_t kept = ((high >> (8 * part)) & 0xFF) * kOnes & 0x8040201008040201ull;
    const uint64_t fifth = ((kept + 0x7F7F7F7F7F7F7F7Full) >> 7) & kOnes;
    return nibs | fifth * 0x10;
}

// The 32 4-bit quants of 16 bytes in ggml's order for 32 values (value j in
// byte j's low nibble, j + 16 in its high one), as bytes.
void split_nibbles(const uint8_t *qs, uint8_t *q) {
    for (int j = 0; j < kQK / 2; ++j) q[j] = qs[j] & 15, q[j + kQK / 2] = qs[j] >> 4;
}

// A Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL block's quants q in order, as bytes.
template <typename Block>
void block_quants(const Block &b, uint8_t *q) {
    if constexpr (requires { b.qh; }) {  // Q5_0, Q5_1
        for (int part = 0; part < 4; ++part) {
            const uint64_t bytes = five_bit_quants(b.qh, b.qs, part);
            std::memcpy(q + 8 * part, &bytes, sizeof bytes);
        }
    } else {
        split_nibbles(b.qs, q);
    }
}

// f(blk, r, out) for row r's block b of a group's rows (in: row-major, nb
// blocks a row), b = 0, 1, ... in turn, out advancing `bytes` per b: how
// every layout is written, a super-block (or block) of all 16 rows at a time.
template <typename Block, typename F>
void for_each_row_block(const Block *in, int64_t nb, size_t bytes, uint8_t *out, F &&f) {
    for (int64_t b = 0; b < nb; ++b, out += bytes) {
        for (int r = 0; r < kRows; ++r) f(in[r * nb + b], r, out);
    }
}

// Q8_0, per group and block: the 16 rows' scales, then their quants + 128
// as 8 vectors of 16 rows x 4.
void pack_q8_0_group(const BlockQ8_0 *in, int64_t nb, uint8_t *out) {
    for_each_row_block(in, nb, kGroupBlock, out, [](const BlockQ8_0 &blk, int r, uint8_t *out) {
        std::memcpy(out + 2 * r, &blk.d, 2);
        uint32_t q4[8];  // the row's quants as 8 groups of 4, each byte + 128
        std::memcpy(q4, blk.qs, sizeof q4);
        for (int j = 0; j < 8; ++j) {
            const uint32_t u = q4[j] ^ 0x80808080u;
            std::memcpy(out + 32 + 64 * j + 4 * r, &u, 4);
        }
    });
}

// Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL (kType), per group and block: the 16 rows' d
// (and m), then their quants as 4 vectors of nibbles (and Q5's fifth bits).
template <Block32 kType, typename Block>
void pack_nibble_group(const Block *in, int64_t nb, uint8_t *out) {
    for_each_row_block(in, nb, block32_bytes(kType), out, [](const Block &blk, int r, uint8_t *out) {
        std::memcpy(out + 2 * r, &blk.d, 2);
        if constexpr (has_min(kType)) std::memcpy(out + kQ51M + 2 * r, &blk.m, 2);
        uint8_t q[kQK];
        block_quants(blk, q);
        put_nibbles(q, r, out + block32_quants(kType));
        if constexpr (has_fifth(kType)) put_bit_vector(q, 4, r, out + block32_bits(kType));
    });
}

void pack_f16_group(const uint16_t *in, int64_t n_in, uint16_t *out) {
    for (int64_t k = 0; k < n_in; ++k) {
        for (int r = 0; r < kRows; ++r) *out++ = in[r * n_in + k];
    }
}

// Row r's inputs 2p and 2p+1 side by side, the 16 rows of a pair in one vector.
void pack_bf16_group(const uint16_t *in, int64_t n_in, uint16_t *out) {
    for (int64_t k = 0; k < n_in; k += 2) {
        for (int r = 0; r < kRows; ++r) {
            *out++ = in[r * n_in + k];
            *out++ = in[r * n_in + k + 1];
        }
    }
}

// A Q4_K or Q5_K super-block's quants in order (sub-block j is 32j..32j+31):
// per 64 inputs, 32 bytes of low nibbles then high ones; Q5_K's fifth bit of
// input 32j + l is bit j of qh[l].
void k_values(const BlockQ4K &blk, uint8_t *q) {
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = blk.qs[32 * c + l] & 15;
            q[64 * c + 32 + l] = blk.qs[32 * c + l] >> 4;
        }
    }
}
void k_values(const BlockQ5K &blk, uint8_t *q) {
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = (blk.qs[32 * c + l] & 15) | ((blk.qh[l] >> (2 * c)) & 1) << 4;
            q[64 * c + 32 + l] = (blk.qs[32 * c + l] >> 4) | ((blk.qh[l] >> (2 * c + 1)) & 1) << 4;
        }
    }
}

// Q4_K (kBlock kQ4Block) or Q5_K (kQ5Block: the fifth bits after Q4_K's layout).
template <typename Block, size_t kBlock>
void pack_q4_k_group(const Block *in, int64_t nb, uint8_t *out) {
    for_each_row_block(in, nb, kBlock, out, [](const Block &blk, int r, uint8_t *out) {
        std::memcpy(out + kQ4D + 2 * r, &blk.d, 2);
        std::memcpy(out + kQ4Dmin + 2 * r, &blk.dmin, 2);
        uint8_t q[kQKK];
        k_values(blk, q);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            q4k_scale_min(blk.scales, j, &sc, &m);
            out[kQ4Sc + 16 * j + r] = sc;
            out[kQ4Min + 32 * (j / 2) + 2 * r + j % 2] = m;
            put_nibbles(q + 32 * j, r, out + kQ4Qs + 256 * j);
            if constexpr (kBlock == kQ5Block) put_bit_vector(q + 32 * j, 4, r, out + kQ5Qh + 64 * j);
        }
    });
}

void pack_iq4_xs_group(const BlockIQ4XS *in, int64_t nb, uint8_t *out) {
    for_each_row_block(in, nb, kX4Block, out, [](const BlockIQ4XS &blk, int r, uint8_t *out) {
        std::memcpy(out + kX4D + 2 * r, &blk.d, 2);
        for (int j = 0; j < 8; ++j) {
            const int ls = ((blk.scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((blk.scales_h >> (2 * j)) & 3) << 4;
            out[kX4Sc + 16 * j + r] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
            uint8_t q[kQK];
            split_nibbles(blk.qs + 16 * j, q);
            put_nibbles(q, r, out + kX4Qs + 256 * j);
        }
    });
}

// A grid of kValues-value entries (IQ3_S's 512 and IQ3_XXS's 256 of 4;
// IQ2_XXS's 256, IQ2_XS's 512, IQ2_S's 1024 and IQ1_S's 2048 of 8) as the
// nibbles of their positive values in an X4 table, 4 to a word (entry e's
// values in words e kValues / 4 ..), read once from ggml's dequantization
// of blocks that pick 256 / kValues entries each in turn (`pick`: d 1,
// scales 0, no signs; each value then the grid value times `step`). A
// negative value -g is 15 - m for g's nibble m: the nibble xor 15.
template <typename Block, size_t kEntries, int kValues = 4>
std::array<uint32_t, kEntries * kValues / 4> grid_nibbles(ggml_type type, X4 table, float step, void (*pick)(Block &, int first)) {
    constexpr int kPerBlock = kQKK / kValues;
    const std::array<uint8_t, 16> values = x4_table(table, 0);
    std::array<uint32_t, kEntries * kValues / 4> n{};
    const auto to_float = ggml_get_type_traits(type)->to_float;
    for (int first = 0; first < static_cast<int>(kEntries); first += kPerBlock) {
        Block blk{};
        blk.d = ggml_fp32_to_fp16(1.0f);
        pick(blk, first);
        float v[kQKK];
        to_float(&blk, v, kQKK);
        for (int i = 0; i < kQKK; ++i) {
            const auto g = static_cast<int8_t>(std::lround(v[i] / step));
            const auto m = std::find(values.begin(), values.end(), static_cast<uint8_t>(g)) - values.begin();
            n[first * kValues / 4 + i / 4] |= static_cast<uint32_t>(m) << (8 * (i % 4));
        }
    }
    return n;
}

// IQ3_S's: block values 4k.. are the entry picked by qs[k] and bit k % 8 of
// qh[k / 8]; d (2 sc + 1) with sc 0 is 1.
const std::array<uint32_t, 512> &iq3s_grid_nibbles() {
    static const auto nibbles = grid_nibbles<BlockIQ3S, 512>(GGML_TYPE_IQ3_S, X4::iq3_s, 1.0f, [](BlockIQ3S &blk, int first) {
        for (int k = 0; k < 64; ++k) {
            blk.qs[k] = static_cast<uint8_t>(first + k);
            blk.qh[k / 8] |= static_cast<uint8_t>(((first + k) >> 8) << (k % 8));
        }
    });
    return nibbles;
}

// IQ3_XXS's: block values 4k.. are the entry picked by qs[k]; d / 4 (2 ls +
// 1) with ls 0 is 1/4.
const std::array<uint32_t, 256> &iq3xxs_grid_nibbles() {
    static const auto nibbles = grid_nibbles<BlockIQ3XXS, 256>(GGML_TYPE_IQ3_XXS, X4::iq3_xxs, 0.25f, [](BlockIQ3XXS &blk, int first) {
        for (int k = 0; k < 64; ++k) blk.qs[k] = static_cast<uint8_t>(first + k);
    });
    return nibbles;
}

// IQ2_XXS's: block values 8k.. are the entry picked by byte k % 4 of
// sub-block k / 4; d / 8 (2 ls + 1) with ls 0 is 1/8.
const std::array<uint32_t, 512> &iq2xxs_grid_nibbles() {
    static const auto nibbles = grid_nibbles<BlockIQ2XXS, 256, 8>(GGML_TYPE_IQ2_XXS, X4::iq2_xxs, 0.125f, [](BlockIQ2XXS &blk, int first) {
        for (int k = 0; k < 32; ++k) blk.qs[8 * (k / 4) + k % 4] = static_cast<uint8_t>(first + k);
    });
    return nibbles;
}

// IQ2_XS's: block values 8k.. are the entry picked by word k of qs (sign
// pattern 0); d / 8 (2 ls + 1) with ls 0 is 1/8.
const std::array<uint32_t, 1024> &iq2xs_grid_nibbles() {
    static const auto nibbles = grid_nibbles<BlockIQ2XS, 512, 8>(GGML_TYPE_IQ2_XS, X4::iq2_xxs, 0.125f, [](BlockIQ2XS &blk, int first) {
        for (int k = 0; k < 32; ++k) blk.qs[k] = static_cast<uint16_t>(first + k);
    });
    return nibbles;
}

// IQ2_S's: block values 8k.. are the entry picked by qs[k] and bits 2 (k %
// 4).. of qh[k / 4] (no signs); d / 8 (2 ls + 1) with ls 0 is 1/8.
const std::array<uint32_t, 2048> &iq2s_grid_nibbles() {
    static const auto nibbles = grid_nibbles<BlockIQ2S, 1024, 8>(GGML_TYPE_IQ2_S, X4::iq2_xxs, 0.125f, [](BlockIQ2S &blk, int first) {
        for (int k = 0; k < 32; ++k) {
            blk.qs[k] = static_cast<uint8_t>(first + k);
            blk.qh[k / 4] |= static_cast<uint8_t>((((first + k) >> 8) & 3) << (2 * (k % 4)));
        }
    });
    return nibbles;
}

// IQ1_S's, for a positive delta (kNegative false) or a negative one: block
// values 8k.. are the entry picked by byte k of qs and bits 3 (k % 4).. of
// qh[k / 4]; d (2 ls + 1) with ls 0 is 1, each value g +- 1/8.
template <bool kNegative>
const std::array<uint32_t, 4096> &iq1s_grid_nibbles() {
    static const auto nibbles = grid_nibbles<BlockIQ1S, 2048, 8>(GGML_TYPE_IQ1_S, X4::iq1_s, 0.125f, [](BlockIQ1S &blk, int first) {
        for (int k = 0; k < 32; ++k) {
            blk.qs[k] = static_cast<uint8_t>(first + k);
            blk.qh[k / 4] |= static_cast<uint16_t>((((first + k) >> 8) & 7) << (3 * (k % 4)));
        }
        if (kNegative) {
            for (uint16_t &h : blk.qh) h |= 0x8000;
        }
    });
    return nibbles;
}

// A 7-bit sign pattern (IQ3_XXS, IQ2_XXS, IQ2_XS) as 8 signs: the eighth
// makes the number of minus signs even.
uint8_t even_signs(unsigned seven) { return static_cast<uint8_t>(seven | (__builtin_parity(seven) << 7)); }

// IQ3_XXS's and IQ2_XXS's four 7-bit sign patterns of a sub-block's word.
void even_signs(uint32_t word, uint8_t (&signs)[4]) {
    for (int l = 0; l < 4; ++l) signs[l] = even_signs((word >> (7 * l)) & 127);
}

// 4 sign bits as 4 bytes, 15 where set (what turns m into 15 - m).
constexpr std::array<uint32_t, 16> kSignFlips = [] {
    std::array<uint32_t, 16> f{};
    for (int b = 0; b < 16; ++b) {
        for (int p = 0; p < 4; ++p) f[b] |= ((b >> p) & 1u) * (15u << (8 * p));
    }
    return f;
}();

// One sub-block of a grid type (32 values, 8 words of 4 grid values:
// entries of 4, or halves of entries of 8) as its packer reads it: the
// scale bytes (X4: scale[0] for all 32 values; K16: one per 16), each
// word's nibbles of the grid values (4 to a word, from a grid's nibbles),
// and the signs: word k's values are negated (nibble xor 15) where bits 4 (k
// % 2).. of signs[k / 2] are set.
struct GridUnit {
    uint8_t scale[2] = {};
    uint32_t word[8] = {};
    uint8_t signs[4] = {};
};

// A block's fp16 d: where ggml keeps it (IQ1_M: spread over the top 4 bits
// of its 4 words of scales).
template <typename Block>
uint16_t block_d(const Block &blk) {
    return blk.d;
}
uint16_t block_d(const BlockIQ1M &blk) {
    uint16_t sc[4];
    std::memcpy(sc, blk.scales, sizeof sc);
    return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

// A group of a grid type in IQ4_XS's layout (kPer16 false: the X4 types) or
// the K16 IQ types' (Q6_K's scales and low nibbles): per row and super-block
// d, then per sub-block j what read(blk, j, unit) gives: its scale bytes and
// each value's nibble.
template <bool kPer16, typename Block, typename Read>
void pack_grid_group(const Block *in, int64_t nb, uint8_t *out, Read read) {
    constexpr size_t kBlock = kPer16 ? kI16Block : kX4Block, kQs = kPer16 ? kI16Qs : kX4Qs;
    static_assert(kX4D == kI16D, "both layouts start with d");
    for_each_row_block(in, nb, kBlock, out, [&read](const Block &blk, int r, uint8_t *out) {
        const uint16_t d = block_d(blk);
        std::memcpy(out + kX4D + 2 * r, &d, 2);
        for (int j = 0; j < 8; ++j) {
            GridUnit u;
            read(blk, j, u);
            if constexpr (kPer16) {
                out[kI16Sc + 32 * j + 2 * r] = u.scale[0];
                out[kI16Sc + 32 * j + 2 * r + 1] = u.scale[1];
            } else {
                out[kX4Sc + 16 * j + r] = u.scale[0];
            }
            uint8_t q[kQK];
            for (int k = 0; k < 8; ++k) {
                const uint32_t m = u.word[k] ^ kSignFlips[(u.signs[k / 2] >> (4 * (k % 2))) & 15];
                std::memcpy(q + 4 * k, &m, sizeof m);
            }
            put_nibbles(q, r, out + kQs + 256 * j);
        }
    });
}

// The words of an entry of 8 values (entry e's words 2e and 2e + 1 of a grid's nibbles) as words k and k + 1.
void entry_words(const uint32_t *grid, int entry, GridUnit &u, int k) {
    u.word[k] = grid[2 * entry];
    u.word[k + 1] = grid[2 * entry + 1];
}

// IQ3_S in IQ4_XS's layout: the scales 2 sc + 1, and each value's signed
// grid value (odd, -15..15) as the nibble m of 2m - 15 (kIq3sValues).
// Values 4k.. of sub-block j: grid entry qs[8j + k] | (bit k of qh[j]) << 8,
// their signs bits 4 (k % 2).. of signs[4j + k / 2].
void pack_iq3_s_group(const BlockIQ3S *in, int64_t nb, uint8_t *out) {
    pack_grid_group<false>(in, nb, out, [grid = iq3s_grid_nibbles().data()](const BlockIQ3S &blk, int j, GridUnit &u) {
        u.scale[0] = static_cast<uint8_t>(2 * ((blk.scales[j / 2] >> (4 * (j % 2))) & 15) + 1);
        for (int k = 0; k < 8; ++k) u.word[k] = grid[blk.qs[8 * j + k] | ((blk.qh[j] >> k) & 1) << 8];
        std::memcpy(u.signs, blk.signs + 4 * j, sizeof u.signs);
    });
}

// IQ3_XXS in IQ4_XS's layout: the scales 2 ls + 1, and each value's signed
// grid value as its nibble in kIq3xxsValues (the tiles take d's 1/4).
// Values 4k.. of sub-block j: grid entry qs[8j + k], their signs bits 4 (k %
// 2).. of the 8 signs of the 7-bit pattern k / 2 in sub-block j's word.
void pack_iq3_xxs_group(const BlockIQ3XXS *in, int64_t nb, uint8_t *out) {
    pack_grid_group<false>(in, nb, out, [grid = iq3xxs_grid_nibbles().data()](const BlockIQ3XXS &blk, int j, GridUnit &u) {
        uint32_t word;
        std::memcpy(&word, blk.signs_scales + 4 * j, sizeof word);
        u.scale[0] = static_cast<uint8_t>(2 * (word >> 28) + 1);
        for (int k = 0; k < 8; ++k) u.word[k] = grid[blk.qs[8 * j + k]];
        even_signs(word, u.signs);
    });
}

// IQ2_XXS in IQ4_XS's layout: the scales 2 ls + 1, and each value's signed
// grid value as its nibble in kIq2xxsValues (the tiles take d's 1/8).
// Sub-block j's 8 bytes: entries qs[8j + l] (values 8l.., the words 2
// qs[8j + l] and the next of the grid's nibbles), then the word of signs
// and ls, sign pattern l for entry l.
void pack_iq2_xxs_group(const BlockIQ2XXS *in, int64_t nb, uint8_t *out) {
    pack_grid_group<false>(in, nb, out, [grid = iq2xxs_grid_nibbles().data()](const BlockIQ2XXS &blk, int j, GridUnit &u) {
        uint32_t word;
        std::memcpy(&word, blk.qs + 8 * j + 4, sizeof word);
        u.scale[0] = static_cast<uint8_t>(2 * (word >> 28) + 1);
        for (int l = 0; l < 4; ++l) entry_words(grid, blk.qs[8 * j + l], u, 2 * l);
        even_signs(word, u.signs);
    });
}

// IQ1_S in IQ4_XS's layout: the scales 2 ls + 1, and each value's 8 (g +-
// 1/8) as its nibble in kIq1sValues (the tiles take d's 1/8), from the grid
// read for the sub-block's delta; no signs. Entry l of sub-block j: qs[4j +
// l] | bits 3l.. of qh[j] << 8 (values 8l.., the grid's words 2 entry and
// the next).
void pack_iq1_s_group(const BlockIQ1S *in, int64_t nb, uint8_t *out) {
    pack_grid_group<false>(in, nb, out, [plus = iq1s_grid_nibbles<false>().data(), minus = iq1s_grid_nibbles<true>().data()](
                                            const BlockIQ1S &blk, int j, GridUnit &u) {
        const unsigned qh = blk.qh[j];
        u.scale[0] = static_cast<uint8_t>(2 * ((qh >> 12) & 7) + 1);
        for (int l = 0; l < 4; ++l) entry_words(qh & 0x8000 ? minus : plus, blk.qs[4 * j + l] | ((qh >> (3 * l)) & 7) << 8, u, 2 * l);
    });
}

// The scale bytes 2 ls + 1 of sub-block j's halves, from IQ2_XS's and IQ2_S's byte j of 4-bit ls.
template <typename Block>
void halves_scales(const Block &blk, int j, GridUnit &u) {
    u.scale[0] = static_cast<uint8_t>(2 * (blk.scales[j] & 15) + 1);
    u.scale[1] = static_cast<uint8_t>(2 * (blk.scales[j] >> 4) + 1);
}

// IQ2_XS in the K16 IQ layout: the scales 2 ls + 1 per 16 values, each
// value's signed grid value as its nibble in kIq2xxsValues (the tiles take
// d's 1/8). Entry l of sub-block j: the low 9 bits of qs[4j + l], its signs
// the top 7 and their parity.
void pack_iq2_xs_group(const BlockIQ2XS *in, int64_t nb, uint8_t *out) {
    pack_grid_group<true>(in, nb, out, [grid = iq2xs_grid_nibbles().data()](const BlockIQ2XS &blk, int j, GridUnit &u) {
        halves_scales(blk, j, u);
        for (int l = 0; l < 4; ++l) {
            const unsigned q = blk.qs[4 * j + l];
            entry_words(grid, static_cast<int>(q & 511), u, 2 * l);
            u.signs[l] = even_signs(q >> 9);
        }
    });
}

// IQ2_S likewise: entry l of sub-block j is qs[4j + l] | bits 2l.. of qh[j]
// << 8, its signs the byte qs[32 + 4j + l].
void pack_iq2_s_group(const BlockIQ2S *in, int64_t nb, uint8_t *out) {
    pack_grid_group<true>(in, nb, out, [grid = iq2s_grid_nibbles().data()](const BlockIQ2S &blk, int j, GridUnit &u) {
        halves_scales(blk, j, u);
        for (int l = 0; l < 4; ++l) entry_words(grid, blk.qs[4 * j + l] | ((blk.qh[j] >> (2 * l)) & 3) << 8, u, 2 * l);
        std::memcpy(u.signs, blk.qs + kQKK / 8 + 4 * j, sizeof u.signs);
    });
}

// IQ1_M in the K16 IQ layout: the scales 2 ls + 1 per 16 values (sub-block
// j's in bits 6 (j % 2).. of scale word j / 2), each value's 8 (g +- 1/8) as
// its nibble in kIq1sValues from IQ1_S's grid for the entry's delta (the
// tiles take d's 1/8). Entry l of sub-block j: qs[4j + l] | the low 3 bits
// of nibble l % 2 of qh[2j + l / 2] << 8, the nibble's fourth bit its delta.
void pack_iq1_m_group(const BlockIQ1M *in, int64_t nb, uint8_t *out) {
    pack_grid_group<true>(in, nb, out, [plus = iq1s_grid_nibbles<false>().data(), minus = iq1s_grid_nibbles<true>().data()](
                                           const BlockIQ1M &blk, int j, GridUnit &u) {
        uint16_t sc;
        std::memcpy(&sc, blk.scales + 2 * (j / 2), sizeof sc);
        u.scale[0] = static_cast<uint8_t>(2 * ((sc >> (6 * (j % 2))) & 7) + 1);
        u.scale[1] = static_cast<uint8_t>(2 * ((sc >> (6 * (j % 2) + 3)) & 7) + 1);
        for (int l = 0; l < 4; ++l) {
            const unsigned nibble = (blk.qh[2 * j + l / 2] >> (4 * (l % 2))) & 15;
            entry_words(nibble & 8 ? minus : plus, static_cast<int>(blk.qs[4 * j + l] | (nibble & 7) << 8), u, 2 * l);
        }
    });
}

void pack_q6_k_group(const BlockQ6K *in, int64_t nb, uint8_t *out) {
    for_each_row_block(in, nb, kQ6Block, out, [](const BlockQ6K &blk, int r, uint8_t *out) {
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
            put_nibbles(q + 32 * j, r, out + kQ6Ql + 256 * j);
            put_bit_pairs(q + 32 * j, 4, r, out + kQ6Qh + 128 * j);
        }
    });
}

// Q3_K's and Q2_K's 2-bit fields of unit j (values 32j..32j+31) as Q6_K's
// planes of high bits, for row r: the field of value 128c + 32t + l is bits
// 2t..2t+1 of qs[32c + l]. (Q3_K's third bit of value v is bit v / 32 of
// hmask[v % 32]: put_bit_vector(hmask, j, ...).)
void put_two_bit_planes(const uint8_t *qs, int j, int r, uint8_t *out) { put_bit_pairs(qs + 32 * (j / 4), 2 * (j % 4), r, out); }

// Q3_K: the 6-bit scales less 32 (scale i: its low 4 bits in byte i's low
// nibble, or i - 8's high nibble from 8 on; its high 2 bits in bits
// 2 (i / 4).. of byte 8 + i % 4), the 2-bit fields and the third bits.
void pack_q3_k_group(const BlockQ3K *in, int64_t nb, uint8_t *out) {
    for_each_row_block(in, nb, kQ3Block, out, [](const BlockQ3K &blk, int r, uint8_t *out) {
        std::memcpy(out + kQ3D + 2 * r, &blk.d, 2);
        for (int i = 0; i < 16; ++i) {
            const int low = i < 8 ? blk.scales[i] & 15 : blk.scales[i - 8] >> 4;
            const int high = (blk.scales[8 + i % 4] >> (2 * (i / 4))) & 3;
            out[kQ3Sc + 32 * (i / 2) + 2 * r + i % 2] = static_cast<uint8_t>(static_cast<int8_t>((low | high << 4) - 32));
        }
        for (int j = 0; j < 8; ++j) {
            put_two_bit_planes(blk.qs, j, r, out + kQ3Ql + 128 * j);
            put_bit_vector(blk.hmask, j, r, out + kQ3Qh + 64 * j);
        }
    });
}

// Q2_K: d, dmin, the bytes of scales and mins as they are, the 2-bit fields.
void pack_q2_k_group(const BlockQ2K *in, int64_t nb, uint8_t *out) {
    for_each_row_block(in, nb, kQ2Block, out, [](const BlockQ2K &blk, int r, uint8_t *out) {
        std::memcpy(out + kQ2D + 2 * r, &blk.d, 2);
        std::memcpy(out + kQ2Dmin + 2 * r, &blk.dmin, 2);
        for (int i = 0; i < 16; ++i) out[kQ2Sc + 32 * (i / 2) + 2 * r + i % 2] = blk.scales[i];
        for (int j = 0; j < 8; ++j) put_two_bit_planes(blk.qs, j, r, out + kQ2Qs + 128 * j);
    });
}

// The decoding prefetches for this CPU (packed_kernels.h): into L2 and then
// L1 on Intel's (measured on Sapphire Rapids; on Emerald Rapids, family 6
// model 207, twice as far ahead decoded SmolLM2 F16 3-11% faster in three
// runs, SmolLM2 Q8_0 3%, the larger two -2% to +11%: BENCHMARKS.md), into
// L1 alone elsewhere (as measured on AMD's Zen 3 and 4; the step into L2 was
// tried on Zen 3 only).
PrefetchPlan cpu_prefetch_plan() {
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // the vendor string in EBX, EDX, ECX: "Genu" "ineI" "ntel"
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) && ebx == 0x756e6547 && edx == 0x49656e69 && ecx == 0x6c65746e) {
        // the display model of family 6: EAX bits 4-7, and 16-19 above them
        const bool emerald_rapids = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((eax >> 8) & 0xf) == 6 &&
                                    (((eax >> 12) & 0xf0) | ((eax >> 4) & 0xf)) == 207;
        if (emerald_rapids) return {2048, 8192};
        return {1024, 4096};
    }
#endif
    return {4096, 0};
}

// The CPU's plan, or TOY_PREFETCH=L1,L2's (bytes; L2 0: none; a value that
// is not two numbers up to 64 KiB, L1 above 0, is a warning).
PrefetchPlan chosen_prefetch_plan() {
    const PrefetchPlan cpu = cpu_prefetch_plan();
    const char *want = std::getenv("TOY_PREFETCH");
    if (!want || !*want) return cpu;
    unsigned long l1 = 0, l2 = 0;
    char end = 0;
    if (std::sscanf(want, "%lu,%lu%c", &l1, &l2, &end) == 2 && l1 > 0 && l1 <= 65536 && l2 <= 65536) return {l1, l2};
    std::fprintf(stderr, "toy: warning: TOY_PREFETCH=%s: expected L1,L2 (bytes ahead, at most 65536; L1 above 0); using %zu,%zu\n",
                 want, cpu.l1, cpu.l2);
    return cpu;
}

}  // namespace

const PrefetchPlan packed::prefetch_plan = chosen_prefetch_plan();

namespace {

// The best kernel set this CPU runs, or null.
const KernelSet *cpu_best() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    // F16C from CPUID: clang before 15 does not name it in __builtin_cpu_supports
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    const bool base = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    if (base && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni")) {
        const bool bf16 = __builtin_cpu_supports("avx512bf16");
        const KernelSet *amx = amx_kernels(bf16);
        return amx ? amx : avx512_kernels(bf16);
    }
    if (base) return avx2_kernels();
#endif
    return nullptr;
}

const KernelSet *runnable(std::string_view name) {
    const KernelSet *best = cpu_best();
    if (!best || name == "off") return nullptr;
    if (name == best->name) return best;
    // an AMX CPU also runs the AVX-512 set without its AMX tiles, and an
    // AVX-512 CPU the AVX2 set
    const std::string_view best_name = best->name;
    if (name == "avx512" && best_name == "amx") return avx512_kernels(best->pack_bf16);
    if (name == "avx2" && best_name != "avx2") return avx2_kernels();
    return nullptr;
}

// The kernel set in use: the best the CPU runs, or TOY_PACKED_KERNELS's
// choice (avx512, avx2, off; a name the CPU cannot run is a warning), or
// use_packed_kernels's.
std::atomic<const KernelSet *> &current() {
    static std::atomic<const KernelSet *> set{[] {
        const char *want = std::getenv("TOY_PACKED_KERNELS");
        if (!want || !*want) return cpu_best();
        const KernelSet *k = runnable(want);
        if (!k && std::string_view(want) != "off") {
            const KernelSet *best = cpu_best();
            std::fprintf(stderr, "toy: warning: TOY_PACKED_KERNELS=%s: expected amx, avx512, avx2 or off, one this CPU runs; using %s\n",
                         want, best ? best->name : "ggml's kernels");
            return best;
        }
        return k;
    }()};
    return set;
}

const KernelSet *kernels() { return current().load(std::memory_order_relaxed); }

// The input prepared for the matrix's input form (userdata: that form).
void prepare_kernel(ggml_tensor *dst, int ith, int nth, void *input) {
    const ggml_tensor *x = dst->src[0];
    const ggml_type form = *static_cast<const ggml_type *>(input);
    const KernelSet &k = *kernels();
    const auto [c0, c1] = thread_share(columns(x), ith, nth);
    for (int64_t c = c0; c < c1; ++c) k.prepare(form, column(x, c), x->ne[0], static_cast<uint8_t *>(dst->data) + c * dst->nb[1]);
}

void matmul_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    const KernelSet &k = *kernels();
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
        for (int64_t c = 0; c < n_cols; ++c) k.prepare(f.input, column(xs, c), xs->ne[0], own.data() + c * x_stride);
        xbase = own.data();
    }
    const int64_t depth = w->ne[0] / f.unit;  // a tile's units: blocks, or inputs for F16
    const size_t group_bytes = depth * f.group_unit_bytes;
    const Tiles *tiles = tiles_for(k, w->type);
    // AMX tiles (16 columns at a time) for the columns of a prompt
    const WideTileFn wide = k.wide && n_cols >= k.wide->cols ? wide_tiles_for(*k.wide, w->type) : nullptr;
    const auto *wbase = static_cast<const uint8_t *>(w->data);
    auto *y = static_cast<float *>(dst->data);
    // The row groups shared out as the threads run (share_work: a thread the
    // VM holds up leaves its last groups to the other; decoding SmolLM2 Q8_0
    // on Zen 3 waited 28-37% less). Per range of groups, the columns in
    // panels whose prepared inputs stay in L2 while the groups pass over
    // them; within a panel, the set's max_cols columns (8 with AVX-512; F16:
    // its f16_cols) per weight load.
    constexpr int64_t kPanel = 64;
    const int64_t per_load = w->type == GGML_TYPE_F16 ? k.f16_cols : k.max_cols;
    // all columns in one call per group (decoding, a few sequences at a
    // time): each weight is read once, through the tiles that prefetch
    const TileFn *fns = n_cols <= per_load ? tiles->stream : tiles->reuse;
    // With wide tiles, a panel's columns that fill them go through them
    // for kWideGroups groups at a time (whose weights stay in L2 meanwhile),
    // the rest through the set's tiles.
    constexpr int64_t kWideGroups = 8;
    // The nibble types (Q4_0 to Q5_1, IQ4_NL) in passes of columns
    // (prompts): each group's blocks decoded once per panel into a layout
    // the tiles read as they are (KernelSet::expand), not once per pass of
    // 8 columns
    const TileFn *expanded = fns == tiles->reuse && expanded_tiles_for(k, w->type) ? expanded_tiles_for(k, w->type)->reuse : nullptr;
    share_work(dst, n_out / kRows, ith, nth, [&](int64_t g0, int64_t g1) {
        thread_local std::vector<uint8_t> expansion;
        if (expanded) expansion.resize(depth * expanded_block_bytes(w->type));
        TileState saved;
        if (wide) k.wide->enter(&saved);
        for (int64_t p0 = 0; p0 < n_cols; p0 += kPanel) {
            const int64_t p1 = std::min(n_cols, p0 + kPanel);
            const int64_t p_wide = wide ? p0 + (p1 - p0) / k.wide->cols * k.wide->cols : p0;
            for (int64_t s0 = g0; s0 < g1 && p_wide > p0; s0 += kWideGroups) {
                const int64_t s1 = std::min(g1, s0 + kWideGroups);
                wide(wbase + s0 * group_bytes, group_bytes, s1 - s0, depth, xbase + p0 * x_stride, x_stride, p_wide - p0,
                     y + p0 * n_out + s0 * kRows, n_out);
            }
            for (int64_t g = g0; g < g1 && p1 > p_wide; ++g) {
                const uint8_t *wg = wbase + g * group_bytes;
                const TileFn *group_fns = fns;
                if (expanded) {
                    k.expand(w->type, wg, depth, expansion.data());
                    wg = expansion.data(), group_fns = expanded;
                }
                for (int64_t c = p_wide; c < p1; c += per_load) {
                    const int n = (int)std::min<int64_t>(per_load, p1 - c);
                    group_fns[n](wg, depth, xbase + c * x_stride, x_stride, y + c * n_out + g * kRows, n_out);
                }
            }
        }
        if (wide) k.wide->leave(&saved);
    }, [&](int64_t g) { prefetch_start(wbase + g * group_bytes, std::min(group_bytes, prefetch_reach())); });
}

// The format of a matrix of `type`, for an input x it can multiply (float32
// rows of whole blocks); throws toy::Error otherwise.
Format checked_format(const ggml_tensor *x, ggml_type type) {
    Format f{};
    if (!format_of(type, &f)) fail("packed matmul: no packed layout for {}", ggml_type_name(type));
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || x->ne[0] % f.unit != 0) {
        fail("packed matmul: input must be float32 rows{}",
             f.unit > 1 ? fmt::format(" of a multiple of {} values", f.unit) : "");
    }
    return f;
}

}  // namespace

bool packed_matmul_supports(ggml_type type, const int64_t *ne, int n_dims) {
    Format f{};
    const bool matrix = n_dims == 2 || (n_dims > 2 && ne[2] == 1 && (n_dims < 4 || ne[3] == 1));
    const KernelSet *k = kernels();
    return k && (type != GGML_TYPE_F16 || k->pack_f16) && (type != GGML_TYPE_BF16 || (k->bf16 && k->pack_bf16)) &&
           matrix && format_of(type, &f) && ne[1] % kRows == 0 &&
           ne[0] % f.unit == 0;
}

const char *packed_kernels_name() {
    const KernelSet *k = kernels();
    return k ? k->name : "none";
}

bool packed_wide_tiles(ggml_type type) {
    const KernelSet *k = kernels();
    return k && k->wide && wide_tiles_for(*k->wide, type);
}

bool use_packed_kernels(std::string_view name) {
    const KernelSet *k = runnable(name);
    if (!k || !kernels()) return false;  // "off" only at startup: packed matrices need a set
    current().store(k, std::memory_order_relaxed);
    return true;
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
        case GGML_TYPE_Q4_0: pack_nibble_group<Block32::q4_0>(reinterpret_cast<const BlockQ4_0 *>(s), depth, d); break;
        case GGML_TYPE_Q4_1: pack_nibble_group<Block32::q4_1>(reinterpret_cast<const BlockQ4_1 *>(s), depth, d); break;
        case GGML_TYPE_Q5_0: pack_nibble_group<Block32::q5_0>(reinterpret_cast<const BlockQ5_0 *>(s), depth, d); break;
        case GGML_TYPE_Q5_1: pack_nibble_group<Block32::q5_1>(reinterpret_cast<const BlockQ5_1 *>(s), depth, d); break;
        case GGML_TYPE_IQ4_NL: pack_nibble_group<Block32::iq4_nl>(reinterpret_cast<const BlockQ4_0 *>(s), depth, d); break;
        case GGML_TYPE_F16:
            pack_f16_group(reinterpret_cast<const uint16_t *>(s), n_in, reinterpret_cast<uint16_t *>(d));
            break;
        case GGML_TYPE_Q4_K: pack_q4_k_group<BlockQ4K, kQ4Block>(reinterpret_cast<const BlockQ4K *>(s), depth, d); break;
        case GGML_TYPE_Q5_K: pack_q4_k_group<BlockQ5K, kQ5Block>(reinterpret_cast<const BlockQ5K *>(s), depth, d); break;
        case GGML_TYPE_IQ4_XS: pack_iq4_xs_group(reinterpret_cast<const BlockIQ4XS *>(s), depth, d); break;
        case GGML_TYPE_IQ3_S: pack_iq3_s_group(reinterpret_cast<const BlockIQ3S *>(s), depth, d); break;
        case GGML_TYPE_IQ3_XXS: pack_iq3_xxs_group(reinterpret_cast<const BlockIQ3XXS *>(s), depth, d); break;
        case GGML_TYPE_IQ2_XXS: pack_iq2_xxs_group(reinterpret_cast<const BlockIQ2XXS *>(s), depth, d); break;
        case GGML_TYPE_IQ1_S: pack_iq1_s_group(reinterpret_cast<const BlockIQ1S *>(s), depth, d); break;
        case GGML_TYPE_IQ2_XS: pack_iq2_xs_group(reinterpret_cast<const BlockIQ2XS *>(s), depth, d); break;
        case GGML_TYPE_IQ2_S: pack_iq2_s_group(reinterpret_cast<const BlockIQ2S *>(s), depth, d); break;
        case GGML_TYPE_IQ1_M: pack_iq1_m_group(reinterpret_cast<const BlockIQ1M *>(s), depth, d); break;
        case GGML_TYPE_BF16:
            pack_bf16_group(reinterpret_cast<const uint16_t *>(s), n_in, reinterpret_cast<uint16_t *>(d));
            break;
        case GGML_TYPE_Q6_K: pack_q6_k_group(reinterpret_cast<const BlockQ6K *>(s), depth, d); break;
        case GGML_TYPE_Q3_K: pack_q3_k_group(reinterpret_cast<const BlockQ3K *>(s), depth, d); break;
        case GGML_TYPE_Q2_K: pack_q2_k_group(reinterpret_cast<const BlockQ2K *>(s), depth, d); break;
        default: break;  // format_of has none: failed above
        }
    });
}

ggml_type packed_input_type(ggml_type type) {
    Format f{};
    return format_of(type, &f) ? f.input : type;
}

ggml_tensor *quantize_input(ggml_context *ctx, ggml_tensor *x, ggml_type type) {
    const Format f = checked_format(x, type);
    static const ggml_type kForms[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q8_1, GGML_TYPE_Q8_K, GGML_TYPE_F16, GGML_TYPE_BF16};
    const ggml_type *form = std::find(std::begin(kForms), std::end(kForms), f.input);
    ggml_tensor *args[] = {x};
    return ggml_custom_4d(ctx, GGML_TYPE_I8, (int64_t)column_bytes(f.input, x->ne[0]), columns(x), 1, 1, args, 1,
                          prepare_kernel, GGML_N_TASKS_MAX, const_cast<ggml_type *>(form));
}

bool packed_input_inline(const ggml_tensor *x) { return columns(x) <= kInlineColumns; }

ggml_tensor *packed_mul_mat(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *xq) {
    if (w->ne[0] != x->ne[0]) fail("packed matmul: input has {} rows, the matrix {}", x->ne[0], w->ne[0]);
    if (!xq && packed_input_inline(x)) {
        checked_format(x, w->type);
        xq = x;  // prepared inside the product
    }
    if (!xq) xq = quantize_input(ctx, x, w->type);
    ggml_tensor *args[] = {w, xq};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], x->ne[2], x->ne[3], args, 2, matmul_kernel,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace toy::graph
