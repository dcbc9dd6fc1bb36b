#include "train/trainable.h"

#include "core/error.h"
#include "gguf/gguf_writer.h"

#include <fmt/format.h>

#include <cmath>
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

std::unique_ptr<TrainableModel> TrainableModel::full(const Model &base) {
    const Config &c = base.config();
    check_trainable(c);
    std::unique_ptr<TrainableModel> m(new TrainableModel(base, Mode::Full));
    std::vector<TensorSpec> specs = tensor_specs(c, &m->w_);
    m->params_ = std::make_unique<ParamSet>(specs.size());
    struct Fill {
        ggml_tensor *t;
        std::string name;
    };
    std::vector<Fill> fills;
    for (const TensorSpec &s : specs) {
        if (!base.has_weight(s.name) || (s.name == "output.weight" && base.weights().tied_output)) continue;
        const ggml_type type = base.file_type(s.name);
        if (type != GGML_TYPE_F32 && type != GGML_TYPE_F16 && type != GGML_TYPE_BF16) {
            fail("{}: tensor '{}' is {}: a quantized model cannot be fully fine-tuned (train a LoRA on it with "
                 "--lora-rank, or start from an F32/F16/BF16 model)",
                 base.path(), s.name, ggml_type_name(type));
        }
        ggml_tensor *t;
        if (s.role == TensorRole::RopeFactors) {
            t = m->params_->add_constant(s.name, s.ne);
        } else {
            const bool decay = s.role == TensorRole::Linear || s.role == TensorRole::Experts || s.role == TensorRole::Router;
            t = m->params_->add(s.name, s.ne, decay, group_of(s.name)).value;
        }
        *s.slot = t;
        fills.push_back({t, s.name});
    }
    m->w_.tied_output = base.weights().tied_output;
    if (!m->w_.output) m->w_.output = m->w_.tok_embd;
    m->params_->allocate(ggml_backend_cpu_buffer_type());
    for (const Fill &f : fills) {
        std::vector<float> v = base.read_weight(f.name);
        ggml_backend_tensor_set(f.t, v.data(), 0, v.size() * sizeof(float));
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
    for (Proj p : o.targets) {
        if (!proj_shape(c, w.layers[0], p).first) {
            fail("--lora-targets: {} has no '{}' projection", c.arch, graph::kProjNames[(int)p]);
        }
    }
    m->params_ = std::make_unique<ParamSet>(2 * o.targets.size() * c.n_layer);
    struct Init {
        ggml_tensor *t;
        float bound;  // > 0: uniform(-bound, bound); < 0: normal(0, -bound); 0: zeros
    };
    std::vector<Init> inits;
    for (int il = 0; il < c.n_layer; ++il) {
        for (Proj p : o.targets) {
            const auto [n_in, n_out] = proj_shape(c, w.layers[il], p);
            graph::LoraTerm term;
            term.scale = o.alpha / (float)o.rank;
            if (p == Proj::Q && o.per_head) {
                // one A_h [n_in, r] and B_h [r, head_dim] per head; A ~ N(0, 0.01^2)
                term.per_head = true;
                term.a = m->params_->add(lora_name(il, p, "lora_a"), {n_in, o.rank * c.n_head}, true, "lora").value;
                term.b = m->params_->add(lora_name(il, p, "lora_b"), {o.rank, c.head_dim_k, c.n_head}, true, "lora").value;
                inits.push_back({term.a, -0.01f});
            } else {
                // PEFT's default: A ~ kaiming-uniform (bound 1/sqrt(n_in)), B = 0
                term.a = m->params_->add(lora_name(il, p, "lora_a"), {n_in, o.rank}, true, "lora").value;
                term.b = m->params_->add(lora_name(il, p, "lora_b"), {o.rank, n_out}, true, "lora").value;
                inits.push_back({term.a, 1.0f / std::sqrt((float)n_in)});
            }
            m->adapters_.add(il, p, term);
        }
    }
    m->params_->allocate(ggml_backend_cpu_buffer_type());
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
    m->params_->allocate(ggml_backend_cpu_buffer_type());
    return m;
}

namespace {

std::array<int64_t, 4> ne4(const ggml_tensor *t) { return {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}; }

}  // namespace

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
            if (!t) continue;
            data.push_back(read_f32(t));
            w.add_tensor(s.name, GGML_TYPE_F32, ne4(t), ggml_n_dims(t), data.back().data());
        }
    } else {
        w.set("general.architecture", gguf::Value::str(config().arch));
        w.set("general.type", gguf::Value::str("adapter"));
        w.set("adapter.type", gguf::Value::str("lora"));
        w.set("adapter.lora.alpha", gguf::Value::f32(lora_.alpha));
        for (int il = 0; il < (int)adapters_.layers.size(); ++il) {
            for (int pi = 0; pi < graph::kProjCount; ++pi) {
                for (const graph::LoraTerm &term : adapters_.layers[il][pi]) {
                    const Proj p = (Proj)pi;
                    data.push_back(read_f32(term.a));
                    w.add_tensor(lora_name(il, p, "lora_a"), GGML_TYPE_F32, ne4(term.a), 2, data.back().data());
                    if (!term.per_head) {
                        data.push_back(read_f32(term.b));
                        w.add_tensor(lora_name(il, p, "lora_b"), GGML_TYPE_F32, ne4(term.b), 2, data.back().data());
                        continue;
                    }
                    // block-diagonal B [r * n_head, n_out]: head h's rows h*r.. of A
                    // feed its head_dim outputs. llama.cpp scales by alpha / rank, and
                    // the rank is now r * n_head: B carries the factor n_head back.
                    const int64_t r = term.b->ne[0], hd = term.b->ne[1], nh = term.b->ne[2];
                    const std::vector<float> b = read_f32(term.b);
                    std::vector<float> full((size_t)(r * nh) * (hd * nh), 0.0f);
                    for (int64_t h = 0; h < nh; ++h)
                        for (int64_t d = 0; d < hd; ++d)
                            for (int64_t i = 0; i < r; ++i)
                                full[(size_t)(h * hd + d) * (r * nh) + h * r + i] = b[(size_t)(h * hd + d) * r + i] * (float)nh;
                    data.push_back(std::move(full));
                    w.add_tensor(lora_name(il, p, "lora_b"), GGML_TYPE_F32, {r * nh, hd * nh, 1, 1}, 2, data.back().data());
                }
            }
        }
    }
    w.write(path);
}

}  // namespace toy::train
