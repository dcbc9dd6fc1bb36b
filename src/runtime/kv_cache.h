// KvCache: the K and V of every layer for n_ctx cells, and what each cell
// holds — a position and the set of sequences that see it (a shared prompt
// prefix is one cell seen by several sequences). Finding cells for a batch,
// removing a sequence's cells and building the attention masks from cells
// (not positions) is what lets several sequences share one cache.
#pragma once

#include "graph/forward.h"
#include "model/config.h"
#include "runtime/batch.h"
#include "runtime/engine.h"

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace toy {

// The types a K or V cache may have (llama.cpp's -ctk / -ctv choices), and
// their names as one comma-separated list.
const std::vector<ggml_type> &kv_cache_types();
std::string kv_cache_type_names();
// The cache type named `name` (as ggml names it: f16, q8_0, ...); throws
// toy::Error naming `flag` and the choices otherwise.
ggml_type parse_kv_cache_type(const std::string &name, const char *flag);

class KvCache {
public:
    static constexpr int kMaxSeqs = 64;

    // Throws toy::Error for an unsupported cache type or a failed allocation.
    // `layer_devices`: where each layer's K and V live (a split model's
    // LayerSplit::layer; nullptr or empty: the engine's CPU).
    KvCache(const Engine &engine, const Config &c, int64_t n_ctx, ggml_type type_k, ggml_type type_v, bool v_trans,
            std::span<const ggml_backend_dev_t> layer_devices = {});
    ~KvCache();
    KvCache(const KvCache &) = delete;
    KvCache &operator=(const KvCache &) = delete;

    const graph::KvBinding &binding() const { return kv_; }
    int64_t size() const { return (int64_t)cells_.size(); }
    int64_t n_used() const;
    size_t bytes() const;
    ggml_type type_k() const { return type_k_; }
    ggml_type type_v() const { return type_v_; }

    // Free cells for the batch's tokens, in order (lowest first), without
    // taking them; throws toy::Error naming the shortfall when there are too
    // few. store() then marks them as the tokens' (before the graph that
    // writes their K and V runs, so the masks include them).
    std::vector<int64_t> find_slot(const Batch &b) const;
    // Throws toy::Error unless every sequence id is in 0 .. kMaxSeqs - 1.
    static void check(const Batch &b);
    static void check(int32_t seq);
    void store(const Batch &b, std::span<const int64_t> cells);

    // Forgets sequence `seq`'s cells with positions in [p0, p1) (seq < 0:
    // every sequence's). A cell no sequence sees any more is free.
    void remove(int32_t seq, int32_t p0 = 0, int32_t p1 = INT32_MAX);
    void clear() { remove(-1); }
    // Makes sequence `dst` see `src`'s cells with positions in [p0, p1): a
    // cached prompt prefix shared without copying K or V.
    void copy(int32_t src, int32_t dst, int32_t p0 = 0, int32_t p1 = INT32_MAX);
    // The highest position `seq` holds, -1 when it holds none.
    int32_t pos_max(int32_t seq) const;
    // Cells a graph must attend: one past the highest used cell, or (with a
    // batch) the highest cell any of its sequences sees — cells only other
    // sequences see (a server's cached prompts) cost its attention nothing.
    int64_t n_active() const;
    int64_t n_active(const Batch &b) const;

    // mask [n_kv, n_tokens] (F32 or F16): 0 where batch token i may attend
    // cell j — j holds i's sequence at a position <= i's (and, n_swa > 0,
    // fewer than n_swa positions back) — and -inf elsewhere.
    void fill_mask(ggml_tensor *mask, const Batch &b, int64_t n_swa) const;

private:
    void release();
    int64_t n_active(uint64_t seqs) const;  // one past the highest cell a sequence of the set sees

    struct Cell {
        int32_t pos = -1;   // -1: free
        uint64_t seqs = 0;  // bit s: sequence s sees this cell
    };
    std::vector<Cell> cells_;
    ggml_type type_k_, type_v_;
    std::vector<ggml_context *> ctxs_;         // one per device
    std::vector<ggml_backend_buffer_t> bufs_;  // one per device
    graph::KvBinding kv_;
};

}  // namespace toy
