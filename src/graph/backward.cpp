#include "graph/backward.h"

#include "graph/custom_ops.h"

#include <ggml-backend.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace toy::graph {
namespace {

// Points a node's sources (and the tensor it views) at f(source); f maps null to null.
template <typename F>
void remap_sources(ggml_tensor *node, F &&f) {
    for (ggml_tensor *&src : node->src) src = f(src);
    node->view_src = f(node->view_src);
}

// Whether t's bytes (or its view source's) are in a buffer of a device other
// than the CPU: only weights have buffers while the graph is built.
bool on_other_device(const ggml_tensor *t) {
    const ggml_tensor *base = t->view_src ? t->view_src : t;
    if (!base->buffer) return false;
    ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(base->buffer));
    return dev && ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU;
}

// The forward nodes ggml's scheduler runs on an offload device, placed as it
// places them: beside an offload device's weight they read, else (reading
// no weight) after a source that runs there. Blocks on devices come after
// those on the CPU, so a CPU block's nodes never follow a device's.
std::unordered_set<const ggml_tensor *> offloaded_nodes(ggml_cgraph *gf, const std::unordered_set<ggml_tensor *> &forward) {
    std::unordered_set<const ggml_tensor *> out;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor *t = ggml_graph_node(gf, i);
        if (!forward.count(t)) continue;
        bool device_weight = false, cpu_weight = false, follows = false;
        for (const ggml_tensor *s : t->src) {
            if (!s) continue;
            if ((s->view_src ? s->view_src : s)->buffer) {
                (on_other_device(s) ? device_weight : cpu_weight) = true;
            } else if (out.count(s)) {
                follows = true;
            }
        }
        if (device_weight || (!cpu_weight && follows)) out.insert(t);
    }
    return out;
}

// The out_prod nodes among the terms of gradient g (sums, reshapes and
// copies of them): what computes a parameter's gradient.
void collect_products(ggml_tensor *g, std::unordered_set<const ggml_tensor *> &out) {
    if (!g) return;
    switch (g->op) {
    case GGML_OP_OUT_PROD: out.insert(g); return;
    case GGML_OP_ADD: case GGML_OP_RESHAPE: case GGML_OP_VIEW: case GGML_OP_PERMUTE: case GGML_OP_TRANSPOSE:
    case GGML_OP_CONT: case GGML_OP_CPY: case GGML_OP_DUP: case GGML_OP_SCALE:
        for (ggml_tensor *s : g->src) collect_products(s, out);
        return;
    default: return;
    }
}

// Same batch dimensions (2 and 3): out_prod's broadcasting has no matmul equivalent here.
bool same_batches(const ggml_tensor *a, const ggml_tensor *b) { return a->ne[2] == b->ne[2] && a->ne[3] == b->ne[3]; }

// Replaces ggml's out_prod nodes `t` = a b^T (a: [n, K], b: [m, K] -> [n, m],
// per batch), whose generic kernel is slow: by toy's out_prod_f32
// (`replacement` maps t to the new node), or, on a CPU without its SIMD
// kernel, by mul_mat(a^T, b^T) on contiguous transposed copies, in place.
class OutProdRewriter {
public:
    OutProdRewriter(ggml_context *ctx, std::unordered_set<const ggml_tensor *> offloaded)
        : ctx_(ctx), offloaded_(std::move(offloaded)) {}

    std::unordered_map<ggml_tensor *, ggml_tensor *> replacement;
    // products left to ggml: those of parameters on another device (their
    // accumulators are there, and ggml's op runs there beside them)
    std::unordered_set<const ggml_tensor *> keep;

    // ggml's cross-entropy over one-hot labels: the same loss and gradient
    // from integer targets (the label matrix is never allocated)
    void rewrite_cross_entropy(ggml_tensor *t, ggml_tensor *targets) {
        if (t->op == GGML_OP_CROSS_ENTROPY_LOSS) replacement[t] = mean_cross_entropy(ctx_, t->src[0], targets);
        if (t->op == GGML_OP_CROSS_ENTROPY_LOSS_BACK) {
            replacement[t] = cross_entropy_grad_inplace(ctx_, t->src[0], t->src[1], targets);
        }
    }

    bool rewrite(ggml_tensor *t) {
        if (t->op != GGML_OP_OUT_PROD || keep.count(t)) return false;
        ggml_tensor *a = t->src[0], *b = t->src[1];
        // a weight held by another device (a split model's frozen block), or
        // an activation of a block that runs there: ggml's own op runs there;
        // toy's kernels are the CPU's. ggml's CUDA out_prod takes F32 only:
        // an F16 or quantized weight is first dequantized there.
        if (on_other_device(a) && a->type != GGML_TYPE_F32 && a->ne[2] == 1 && a->ne[3] == 1) {
            t->src[0] = dequantized(a);
            return true;
        }
        if (on_other_device(a) || on_other_device(b) || runs_offloaded(a) || runs_offloaded(b)) return false;
        if (out_prod_f32_supported(a, b)) {
            replacement[t] = out_prod_f32(ctx_, a, b);
            return true;
        }
        if (!same_batches(t, a) || !same_batches(t, b)) return false;
        if (b->type != GGML_TYPE_F32) return false;
        if (a->type != GGML_TYPE_F32 && !(ggml_is_contiguous(a) && ggml_get_type_traits(a->type)->to_float)) return false;
        t->op = GGML_OP_MUL_MAT;
        t->src[0] = transposed(a);
        t->src[1] = transposed(b);
        return true;
    }

private:
    // Whether x is (a view, copy or transpose of) a forward node that runs on an offload device.
    bool runs_offloaded(const ggml_tensor *x) const {
        for (; x; x = x->src[0]) {
            if (offloaded_.count(x)) return true;
            switch (x->op) {
            case GGML_OP_VIEW: case GGML_OP_RESHAPE: case GGML_OP_PERMUTE: case GGML_OP_TRANSPOSE: case GGML_OP_CONT:
            case GGML_OP_CPY: case GGML_OP_DUP: continue;
            default: return false;
            }
        }
        return false;
    }

    // A 2-D weight of any type as F32, where it lives: every row through
    // get_rows, which ggml's backends have for every type (their cpy does
    // not convert K-quants). Shared by the products that read the same weight.
    ggml_tensor *dequantized(ggml_tensor *w) {
        auto it = f32_.find(w);
        if (it != f32_.end()) return it->second;
        ggml_tensor *rows = ggml_cast(ctx_, ggml_arange(ctx_, 0.0f, (float)w->ne[1], 1.0f), GGML_TYPE_I32);
        return f32_[w] = ggml_get_rows(ctx_, w, rows);
    }

    // x^T, contiguous; the transpose of a transpose is its source. Shared
    // between the products that read the same activation (Q, K and V's
    // weight gradients all need the normed input transposed).
    ggml_tensor *transposed(ggml_tensor *x) {
        if (x->op == GGML_OP_TRANSPOSE && ggml_is_contiguous(x->src[0])) return x->src[0];
        auto it = cache_.find(x);
        if (it != cache_.end()) return it->second;
        // a frozen F16 or quantized weight (LoRA's base): dequantized first
        ggml_tensor *xt = transpose_f32(ctx_, x->type == GGML_TYPE_F32 ? x : ggml_cast(ctx_, x, GGML_TYPE_F32));
        cache_[x] = xt;
        return xt;
    }

    ggml_context *ctx_;
    std::unordered_set<const ggml_tensor *> offloaded_;
    std::unordered_map<ggml_tensor *, ggml_tensor *> cache_, f32_;
};

// Copies of forward nodes, computed again from the tensors kept (the block
// inputs): the backward pass reads the copies, so the forward pass's own
// activations are freed as soon as the forward pass is done with them.
class Recompute {
public:
    Recompute(ggml_context *ctx, std::unordered_set<ggml_tensor *> forward, const std::vector<ggml_tensor *> &keep)
        : ctx_(ctx), forward_(std::move(forward)), keep_(keep.begin(), keep.end()) {}

    ggml_tensor *operator()(ggml_tensor *t) {
        // parameters are nodes of the graph too (op NONE): never copied
        if (!t || t->op == GGML_OP_NONE || !forward_.count(t) || keep_.count(t)) return t;
        if (auto it = copies_.find(t); it != copies_.end()) return it->second;
        ggml_tensor *c = ggml_new_tensor(ctx_, t->type, GGML_MAX_DIMS, t->ne);
        std::copy(std::begin(t->nb), std::end(t->nb), std::begin(c->nb));
        c->op = t->op;
        std::copy(std::begin(t->op_params), std::end(t->op_params), std::begin(c->op_params));
        c->flags = t->flags & ~GGML_TENSOR_FLAG_OUTPUT;
        for (int i = 0; i < GGML_MAX_SRC; ++i) c->src[i] = (*this)(t->src[i]);
        c->view_src = (*this)(t->view_src);
        c->view_offs = t->view_offs;
        ggml_format_name(c, "%s (again)", t->name);
        copies_[t] = c;
        is_copy_.insert(c);
        return c;
    }

    // gb's nodes in an order that computes each copy just before the backward
    // node that needs it: sources that are copies are visited last
    void order(ggml_cgraph *gb, ggml_tensor *t, std::unordered_set<ggml_tensor *> &seen) const {
        if (!t || !seen.insert(t).second) return;
        for (bool copies : {false, true}) {
            for (ggml_tensor *src : t->src)
                if (src && is_copy_.count(src) == copies) order(gb, src, seen);
        }
        ggml_build_forward_expand(gb, t);
    }

private:
    ggml_context *ctx_;
    std::unordered_set<ggml_tensor *> forward_, keep_;
    std::unordered_map<ggml_tensor *, ggml_tensor *> copies_;
    std::unordered_set<ggml_tensor *> is_copy_;
};

}  // namespace

ggml_tensor *mean_cross_entropy(ggml_context *ctx, ggml_tensor *logits, ggml_tensor *targets) {
    return ggml_scale(ctx, ggml_sum(ctx, cross_entropy_rows(ctx, logits, targets)), 1.0f / (float)logits->ne[1]);
}

ggml_cgraph *build_backward(ggml_context *ctx, ggml_cgraph *gf, ggml_tensor *loss,
                            const std::vector<std::pair<ggml_tensor *, ggml_tensor *>> &accumulators, size_t graph_size,
                            const BackwardOptions &opts) {
    std::unordered_set<ggml_tensor *> forward;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) forward.insert(ggml_graph_node(gf, i));
    std::vector<ggml_tensor *> accs(ggml_graph_n_nodes(gf), nullptr);
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor *node = ggml_graph_node(gf, i);
        for (const auto &[param, acc] : accumulators)
            if (param == node) accs[i] = acc;
    }
    ggml_build_backward_expand(ctx, gf, accs.data());

    OutProdRewriter rw(ctx, offloaded_nodes(gf, forward));
    for (const auto &[param, acc] : accumulators)
        if (on_other_device(acc)) collect_products(ggml_graph_get_grad(gf, param), rw.keep);
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        rw.rewrite(ggml_graph_node(gf, i));
        if (opts.targets) rw.rewrite_cross_entropy(ggml_graph_node(gf, i), opts.targets);
    }
    const auto replaced = [&](ggml_tensor *t) {
        auto it = rw.replacement.find(t);
        return it == rw.replacement.end() ? t : it->second;
    };
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) remap_sources(ggml_graph_node(gf, i), replaced);
    for (auto &[old, now] : rw.replacement) remap_sources(now, replaced);

    std::optional<Recompute> again;
    if (opts.recompute_from) {
        again.emplace(ctx, forward, *opts.recompute_from);
        for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
            if (!forward.count(ggml_graph_node(gf, i))) remap_sources(ggml_graph_node(gf, i), *again);
        }
        for (auto &[old, now] : rw.replacement) remap_sources(now, *again);
    }

    // the rewritten products read new nodes: a fresh graph built from the
    // loss and the final gradients orders them first
    std::vector<ggml_tensor *> grads;
    for (const auto &[param, acc] : accumulators) {
        if (ggml_tensor *g = ggml_graph_get_grad(gf, param)) grads.push_back(replaced(g));
    }
    ggml_cgraph *gb = ggml_new_graph_custom(ctx, graph_size, false);
    ggml_build_forward_expand(gb, loss);
    std::unordered_set<ggml_tensor *> seen;
    if (again) {
        // the last blocks' parameters first: the walk then meets the blocks
        // in the order the backward pass runs them, and the allocator lays
        // out their recomputed activations with less fragmentation (the
        // 0.5B LoRA of BENCHMARKS.md: 677 -> 644 MiB)
        for (auto g = grads.rbegin(); g != grads.rend(); ++g) again->order(gb, *g, seen);
    } else {
        for (ggml_tensor *g : grads) ggml_build_forward_expand(gb, g);
    }
    return gb;
}

}  // namespace toy::graph
