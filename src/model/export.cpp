#include "model/export.h"

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "quant/quantize.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

namespace toy {
namespace {

std::vector<float> tensor_f32(const ggml_tensor *t) {
    std::vector<uint8_t> raw(ggml_nbytes(t));
    ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
    return gguf::to_f32(raw.data(), t->type, ggml_nelements(t));
}

// w [n_out rows of n_in] += scale * B A, with A [r rows of n_in] and B [n_out rows of r].
void merge(std::vector<float> &w, const LoraAdapter::FilePair &p) {
    const std::vector<float> a = tensor_f32(p.a), b = tensor_f32(p.b);
    const int64_t n_in = p.a->ne[0], r = p.a->ne[1], n_out = p.b->ne[1];
    for (int64_t o = 0; o < n_out; ++o) {
        float *row = w.data() + o * n_in;
        for (int64_t i = 0; i < r; ++i) {
            const float k = p.scale * b[(size_t)(o * r + i)];
            const float *ai = a.data() + i * n_in;
            for (int64_t j = 0; j < n_in; ++j) row[j] += k * ai[j];
        }
    }
}

// The embedding E [n_vocab rows of n_embd] += scale * (B A)^T with A [n_vocab rows of r], B [n_embd rows of r].
void merge_embedding(std::vector<float> &e, const LoraAdapter::FilePair &p) {
    const std::vector<float> a = tensor_f32(p.a), b = tensor_f32(p.b);
    const int64_t r = p.a->ne[0], n_vocab = p.a->ne[1], n_embd = p.b->ne[1];
    for (int64_t t = 0; t < n_vocab; ++t)
        for (int64_t j = 0; j < n_embd; ++j) {
            float d = 0;
            for (int64_t i = 0; i < r; ++i) d += b[(size_t)(j * r + i)] * a[(size_t)(t * r + i)];
            e[(size_t)(t * n_embd + j)] += p.scale * d;
        }
}

std::vector<uint8_t> quantize(const std::vector<float> &v, ggml_type type, int64_t n_per_row) {
    const int64_t n_rows = (int64_t)v.size() / n_per_row;
    std::vector<uint8_t> out(ggml_row_size(type, n_per_row) * (size_t)n_rows);
    if (type == GGML_TYPE_F32) {
        std::memcpy(out.data(), v.data(), out.size());
    } else {
        ggml_quantize_init(type);
        ggml_quantize_chunk(type, v.data(), out.data(), 0, n_rows, n_per_row, nullptr);
    }
    return out;
}

// Heads of blk.N.attn_{q,k,v}.weight (0 for any other tensor).
int heads_of(const Config &c, const std::string &name) {
    if (!name.starts_with("blk.")) return 0;
    if (name.ends_with(".attn_q.weight")) return (int)c.n_head;
    if (name.ends_with(".attn_k.weight") || name.ends_with(".attn_v.weight")) return (int)c.n_head_kv;
    return 0;
}

}  // namespace

ExportResult export_model(const Model &base, const LoraSet &adapters, const std::string &path, const ExportOptions &o) {
    const Config &c = base.config();
    std::map<std::string, std::vector<const LoraAdapter::FilePair *>> deltas;
    for (const auto &ad : adapters.adapters)
        for (const auto &p : ad->file_pairs()) deltas[p.target].push_back(&p);
    if (o.per_head_layout && c.fused_qkv) {
        fail("--per-head-layout: {} stores Q, K and V in one attn_qkv matrix; the per-head layout needs them apart", c.arch);
    }
    ExportResult res;
    const bool tied = base.weights().tied_output;
    res.untied = tied && (deltas.count("output.weight") || deltas.count("token_embd.weight"));

    gguf::Writer w(base.file().alignment());
    w.copy_metadata(base.file(), [](const std::string &k) {
        return k == "toy.ggml_native" || k == "general.file_type" || k == "general.quantization_version";
    });
    if (o.type) {
        w.set("general.file_type", gguf::Value::u32((uint32_t)init_file_type(*o.type)));
    } else if (auto ft = base.file().opt_int("general.file_type")) {
        w.set("general.file_type", gguf::Value::u32((uint32_t)*ft));
    }
    bool quantized = false;
    // the tensors written, then their types: the mix looks at all of them at once
    std::vector<TensorSpec> written;
    std::vector<quant::TensorDesc> descs;
    for (const TensorSpec &s : tensor_specs(c)) {
        const bool is_output = s.name == "output.weight";
        if (!base.has_weight(s.name) || (is_output && tied && !res.untied)) continue;
        written.push_back(s);
        descs.push_back({s.name, base.file_type(s.name), base.weight_shape(s.name)});
    }
    std::vector<quant::TypeChoice> types;
    if (o.type) types = storage_types(*o.type, descs, c);
    for (size_t k = 0; k < written.size(); ++k) {
        const TensorSpec &s = written[k];
        const auto ne = descs[k].ne;
        const ggml_type have = descs[k].type;
        ggml_type type = o.type ? types[k].type : have;
        if (s.role != TensorRole::Embedding && s.role != TensorRole::Linear && s.role != TensorRole::Experts) {
            type = have == GGML_TYPE_F16 ? GGML_TYPE_F16 : GGML_TYPE_F32;  // vectors as they were
        }
        quantized |= ggml_is_quantized(type);
        const auto it = deltas.find(s.name);
        const bool merged = it != deltas.end();
        res.n_merged += merged;
        ++res.n_tensors;
        const std::string name = s.name;
        auto convert = [&base, name, type, ne, merged, it]() {
            std::vector<uint8_t> bytes;
            ggml_type held;
            if (!merged && (bytes = base.read_weight_bytes(name, &held), held == type)) return bytes;  // as they are
            std::vector<float> v = base.read_weight(name);
            if (merged) {
                for (const auto *p : it->second) {
                    if (name == "token_embd.weight") merge_embedding(v, *p);
                    else merge(v, *p);
                }
            }
            std::vector<uint8_t> q = quantize(v, type, ne[0]);
            const int64_t n_rows = (int64_t)v.size() / ne[0];
            if (!quant::reads_back_finite(type, q.data(), (int64_t)v.size())) quant::fail_not_held(type, v.data(), 0, n_rows, ne[0]);
            return q;
        };
        const int n_heads = o.per_head_layout ? heads_of(c, name) : 0;
        if (n_heads == 0) {
            w.add_tensor(name, type, ne, (int)s.ne.size(), [convert, name](uint8_t *out, uint64_t nbytes) {
                const std::vector<uint8_t> bytes = convert();
                if (bytes.size() != nbytes) fail("export: tensor '{}' has {} bytes where {} were planned", name, bytes.size(), nbytes);
                std::memcpy(out, bytes.data(), nbytes);
            });
            continue;
        }
        // one tensor per head, [n_embd, head_dim] each: the matrix is
        // converted once, when its first head is written, and dropped after the last
        auto held = std::make_shared<std::vector<uint8_t>>();
        const int64_t head_rows = ne[1] / n_heads;
        const size_t head_bytes = ggml_row_size(type, ne[0]) * (size_t)head_rows;
        const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
        for (int h = 0; h < n_heads; ++h) {
            w.add_tensor(fmt::format("{}.head_{}.weight", stem, h), type, {ne[0], head_rows, 1, 1}, 2,
                         [convert, held, h, n_heads, head_bytes](uint8_t *out, uint64_t nbytes) {
                             if (h == 0) *held = convert();
                             if (nbytes != head_bytes || held->size() != head_bytes * n_heads) fail("export: head sizes do not add up");
                             std::memcpy(out, held->data() + head_bytes * h, nbytes);
                             if (h == n_heads - 1) std::vector<uint8_t>().swap(*held);
                         });
        }
    }
    if (quantized) w.set("general.quantization_version", gguf::Value::u32(GGML_QNT_VERSION));
    if (o.per_head_layout) w.set("toy.ggml_native", gguf::Value::boolean(true));
    res.bytes = w.write(path);
    return res;
}

}  // namespace toy
