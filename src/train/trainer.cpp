#include "train/trainer.h"

#include "core/error.h"
#include "core/remote_wait.h"
#include "graph/backward.h"
#include "graph/blocks.h"
#include "graph/custom_ops.h"
#include "graph/forward.h"
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

namespace toy::train {

float LrSchedule::at(int64_t step) const {
    if (warmup > 0 && step < warmup) return lr * (float)(step + 1) / (float)warmup;
    if (kind == ScheduleKind::Constant || total <= warmup) return lr;
    const double t = std::clamp((double)(step - warmup) / (double)std::max<int64_t>(1, total - warmup), 0.0, 1.0);
    const double lo = lr * min_ratio;
    if (kind == ScheduleKind::Linear) return (float)(lr + (lo - lr) * t);
    return (float)(lo + 0.5 * (lr - lo) * (1.0 + std::cos(M_PI * t)));
}

// One graph computing the loss of a micro-batch (and, for training, the
// gradients accumulated into the parameters' .grad tensors).
struct Trainer::LossGraph {
    ggml_context *ctx = nullptr;
    ggml_cgraph *gf = nullptr;
    graph::ForwardGraph g;
    ggml_tensor *weight = nullptr;   // F32 [1]
    // The head on the CPU: toy's loss kernels over the targets.
    ggml_tensor *targets = nullptr;  // I32 [N]: the next token, -1 where a row has no target
    // The head on an offload device: ggml's cross-entropy there, over one-hot
    // labels the graph writes itself (no V x N upload): `hot` is row i's
    // label index i * V + target, V the logits' rows (any index in the row
    // where there is no target), `has_target` 1 or 0 per row (the label's
    // value, and the mask that keeps rows without a target out of the
    // gradient). Null on the CPU.
    ggml_tensor *hot = nullptr;         // I64 [N]
    ggml_tensor *has_target = nullptr;  // F32 [1, N]
    ggml_tensor *loss = nullptr;
    ggml_tensor *loss_grad = nullptr;  // d loss / d loss, 1 before each compute (backward only)
    InputBuffer inputs;
    // its own scheduler: resetting a scheduler leaves the tensors of the graph
    // it held dangling, so two graphs cannot take turns in one
    ggml_backend_sched_t sched = nullptr;
    ~LossGraph() {
        if (sched) ggml_backend_sched_free(sched);
        if (ctx) ggml_free(ctx);
    }
};

namespace {

size_t loss_graph_size(const Config &c) { return std::max<size_t>(8192, (size_t)c.n_layer * 1600 + 2048); }

// Whether the logits are computed on an offload device (a GPU or an RPC
// server): the output projection's weight lives there.
bool head_offloaded(const TrainableModel &m) {
    const ggml_tensor *w = m.weights().output;
    return w && w->buffer && !ggml_backend_buffer_is_host(w->buffer);
}

}  // namespace

Trainer::Trainer(const Engine &engine, TrainableModel &model, const TrainerOptions &opts)
    : engine_(engine), model_(model), opts_(opts) {
    const Config &c = model.config();
    if (opts.n_ctx < 1 || opts.seqs_per_ubatch < 1 || opts.ubatches < 1) {
        fail("training batch: expected positive sizes, found -c {}, {} sequences per micro-batch, {} micro-batches",
             opts.n_ctx, opts.seqs_per_ubatch, opts.ubatches);
    }
    if (c.pos == PosKind::Learned && opts.n_ctx > c.n_ctx_train) {
        fail("-c {}: {} has {} learned positions", opts.n_ctx, model.base().path(), c.n_ctx_train);
    }
    trace_.out = opts.trace;
}

Trainer::~Trainer() {
    for (ggml_backend_sched_t s : {norm_sched_, update_sched_})
        if (s) ggml_backend_sched_free(s);
    if (opt_ctx_) ggml_free(opt_ctx_);
}

void Trainer::build_loss_graph(LossGraph &lg, bool backward) {
    const Config &c = model_.config();
    const size_t size = loss_graph_size(c);
    ggml_init_params ip{ggml_tensor_overhead() * size * 3 + 2 * ggml_graph_overhead_custom(size, backward), nullptr, true};
    lg.ctx = ggml_init(ip);
    if (!lg.ctx) fail("out of memory creating the training graph");
    lg.gf = ggml_new_graph_custom(lg.ctx, size, backward);

    const int64_t n_seqs = opts_.seqs_per_ubatch, N = opts_.n_ctx * n_seqs;
    graph::ForwardParams p;
    p.n_tokens = N;
    p.n_seqs = n_seqs;
    p.n_outputs = N;
    p.train = true;
    p.adapters = model_.adapters();
    lg.g = graph::build_forward(lg.ctx, lg.gf, c, model_.weights(), p);

    lg.weight = ggml_new_tensor_1d(lg.ctx, GGML_TYPE_F32, 1);
    ggml_set_input(graph::named(lg.weight, "train_loss_weight"));
    std::vector<ggml_tensor *> inputs = lg.g.inputs();
    inputs.push_back(lg.weight);
    ggml_tensor *ce = nullptr;
    const bool device_loss = head_offloaded(model_);
    if (device_loss) {
        // ggml's cross-entropy and its backward, which offload devices have,
        // over labels written where the logits are: zeros, then each row's
        // has_target at its label index
        const int64_t V = lg.g.logits->ne[0];
        lg.hot = ggml_new_tensor_1d(lg.ctx, GGML_TYPE_I64, N);
        ggml_set_input(graph::named(lg.hot, "train_label_index"));
        lg.has_target = ggml_new_tensor_2d(lg.ctx, GGML_TYPE_F32, 1, N);
        ggml_set_input(graph::named(lg.has_target, "train_has_target"));
        inputs.insert(inputs.end(), {lg.hot, lg.has_target});
        ggml_tensor *zeros = ggml_fill_inplace(lg.ctx, ggml_new_tensor_2d(lg.ctx, GGML_TYPE_F32, 1, V * N), 0.0f);
        ggml_tensor *labels = ggml_reshape_2d(lg.ctx, ggml_set_rows(lg.ctx, zeros, lg.has_target, lg.hot), V, N);
        ce = ggml_cross_entropy_loss(lg.ctx, ggml_mul(lg.ctx, lg.g.logits, lg.has_target), labels);
    } else {
        lg.targets = ggml_new_tensor_1d(lg.ctx, GGML_TYPE_I32, N);
        ggml_set_input(graph::named(lg.targets, "train_targets"));
        inputs.push_back(lg.targets);
        // differentiated as ggml's cross-entropy over one-hot labels, computed
        // from the targets: the labels are a placeholder build_backward replaces
        ce = backward ? ggml_cross_entropy_loss(lg.ctx, lg.g.logits, ggml_dup_tensor(lg.ctx, lg.g.logits))
                      : graph::mean_cross_entropy(lg.ctx, lg.g.logits, lg.targets);
    }
    lg.loss = ggml_mul(lg.ctx, ce, lg.weight);
    graph::named(lg.loss, "train_loss");
    ggml_set_output(lg.loss);
    ggml_set_loss(lg.loss);
    ggml_build_forward_expand(lg.gf, lg.loss);

    if (backward) {
        // every parameter's gradient goes into its own accumulator
        std::vector<std::pair<ggml_tensor *, ggml_tensor *>> accs;
        for (const Param &prm : model_.params().params()) accs.emplace_back(prm.value, prm.grad);
        ggml_cgraph *forward = lg.gf;
        graph::BackwardOptions bo;
        if (!device_loss) bo.targets = lg.targets;
        if (opts_.recompute) bo.recompute_from = &lg.g.checkpoints;
        lg.gf = graph::build_backward(lg.ctx, forward, lg.loss, accs, size, bo);
        lg.loss_grad = ggml_graph_get_grad_acc(forward, lg.loss);
        ggml_set_input(lg.loss_grad);
        inputs.push_back(lg.loss_grad);
    }
    lg.inputs.place(engine_.buffer_type(), inputs);
    // Every op stays where toy placed it: with ggml's op offload a GPU took
    // the CPU head's product (a batch of 32 tokens or more) and the in-place
    // loss ops then ran on the CPU over logits in GPU memory (a crash).
    lg.sched = engine_.make_scheduler(size, Engine::OpOffload::Off);
    engine_.place_ops(lg.sched, lg.gf);
    if (trace_.out) ggml_backend_sched_set_eval_callback(lg.sched, trace_callback, &trace_);
    if (!ggml_backend_sched_alloc_graph(lg.sched, lg.gf)) {
        fail("could not allocate the {} graph ({} x {} tokens)", backward ? "training" : "evaluation",
             opts_.seqs_per_ubatch, opts_.n_ctx);
    }
}

double Trainer::run_ubatch(LossGraph &lg, std::span<const Window *const> windows, float weight) {
    const Config &c = model_.config();
    const int64_t T = opts_.n_ctx, n_seqs = opts_.seqs_per_ubatch, N = T * n_seqs;
    std::vector<int32_t> tokens(N), pos(N), targets(N, -1);
    for (int64_t s = 0; s < n_seqs; ++s) {
        const Window &w = *windows[s];
        if ((int64_t)w.tokens.size() != T + 1 || (int64_t)w.mask.size() != T) {
            fail("internal: a window of {} tokens where -c {} needs {}", w.tokens.size(), T, T + 1);
        }
        for (int64_t i = 0; i < T; ++i) {
            const int64_t row = s * T + i;
            tokens[row] = w.tokens[i];
            pos[row] = (int32_t)i;
            if (!w.mask[i]) continue;
            const int32_t target = w.tokens[i + 1];
            if (target < 0 || target >= c.n_vocab) {
                fail("token id {} is out of range: the vocabulary has {} tokens", target, c.n_vocab);
            }
            targets[row] = target;
        }
    }
    for (int32_t t : tokens) {
        if (t < 0 || t >= c.n_vocab) fail("token id {} is out of range: the vocabulary has {} tokens", t, c.n_vocab);
    }
    set_forward_inputs(lg.g, c, tokens, pos);
    if (lg.targets) ggml_backend_tensor_set(lg.targets, targets.data(), 0, targets.size() * sizeof(int32_t));
    if (lg.hot) {
        const int64_t V = lg.g.logits->ne[0];  // a full fine-tune pads the vocabulary (TrainableModel::full)
        std::vector<int64_t> hot(N);
        std::vector<float> has(N);
        for (int64_t row = 0; row < N; ++row) {
            hot[row] = row * V + std::max(targets[row], 0);
            has[row] = targets[row] >= 0 ? 1.0f : 0.0f;
        }
        ggml_backend_tensor_set(lg.hot, hot.data(), 0, hot.size() * sizeof(int64_t));
        ggml_backend_tensor_set(lg.has_target, has.data(), 0, has.size() * sizeof(float));
    }
    ggml_backend_tensor_set(lg.weight, &weight, 0, sizeof(float));
    if (lg.loss_grad) {
        const float one = 1.0f;
        ggml_backend_tensor_set(lg.loss_grad, &one, 0, sizeof(float));
    }
    trace_.graph++;
    RemoteWait wait("computing a training batch");
    if (ggml_backend_sched_graph_compute(lg.sched, lg.gf) != GGML_STATUS_SUCCESS) fail("training graph computation failed");
    float loss = 0.0f;
    ggml_backend_tensor_get(lg.loss, &loss, 0, sizeof(float));
    return loss;
}

StepStats Trainer::step(std::span<const Window *const> windows, float lr) {
    StepStats st = gradients(windows);
    update(st, lr);
    return st;
}

StepStats Trainer::gradients(std::span<const Window *const> windows) {
    if ((int64_t)windows.size() != seqs_per_step()) {
        fail("internal: a step of {} windows where the trainer takes {}", windows.size(), seqs_per_step());
    }
    if (model_.params().params().empty()) fail("nothing to train: the model has no trainable parameters");
    if (!train_) {
        // built on first use: an evaluation-only trainer (frozen model) never needs them
        train_ = std::make_unique<LossGraph>();
        build_loss_graph(*train_, true);
        build_optimizer_graphs();
    }
    StepStats st;
    for (const Window *w : windows) st.n_targets += w->n_targets;
    if (st.n_targets == 0) fail("internal: a training step without targets");
    const int64_t T = opts_.n_ctx, n_seqs = opts_.seqs_per_ubatch;
    // ggml's loss is the mean over the micro-batch's rows: weighting it by
    // rows / (the step's targets) makes the sum over micro-batches the mean
    // over the step's targets
    const float weight = (float)(T * n_seqs) / (float)st.n_targets;
    // the accumulators are zero here unless gradients() ran without an
    // update: allocated so, and the update clears them as it reads them
    if (pending_) model_.params().zero_grads();
    pending_ = true;
    for (int64_t u = 0; u < opts_.ubatches; ++u) {
        st.loss += run_ubatch(*train_, windows.subspan(u * n_seqs, n_seqs), weight);
    }

    // gradient norms, per group and overall
    RemoteWait wait("computing the gradient norms");
    if (ggml_backend_sched_graph_compute(norm_sched_, norm_graph_) != GGML_STATUS_SUCCESS) fail("gradient norm computation failed");
    const std::vector<Param> &params = model_.params().params();
    std::vector<float> sqs(params.size());
    for (const NormRead &r : norm_reads_) {
        std::vector<float> v(r.index.size());
        ggml_backend_tensor_get(r.sums, v.data(), 0, v.size() * sizeof(float));
        for (size_t k = 0; k < v.size(); ++k) sqs[r.index[k]] = v[k];
    }
    double total = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        const float sq = sqs[i];
        total += sq;
        auto it = std::find_if(st.group_norms.begin(), st.group_norms.end(), [&](auto &g) { return g.first == params[i].group; });
        if (it == st.group_norms.end()) {
            st.group_norms.emplace_back(params[i].group, sq);
        } else {
            it->second += sq;
        }
    }
    for (auto &g : st.group_norms) g.second = std::sqrt(g.second);
    st.grad_norm = std::sqrt(total);
    if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm)) {
        fail("training diverged at optimizer step {}: loss {}, gradient norm {} (lower -lr or keep --grad-clip on)",
             opt_steps_ + 1, st.loss, st.grad_norm);
    }

    return st;
}

void Trainer::update(const StepStats &st, float lr) {
    if (!pending_) fail("internal: an optimizer update without gradients");
    pending_ = false;
    const OptimizerOptions &o = opts_.opt;
    const float clip = o.grad_clip > 0 && st.grad_norm > o.grad_clip ? (float)(o.grad_clip / st.grad_norm) : 1.0f;
    ++opt_steps_;
    float hp[kHyperCount] = {};
    hp[kLr] = lr;
    hp[kWeightDecay] = o.weight_decay;
    hp[kGradScale] = clip;
    hp[kBeta1] = o.beta1;
    hp[kBeta2] = o.beta2;
    hp[kEps] = o.eps;
    hp[kBeta1Correction] = 1.0f / (1.0f - std::pow(o.beta1, (float)opt_steps_));
    hp[kBeta2Correction] = 1.0f / (1.0f - std::pow(o.beta2, (float)opt_steps_));
    hp[kSgdLr] = lr;
    hp[kSgdWeightDecay] = o.weight_decay;
    ggml_backend_tensor_set(hp_decay_, hp, 0, sizeof(hp));
    hp[kWeightDecay] = hp[kSgdWeightDecay] = 0.0f;
    ggml_backend_tensor_set(hp_no_decay_, hp, 0, sizeof(hp));
    RemoteWait wait("updating the weights");
    if (ggml_backend_sched_graph_compute(update_sched_, update_graph_) != GGML_STATUS_SUCCESS) fail("optimizer step failed");
    model_.params().zero_grads(/*offloaded_only*/ true);  // those on the CPU were cleared as they were read
}

double Trainer::evaluate(std::span<const Window> windows) {
    const int64_t n_seqs = opts_.seqs_per_ubatch;
    if (windows.empty()) return NAN;
    // built for each evaluation and freed after: its buffers are not held between them
    LossGraph eval;
    build_loss_graph(eval, false);
    // rows not filled by a window (the last micro-batch) repeat the first one with no targets
    Window blank = windows[0];
    std::fill(blank.mask.begin(), blank.mask.end(), 0);
    blank.n_targets = 0;
    double sum = 0;
    int64_t n_targets = 0;
    for (size_t at = 0; at < windows.size(); at += n_seqs) {
        std::vector<const Window *> mb;
        for (int64_t s = 0; s < n_seqs; ++s) {
            const size_t i = at + s;
            mb.push_back(i < windows.size() ? &windows[i] : &blank);
            n_targets += mb.back()->n_targets;
        }
        // weight = rows: the graph's value is then the sum of the rows' losses
        sum += run_ubatch(eval, mb, (float)(opts_.n_ctx * n_seqs));
    }
    return n_targets ? sum / n_targets : NAN;
}

void Trainer::build_optimizer_graphs() {
    std::vector<Param> &params = model_.params().params();
    const size_t n = params.size();
    // per parameter at most: sqr, sum and concat; the value (a parameter is a
    // node), two views, the scaled gradient and the step
    const size_t norm_nodes = 3 * n + 8, update_nodes = 5 * n + 8;
    ggml_init_params ip{ggml_tensor_overhead() * (norm_nodes + update_nodes + 8) +
                            ggml_graph_overhead_custom(norm_nodes, false) + ggml_graph_overhead_custom(update_nodes, false),
                        nullptr, true};
    opt_ctx_ = ggml_init(ip);
    if (!opt_ctx_) fail("out of memory creating the optimizer graphs");
    norm_graph_ = ggml_new_graph_custom(opt_ctx_, norm_nodes, false);
    update_graph_ = ggml_new_graph_custom(opt_ctx_, update_nodes, false);
    const bool adamw = opts_.opt.kind == OptimizerKind::AdamW;
    hp_decay_ = ggml_new_tensor_1d(opt_ctx_, GGML_TYPE_F32, kHyperCount);
    hp_no_decay_ = ggml_new_tensor_1d(opt_ctx_, GGML_TYPE_F32, kHyperCount);
    for (ggml_tensor *t : {hp_decay_, hp_no_decay_}) ggml_set_input(t);
    for (size_t i = 0; i < n; ++i) {
        Param &p = params[i];
        ggml_tensor *sq = grad_sum_of_squares(opt_ctx_, p);
        auto read = std::find_if(norm_reads_.begin(), norm_reads_.end(),
                                 [&](const NormRead &r) { return params[r.index[0]].device == p.device; });
        if (read == norm_reads_.end()) {
            norm_reads_.push_back({sq, {i}});
        } else {
            read->sums = ggml_concat(opt_ctx_, read->sums, sq, 0);
            read->index.push_back(i);
        }

        ggml_tensor *hp = p.decay ? hp_decay_ : hp_no_decay_;
        ggml_tensor *upd = adamw ? adamw_update(opt_ctx_, p, hp) : sgd_update(opt_ctx_, p, hp);
        ggml_build_forward_expand(update_graph_, upd);
    }
    for (const NormRead &r : norm_reads_) {
        ggml_set_output(r.sums);
        ggml_build_forward_expand(norm_graph_, r.sums);
    }
    opt_inputs_.place(engine_.buffer_type(), {hp_decay_, hp_no_decay_});
    // a scheduler counts nodes and leaves (values, moments) together
    norm_sched_ = engine_.make_scheduler(2 * norm_nodes, Engine::OpOffload::Off);
    update_sched_ = engine_.make_scheduler(2 * update_nodes, Engine::OpOffload::Off);
    for (auto [sched, gf] : {std::pair{norm_sched_, norm_graph_}, std::pair{update_sched_, update_graph_}}) {
        engine_.place_ops(sched, gf);
        if (!ggml_backend_sched_alloc_graph(sched, gf)) fail("could not allocate the optimizer graphs");
    }
}

}  // namespace toy::train
