// The packed layouts' constants and the kernel sets that multiply them, one
// per instruction set (packed_kernels_avx512.cpp, packed_kernels_avx2.cpp),
// chosen at run time by packed_matmul.cpp. Every set reads the same layouts
// (described in packed_matmul.h and below), so packing does not depend on the
// set that runs.
#pragma once

#include <ggml.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace toy::graph::packed {

constexpr int kRows = 16;  // rows per packed group
constexpr int kQK = 32;    // values per Q8_0 block
constexpr int kQKK = 256;  // values per K-quant super-block

// Q8_0, per group and block: 16 fp16 scales, then 8 vectors of 16 rows x 4
// quants (+128, unsigned): vector j holds inputs 4j..4j+3.
constexpr size_t kGroupBlock = kRows * 2 + kRows * kQK;
// One Q8_0-quantized input column: per block, 32 int8 quants, the
// fp16-rounded scale as float, and -128 times the quants' sum (an exact int32).
// Q8_1 (the input of Q5_1) the same size: the same quants and scale, then
// ggml's fp16-rounded scale x sum of the quants, as float.
constexpr size_t kColBlock = kQK + 2 * sizeof(int32_t);

// The blocks of 32 values the Q8_0-style tiles take (Block32). Q4_0, Q4_1,
// Q5_0, Q5_1 and IQ4_NL (the nibble types), per group and block: 16 fp16
// scales d, (Q4_1, Q5_1) 16 fp16 minimums m, then the quants q (value
// d (q - 8), d q + m, d (q - 16), d q + m, d t[q]) as 4 vectors of nibbles,
// and for Q5_0 and Q5_1 one of fifth bits (a Q5_K unit, below), decoded to
// Q8_0's 8 vectors of 16 rows x 4 (unsigned; IQ4_NL's t[q] + 128, looked up
// in ggml's table kIq4nlValues) as they load. Same sizes as the types' own
// blocks. Prompts decode a row group's nibble blocks once per panel of
// columns (KernelSet::expand: Q4_0, Q5_0 and IQ4_NL to Q8_0's layout,
// q - 8 + 128, q - 16 + 128, t[q] + 128; Q4_1 and Q5_1 to q5_1x, their
// quants as 8 vectors of bytes after d and m) rather than once per pass of
// 8 columns.
enum class Block32 { q8_0, q4_0, q4_1, q5_0, q5_1, q5_1x, iq4_nl };
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// the table + 128 (unsigned: what the tiles multiply), and as it is
constexpr std::array<uint8_t, 16> iq4nl_table(int offset) {
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(kIq4nlValues[i] + offset);
    return t;
}
inline constexpr std::array<uint8_t, 16> kIq4nlBiased = iq4nl_table(128), kIq4nlSigned = iq4nl_table(0);
constexpr bool has_min(Block32 t) { return t == Block32::q4_1 || t == Block32::q5_1 || t == Block32::q5_1x; }
constexpr bool has_fifth(Block32 t) { return t == Block32::q5_0 || t == Block32::q5_1; }
constexpr bool nibbles(Block32 t) { return t != Block32::q8_0 && t != Block32::q5_1x; }
constexpr size_t kQ51M = kRows * 2;
// where a block's quants start (Q8_0, q5_1x: its 8 vectors; the others: the nibbles)
constexpr size_t block32_quants(Block32 t) { return has_min(t) ? kRows * 4 : kRows * 2; }
// where a Q5_0 or Q5_1 block's fifth bits start
constexpr size_t block32_bits(Block32 t) { return block32_quants(t) + 4 * 64; }
constexpr size_t block32_bytes(Block32 t) {
    return nibbles(t) ? block32_bits(t) + (has_fifth(t) ? 64 : 0) : block32_quants(t) + 8 * 64;
}
// The layout a prompt expands a nibble type to, and what it adds to each quant.
constexpr Block32 block32_expansion(Block32 t) { return has_min(t) ? Block32::q5_1x : Block32::q8_0; }
constexpr int block32_expansion_offset(Block32 t) { return t == Block32::q4_0 ? 120 : t == Block32::q5_0 ? 112 : 0; }
// Q8_0's input column carries -128 x its quants' sum (the bias): Q8_0's
// quants are stored + 128; Q4_0's q for values q - 8 take -8 x the sum (the
// bias shifted right by 4, exact), Q5_0's -16 x (by 3); the types with
// minimums take none (their Q8_1 input has its scaled sum there instead).
constexpr int block32_bias_shift(Block32 t) { return t == Block32::q4_0 ? 4 : t == Block32::q5_0 ? 3 : 0; }
// The Block32 of a ggml type (q8_0 for any type not listed).
constexpr Block32 block32_of(ggml_type type) {
    return type == GGML_TYPE_Q4_0 ? Block32::q4_0 : type == GGML_TYPE_Q4_1 ? Block32::q4_1
         : type == GGML_TYPE_Q5_0 ? Block32::q5_0 : type == GGML_TYPE_Q5_1 ? Block32::q5_1
         : type == GGML_TYPE_IQ4_NL ? Block32::iq4_nl : Block32::q8_0;
}
// f(std::integral_constant<Block32, t>) for the nibble type t of a ggml type
// (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL); false for others.
template <typename F>
bool with_nibble_type(ggml_type type, F &&f) {
    switch (block32_of(type)) {
    case Block32::q4_0: f(std::integral_constant<Block32, Block32::q4_0>{}); return true;
    case Block32::q4_1: f(std::integral_constant<Block32, Block32::q4_1>{}); return true;
    case Block32::q5_0: f(std::integral_constant<Block32, Block32::q5_0>{}); return true;
    case Block32::q5_1: f(std::integral_constant<Block32, Block32::q5_1>{}); return true;
    case Block32::iq4_nl: f(std::integral_constant<Block32, Block32::iq4_nl>{}); return true;
    default: return false;
    }
}

// One Q8_K-quantized input column (the input of the K-quants and IQ4_XS): per 256
// values, the int8 quants, their sums per 16 and per 32 (int16), the scale.
constexpr size_t kKQs = 0, kKSum16 = 256, kKSum32 = 288, kKD = 304, kKColBlock = 308;

// Q4_K, per group and super-block: 16 fp16 d, 16 fp16 dmin, the 8 sub-block
// scales as bytes (16 per sub-block), the mins as byte pairs per row (sub-blocks
// 2p and 2p+1: 32 bytes per p), then per sub-block 4 vectors of 16 rows x 4
// inputs whose low nibbles are inputs 4k.. and high nibbles inputs 16 + 4k..
constexpr size_t kQ4D = 0, kQ4Dmin = 32, kQ4Sc = 64, kQ4Min = 192, kQ4Qs = 320, kQ4Block = 2368;
// Q5_K, per group and super-block: Q4_K's layout of its scales, mins and low
// 4 bits, then per sub-block (a unit) one vector of the fifth bits: row r's
// byte i holds in bit k the fifth bit of input 4k + i (the input whose low
// nibble is in Q4_K's vector k % 4, low nibble for k < 4, high for k >= 4).
constexpr size_t kQ5Qh = kQ4Block, kQ5Block = kQ4Block + 8 * 64;
// Q6_K, per group and super-block: 16 fp16 d, the 16 scales as byte pairs
// per row (32 bytes per 32 inputs), the low 4 bits as Q4_K's, then per 32
// inputs two planes of the high 2 bits (plane h, bits 2t: inputs 16h + 4t..).
constexpr size_t kQ6D = 0, kQ6Sc = 32, kQ6Ql = 288, kQ6Qh = 2336, kQ6Block = 3360;
// Q3_K, per group and super-block: 16 fp16 d, the 16 scales sc - 32 as
// Q6_K's, then per 32 inputs two planes of the quants' low 2 bits (as Q6_K's
// high bits: plane h, bits 2t: inputs 16h + 4t..), and after them per 32
// inputs one vector of the third bits (as Q5_K's fifth bits): q = low + 4 x
// third, value d (sc - 32) (q - 4). 64 bytes (3.6%) above Q3_K's 1760: the
// scales as bytes. Q2_K: 16 fp16 d, 16 fp16 dmin, per 32 inputs the two
// sub-blocks' bytes (scale | min << 4, as Q2_K has them) as pairs per row,
// then Q3_K's planes of 2-bit quants: value d scale q - dmin min; Q2_K's size.
// Q6_K, Q3_K and Q2_K (K16 below) have 16 sub-blocks of 16 inputs.
constexpr size_t kQ3D = 0, kQ3Sc = kQ6Sc, kQ3Ql = 288, kQ3Qh = 1312, kQ3Block = 1824;
constexpr size_t kQ2D = 0, kQ2Dmin = 32, kQ2Sc = 64, kQ2Qs = 320, kQ2Block = 1344;
// IQ2_XS, IQ2_S and IQ1_M, the grid types with a scale per 16 values, in
// Q6_K's layout without its high planes: 16 fp16 d, the 16 scales as Q6_K's
// (2 ls + 1), then Q6_K's low nibbles, which index a table of signed values
// as the X4 types' do (below): IQ2_XS's and IQ2_S's d / 8 (2 ls + 1) times
// a grid value (8, 25 or 43) and a sign is IQ2_XXS's table (K16::iq2);
// IQ1_M's d (2 ls + 1) (g + delta), delta +-1/8 per 8 values, is IQ1_S's
// (K16::iq1_m); the tiles take d's 1/8. 2336 bytes a group and super-block
// (4.56 bits a weight): 1.97 times IQ2_XS, 1.78 times IQ2_S, 2.61 times
// IQ1_M, so Model::load's memory rule for growing types applies.
constexpr size_t kI16D = 0, kI16Sc = kQ6Sc, kI16Qs = kQ6Ql, kI16Block = kQ6Qh;
enum class K16 { q6_k, q3_k, q2_k, iq2, iq1_m };
static_assert(kQ3D == kQ6D && kQ2D == kQ6D && kI16D == kQ6D, "the K16 types keep d in one place");
constexpr size_t k16_block(K16 t) {
    return t == K16::q6_k ? kQ6Block : t == K16::q3_k ? kQ3Block : t == K16::q2_k ? kQ2Block : kI16Block;
}
// whether a K16 type's quants are nibbles looked up in a table (the IQ types)
constexpr bool k16_table(K16 t) { return t == K16::iq2 || t == K16::iq1_m; }
// IQ4_XS, per group and super-block: 16 fp16 d, the 8 sub-block scales
// ls - 32 as signed bytes (16 per sub-block), then per sub-block Q4_K's 4
// vectors of nibbles, which index ggml's table (kIq4nlValues). 1.5% larger.
// IQ3_S in the same layout (X4 below): its values are d (2 sc + 1) times a
// grid value (odd, 1..15) and a sign, and the 16 odd numbers -15..15 are 2m
// - 15 for a nibble m; the scales 2 sc + 1 as the bytes. 25% larger than
// IQ3_S (4.3 bits a weight where it stores 3.44). IQ3_XXS likewise: its
// values are d / 4 (2 ls + 1) times a grid value (4, 12, ..., 52 or 62) and
// a sign, 16 signed values; the scales 2 ls + 1 as the bytes, d as it is and
// the 1/4 taken by the tiles (x4_d_factor). 39% larger than IQ3_XXS (4.3
// bits a weight where it stores 3.06). IQ2_XXS: d / 8 (2 ls + 1) times a
// grid value (8, 25 or 43) and a sign, 6 signed values in a table of 16
// (the rest 0; the tiles take d's 1/8); 2.06 times IQ2_XXS's size (4.3 bits
// a weight where it stores 2.06), so the types that grow are packed only
// where memory allows (Model::load). IQ1_S: d (2 ls + 1) (g + delta), g in
// {-1, 0, 1} and delta +-1/8 per 32 values, is d / 8 (2 ls + 1) times one of
// -9, -7, -1, 1, 7, 9 (the tiles take the 1/8); 2.76 times IQ1_S's size.
constexpr size_t kX4D = 0, kX4Sc = 32, kX4Qs = 160, kX4Block = 2208;
enum class X4 { iq4_xs, iq3_s, iq3_xxs, iq2_xxs, iq1_s };
constexpr int kX4Types = 5;
constexpr int8_t kIq3sValues[16] = {-15, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 15};
constexpr int8_t kIq3xxsValues[16] = {-62, -52, -44, -36, -28, -20, -12, -4, 4, 12, 20, 28, 36, 44, 52, 62};
constexpr int8_t kIq2xxsValues[16] = {-43, -25, -8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 25, 43};
constexpr int8_t kIq1sValues[16] = {-9, -7, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 7, 9};
// an X4 type's table + offset (128: unsigned, what the tiles multiply; 0: as
// it is). Every table is odd (t[15 - m] = -t[m]): a nibble's xor 15 negates it.
constexpr std::array<uint8_t, 16> x4_table(X4 t, int offset) {
    const int8_t *values = t == X4::iq4_xs ? kIq4nlValues : t == X4::iq3_s ? kIq3sValues
                         : t == X4::iq3_xxs ? kIq3xxsValues : t == X4::iq2_xxs ? kIq2xxsValues : kIq1sValues;
    std::array<uint8_t, 16> v{};
    for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(values[i] + offset);
    return v;
}
// what an X4 type's d is multiplied by (exact in float32)
constexpr float x4_d_factor(X4 t) { return t == X4::iq3_xxs ? 0.25f : t == X4::iq2_xxs || t == X4::iq1_s ? 0.125f : 1.0f; }
// A K16 IQ type's table (the X4 type whose values it has) and d's factor.
constexpr X4 k16_values(K16 t) { return t == K16::iq2 ? X4::iq2_xxs : X4::iq1_s; }
constexpr float k16_d_factor(K16 t) { return k16_table(t) ? x4_d_factor(k16_values(t)) : 1.0f; }
// How far a K16 type's quants are shifted up in the unit's bytes a kernel set
// multiplies, as a power of two: Q6_K's 32 and Q3_K's 4 as they are stored,
// Q2_K's none, and the IQ types' table offset, which the set chooses (iq_shift).
constexpr int k16_offset_shift(K16 t, int iq_shift) {
    return t == K16::q6_k ? 5 : t == K16::q3_k ? 2 : t == K16::q2_k ? 0 : iq_shift;
}
// The X4 type of a ggml type, or -1.
constexpr int x4_of(ggml_type type) {
    return type == GGML_TYPE_IQ4_XS ? static_cast<int>(X4::iq4_xs) : type == GGML_TYPE_IQ3_S ? static_cast<int>(X4::iq3_s)
         : type == GGML_TYPE_IQ3_XXS ? static_cast<int>(X4::iq3_xxs) : type == GGML_TYPE_IQ2_XXS ? static_cast<int>(X4::iq2_xxs)
         : type == GGML_TYPE_IQ1_S ? static_cast<int>(X4::iq1_s) : -1;
}

// BF16, per group and pair of inputs (2k, 2k+1): one vector of 16 rows x 2
// bfloat16 (row r's 4 bytes: input 2k in the low half), so one VDPBF16PS
// multiplies both inputs of all 16 rows by a broadcast pair of a column. Same
// size as BF16. The input column: its values as bfloat16, in order (pairs).

// The byte mask of a field of `width` bits at bit `to`: what the kernels' bit
// moves keep of a byte after shifting a field of the packed bits there.
constexpr char field_mask(int to, int width) { return static_cast<char>(((1 << width) - 1) << to); }

// A vector of 16 rows is 64 bytes: rows 0-7 in its first 32 bytes, rows
// 8-15 in the second (the 256-bit kernels take a group as two halves).

// Decoding: how far ahead of the weights being multiplied to prefetch, in
// bytes: into L1 `l1` ahead, and, where l2 > 0, into L2 `l2` ahead first.
// The hardware prefetcher alone left the kernels waiting on loads (Zen 4:
// Llama-3.2-1B Q4_K_M tg 33 -> 47-51 t/s, Qwen2.5-0.5B Q8_0 57-63 -> 66-72,
// SmolLM2 F16 +4-8%, with prefetches into L1 4 KiB ahead), and on Zen 3 a
// second step into L2 8-16 KiB ahead lost a quarter of Q8_0's streaming. On
// a Sapphire Rapids Xeon the far L1 prefetches held the core's few L1 miss
// slots for a whole trip to memory: one core streamed Q4_K and Q6_K at 10.4
// GB/s; asked into L2 4 KiB ahead and then into L1 1 KiB ahead, at 15-16.5
// (Q8_0 and F16 14-15.5 -> 16.5; BENCHMARKS.md). So the plan depends on the
// CPU (packed_matmul.cpp), and TOY_PREFETCH=L1,L2 sets another to measure.
struct PrefetchPlan {
    size_t l1, l2;
};
extern const PrefetchPlan prefetch_plan;
// How far past the weights being multiplied the plan reads.
inline size_t prefetch_reach() { return std::max(prefetch_plan.l1, prefetch_plan.l2); }

// The `bytes` at p on their way into L1 (kL1) or L2, a cache line at a
// time. An asm statement, not _mm_prefetch: GCC 12 deleted a loop of nothing
// but _mm_prefetch once the AVX2 tiles' bodies were inlined (a loop without
// side effects may go), and Q6_K decoding lost a third.
template <bool kL1>
inline void prefetch_bytes(const void *p, size_t bytes) {
#if defined(__x86_64__)
    const auto *b = static_cast<const char *>(p);
    for (size_t o = 0; o < bytes; o += 64) {
        if constexpr (kL1) {
            asm volatile("prefetcht0 %0" : : "m"(b[o]));
        } else {
            asm volatile("prefetcht1 %0" : : "m"(b[o]));
        }
    }
#else
    (void)p, (void)bytes;
#endif
}

// The `bytes` the plan's distances past p on their way into L2 and L1.
inline void prefetch_ahead(const uint8_t *p, size_t bytes) {
    const PrefetchPlan plan = prefetch_plan;
    if (plan.l2 > 0) prefetch_bytes<false>(p + plan.l2, bytes);
    prefetch_bytes<true>(p + plan.l1, bytes);
}

// A product that streams each weight once (every input column in one call
// of a tile: decoding, a few sequences at a time) asks for the bytes ahead
// of w. One that takes the columns 8 at a time reads each group's weights
// again from the cache and leaves the prefetches out (they cost its prompts
// 2-9%, and gain 10-72% streaming 3-8 columns; BENCHMARKS.md).
template <bool kStream>
inline void prefetch_block(const uint8_t *w, size_t bytes) {
    if constexpr (kStream) prefetch_ahead(w, bytes);
}

// Streaming: part `part` of `parts` of the cache lines of the `bytes` ahead
// of w. A block's prefetches spread over its compute, a few lines per step:
// asked for all at once, as many as a K-quant block's 37-53 lines waited for
// the core's few outstanding-miss slots, and two cores streamed Q4_K and
// Q6_K at 21-22 GB/s where spread they stream 24-25 (Zen 3).
template <bool kStream>
inline void prefetch_part(const uint8_t *w, size_t bytes, int part, int parts) {
    if constexpr (kStream) {
        const int lines = static_cast<int>((bytes + 63) / 64), per = (lines + parts - 1) / parts;
        const int first = part * per, n = std::min(per, lines - first);
        if (n > 0) prefetch_ahead(w + 64 * first, 64 * static_cast<size_t>(n));
    }
}

// The first `bytes` at w on their way into L2: the start of a range of
// groups a thread will take next, which no earlier prefetch asked for.
inline void prefetch_start(const uint8_t *w, size_t bytes) { prefetch_bytes<false>(w, bytes); }

// y[c * ldy + r] for a group's 16 rows and `n` (1..max_cols) columns of
// prepared input: `depth` units (blocks, or inputs for F16) of the group at w.
using TileFn = void (*)(const uint8_t *w, int64_t depth, const uint8_t *x, size_t x_stride, float *y, int64_t ldy);

// A type's tiles for 1..8 columns (index 0 unused): `stream` for a product
// whose columns all go through one call per group, which reads each weight
// once and prefetches them ahead (prefetch_block), `reuse` for one that
// takes its columns 8 at a time, without prefetches.
struct Tiles {
    TileFn stream[9], reuse[9];
};

// A thread's tile configuration, kept while wide tiles run (64 bytes).
struct alignas(64) TileState {
    uint8_t bytes[64];
};

// y[c * ldy + r] for `groups` consecutive groups (group_bytes apart) and
// `cols` columns of prepared input, a multiple of the wide tiles' columns:
// `depth` units of each group.
using WideTileFn = void (*)(const uint8_t *w, size_t group_bytes, int64_t groups, int64_t depth, const uint8_t *x,
                            size_t x_stride, int64_t cols, float *y, int64_t ldy);

// Tiles over many columns at once (AMX, for prompts): `cols` columns at a
// time, called between enter() and leave() on the same thread, which save
// the thread's tile configuration and put it back (ggml's AMX kernels
// configure a thread once and expect it to stay).
struct WideTiles {
    int cols;
    WideTileFn q8_0, q4_k, q6_k, q5_k, q4_0, q4_1, q5_0, q5_1, iq4_nl, q3_k, q2_k;
    WideTileFn x4[kX4Types];  // by X4
    WideTileFn iq2, iq1_m;    // the K16 IQ types: IQ2_XS and IQ2_S, IQ1_M
    WideTileFn bf16, f16;     // null where the CPU has no AMX-BF16
    void (*enter)(TileState *saved);
    void (*leave)(const TileState *saved);
};

struct KernelSet {
    const char *name;
    int max_cols;                  // columns per weight load: tiles[1..max_cols]
    int f16_cols;                  // the F16 tile's columns per pass (<= max_cols), which callers ask for
    const Tiles *q8_0, *f16, *q4_k, *q6_k, *q5_k, *q4_0, *q4_1, *q5_0, *q5_1, *q5_1x, *iq4_nl, *q3_k, *q2_k, *bf16;
    const Tiles *x4[kX4Types];  // by X4
    const Tiles *iq2, *iq1_m;   // the K16 IQ types: IQ2_XS and IQ2_S, IQ1_M
    // whether F16 and BF16 matrices are packed for this set at load (BF16:
    // AVX-512 where the CPU has AVX512_BF16; the tiles still run either layout)
    bool pack_f16, pack_bf16;
    // one column of x prepared for an input form (Q8_0, Q8_1, Q8_K, F16 or BF16), as ggml prepares it
    void (*prepare)(ggml_type form, const float *x, int64_t n, uint8_t *out);
    // `nb` packed Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL blocks of a group at w expanded
    // to Q8_0's layout or q5_1x's at out (expanded_tiles_for's tiles take them)
    void (*expand)(ggml_type type, const uint8_t *w, int64_t nb, uint8_t *out);
    // AMX tiles for prompts through every type (the "amx"
    // set: AVX-512's plus these), or null
    const WideTiles *wide = nullptr;
};

// A set's tiles for matrices of `type`, or null where the set has none.
inline const Tiles *tiles_for(const KernelSet &k, ggml_type type) {
    if (x4_of(type) >= 0) return k.x4[x4_of(type)];
    switch (type) {
    case GGML_TYPE_Q8_0: return k.q8_0;
    case GGML_TYPE_Q4_0: return k.q4_0;
    case GGML_TYPE_Q4_1: return k.q4_1;
    case GGML_TYPE_Q5_0: return k.q5_0;
    case GGML_TYPE_F16: return k.f16;
    case GGML_TYPE_Q4_K: return k.q4_k;
    case GGML_TYPE_Q6_K: return k.q6_k;
    case GGML_TYPE_Q5_K: return k.q5_k;
    case GGML_TYPE_Q5_1: return k.q5_1;
    case GGML_TYPE_IQ4_NL: return k.iq4_nl;
    case GGML_TYPE_Q3_K: return k.q3_k;
    case GGML_TYPE_Q2_K: return k.q2_k;
    case GGML_TYPE_BF16: return k.bf16;
    case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: return k.iq2;
    case GGML_TYPE_IQ1_M: return k.iq1_m;
    default: return nullptr;
    }
}

// The tiles for a group of `type` expanded by KernelSet::expand, and the
// bytes per expanded block; null and 0 for types without an expansion.
inline bool expands(ggml_type type) { return nibbles(block32_of(type)); }
inline const Tiles *expanded_tiles_for(const KernelSet &k, ggml_type type) {
    if (!expands(type)) return nullptr;
    return block32_expansion(block32_of(type)) == Block32::q8_0 ? k.q8_0 : k.q5_1x;
}
inline size_t expanded_block_bytes(ggml_type type) {
    return expands(type) ? block32_bytes(block32_expansion(block32_of(type))) : 0;
}

// A set's wide tiles for matrices of `type`, or null.
inline WideTileFn wide_tiles_for(const WideTiles &wide, ggml_type type) {
    if (x4_of(type) >= 0) return wide.x4[x4_of(type)];
    switch (type) {
    case GGML_TYPE_Q8_0: return wide.q8_0;
    case GGML_TYPE_Q4_0: return wide.q4_0;
    case GGML_TYPE_Q4_1: return wide.q4_1;
    case GGML_TYPE_Q5_0: return wide.q5_0;
    case GGML_TYPE_Q4_K: return wide.q4_k;
    case GGML_TYPE_Q6_K: return wide.q6_k;
    case GGML_TYPE_Q5_K: return wide.q5_k;
    case GGML_TYPE_Q5_1: return wide.q5_1;
    case GGML_TYPE_IQ4_NL: return wide.iq4_nl;
    case GGML_TYPE_Q3_K: return wide.q3_k;
    case GGML_TYPE_Q2_K: return wide.q2_k;
    case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: return wide.iq2;
    case GGML_TYPE_IQ1_M: return wide.iq1_m;
    case GGML_TYPE_BF16: return wide.bf16;
    case GGML_TYPE_F16: return wide.f16;
    default: return nullptr;
    }
}

// A type's Tiles from a tile template <int C, bool kStream>, or (TOY_TILES_OF)
// <int C, bool kStream, kind> for one of the kinds a template serves.
#define TOY_TILE_ROW(tile, s) {nullptr, tile<1, s>, tile<2, s>, tile<3, s>, tile<4, s>, tile<5, s>, tile<6, s>, tile<7, s>, tile<8, s>}
#define TOY_TILES(tile) {TOY_TILE_ROW(tile, true), TOY_TILE_ROW(tile, false)}
#define TOY_TILE_ROW_OF(tile, s, k) \
    {nullptr, tile<1, s, k>, tile<2, s, k>, tile<3, s, k>, tile<4, s, k>, tile<5, s, k>, tile<6, s, k>, tile<7, s, k>, tile<8, s, k>}
#define TOY_TILES_OF(tile, k) {TOY_TILE_ROW_OF(tile, true, k), TOY_TILE_ROW_OF(tile, false, k)}
// Every X4 type's Tiles from one tile template <int C, bool kStream, X4>, in
// X4's order, and the pointers to them a KernelSet holds.
#define TOY_X4_TILES(tile)                                                                      \
    {TOY_TILES_OF(tile, X4::iq4_xs), TOY_TILES_OF(tile, X4::iq3_s), TOY_TILES_OF(tile, X4::iq3_xxs), \
     TOY_TILES_OF(tile, X4::iq2_xxs), TOY_TILES_OF(tile, X4::iq1_s)}
#define TOY_X4_POINTERS(tiles) {&tiles[0], &tiles[1], &tiles[2], &tiles[3], &tiles[4]}
static_assert(kX4Types == 5, "TOY_X4_TILES and TOY_X4_POINTERS list every X4 type");

// Everything between TOY_TARGET_BEGIN("isa,...") and TOY_TARGET_END is
// compiled for those instructions whatever the build targets (GCC and clang).
#define TOY_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define TOY_TARGET_BEGIN(isa) TOY_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define TOY_TARGET_END TOY_PRAGMA(clang attribute pop)
#else
#define TOY_TARGET_BEGIN(isa) TOY_PRAGMA(GCC push_options) TOY_PRAGMA(GCC target(isa))
#define TOY_TARGET_END TOY_PRAGMA(GCC pop_options)
#endif

// The sets this build has for its CPU architecture (null where it has none);
// whether the CPU runs them is the caller's question.
// with_bf16: the AVX-512 set that also runs and packs BF16 (VDPBF16PS, for
// CPUs with AVX512_BF16); otherwise BF16 is left to ggml.
const KernelSet *avx512_kernels(bool with_bf16);
// The AVX-512 set with AMX tiles for prompts, where the CPU has
// AMX-INT8 and Linux grants this process its tiles; null elsewhere.
const KernelSet *amx_kernels(bool with_bf16);
const WideTiles *amx_tiles();
const KernelSet *avx2_kernels();

}  // namespace toy::graph::packed
