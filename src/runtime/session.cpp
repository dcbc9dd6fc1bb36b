#include "runtime/session.h"

#include "core/remote_wait.h"
#include "runtime/inputs.h"

#include <ggml-cpu.h>

#include <algorithm>
#include <cmath>
#include <thread>

namespace toy {
namespace {

constexpr int64_t kKvPad = 256;  // attended cells grow in steps of this, so decode graphs stay constant

const char *type_label(ggml_type t) { return ggml_type_name(t); }

}  // namespace

Session::Session(const Model &model, const SessionOptions &opts) : model_(model), opts_(opts) {
    const Config &c = model.config();
    n_ctx_ = opts.n_ctx > 0 ? opts.n_ctx : std::min<int64_t>(c.n_ctx_train, 4096);
    if (n_ctx_ <= 0) fail("context size must be positive, found {}", n_ctx_);
    if (opts.n_ubatch <= 0 || opts.n_batch <= 0) fail("batch sizes must be positive (-b {}, -ub {})", opts.n_batch, opts.n_ubatch);
    n_ubatch_ = std::min(opts.n_ubatch, opts.n_batch);

    // flash attention: auto means on (the CPU backend has the kernel); a
    // quantized V cache cannot be stored transposed, so it needs it
    flash_attn_ = opts.flash_attn != FlashAttn::Off;
    if (!flash_attn_ && ggml_is_quantized(opts.type_v)) {
        flash_attn_ = true;
        notes_.push_back(fmt::format("flash attention enabled: a {} V cache needs it", type_label(opts.type_v)));
    }
    if (flash_attn_ && c.head_dim_k != c.head_dim_v) {
        if (opts.flash_attn == FlashAttn::On || ggml_is_quantized(opts.type_v)) {
            fail("flash attention needs equal K and V head sizes, found {} and {}", c.head_dim_k, c.head_dim_v);
        }
        flash_attn_ = false;
    }

    const LayerSplit &split = model.split();
    engine_ = std::make_unique<Engine>(opts.n_threads, split.devices);

    kv_ = std::make_unique<KvCache>(*engine_, c, n_ctx_, opts.type_k, opts.type_v, !flash_attn_, split.layer);

    graph_size_ = graph::forward_graph_size(c, opts_.adapters);
    sched_ = engine_->make_scheduler(graph_size_);
    trace_.out = opts.trace;
    if (opts.trace || opts.eval_callback) ggml_backend_sched_set_eval_callback(sched_, eval_callback, this);
}

bool Session::eval_callback(ggml_tensor *t, bool ask, void *session) {
    auto *s = static_cast<Session *>(session);
    const SessionOptions &o = s->opts_;
    // each hook is asked again when the node is done, so each sees only the nodes it asked for
    const bool trace = s->trace_.out && trace_callback(t, true, &s->trace_);
    const bool user = o.eval_callback && o.eval_callback(t, true, o.eval_callback_data);
    if (ask) return trace || user;
    bool go = true;
    if (trace) go = trace_callback(t, false, &s->trace_);
    if (user) go = o.eval_callback(t, false, o.eval_callback_data) && go;
    return go;
}

Session::~Session() {
    if (sched_) ggml_backend_sched_free(sched_);
    if (graph_ctx_) ggml_free(graph_ctx_);
}

void Session::reset() {
    // freed cells are masked, and they hold finite values from earlier evals
    // (the buffer was zeroed once at allocation), so nothing to clear
    kv_->clear();
    logits_.clear();
}

KvStats Session::kv_stats() const { return {n_ctx_, kv_->n_used(), kv_->bytes(), kv_->type_k(), kv_->type_v()}; }

void Session::eval(std::span<const int32_t> tokens, bool all_logits) {
    const int64_t n = (int64_t)tokens.size(), n_past = this->n_past();
    if (n_past + n > n_ctx_) {
        fail("context overflow: {} tokens after {} already in a context of {} (raise -c)", n, n_past, n_ctx_);
    }
    Batch b;
    for (int64_t i = 0; i < n; ++i) b.add(tokens[i], (int32_t)(n_past + i), 0, all_logits || i == n - 1);
    decode(b);
}

void Session::decode(const Batch &b) {
    const int64_t n = b.size();
    if (n == 0) fail("nothing to evaluate: the token list is empty");
    const int32_t max_pos = *std::max_element(b.pos.begin(), b.pos.end());
    check_tokens(model_, b.tokens, max_pos + 1 - n);
    KvCache::check(b);
    if (n > n_ctx_ - kv_->n_used()) {
        fail("context overflow: {} tokens, {} of the context's {} cells free (raise -c)", n, n_ctx_ - kv_->n_used(), n_ctx_);
    }
    const int64_t nv = n_row();
    logits_.assign((size_t)b.n_outputs() * nv, 0.0f);
    float *out = logits_.data();
    for (int64_t start = 0; start < n; start += n_ubatch_) {
        Batch ub;
        for (int64_t i = start; i < std::min(n, start + n_ubatch_); ++i) ub.add(b.tokens[i], b.pos[i], b.seq[i], b.output[i]);
        decode_ubatch(ub, out);
        out += ub.n_outputs() * nv;
    }
}

void Session::build_graph(int64_t n_tokens, int64_t n_kv, int64_t n_outputs) {
    if (graph_ctx_) ggml_free(graph_ctx_);
    ggml_backend_sched_reset(sched_);
    ggml_init_params ip{ggml_tensor_overhead() * graph_size_ + ggml_graph_overhead_custom(graph_size_, false), nullptr,
                        true};
    graph_ctx_ = ggml_init(ip);
    gf_ = ggml_new_graph_custom(graph_ctx_, graph_size_, false);
    graph::ForwardParams p;
    p.n_tokens = n_tokens;
    p.n_kv = n_kv;
    p.n_outputs = n_outputs;
    p.flash_attn = flash_attn_;
    p.kv = &kv_->binding();
    p.adapters = opts_.adapters;
    p.logits = !opts_.embeddings;
    g_ = graph::build_forward(graph_ctx_, gf_, model_, p);
    inputs_.place(engine_->buffer_type(), g_.inputs());
    engine_->place_ops(sched_, gf_);
    if (!ggml_backend_sched_alloc_graph(sched_, gf_)) fail("could not allocate the compute graph ({} tokens)", n_tokens);
    shape_ = {n_tokens, n_kv, n_outputs};
    ++graphs_built_;
}

void Session::set_inputs(const Batch &ub, std::span<const int64_t> cells, std::span<const int32_t> out_rows) {
    const Config &c = model_.config();
    const int64_t T = ub.size();
    ggml_backend_tensor_set(g_.k_idxs, cells.data(), 0, T * sizeof(int64_t));
    if (g_.v_idxs) {
        const int64_t nv = c.n_embd_v_gqa();
        std::vector<int64_t> vi(T * nv);
        for (int64_t i = 0; i < T; ++i)
            for (int64_t j = 0; j < nv; ++j) vi[i * nv + j] = graph::v_trans_index(n_ctx_, j, cells[i]);
        ggml_backend_tensor_set(g_.v_idxs, vi.data(), 0, vi.size() * sizeof(int64_t));
    }
    if (g_.out_ids) ggml_backend_tensor_set(g_.out_ids, out_rows.data(), 0, out_rows.size() * sizeof(int32_t));
    set_forward_inputs(g_, c, ub.tokens, ub.pos, false);
    kv_->fill_mask(g_.mask, ub, 0);
    if (g_.mask_swa) kv_->fill_mask(g_.mask_swa, ub, c.n_swa);
}

void Session::decode_ubatch(const Batch &ub, float *out) {
    const int64_t T = ub.size();
    // the rows that go through the output head; a ubatch without any still
    // computes its last row (one graph shape for prompt chunks), discarded
    std::vector<int32_t> rows;
    for (int64_t i = 0; i < T; ++i)
        if (ub.output[i]) rows.push_back((int32_t)i);
    const bool discard = rows.empty();
    if (discard) rows.push_back((int32_t)(T - 1));
    const std::vector<int64_t> cells = kv_->find_slot(ub);
    kv_->store(ub, cells);
    const int64_t n_out = (int64_t)rows.size();
    const int64_t n_kv = std::min(n_ctx_, (kv_->n_active(ub) + kKvPad - 1) / kKvPad * kKvPad);
    const Shape shape{T, n_kv, n_out};
    if (!(shape == shape_)) build_graph(T, n_kv, n_out);
    set_inputs(ub, cells, rows);
    trace_.graph++;
    RemoteWait wait("computing a batch");
    if (ggml_backend_sched_graph_compute(sched_, gf_) != GGML_STATUS_SUCCESS) fail("graph computation failed");
    if (!discard) ggml_backend_tensor_get(opts_.embeddings ? g_.hidden : g_.logits, out, 0, (size_t)n_out * n_row() * sizeof(float));
}

Session::GraphWork Session::graph_work() const {
    GraphWork w;
    if (!gf_) return w;
    auto empty = [](ggml_op op) {
        return op == GGML_OP_NONE || op == GGML_OP_RESHAPE || op == GGML_OP_VIEW || op == GGML_OP_PERMUTE ||
               op == GGML_OP_TRANSPOSE;
    };
    w.nodes = ggml_graph_n_nodes(gf_);
    for (int i = 0; i < w.nodes; ++i) {
        const ggml_tensor *t = ggml_graph_node(gf_, i);
        if (empty(t->op)) continue;
        ++w.ops;
        // ggml-cpu runs an RMS_NORM and the MUL right after it that uses it as one op
        if (t->op == GGML_OP_MUL && i > 0) {
            const ggml_tensor *prev = ggml_graph_node(gf_, i - 1);
            if (prev->op == GGML_OP_RMS_NORM && (t->src[0] == prev || t->src[1] == prev) && !prev->view_src &&
                ggml_are_same_shape(prev, t)) {
                ++w.fused;
            }
        }
    }
    w.barriers = w.ops - w.fused;  // ops - fused - 1 between ops, plus the final one
    return w;
}

}  // namespace toy
