// Ops toy computes itself where ggml's generic kernels are slow for training's
// shapes. Each is a ggml custom op, so graphs stay ggml graphs (these appear
// only after differentiation and are never differentiated themselves).
#pragma once

#include <ggml.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

namespace toy::graph {

// A custom op's thread `ith` of `nth`: its contiguous share [begin, end) of n units.
inline std::pair<int64_t, int64_t> thread_share(int64_t n, int ith, int nth) {
    const int64_t per = (n + nth - 1) / nth;
    return {std::min(n, ith * per), std::min(n, (ith + 1) * per)};
}

// A custom op's n units shared out while it runs, for ops whose threads can
// fall out of step (a VM's vCPUs, a core that also takes interrupts): each
// thread first takes a contiguous share of the first half, then claims the
// rest in chunks from a counter kept in the op's own tensor, so a thread that
// is held up leaves its part of the rest to the others. The chunks halve in
// size every nth of them, down to one unit, so the threads run out of work
// together. (With three quarters shared out first and the rest in equal
// chunks of an eighth of it, the thread that finished first waited 10-17 us
// of a 270 us gate|up product decoding Qwen2.5-0.5B, 140-240 us of the
// output's 4.2 ms; now 4-10 and 2-17 us in most runs.) Each thread claims its
// next chunk before it works on the one it has and calls `ahead(begin)` for
// it, so that the chunk's first bytes can be on their way (a weight stream
// that starts anew stalls without). `work(begin, end)` gets each range. Every
// thread of the op must call this once per run (ggml calls a custom op's
// function on all of its threads, and a graph stops between nodes, never
// inside one); the last to finish resets the counter for the graph's next
// run.
template <typename Work, typename Ahead>
void share_work(ggml_tensor *dst, int64_t n, int ith, int nth, Work &&work, Ahead &&ahead) {
    if (nth <= 1) {
        if (n > 0) work(int64_t{0}, n);
        return;
    }
    const int64_t per = n / (2 * nth), fixed = per * nth;
    // chunk c's first unit (n or more: no such chunk)
    const auto chunk_begin = [&](int64_t c) {
        int64_t begin = fixed, size = std::max<int64_t>(1, (n - fixed) / (2 * nth));
        while (c >= nth && begin < n) begin += nth * size, c -= nth, size = std::max<int64_t>(1, size / 2);
        return begin + c * size;
    };
    // op_params' last two words: a custom op's own parameters (function,
    // task count, user data) take the first 24 of its 64 bytes
    static_assert(GGML_MAX_OP_PARAMS == 64);
    std::atomic_ref<int32_t> next(dst->op_params[14]), done(dst->op_params[15]);
    int64_t c = next.fetch_add(1, std::memory_order_relaxed), begin = chunk_begin(c);
    if (begin < n) ahead(begin);
    if (per > 0) work(ith * per, (ith + 1) * per);
    while (begin < n) {
        const int64_t end = std::min(n, chunk_begin(c + 1));
        c = next.fetch_add(1, std::memory_order_relaxed);
        const int64_t following = chunk_begin(c);
        if (following < n) ahead(following);
        work(begin, end);
        begin = following;
    }
    if (done.fetch_add(1, std::memory_order_acq_rel) == nth - 1) {
        next.store(0, std::memory_order_relaxed);
        done.store(0, std::memory_order_relaxed);
    }
}

// The same, for work whose chunks need nothing asked for ahead.
template <typename Work>
void share_work(ggml_tensor *dst, int64_t n, int ith, int nth, Work &&work) {
    share_work(dst, n, ith, nth, std::forward<Work>(work), [](int64_t) {});
}

// x^T of an F32 tensor (any strides), each [ne0, ne1] plane transposed:
// contiguous [ne1, ne0, ne2, ne3], blocked in 32 x 32 tiles over all threads. ggml's cont(transpose(x)) copies one
// element per memcpy call, the largest cost of a training step before this.
ggml_tensor *transpose_f32(ggml_context *ctx, ggml_tensor *x);

// The outer-product sum ggml_out_prod computes, dst[i, j] = sum_k a[i, k] b[j, k]
// per [.., .., ne2, ne3] plane of b (a: [n, K], b: [m, K] -> [n, m]; a's planes
// broadcast over b's as in ggml_out_prod), for a whose rows are contiguous (F32,
// or F16/BF16/quantized: converted a block of rows at a time, never as a whole
// F32 copy) and F32 b of any strides (a transposed view included).
// Register-blocked over i and j, vectorised along i; no copies of F32 operands.
// Needs AVX-512 or AVX2+FMA: where out_prod_f32_supported() is false, use
// ggml_out_prod (or transposes and ggml_mul_mat).
bool out_prod_f32_supported(const ggml_tensor *a, const ggml_tensor *b);
ggml_tensor *out_prod_f32(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b);

// Cross-entropy of logits [n, rows] against integer targets [rows] (I32; a
// negative target: the row has no loss): per-row losses [rows], log-sum-exp
// in double. The training loss replaces ggml's cross_entropy_loss by these
// (graph/backward.h), so no one-hot label matrix exists.
ggml_tensor *cross_entropy_rows(ggml_context *ctx, ggml_tensor *logits, ggml_tensor *targets);
// The gradient of mean(cross_entropy_rows) * grad (a scalar) with respect to
// the logits, written over the logits themselves (they are not needed after):
// (softmax - one-hot) * grad / rows, zero on rows without a target.
ggml_tensor *cross_entropy_grad_inplace(ggml_context *ctx, ggml_tensor *grad, ggml_tensor *logits, ggml_tensor *targets);

// sum(x^2) of a contiguous F32 tensor as a [1] tensor, accumulated in double
// (one pass, no squared copy).
ggml_tensor *sum_of_squares(ggml_context *ctx, ggml_tensor *x);

}  // namespace toy::graph
