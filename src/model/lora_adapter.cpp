#include "model/lora_adapter.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"

#include <ggml-alloc.h>
#include <ggml-cpu.h>

#include <charconv>
#include <cstring>
#include <map>

namespace toy {
namespace {

using graph::Proj;

constexpr std::string_view kA = ".lora_a", kB = ".lora_b";

// "blk.12.attn_q.weight" -> (12, "attn_q"); false for any other name.
bool parse_block_name(const std::string &name, int *layer, std::string *what) {
    if (!name.starts_with("blk.") || !name.ends_with(".weight")) return false;
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return false;
    int il = -1;
    const auto [end, ec] = std::from_chars(name.data() + 4, name.data() + dot, il);
    if (ec != std::errc() || end != name.data() + dot || il < 0) return false;
    *layer = il;
    *what = name.substr(dot + 1, name.size() - dot - 1 - std::string_view(".weight").size());
    return true;
}

}  // namespace

LoraAdapter::~LoraAdapter() {
    for (auto *b : bufs_) ggml_backend_buffer_free(b);
    for (auto &[dev, ctx] : ctxs_) ggml_free(ctx);
}

size_t LoraAdapter::bytes() const {
    size_t n = 0;
    for (auto *b : bufs_) n += ggml_backend_buffer_get_size(b);
    return n;
}

std::unique_ptr<LoraAdapter> LoraAdapter::load(const std::string &path, const Model &base, float scale) {
    auto f = gguf::File::open(path);
    const Config &c = base.config();
    auto kv = [&](const char *key) { return f->opt_string(key).value_or(""); };
    if (kv("general.type") != "adapter") {
        fail("{}: not a LoRA adapter: general.type is '{}', expected 'adapter'", path, kv("general.type"));
    }
    if (kv("adapter.type") != "lora") fail("{}: adapter.type is '{}', expected 'lora'", path, kv("adapter.type"));
    if (kv("general.architecture") != c.arch) {
        fail("{}: the adapter is for architecture '{}', the model {} is '{}'", path, kv("general.architecture"), base.path(),
             c.arch);
    }
    std::unique_ptr<LoraAdapter> ad(new LoraAdapter());
    ad->path_ = path;
    ad->alpha_ = (float)f->opt_float("adapter.lora.alpha").value_or(0.0);
    ad->scale_ = scale;

    // pair the tensors by the base tensor they adapt
    std::map<std::string, std::pair<const gguf::TensorInfo *, const gguf::TensorInfo *>> pairs;
    for (const auto &t : f->tensors()) {
        if (t.name.ends_with(kA)) {
            pairs[t.name.substr(0, t.name.size() - kA.size())].first = &t;
        } else if (t.name.ends_with(kB)) {
            pairs[t.name.substr(0, t.name.size() - kB.size())].second = &t;
        } else {
            fail("{}: tensor '{}' is neither a .lora_a nor a .lora_b", path, t.name);
        }
    }
    if (pairs.empty()) fail("{}: the adapter has no tensors", path);

    // a context per device: a pair lives where the weight it adapts runs
    // (a split model's block on its device), so its products need no trip
    auto ctx_for = [&](ggml_backend_dev_t dev) {
        for (auto &[d, ctx] : ad->ctxs_)
            if (d == dev) return ctx;
        ggml_init_params ip{ggml_tensor_overhead() * (4 * pairs.size() + 4), nullptr, true};
        ad->ctxs_.emplace_back(dev, ggml_init(ip));
        return ad->ctxs_.back().second;
    };
    const LayerSplit &split = base.split();
    struct Copy {
        ggml_tensor *t;
        const gguf::TensorInfo *info;
    };
    std::vector<Copy> copies;
    auto make = [&](const gguf::TensorInfo &info, ggml_context *ctx) {
        if (info.n_dims > 2) fail("{}: tensor '{}' has shape {}, expected a matrix", path, info.name, info.shape_string());
        const auto *cpu = ggml_get_type_traits_cpu(info.type);
        if (info.type != GGML_TYPE_F32 && !(cpu && cpu->vec_dot)) {
            fail("{}: tensor '{}' has type {}, which toy cannot multiply", path, info.name, ggml_type_name(info.type));
        }
        ggml_tensor *t = ggml_new_tensor_2d(ctx, info.type, info.ne[0], info.ne[1]);
        ggml_set_name(t, info.name.c_str());
        copies.push_back({t, &info});
        return t;
    };
    for (const auto &[target, ab] : pairs) {
        const auto [ia, ib] = ab;
        if (!ia || !ib) fail("{}: '{}' has {} but no {}", path, target, ia ? "lora_a" : "lora_b", ia ? "lora_b" : "lora_a");
        if (!base.has_weight(target)) {
            fail("{}: the adapter changes '{}', which the model {} does not have (an adapter for another model?)", path,
                 target, base.path());
        }
        const auto ne = base.weight_shape(target);
        Pair p;
        if (target == "token_embd.weight") {
            p.where = Where::Embedding;
            if (ib->ne[1] != ne[0] || ia->ne[1] != ne[1] || ia->ne[0] != ib->ne[0]) {
                fail("{}: token_embd.weight.lora_a {} and lora_b {} do not fit the embedding {} (expected [r, {}] and "
                     "[r, {}])",
                     path, ia->shape_string(), ib->shape_string(), fmt::format("[{}, {}]", ne[0], ne[1]), ne[1], ne[0]);
            }
        } else {
            if (ia->ne[0] != ne[0] || ib->ne[1] != ne[1] || ia->ne[1] != ib->ne[0]) {
                fail("{}: {}.lora_a {} and lora_b {} do not fit the model's [{}, {}] (expected [{}, r] and [r, {}])", path,
                     target, ia->shape_string(), ib->shape_string(), ne[0], ne[1], ne[0], ne[1]);
            }
            std::string what;
            if (target == "output.weight") {
                p.where = Where::Output;
            } else if (parse_block_name(target, &p.layer, &what) && p.layer < c.n_layer) {
                int found = -1;
                for (int i = 0; i < graph::kProjCount; ++i)
                    if (what == graph::kProjTensors[i]) found = i;
                if (found < 0 && what != "attn_qkv") {
                    fail("{}: the adapter changes '{}': toy applies adapters to attention and feed-forward projections, "
                         "output and token_embd",
                         path, target);
                }
                p.proj = found >= 0 ? (Proj)found : Proj::Q;
            } else {
                fail("{}: the adapter changes '{}': toy applies adapters to attention and feed-forward projections, "
                     "output and token_embd",
                     path, target);
            }
        }
        const int64_t rank = ib->ne[0];
        p.scale = ad->alpha_ != 0.0f ? scale * ad->alpha_ / (float)rank : scale;
        ggml_backend_dev_t dev = p.where == Where::Block    ? split.layer[(size_t)p.layer]
                                 : p.where == Where::Output ? split.output
                                                            : nullptr;  // the embedding's lookup is the CPU's
        ggml_context *ctx = ctx_for(dev);
        p.a = make(*ia, ctx);
        p.b = make(*ib, ctx);
        ad->file_pairs_.push_back({target, p.a, p.b, p.scale});
        std::string what;
        if (p.where == Where::Block && parse_block_name(target, &p.layer, &what) && what == "attn_qkv") {
            // B's rows are Q's, then K's, then V's outputs: one term per slice
            const int64_t rows[3] = {c.n_embd_q(), c.n_embd_k_gqa(), c.n_embd_v_gqa()};
            int64_t at = 0;
            for (int part = 0; part < 3; ++part) {
                Pair q = p;
                q.proj = part == 0 ? Proj::Q : part == 1 ? Proj::K : Proj::V;
                q.b = ggml_view_2d(ctx, p.b, p.b->ne[0], rows[part], ggml_row_size(p.b->type, p.b->ne[0]),
                                   ggml_row_size(p.b->type, p.b->ne[0]) * at);
                at += rows[part];
                ad->pairs_.push_back(q);
            }
        } else {
            ad->pairs_.push_back(p);
        }
    }
    for (auto &[dev, ctx] : ad->ctxs_) {
        ggml_backend_buffer_t buf =
            ggml_backend_alloc_ctx_tensors_from_buft(ctx, dev ? ggml_backend_dev_buffer_type(dev) : ggml_backend_cpu_buffer_type());
        if (!buf) fail("{}: could not allocate memory for the adapter on {}", path, dev ? ggml_backend_dev_name(dev) : "the CPU");
        ad->bufs_.push_back(buf);
    }
    for (const Copy &cp : copies) ggml_backend_tensor_set(cp.t, f->tensor_data(*cp.info), 0, cp.info->nbytes);
    return ad;
}

void LoraAdapter::add_to(graph::Adapters &out) const {
    for (const Pair &p : pairs_) {
        graph::LoraTerm t;
        t.a = p.a;
        t.b = p.b;
        t.scale = p.scale;
        switch (p.where) {
        case Where::Block: out.add(p.layer, p.proj, t); break;
        case Where::Output: out.output.push_back(t); break;
        case Where::Embedding: out.tok_embd.push_back(t); break;
        }
    }
}

LoraSet LoraSet::load(const std::vector<std::pair<std::string, float>> &files, const Model &base) {
    LoraSet s;
    for (const auto &[path, scale] : files) {
        s.adapters.push_back(LoraAdapter::load(path, base, scale));
        s.adapters.back()->add_to(s.terms);
    }
    return s;
}

}  // namespace toy
