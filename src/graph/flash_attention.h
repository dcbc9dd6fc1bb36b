// toy's flash attention for prompts on the CPU (AVX-512 or AVX2), in place of
// ggml_flash_attn_ext where it applies. ggml's CPU kernel converts every K
// tile from F16 to F32 again for every tile of 32 queries and every query
// head of a group, element by element: for a 512-token SmolLM2 prompt that
// conversion costs as much as the products. Here K is converted once per
// graph, into tiles of 16 cells (AVX2: 8) laid out for the product (one
// op), V once (ggml's cast), and the attention op then runs 16 queries
// against 16 cells at a time (AVX2: 8 against 8): the scores in 16 (8)
// registers, an online softmax per row (flash attention's running maximum
// and sum) over 64 cells (several tiles) per step, the weighted V rows added
// four queries at a time. Fully masked
// tiles (past the causal diagonal, other sequences) are skipped. Same
// arithmetic as ggml's tiled kernel (F32 products, F32 accumulation), in
// another order.
#pragma once

#include <ggml.h>

namespace toy::graph {

// Fewer than 16 queries (decoding) skip the tiles: the cells are split into
// runs of at most 256 (at least 16 runs x KV heads, for the threads), and
// each run's K and V rows are read from the cache once per pass over a group
// of query heads (up to 8; AVX2: 4), converted to F32 in registers (a
// second op merges the runs' partial softmaxes), V summed in F32 (ggml's
// decoding sums an F16 V in F16). The cache rows are prefetched in
// software: at 2048 cells SmolLM2 decoded at 40 t/s reading them once per
// head without prefetch, 70 t/s so.
//
// Whether toy's kernel takes this attention: toy runs a kernel set on this
// CPU (AVX-512 or AVX2, the packed matmuls' choice: TOY_PACKED_KERNELS), K
// and V each of a type llama.cpp caches in (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL; a blocked type's head whole blocks) in host
// memory (or computed in this graph), a mask is given, a finite logit
// softcap (0: none), head sizes multiples of 16 up to 256.
// q: [head_dim_k, n_q, n_head]; k: [head_dim_k, n_kv, n_head_kv];
// v: [head_dim_v, n_kv, n_head_kv]; mask: F16 [n_kv, >= n_q].
bool host_flash_attn_applies(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v, const ggml_tensor *mask,
                             float softcap);

// softmax(s + mask) v per head, s = scale * q k^T or, with a softcap > 0,
// softcap * tanh(scale * q k^T / softcap), as ggml_flash_attn_ext (without
// ALiBi or sinks): [head_dim_v, n_head, n_q], F32.
ggml_tensor *host_flash_attn(ggml_context *ctx, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, ggml_tensor *mask,
                             float scale, float softcap = 0.0f);

}  // namespace toy::graph
