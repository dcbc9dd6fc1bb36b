#include "train/trainable.h"

#include "core/error.h"
#include "gguf/gguf_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <sstream>

namespace toy::train {
namespace {

using graph::Proj;

std::string group_of(const std::string &name) {
    if (name.find("norm") != std::string::npos) return "norm";
    if (name.starts_with("token_embd") || name.starts_with("position_embd")) return "embd";
    if (name.starts_with("output")) return "output";
    if (name.find(".attn_") != std::string::npos) return "attn";
    if (name.find(".ffn_") != std::string::npos) return "ffn";
    return "other";
}

// The base tensor a projection of layer il adapts (null when the layer has none).
ggml_tensor *proj_weight(const LayerWeights &l, Proj p) {
    switch (p) {
    case Proj::Q: return l.wq;
    case Proj::K: return l.wk;
    case Proj::V: return l.wv;
    case Proj::O: return l.wo;
    case Proj::Gate: return l.ffn_gate;
    case Proj::Up: return l.ffn_up;
    case Proj::Down: return l.ffn_down;
    }
    return nullptr;
}

// Input and output sizes of a projection; the fused Q|K|V of gpt2 gives each part its rows.
std::pair<int64_t, int64_t> proj_shape(const Config &c, const LayerWeights &l, Proj p) {
    if (l.wqkv && (p == Proj::Q || p == Proj::K || p == Proj::V)) {
        return {c.n_embd, p == Proj::Q ? c.n_embd_q() : p == Proj::K ? c.n_embd_k_gqa() : c.n_embd_v_gqa()};
    }
    const ggml_tensor *w = proj_weight(l, p);
    return w ? std::pair{w->ne[0], w->ne[1]} : std::pair<int64_t, int64_t>{0, 0};
}

bool is_vocab_matrix(const std::string &name) { return name == "token_embd.weight" || name == "output.weight"; }

std::string lora_name(int il, Proj p, const char *ab) {
    return fmt::format("blk.{}.{}.weight.{}", il, graph::kProjTensors[(int)p], ab);
}

}  // namespace

LoadOptions trainable_load_options() {
    LoadOptions lo;
    lo.repack = false;
    lo.fuse = false;
    return lo;
}

std::vector<Proj> parse_lora_targets(const std::string &list) {
    std::vector<Proj> out;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item == "all") return {Proj::Q, Proj::K, Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down};
        int found = -1;
        for (int i = 0; i < graph::kProjCount; ++i)
            if (item == graph::kProjNames[i]) found = i;
        if (found < 0) fail("--lora-targets: expected a list of q,k,v,o,gate,up,down (or all), found '{}'", item);
        if (std::find(out.begin(), out.end(), (Proj)found) == out.end()) out.push_back((Proj)found);
    }
    if (out.empty()) fail("--lora-targets: expected at least one of q,k,v,o,gate,up,down");
    return out;
}

void check_trainable(const Config &c) {
    if (c.is_moe()) {
        fail("cannot train {}: its mixture-of-experts layers use ggml_mul_mat_id, which ggml 0.25.1 cannot "
             "differentiate (training supports dense models)",
             c.arch);
    }
}

namespace {

// The donor's embedding [d_donor, n_vocab] for a lens, after checking that
// it tokenizes as the base does.
std::vector<float> lens_donor_embedding(const Model &base, const std::string &path, int64_t *d_donor) {
    auto donor = Model::load(path, trainable_load_options());
    const int64_t want = base.config().n_vocab, have = donor->config().n_vocab;
    auto tokens = [](const Model &m) -> std::vector<std::string> {
        return m.file().has("tokenizer.ggml.tokens") ? m.file().get_string_array("tokenizer.ggml.tokens")
                                                     : std::vector<std::string>{};
    };
    if (have != want || tokens(*donor) != tokens(base)) {
        fail("--lens-from {}: its vocabulary ({} tokens) is not the model's ({} tokens{}); a lens maps token for token",
             path, have, want, have == want ? ", other strings" : "");
    }
    std::array<int64_t, 4> ne;
    std::vector<float> e = donor->read_weight("token_embd.weight", &ne);
    *d_donor = ne[0];
    return e;
}

}  // namespace

std::unique_ptr<TrainableModel> TrainableModel::full(const Model &base, const std::string &lens_from, uint64_t seed,
                                                     const LayerSplit &split) {
    const Config &c = base.config();
    check_trainable(c);
    if (base.split().offloads()) fail("internal: a full fine-tune splits its parameters, not its base (load the base on the CPU)");
    std::unique_ptr<TrainableModel> m(new TrainableModel(base, Mode::Full));
    m->split_ = split;
    std::vector<TensorSpec> specs = tensor_specs(c, &m->w_);
    m->params_ = std::make_unique<ParamSet>(specs.size() + 4);  // + padding mask, lens
    // ggml's fast F32 matmul (llamafile's tinyBLAS) takes row counts and
    // contraction lengths in multiples of 16, and falls back to a dot product
    // per element otherwise: an odd vocabulary (GPT-2's 50257) makes the
    // output projection, the largest matmul, several times slower. Training
    // pads it (as llm.c pads GPT-2 to 50304) with zero rows that the logits
    // mask out; they get no gradient, and write() drops them.
    const int64_t n_vocab_padded = GGML_PAD(c.n_vocab, 16);
    struct Fill {
        ggml_tensor *t;
        std::string name;
    };
    std::vector<Fill> fills;
    const bool lens = !lens_from.empty();
    int64_t d_donor = 0;
    std::vector<float> donor;
    if (lens) {
        donor = lens_donor_embedding(base, lens_from, &d_donor);
        m->lens_from_ = lens_from;
        m->w_.lens_embd = m->params_->add_constant("lens.donor_embd", {d_donor, n_vocab_padded});
        m->w_.lens_proj = m->params_->add("lens.proj", {d_donor, c.n_embd}, true, "embd").value;
    }
    for (const TensorSpec &s : specs) {
        if (!base.has_weight(s.name) || (s.name == "output.weight" && base.weights().tied_output)) continue;
        if (lens && s.name == "token_embd.weight") {
            *s.slot = nullptr;
            continue;
        }
        const ggml_type type = base.file_type(s.name);
        if (type != GGML_TYPE_F32 && type != GGML_TYPE_F16 && type != GGML_TYPE_BF16) {
            fail("{}: tensor '{}' is {}: a quantized model cannot be fully fine-tuned (train a LoRA on it with "
                 "--lora-rank, or start from an F32/F16/BF16 model)",
                 base.path(), s.name, ggml_type_name(type));
        }
        ggml_tensor *t;
        std::vector<int64_t> ne = s.ne;
        if (is_vocab_matrix(s.name)) ne[1] = n_vocab_padded;
        if (s.role == TensorRole::RopeFactors) {
            t = m->params_->add_constant(s.name, ne);
        } else {
            const bool decay = s.role == TensorRole::Linear || s.role == TensorRole::Experts || s.role == TensorRole::Router;
            // a tied embedding is the head's matrix too: it goes with the head
            const bool head = m->w_.is_head_slot(s.slot) || (s.name == "token_embd.weight" && base.weights().tied_output);
            t = m->params_->add(s.name, ne, decay, group_of(s.name), split.device_of(s.layer, head)).value;
        }
        *s.slot = t;
        fills.push_back({t, s.name});
    }
    m->w_.tied_output = base.weights().tied_output;
    if (!m->w_.output) m->w_.output = m->w_.tok_embd;  // null with a lens: the graph uses the lens's product
    if (n_vocab_padded != c.n_vocab) m->w_.vocab_pad_mask = m->params_->add_constant("vocab_pad_mask", {n_vocab_padded});
    m->params_->allocate();
    for (const Fill &f : fills) {
        // a padded matrix takes the file's rows first; the buffer starts zeroed
        std::vector<float> v = base.read_weight(f.name);
        ggml_backend_tensor_set(f.t, v.data(), 0, v.size() * sizeof(float));
    }
    if (lens) {
        // the donor's rows (padding rows stay zero); the projection ~ N(0, 1/d_donor)
        // keeps the product at the donor embedding's scale
        ggml_backend_tensor_set(m->w_.lens_embd, donor.data(), 0, donor.size() * sizeof(float));
        std::vector<float> p((size_t)(d_donor * c.n_embd));
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt((float)d_donor));
        for (float &x : p) x = d(rng);
        ggml_backend_tensor_set(m->w_.lens_proj, p.data(), 0, p.size() * sizeof(float));
    }
    if (ggml_tensor *mask = m->w_.vocab_pad_mask) {
        std::vector<float> v(n_vocab_padded, 0.0f);
        std::fill(v.begin() + c.n_vocab, v.end(), -1e30f);
        ggml_backend_tensor_set(mask, v.data(), 0, v.size() * sizeof(float));
    }
    return m;
}

std::unique_ptr<TrainableModel> TrainableModel::lora(const Model &base, const LoraOptions &o) {
    const Config &c = base.config();
    check_trainable(c);
    if (o.rank < 1) fail("--lora-rank: expected at least 1, found {}", o.rank);
    std::unique_ptr<TrainableModel> m(new TrainableModel(base, Mode::Lora));
    m->lora_ = o;
    const Weights &w = base.weights();
    if (w.layers.empty()) fail("{}: the model has no layers to adapt", base.path());
    for (const LayerWeights &l : w.layers) {
        if (l.wqkv && !c.fused_qkv) {
            fail("internal: LoRA needs the base loaded without Q|K|V fusion (LoadOptions::fuse = false)");
        }
    }
    // Past the smaller side of a matrix (of a head's rows, per head) a rank
    // adds parameters, not directions: the bound is the smallest target's.
    struct Bound {
        int64_t rank, n_in, rows;
        Proj p;
    };
    std::optional<Bound> bound;
    for (Proj p : o.targets) {
        const auto [n_in, n_out] = proj_shape(c, w.layers[0], p);
        if (!n_in) fail("--lora-targets: {} has no '{}' projection", c.arch, graph::kProjNames[(int)p]);
        const int64_t rows = p == Proj::Q && o.per_head ? c.head_dim_k : n_out;
        if (!bound || std::min(n_in, rows) < bound->rank) bound = Bound{std::min(n_in, rows), n_in, rows, p};
    }
    if (bound && o.rank > bound->rank) {
        fail("--lora-rank {}: expected at most {}, the smaller side of the '{}' projection ({} x {}{})", o.rank, bound->rank,
             graph::kProjNames[(int)bound->p], bound->n_in, bound->rows, bound->p == Proj::Q && o.per_head ? " per head" : "");
    }
    m->params_ = std::make_unique<ParamSet>(2 * o.targets.size() * c.n_layer);
    struct Init {
        ggml_tensor *t;
        float bound;  // > 0: uniform(-bound, bound); < 0: normal(0, -bound); 0: zeros
    };
    std::vector<Init> inits;
    for (int il = 0; il < c.n_layer; ++il) {
        ggml_backend_dev_t device = base.split().device_of(il, false);
        for (Proj p : o.targets) {
            const auto [n_in, n_out] = proj_shape(c, w.layers[il], p);
            graph::LoraTerm term;
            term.scale = o.alpha / (float)o.rank;
            if (p == Proj::Q && o.per_head) {
                // one A_h [n_in, r] and B_h [r, head_dim] per head; A ~ N(0, 0.01^2)
                term.per_head = true;
                term.a = m->params_->add(lora_name(il, p, "lora_a"), {n_in, o.rank * c.n_head}, true, "lora", device).value;
                term.b = m->params_->add(lora_name(il, p, "lora_b"), {o.rank, c.head_dim_k, c.n_head}, true, "lora", device).value;
                inits.push_back({term.a, -0.01f});
            } else {
                // PEFT's default: A ~ kaiming-uniform (bound 1/sqrt(n_in)), B = 0
                term.a = m->params_->add(lora_name(il, p, "lora_a"), {n_in, o.rank}, true, "lora", device).value;
                term.b = m->params_->add(lora_name(il, p, "lora_b"), {o.rank, n_out}, true, "lora", device).value;
                inits.push_back({term.a, 1.0f / std::sqrt((float)n_in)});
            }
            m->adapters_.add(il, p, term);
        }
    }
    m->params_->allocate();
    std::mt19937_64 rng(o.seed);
    for (const Init &i : inits) {
        std::vector<float> v(ggml_nelements(i.t));
        if (i.bound > 0) {
            std::uniform_real_distribution<float> d(-i.bound, i.bound);
            for (float &x : v) x = d(rng);
        } else {
            std::normal_distribution<float> d(0.0f, -i.bound);
            for (float &x : v) x = d(rng);
        }
        ggml_backend_tensor_set(i.t, v.data(), 0, v.size() * sizeof(float));
    }
    return m;
}

std::unique_ptr<TrainableModel> TrainableModel::frozen(const Model &base) {
    check_trainable(base.config());
    std::unique_ptr<TrainableModel> m(new TrainableModel(base, Mode::Lora));
    m->params_ = std::make_unique<ParamSet>(1);
    m->params_->allocate();
    return m;
}

namespace {

std::array<int64_t, 4> ne4(const ggml_tensor *t) { return {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}; }

}  // namespace

// llama.cpp's adapter files hold one standard pair per base tensor, scaled
// by alpha / rank. Per-head terms and the Q, K, V terms of a fused attn_qkv
// matrix become one pair each: A stacks the terms' A rows, B is block-diagonal
// (each term's B in its own rank columns and output rows), and each block
// carries its term's scale over the file's: (alpha / r_term) / (alpha / rank).
std::vector<TrainableModel::ExportPair> TrainableModel::export_pairs() const {
    const Config &c = config();
    std::vector<ExportPair> out;
    for (int il = 0; il < (int)adapters_.layers.size(); ++il) {
        struct Block {
            std::vector<float> a, b;  // A [n_in, r]; B [r, n_out]
            int64_t n_in, r, n_out, out_at;
            float scale;
        };
        std::map<std::string, std::pair<int64_t, std::vector<Block>>> by_target;  // -> (n_out, blocks)
        for (int pi = 0; pi < graph::kProjCount; ++pi) {
            const Proj p = (Proj)pi;
            const bool fused = c.fused_qkv && (p == Proj::Q || p == Proj::K || p == Proj::V);
            const std::string target =
                fused ? fmt::format("blk.{}.attn_qkv.weight", il) : fmt::format("blk.{}.{}.weight", il, graph::kProjTensors[pi]);
            const int64_t out_at = !fused || p == Proj::Q ? 0 : p == Proj::K ? c.n_embd_q() : c.n_embd_q() + c.n_embd_k_gqa();
            const int64_t target_out = fused ? c.n_embd_q() + c.n_embd_k_gqa() + c.n_embd_v_gqa() : 0;
            for (const graph::LoraTerm &term : adapters_.layers[il][pi]) {
                Block blk;
                blk.a = read_f32(term.a);
                blk.n_in = term.a->ne[0];
                blk.r = term.a->ne[1];
                blk.scale = term.scale;
                blk.out_at = out_at;
                const std::vector<float> b = read_f32(term.b);
                if (!term.per_head) {
                    blk.n_out = term.b->ne[1];
                    blk.b = b;
                } else {
                    // B_h [r, head_dim] per head -> block-diagonal [r * n_head, head_dim * n_head]
                    const int64_t r = term.b->ne[0], hd = term.b->ne[1], nh = term.b->ne[2];
                    blk.n_out = hd * nh;
                    blk.b.assign((size_t)(r * nh * hd * nh), 0.0f);
                    for (int64_t h = 0; h < nh; ++h)
                        for (int64_t d = 0; d < hd; ++d)
                            for (int64_t i = 0; i < r; ++i)
                                blk.b[(size_t)((h * hd + d) * (r * nh) + h * r + i)] = b[(size_t)((h * hd + d) * r + i)];
                }
                auto &[n_out, blocks] = by_target[target];
                n_out = std::max(n_out, std::max(target_out, blk.out_at + blk.n_out));
                blocks.push_back(std::move(blk));
            }
        }
        for (auto &[target, entry] : by_target) {
            auto &[n_out, blocks] = entry;
            ExportPair e;
            e.target = target;
            e.n_in = blocks.front().n_in;
            e.n_out = n_out;
            e.rank = 0;
            for (const Block &blk : blocks) e.rank += blk.r;
            e.b.assign((size_t)(e.rank * n_out), 0.0f);
            const float file_scale = lora_.alpha / (float)e.rank;
            int64_t r_at = 0;
            for (const Block &blk : blocks) {
                e.a.insert(e.a.end(), blk.a.begin(), blk.a.end());
                const float k = blk.scale / file_scale;
                for (int64_t o = 0; o < blk.n_out; ++o)
                    for (int64_t i = 0; i < blk.r; ++i)
                        e.b[(size_t)((blk.out_at + o) * e.rank + r_at + i)] = blk.b[(size_t)(o * blk.r + i)] * k;
                r_at += blk.r;
            }
            out.push_back(std::move(e));
        }
    }
    return out;
}

std::vector<float> TrainableModel::lens_embedding() const {
    // row v of the result: the projection applied to the donor's row v
    const int64_t dd = w_.lens_proj->ne[0], d = w_.lens_proj->ne[1], V = config().n_vocab;
    const std::vector<float> p = read_f32(w_.lens_proj), e = read_f32(w_.lens_embd);
    std::vector<float> out((size_t)(V * d));
    for (int64_t v = 0; v < V; ++v)
        for (int64_t j = 0; j < d; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < dd; ++k) acc += (double)p[(size_t)(j * dd + k)] * e[(size_t)(v * dd + k)];
            out[(size_t)(v * d + j)] = (float)acc;
        }
    return out;
}

void TrainableModel::write(const std::string &path) const {
    const gguf::File &f = base_.file();
    gguf::Writer w(f.alignment());
    std::vector<std::vector<float>> data;  // kept alive until write()
    data.reserve(params_->params().size() + 4);
    if (mode_ == Mode::Full) {
        // per-head checkpoints come out fused; the file type is now all-F32
        w.copy_metadata(f, [](const std::string &k) { return k == "toy.ggml_native" || k == "general.file_type"; });
        w.set("general.file_type", gguf::Value::u32(0));
        std::vector<TensorSpec> specs = tensor_specs(config());
        for (const TensorSpec &s : specs) {
            const ggml_tensor *t = nullptr;
            if (const Param *p = params_->find(s.name)) t = p->value;
            if (!t && s.role == TensorRole::RopeFactors) t = w_.rope_freqs;
            if (s.name == "token_embd.weight" && w_.lens_proj) {
                data.push_back(lens_embedding());
                w.add_tensor(s.name, GGML_TYPE_F32, {config().n_embd, config().n_vocab, 1, 1}, 2, data.back().data());
                continue;
            }
            if (!t) continue;
            data.push_back(read_f32(t));
            std::array<int64_t, 4> ne = ne4(t);
            if (is_vocab_matrix(s.name)) {  // without the padding rows
                ne[1] = config().n_vocab;
                data.back().resize((size_t)(ne[0] * ne[1]));
            }
            w.add_tensor(s.name, GGML_TYPE_F32, ne, ggml_n_dims(t), data.back().data());
        }
    } else {
        w.set("general.architecture", gguf::Value::str(config().arch));
        w.set("general.type", gguf::Value::str("adapter"));
        w.set("adapter.type", gguf::Value::str("lora"));
        w.set("adapter.lora.alpha", gguf::Value::f32(lora_.alpha));
        for (ExportPair &e : export_pairs()) {
            data.push_back(std::move(e.a));
            w.add_tensor(e.target + ".lora_a", GGML_TYPE_F32, {e.n_in, e.rank, 1, 1}, 2, data.back().data());
            data.push_back(std::move(e.b));
            w.add_tensor(e.target + ".lora_b", GGML_TYPE_F32, {e.rank, e.n_out, 1, 1}, 2, data.back().data());
        }
    }
    w.write(path);
}

}  // namespace toy::train
