// Session: a model, an engine (backend + thread pool) and scheduler, a KV
// cache and the graphs that run them. decode() evaluates a Batch of tokens of
// any sequences (runtime/batch.h, runtime/kv_cache.h); eval() is the
// single-sequence form (sequence 0 at the current position). Both keep the
// logits of the rows asked for.
#pragma once

#include "graph/forward.h"
#include "model/model.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/kv_cache.h"
#include "runtime/trace.h"

#include <ggml-backend.h>
#include <ggml-cpu.h>

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace toy {

enum class FlashAttn { Off, On, Auto };

struct SessionOptions {
    int64_t n_ctx = 0;        // 0: the model's training context, at most 4096
    int64_t n_batch = 2048;   // tokens per eval call at most (logical batch)
    int64_t n_ubatch = 512;   // tokens per graph (physical batch)
    int n_threads = 0;        // 0: all hardware threads
    ggml_type type_k = GGML_TYPE_F16;
    ggml_type type_v = GGML_TYPE_F16;
    FlashAttn flash_attn = FlashAttn::Auto;
    FILE *trace = nullptr;    // non-null: per-graph activation statistics go here
    // A scheduler eval callback (ggml_backend_sched_eval_callback's contract:
    // asked with ask = true whether it wants a node, then called with
    // ask = false once that node is computed; false stops the graph). For
    // tools that read activations (toy imatrix). Installed only when set, so
    // graphs run unsplit otherwise; it runs beside --trace when both are on.
    ggml_backend_sched_eval_callback eval_callback = nullptr;
    void *eval_callback_data = nullptr;
    const graph::Adapters *adapters = nullptr;  // LoRA terms applied in every graph (kept alive by the caller)
    // The output rows are the final norm's hidden states (n_embd each, what
    // llama.cpp pools into embeddings), not logits: no output head is run.
    bool embeddings = false;
};

struct KvStats {
    int64_t n_ctx = 0;
    int64_t n_used = 0;
    size_t bytes = 0;
    ggml_type type_k = GGML_TYPE_F16;
    ggml_type type_v = GGML_TYPE_F16;
};

class Session {
public:
    Session(const Model &model, const SessionOptions &opts = {});
    ~Session();
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    // Evaluates `tokens` at positions n_past() .. n_past()+n-1 and advances.
    // Keeps the logits of every token (all_logits) or of the last one only.
    void eval(std::span<const int32_t> tokens, bool all_logits = false);

    // Evaluates a batch of tokens of any sequences, split in ubatches; keeps
    // the logits of the tokens whose output flag is set, in batch order.
    // Throws toy::Error (leaving the cache as it was) when a token is out of
    // range or the cache has too few free cells.
    void decode(const Batch &b);

    // Logits of the last eval/decode: rows x n_vocab (one row unless all_logits);
    // with SessionOptions::embeddings the hidden states, rows x n_embd.
    const std::vector<float> &logits() const { return logits_; }
    const float *last_logits() const { return logits_.data() + logits_.size() - n_vocab(); }
    int64_t n_vocab() const { return model_.config().n_vocab; }
    int64_t n_row() const { return opts_.embeddings ? model_.config().n_embd : n_vocab(); }  // floats per output row

    int64_t n_past() const { return kv_->pos_max(0) + 1; }  // sequence 0's next position
    int64_t n_ctx() const { return n_ctx_; }
    void reset();                 // forget the cache (positions start at 0 again)
    KvCache &kv() { return *kv_; }
    KvStats kv_stats() const;
    bool flash_attn() const { return flash_attn_; }
    const std::vector<std::string> &notes() const { return notes_; }  // decisions worth telling the user
    const Model &model() const { return model_; }
    int graphs_built() const { return graphs_built_; }
    // What the CPU backend does for the current graph: its nodes, the ops
    // that compute (views and reshapes do not), how many of those ggml fuses
    // into the op before them (RMS_NORM + MUL), and the thread barriers one
    // evaluation waits at (one after each computed op but the last, plus the
    // final one). Zero before the first eval.
    struct GraphWork {
        int nodes = 0, ops = 0, fused = 0, barriers = 0;
    };
    GraphWork graph_work() const;

private:
    void decode_ubatch(const Batch &ub, float *out);
    void build_graph(int64_t n_tokens, int64_t n_kv, int64_t n_outputs);
    void set_inputs(const Batch &ub, std::span<const int64_t> cells, std::span<const int32_t> out_rows);
    static bool eval_callback(ggml_tensor *t, bool ask, void *session);  // trace and/or opts_.eval_callback

    const Model &model_;
    SessionOptions opts_;
    int64_t n_ctx_ = 0;
    int64_t n_ubatch_ = 0;
    bool flash_attn_ = false;
    std::vector<std::string> notes_;

    std::unique_ptr<Engine> engine_;
    ggml_backend_sched_t sched_ = nullptr;

    std::unique_ptr<KvCache> kv_;

    // the current graph, reused while its shape does not change
    ggml_context *graph_ctx_ = nullptr;
    ggml_cgraph *gf_ = nullptr;
    graph::ForwardGraph g_;
    InputBuffer inputs_;
    struct Shape {
        int64_t n_tokens = -1, n_kv = -1, n_outputs = -1;
        bool operator==(const Shape &) const = default;
    } shape_;
    int graphs_built_ = 0;
    size_t graph_size_ = 0;

    std::vector<float> logits_;
    TraceState trace_;
};

}  // namespace toy
