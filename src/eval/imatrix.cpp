#include "eval/imatrix.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/parallel.h"

#include <ggml-backend.h>
#include <ggml.h>

#include <cmath>
#include <cstring>

namespace toy::eval {
namespace {

bool all_finite(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(v[i])) return false;
    return true;
}

}  // namespace

LoadOptions imatrix_load_options(LoadOptions o) {
    o.repack = false;
    o.fuse = false;
    return o;
}

bool ImatrixCollector::wanted(const ggml_tensor *t) const {
    if (t->op == GGML_OP_MUL_MAT_ID) return true;
    if (t->op != GGML_OP_MUL_MAT) return false;
    const ggml_tensor *w = t->src[0], *x = t->src[1];
    // llama-imatrix leaves out products over fewer than 16 rows (single-token decoding)
    if (x->ne[1] < 16 || x->type != GGML_TYPE_F32) return false;
    const std::string_view name = w->name;
    return name.starts_with("blk.") || (process_output_ && name == "output.weight");
}

bool ImatrixCollector::callback(ggml_tensor *t, bool ask, void *collector) {
    auto *c = static_cast<ImatrixCollector *>(collector);
    if (ask) return c->error_.empty() && c->wanted(t);
    c->collect(t);
    return c->error_.empty();  // false stops the graph; the caller reports error()
}

void ImatrixCollector::collect(const ggml_tensor *t) {
    const ggml_tensor *w = t->src[0], *x = t->src[1];
    const std::string name = w->name;
    if (x->nb[0] != ggml_type_size(x->type) || x->type != GGML_TYPE_F32) {
        error_ = fmt::format("imatrix: the input of '{}' is not F32 rows ({})", name, ggml_type_name(x->type));
        return;
    }
    const char *data = static_cast<const char *>(x->data);
    if (!x->buffer || !ggml_backend_buffer_is_host(x->buffer)) {
        scratch_.resize(ggml_nbytes(x));
        ggml_backend_tensor_get(const_cast<ggml_tensor *>(x), scratch_.data(), 0, scratch_.size());
        data = scratch_.data();
    }
    const int64_t ne0 = x->ne[0];
    Stats &e = stats_[name];

    if (t->op == GGML_OP_MUL_MAT_ID) {
        // x: [ne0, 1 or n_used, T]; ids: I32 [n_used, T] (maybe strided); w: [ne0, rows, n_expert]
        const ggml_tensor *ids = t->src[2];
        const int64_t n_expert = w->ne[2], n_used = ids->ne[0], T = x->ne[2];
        if (ggml_nrows(x) != x->ne[1] * x->ne[2] || ids->ne[1] != T) {
            error_ = fmt::format("imatrix: '{}': unexpected input shape [{}, {}, {}, {}]", name, x->ne[0], x->ne[1],
                                 x->ne[2], x->ne[3]);
            return;
        }
        if (e.values.empty()) {
            e.values.assign((size_t)(ne0 * n_expert), 0.0f);
            e.counts.assign((size_t)n_expert, 0);
        } else if (e.values.size() != (size_t)(ne0 * n_expert)) {
            error_ = fmt::format("imatrix: '{}': {} sums, now {}", name, e.values.size(), ne0 * n_expert);
            return;
        }
        std::vector<char> idv(ggml_nbytes(ids));
        ggml_backend_tensor_get(const_cast<ggml_tensor *>(ids), idv.data(), 0, idv.size());
        for (int64_t k = 0; k < n_used; ++k) {
            for (int64_t tok = 0; tok < T; ++tok) {
                int32_t ex;
                std::memcpy(&ex, idv.data() + tok * ids->nb[1] + k * ids->nb[0], sizeof ex);
                if (ex < 0 || ex >= n_expert) {
                    error_ = fmt::format("imatrix: '{}': expert id {} out of 0..{}", name, ex, n_expert - 1);
                    return;
                }
                // the input row this expert multiplies: one per token (broadcast) or one per choice
                const float *row = reinterpret_cast<const float *>(data + (k % x->ne[1]) * x->nb[1] + tok * x->nb[2]);
                float *acc = e.values.data() + ex * ne0;
                for (int64_t j = 0; j < ne0; ++j) acc[j] += row[j] * row[j];
                e.counts[ex]++;
            }
        }
    } else {
        // x: [ne0, rows, ne2, ne3]; a 3-D/4-D weight pairs with the matching
        // planes of x, a 2-D one takes every row
        const int64_t n_mat = w->ne[2] * w->ne[3];
        if (e.values.empty()) {
            e.values.assign((size_t)(ne0 * n_mat), 0.0f);
            e.counts.assign(1, 0);
        } else if (e.values.size() != (size_t)(ne0 * n_mat)) {
            error_ = fmt::format("imatrix: '{}': {} sums, now {}", name, e.values.size(), ne0 * n_mat);
            return;
        }
        for (int64_t i3 = 0; i3 < x->ne[3]; ++i3) {
            for (int64_t i2 = 0; i2 < x->ne[2]; ++i2) {
                float *acc = e.values.data() + ((i3 % w->ne[3]) * w->ne[2] + (i2 % w->ne[2])) * ne0;
                for (int64_t r = 0; r < x->ne[1]; ++r) {
                    const float *row = reinterpret_cast<const float *>(data + r * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]);
                    for (int64_t j = 0; j < ne0; ++j) acc[j] += row[j] * row[j];
                }
            }
        }
        for (int64_t &c : e.counts) c += ggml_nrows(x) / n_mat;
    }
    if (!all_finite(e.values.data(), (int64_t)e.values.size())) {
        error_ = fmt::format("imatrix: non-finite sums of squares in '{}' (the model overflows on this text)", name);
    }
}

quant::Imatrix ImatrixCollector::matrix() const {
    quant::Imatrix m;
    for (const auto &[name, s] : stats_) {
        if (s.counts.empty()) continue;
        quant::Imatrix::Entry e;
        e.n_mat = (int64_t)s.counts.size();
        e.n_per_row = (int64_t)s.values.size() / e.n_mat;
        e.in_sum2 = s.values;
        e.counts.assign(s.counts.begin(), s.counts.end());
        m.entries.emplace(name, std::move(e));
    }
    return m;
}

ImatrixResult compute_imatrix(const Model &model, const text::Vocab &vocab, const std::string &text,
                              const std::string &source, const ImatrixOptions &opts, SessionOptions session,
                              const std::function<void(const ChunkReport &)> &on_chunk) {
    if (opts.output_frequency < 0) fail("--output-frequency: expected a count >= 0, found {}", opts.output_frequency);
    if (opts.output.empty()) fail("-o: an output file name is required");
    check_writable(opts.output);  // now, not after the whole calibration text
    // the graph's weight operands must carry the file's names (imatrix_load_options):
    // toy's packed matrices are multiplied by custom ops, and a fused Q|K|V has no name in the file
    if (!model.weights().packed.empty()) fail("imatrix: the model was loaded with packed matrices (load it without repacking)");
    for (const ggml_tensor *t : model.bound_tensors()) {
        const std::string_view name = ggml_get_name(t);
        if (name.find("attn_qkv") != std::string_view::npos && !model.file().has_tensor(name)) {
            fail("imatrix: the model was loaded with Q, K and V fused into '{}' (load it without fusing)", name);
        }
    }
    ImatrixResult res;
    const std::vector<int32_t> tokens = window_tokens(vocab, text);
    res.n_tokens = (int64_t)tokens.size();
    res.plan = plan_windows(res.n_tokens, opts, session.n_ubatch, source);
    const WindowPlan &p = res.plan;

    ImatrixCollector collector(opts.process_output);
    session.eval_callback = &ImatrixCollector::callback;
    session.eval_callback_data = &collector;
    Session s(model, window_session_options(session, p));

    const int64_t n_vocab = model.config().n_vocab, first = p.n_ctx / 2, rows = p.n_ctx - 1 - first;
    const int32_t bos = vocab.add_bos() ? vocab.bos() : text::Vocab::kNoToken;
    auto snapshot = [&](int64_t chunks) {
        quant::Imatrix m = collector.matrix();
        if (!opts.dataset.empty()) m.datasets.push_back(opts.dataset);
        m.chunk_count = chunks;
        m.chunk_size = p.n_ctx;
        return m;
    };
    double nll = 0, nll2 = 0;
    int64_t count = 0;
    std::vector<double> row_nlls;
    auto on_windows = [&](int64_t w0, int64_t n_win, const float *logits) {
        if (opts.compute_ppl) {
            // every position's logits came back; rows first .. n_ctx-2 of each window are scored
            row_nlls.resize((size_t)(n_win * rows));
            parallel_for(n_win * rows, session.n_threads, [&](int64_t r) {
                const int64_t w = r / rows, k = first + r % rows;
                row_nlls[r] = token_nll(logits + (w * p.n_ctx + k) * n_vocab, n_vocab,
                                        tokens[(size_t)((w0 + w) * p.n_ctx + k + 1)]);
            });
        }
        for (int64_t w = 0; w < n_win; ++w) {
            double ppl = 0;
            if (opts.compute_ppl) {
                for (int64_t r = w * rows; r < (w + 1) * rows; ++r) nll += row_nlls[r], nll2 += row_nlls[r] * row_nlls[r];
                count += rows;
                ppl = std::exp(nll / count);
            }
            if (on_chunk) on_chunk({w0 + w + 1, p.n_chunks, ppl, nullptr});
        }
        const int64_t done = w0 + n_win;
        if (opts.output_frequency > 0 && done < p.n_chunks && done / opts.output_frequency > w0 / opts.output_frequency) {
            quant::write_imatrix(snapshot(done), opts.output);
        }
    };
    auto check = [&] {
        if (!collector.error().empty()) fail("{}", collector.error());
    };
    try {
        evaluate_windows(s, tokens, p, bos, 0, p.n_ctx, on_windows, check);
    } catch (const Error &) {
        check();  // the collector's reason, when it stopped the graph
        throw;
    }
    res.matrix = snapshot(p.n_chunks);
    if (res.matrix.entries.empty()) fail("imatrix: no matrix multiply by a model weight was seen");
    quant::write_imatrix(res.matrix, opts.output);
    if (opts.compute_ppl && count > 0) {
        const double mean = nll / count, var = nll2 / count - mean * mean, ppl = std::exp(mean);
        res.ppl = Estimate{ppl, var > 0 && count > 1 ? ppl * std::sqrt(var / (count - 1)) : 0.0};
    }
    return res;
}

}  // namespace toy::eval
