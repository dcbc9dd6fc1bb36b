#include "runtime/session.h"

#include "runtime/inputs.h"

#include <ggml-cpu.h>

#include <algorithm>
#include <cmath>
#include <thread>

namespace toy {
namespace {

constexpr int64_t kKvPad = 256;  // attended cells grow in steps of this, so decode graphs stay constant

const char *type_label(ggml_type t) { return ggml_type_name(t); }

void check_cache_type(ggml_type t, const char *flag) {
    if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_Q8_0) {
        fail("{}: expected f32, f16 or q8_0, found {}", flag, ggml_type_name(t));
    }
}

}  // namespace

Session::Session(const Model &model, const SessionOptions &opts) : model_(model), opts_(opts) {
    const Config &c = model.config();
    check_cache_type(opts.type_k, "-ctk");
    check_cache_type(opts.type_v, "-ctv");
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

    engine_ = std::make_unique<Engine>(opts.n_threads);

    // KV cache: one K and one V tensor per layer, in one zeroed buffer (masked
    // cells are multiplied by zero weights; they must not hold NaNs)
    ggml_init_params ip{(size_t)(2 * c.n_layer + 2) * ggml_tensor_overhead(), nullptr, true};
    kv_ctx_ = ggml_init(ip);
    kv_.kv_size = n_ctx_;
    kv_.v_trans = !flash_attn_;
    for (int il = 0; il < c.n_layer; ++il) {
        ggml_tensor *k = ggml_new_tensor_2d(kv_ctx_, opts.type_k, c.n_embd_k_gqa(), n_ctx_);
        ggml_tensor *v = kv_.v_trans ? ggml_new_tensor_2d(kv_ctx_, opts.type_v, n_ctx_, c.n_embd_v_gqa())
                                     : ggml_new_tensor_2d(kv_ctx_, opts.type_v, c.n_embd_v_gqa(), n_ctx_);
        if (ggml_is_quantized(opts.type_k) && c.n_embd_k_gqa() % ggml_blck_size(opts.type_k) != 0) {
            fail("-ctk {}: K rows of {} values are not a multiple of its block size {}", ggml_type_name(opts.type_k),
                 c.n_embd_k_gqa(), ggml_blck_size(opts.type_k));
        }
        ggml_format_name(k, "cache_k_l%d", il);
        ggml_format_name(v, "cache_v_l%d", il);
        kv_.k.push_back(k);
        kv_.v.push_back(v);
    }
    kv_buf_ = ggml_backend_alloc_ctx_tensors(kv_ctx_, engine_->backend());
    if (!kv_buf_) fail("could not allocate the KV cache ({} cells)", n_ctx_);
    ggml_backend_buffer_clear(kv_buf_, 0);

    graph_size_ = graph::forward_graph_size(c, opts_.adapters);
    sched_ = engine_->make_scheduler(graph_size_);
    if (opts.trace) {
        trace_.out = opts.trace;
        ggml_backend_sched_set_eval_callback(sched_, trace_callback, &trace_);
    }
}

Session::~Session() {
    if (sched_) ggml_backend_sched_free(sched_);
    if (graph_ctx_) ggml_free(graph_ctx_);
    if (kv_buf_) ggml_backend_buffer_free(kv_buf_);
    if (kv_ctx_) ggml_free(kv_ctx_);
}

void Session::reset() {
    // cells past n_past are masked, and they hold finite values from earlier
    // evals (the buffer was zeroed once at allocation), so nothing to clear
    n_past_ = 0;
    logits_.clear();
}

KvStats Session::kv_stats() const {
    return {n_ctx_, n_past_, ggml_backend_buffer_get_size(kv_buf_), opts_.type_k, opts_.type_v};
}

void Session::eval(std::span<const int32_t> tokens, bool all_logits) {
    const int64_t n = (int64_t)tokens.size();
    check_tokens(model_, tokens, n_past_);
    if (n_past_ + n > n_ctx_) {
        fail("context overflow: {} tokens after {} already in a context of {} (raise -c)", n, n_past_, n_ctx_);
    }
    const int64_t nv = n_vocab();
    logits_.assign((size_t)(all_logits ? n : 1) * nv, 0.0f);
    for (int64_t start = 0; start < n; start += n_ubatch_) {
        const int64_t len = std::min(n_ubatch_, n - start);
        const bool last = start + len == n;
        const int64_t n_out = all_logits ? len : 1;
        // intermediate ubatches of a last-row-only eval still produce one row, discarded
        float *out = all_logits ? logits_.data() + start * nv : (last ? logits_.data() : nullptr);
        eval_ubatch(tokens.subspan(start, len), n_out, out);
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
    p.kv = &kv_;
    p.adapters = opts_.adapters;
    g_ = graph::build_forward(graph_ctx_, gf_, model_, p);
    inputs_.place(engine_->buffer_type(), g_.inputs());
    if (!ggml_backend_sched_alloc_graph(sched_, gf_)) fail("could not allocate the compute graph ({} tokens)", n_tokens);
    shape_ = {n_tokens, n_kv, n_outputs};
    ++graphs_built_;
}

void Session::set_inputs(std::span<const int32_t> tokens, int64_t n_outputs) {
    const Config &c = model_.config();
    const int64_t T = (int64_t)tokens.size();
    std::vector<int32_t> pos(T);
    std::vector<int64_t> cells(T);
    for (int64_t i = 0; i < T; ++i) {
        pos[i] = (int32_t)(n_past_ + i);
        cells[i] = n_past_ + i;  // one sequence: cell == position
    }
    ggml_backend_tensor_set(g_.k_idxs, cells.data(), 0, T * sizeof(int64_t));
    if (g_.v_idxs) {
        const int64_t nv = c.n_embd_v_gqa();
        std::vector<int64_t> vi(T * nv);
        for (int64_t i = 0; i < T; ++i)
            for (int64_t j = 0; j < nv; ++j) vi[i * nv + j] = graph::v_trans_index(kv_.kv_size, j, cells[i]);
        ggml_backend_tensor_set(g_.v_idxs, vi.data(), 0, vi.size() * sizeof(int64_t));
    }
    if (g_.out_ids) {
        std::vector<int32_t> ids(n_outputs);
        for (int64_t i = 0; i < n_outputs; ++i) ids[i] = (int32_t)(T - n_outputs + i);
        ggml_backend_tensor_set(g_.out_ids, ids.data(), 0, n_outputs * sizeof(int32_t));
    }
    set_forward_inputs(g_, c, tokens, pos);
}

void Session::eval_ubatch(std::span<const int32_t> tokens, int64_t n_outputs, float *out) {
    const int64_t T = (int64_t)tokens.size();
    const int64_t n_kv = std::min(n_ctx_, (n_past_ + T + kKvPad - 1) / kKvPad * kKvPad);
    const Shape shape{T, n_kv, n_outputs};
    if (!(shape == shape_)) build_graph(T, n_kv, n_outputs);
    set_inputs(tokens, n_outputs);
    trace_.graph++;
    if (ggml_backend_sched_graph_compute(sched_, gf_) != GGML_STATUS_SUCCESS) fail("graph computation failed");
    n_past_ += T;
    if (out) ggml_backend_tensor_get(g_.logits, out, 0, (size_t)n_outputs * n_vocab() * sizeof(float));
}

}  // namespace toy
