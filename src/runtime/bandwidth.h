// Roofline helpers for `toy bench --roofline`: how fast this machine streams
// memory, and how many bytes one decode step must read; and for
// `toy train --bench`, how fast it multiplies F32 matrices. A decode step is
// bandwidth-bound: every weight it multiplies by is read once per token, so
// tokens/s can never exceed bandwidth / bytes-per-token.
#pragma once

#include "model/model.h"
#include "runtime/engine.h"

#include <ggml.h>

#include <cstddef>
#include <cstdint>

namespace toy {

struct BandwidthResult {
    double gb_per_s = 0.0;    // best run, 1e9 bytes per second
    double mean_gb_per_s = 0.0;
    size_t buffer_bytes = 0;
    int n_threads = 0;
    int runs = 0;
    const char *kernel = "";  // "avx512", "avx2" or "scalar"
};

// Multi-threaded streaming read of a buffer much larger than the last-level
// cache (buffer_bytes = 0: max(1 GiB, 4 x L3), at most a quarter of physical
// memory). Each thread reads its own contiguous slice, which it also touched
// first. Returns the best of `runs`. Throws toy::Error when allocation fails.
BandwidthResult measure_read_bandwidth(int n_threads, size_t buffer_bytes = 0, int runs = 5);

// The same read over the weights a decode step reads, where they are (the
// model's tensors in host memory, the gathered embeddings left out; expert
// tensors whole), in this process, after one untimed pass. buffer_bytes: the
// bytes one pass reads. Where memory is not uniformly fast (a VM whose
// allocations land on faster or slower memory, a NUMA machine), this is the
// ceiling of this model's decode, which a fresh buffer need not show. A
// model with weights off the host (offloaded): an empty result (0 bytes).
BandwidthResult measure_weight_bandwidth(const Model &model, int n_threads, int runs = 5);

struct DecodeBytes {
    size_t weights = 0;   // weight bytes read by one decode step
    size_t kv = 0;        // K and V cache bytes read at the given context
    size_t total() const { return weights + kv; }
};

// Bytes one single-token decode reads at context length n_ctx_tokens: every
// weight tensor once, except the token (and learned position) embedding, of
// which only one row is gathered -- unless the output projection is tied to
// it, then all of it; MoE expert tensors count n_expert_used / n_expert; plus
// n_ctx_tokens cells of K and V per layer (sliding-window layers at most n_swa).
DecodeBytes decode_bytes_per_token(const Model &model, int64_t n_ctx_tokens, ggml_type type_k, ggml_type type_v);

// The compute roof of training: GFLOP/s of one n x n x n F32 ggml_mul_mat on
// the engine's backend and threads (the kernel training's matmuls use), best
// of `runs` after a warm-up.
double measure_f32_matmul_gflops(const Engine &engine, int64_t n = 1024, int runs = 5);

}  // namespace toy
