// toy's own matrix-multiply kernels for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, F16, Q2_K to Q6_K, every IQ type and BF16 weights on
// x86 CPUs with AVX-512 VNNI or AVX2 (packed_kernels_avx512.cpp,
// packed_kernels_avx2.cpp, chosen at run time; with AMX tiles for every
// type's prompts where the CPU has AMX, packed_kernels_amx.cpp),
// where ggml has no repacked
// layout for Q8_0 and F16 (its tinyBLAS and vec_dot paths reload every
// weight block once per column) and its Q4_K repack is a 256-bit kernel.
//
// At load a matrix [n_in, n_out] is rewritten in groups of 16 rows, so one
// 512-bit instruction works on all 16 rows and the weights of a block stay in
// registers while up to 8 input columns pass over them (AVX2: the group as
// two halves of 8 rows, up to 4 columns):
// - Q8_0: per block of 32 inputs, the 16 rows' fp16 scales, then their
//   16 x 32 quants with 128 added (unsigned) and interleaved 4 bytes per row,
//   so one VPDPBUSD multiplies 4 inputs of all 16 rows by one broadcast
//   4-byte group of a column. Same size as Q8_0.
// - Q4_0, Q4_1, Q5_0 and Q5_1 (d (q - 8), d q + m, d (q - 16), d q + m;
//   Q5_0 and Q5_1 are what llama-quantize writes for Q4_K and Q5_K where
//   rows are not whole super-blocks): per block the 16 rows' d (and m), then
//   their quants as 4 vectors of nibbles (and, 5-bit, one of fifth bits: Q5_K's
//   units below), decoded to Q8_0's vectors (unsigned) as they load, or for
//   prompts once per group and panel of columns into Q8_0's layout (q - 8
//   or q - 16, + 128) or the same with m. Q4_0 and Q5_0 against ggml's Q8_0
//   input (its bias / 16 or / 8 is -8 or -16 x the input's sum), Q4_1 and
//   Q5_1 against its Q8_1 (Q8_0's quants and scale, and the fp16 scale x sum
//   of the quants that the minimums multiply). Same sizes. IQ4_NL (d t[q],
//   ggml's table of 16 int8; what llama-quantize writes for IQ4_XS where rows
//   are not whole super-blocks) as Q4_0, its nibbles looked up (PSHUFB) into
//   t[q] + 128, Q8_0's form.
// - F16: per input, the 16 rows' weights; VCVTPH2PS + FMA with float32
//   columns rounded through fp16 first (as ggml rounds them), so every
//   product is ggml's, exact in float32 (AMX: each value and input as two
//   bfloat16, their four products through TDPBF16PS). Same size as F16.
// - Q4_K and Q6_K: per super-block of 256 inputs, the rows' scales unpacked
//   to bytes, then the quants (4-bit, plus Q6_K's 2 high bits in their own
//   planes) as unsigned bytes interleaved 4 per row, two 4-bit values per
//   byte; VPDPBUSD against the input quantized as ggml quantizes it for these
//   types (Q8_K: 256 values per scale), the sub-block scales applied to the
//   exact int32 sums, the mins (Q4_K) and the offset 32 (Q6_K) taken back
//   with the input's sums of 32 and 16 values. Q6_K keeps its size, Q4_K
//   grows 2.8% (its 6-bit scales stored as bytes).
// - Q5_K: Q4_K's layout, then per sub-block a vector of the 16 rows' fifth
//   bits (one byte per row and 4 inputs, bit k for the inputs of Q4_K's
//   vector k), ORed into the nibbles as they are loaded; Q4_K's float steps.
//   2.3% larger than Q5_K.
// - Q3_K and Q2_K (16 sub-blocks of 16 per 256 values, as Q6_K): Q6_K's
//   scales as bytes (Q3_K's 6-bit sc - 32; Q2_K's bytes of 4-bit scale and
//   min as they are, with dmin), the 2-bit fields in Q6_K's planes of high
//   bits and Q3_K's third bits as Q5_K's fifth; decoded to bytes as they
//   load, Q6_K's tile (offset 4 for Q3_K, Q4_K's min step for Q2_K). Q2_K
//   keeps its size, Q3_K grows 3.6%.
// - IQ4_XS (d (ls - 32) t[q] per 256 values, 6-bit ls per 32): d, the
//   scales ls - 32 as signed bytes, Q4_K's nibble vectors looked up into
//   t[q] + 128 as they load; per 32 inputs the exact sum from -128 x the
//   input's sum of 32 (Q8_K's), times the scale. 1.5% larger.
// - IQ3_S (d (2 sc + 1) times a signed grid value, odd, 1..15, per 256
//   values, 4-bit sc per 32): IQ4_XS's layout and tiles with the table 2m -
//   15 (the 16 odd numbers -15..15) and the scales 2 sc + 1; decoded from
//   ggml's dequantization at load. 25% larger (4.3 bits a weight for 3.44).
// - IQ3_XXS (d / 4 (2 ls + 1) times a signed grid value, 4, 12, ..., 52 or
//   62, per 256 values, 4-bit ls per 32): the same, with the table of those
//   16 signed values, the scales 2 ls + 1 and the tiles multiplying d by
//   1/4. 39% larger (4.3 bits a weight for 3.06).
// - IQ2_XXS (d / 8 (2 ls + 1) times a signed grid value, 8, 25 or 43, per
//   256 values, 4-bit ls per 32, grid entries of 8 values): the same, with
//   a table of those 6 signed values (the other 10 nibbles 0), the scales 2
//   ls + 1 and the tiles multiplying d by 1/8. 2.06 times as large (4.3 bits
//   a weight for 2.06): packed only where the model's packed matrices fit in
//   half the memory available (Model::load).
// - IQ1_S (d (2 ls + 1) (g + delta) per 256 values, g in {-1, 0, 1} from
//   grid entries of 8, 3-bit ls and delta +-1/8 per 32): the same, with the
//   table of 8 (g + delta), -9, -7, -1, 1, 7, 9, read from the grid for the
//   sub-block's delta; d times 1/8 in the tiles. 2.76 times as large (4.3
//   bits a weight for 1.56), with IQ2_XXS's memory rule.
// - IQ2_XS, IQ2_S (d / 8 (2 ls + 1) times a signed grid value, 8, 25 or 43,
//   4-bit ls per 16 values; grid entries of 8 picked by 9 or 10 bits) and
//   IQ1_M (d (2 ls + 1) (g + delta), 3-bit ls per 16, delta +-1/8 per 8
//   values): per 16 values a scale, which IQ4_XS's layout has no room for,
//   so Q6_K's layout without its high planes: d, the scales 2 ls + 1 as
//   Q6_K's bytes, Q6_K's low nibbles looked up in IQ2_XXS's or IQ1_S's
//   table (IQ1_M's entries each from the grid of its delta); Q6_K's tile
//   with the table's offset (+ 128) taken back with the input's sums per 16,
//   d times 1/8. 4.56 bits a weight: 1.97, 1.78 and 2.61 times IQ2_XS,
//   IQ2_S and IQ1_M, with IQ2_XXS's memory rule.
// - BF16 (CPUs with AVX512_BF16): per pair of inputs, the 16 rows' two
//   bfloat16 side by side; VDPBF16PS against the input rounded to bfloat16
//   as ggml rounds it, each product exact in float32 (AMX: the layout is
//   TDPBF16PS's B operand as it is). Same size as BF16.
//   BF16 files, and F16 ones loaded with --weight-type bf16 (twice F16's
//   multiply-adds per instruction).
//
// In the graph, y = W x is two custom ops: x prepared for the type (quantized
// per 32 or 256 values, or rounded to fp16), then the products; for a few
// columns (decoding) one op, each thread preparing x for itself. Each block's
// integer dot is exact, so the result is ggml's dot product up to float
// summation order.
#pragma once

#include <ggml.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace toy::graph {

// Whether a kernel takes a matrix of this type and shape: Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL, F16, Q2_K to Q6_K, an IQ type (IQ1_S to IQ4_XS) or BF16 (an even n_in), 2-D, n_out a multiple of 16, on a CPU that
// runs one of the kernel sets (AVX-512 VNNI, BF16 only with AVX512_BF16;
// else AVX2 + FMA + F16C, without BF16; chosen at run time). False
// elsewhere, where ggml's own kernels run.
bool packed_matmul_supports(ggml_type type, const int64_t *ne, int n_dims);

// The kernel set in use: "amx", "avx512", "avx2" or "none". The best the CPU
// runs (amx: AVX-512's with AMX tiles for prompts), unless the
// environment variable TOY_PACKED_KERNELS names another when the process
// first asks (avx512 on an AMX CPU, avx2 on an AVX-512 one, or off: no
// packing at all).
const char *packed_kernels_name();
// Whether the set in use has wide tiles (AMX) for prompts through matrices
// of `type` (every type on the amx set; F16 and BF16 where the CPU has AMX-BF16).
bool packed_wide_tiles(ggml_type type);
// Switches to the named set ("amx", "avx512" or "avx2") if the CPU runs it and a
// set is in use (the layouts are the same, so packed matrices stay valid);
// false otherwise. For tests and comparisons.
bool use_packed_kernels(std::string_view name);

// Bytes of a packed matrix [n_in, n_out] of `type` (for Q4_K more than
// ggml_row_size(type, n_in) * n_out).
size_t packed_size(ggml_type type, int64_t n_in, int64_t n_out);

// Rewrites a matrix [n_in, n_out] of `type` (ggml's row-major blocks) into the
// packed layout at dst (packed_size bytes), on up to n_threads threads (0: all).
void pack_matrix(ggml_type type, const void *src, void *dst, int64_t n_in, int64_t n_out, int n_threads = 1);

// y = W x for a packed W [n_in, n_out] and x [n_in, ...] float32, as
// ggml_mul_mat(W, x) would compute it: [n_out, ...]. `xq`, when not null, is
// x already prepared by quantize_input for a matrix of the same input kind;
// when null, x is prepared inside the product where packed_input_inline(x),
// else by a quantize_input op of its own.
ggml_tensor *packed_mul_mat(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *xq = nullptr);

// Whether x has so few columns (decoding) that every thread of the product
// prepares it for itself: no op and no thread barrier of its own, so not
// worth sharing between matrices either.
bool packed_input_inline(const ggml_tensor *x);

// The form of the input a matrix of `type` multiplies: matrices whose types
// give the same value (the K-quants and the IQ types above; gate and up of one type) can share one
// quantize_input of the same x.
ggml_type packed_input_type(ggml_type type);

// x [n_in, ...] prepared for packed_mul_mat by a matrix of `type` (Q8_0,
// Q4_0 to Q5_1, the IQ types and the K-quants: quantized as ggml quantizes that matmul's input; F16, BF16:
// rounded through fp16 or to bfloat16, as ggml does).
ggml_tensor *quantize_input(ggml_context *ctx, ggml_tensor *x, ggml_type type);

}  // namespace toy::graph
