#include "convert/hf_model.h"

#include "convert/hf_tokenizer.h"
#include "convert/json_file.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <optional>
#include <regex>
#include <set>
#include <span>

namespace toy::convert {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ------------------------------------------------------------ architectures

enum class Layout { Llama, Gpt2 };

struct ArchRow {
    std::vector<const char *> hf_names;
    const char *arch;
    Layout layout = Layout::Llama;
    // llama's rope rotates adjacent pairs; Hugging Face's checkpoints rotate
    // the two halves of each head, so the rows of Q and K are reordered.
    bool permute_qk = false;
    // Gemma's RMSNorm multiplies by (1 + w): GGUF stores 1 + w.
    bool norm_plus_one = false;
};

const ArchRow kArchs[] = {
    {{"LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"}, "llama", Layout::Llama, true},
    {{"GraniteForCausalLM"}, "granite", Layout::Llama, true},
    {{"Qwen2ForCausalLM"}, "qwen2"},
    {{"Qwen3ForCausalLM"}, "qwen3"},
    {{"Qwen3MoeForCausalLM"}, "qwen3moe"},
    {{"OlmoeForCausalLM"}, "olmoe"},
    {{"Gemma2ForCausalLM"}, "gemma2", Layout::Llama, false, true},
    {{"GPT2LMHeadModel"}, "gpt2", Layout::Gpt2},
};

// ------------------------------------------------------------ config.json

class HParams {
public:
    HParams(json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {}

    const json *find(std::initializer_list<const char *> keys) const {
        for (const char *k : keys) {
            if (j_.contains(k) && !j_[k].is_null()) return &j_[k];
        }
        return nullptr;
    }
    std::optional<int64_t> opt_int(std::initializer_list<const char *> keys) const {
        const json *v = find(keys);
        if (!v) return std::nullopt;
        if (!v->is_number_integer()) fail("{}: \"{}\": expected an integer, found {}", path_, *keys.begin(), v->dump());
        return v->get<int64_t>();
    }
    std::optional<double> opt_float(std::initializer_list<const char *> keys) const {
        const json *v = find(keys);
        if (!v) return std::nullopt;
        if (!v->is_number()) fail("{}: \"{}\": expected a number, found {}", path_, *keys.begin(), v->dump());
        return v->get<double>();
    }
    // A size: an integer in 1 .. 2^32-1 (what a GGUF uint32 holds).
    std::optional<int64_t> opt_size(std::initializer_list<const char *> keys) const {
        auto v = opt_int(keys);
        if (v && (*v <= 0 || *v > (int64_t)UINT32_MAX)) fail("{}: \"{}\" = {}, expected a positive size", path_, *keys.begin(), *v);
        return v;
    }
    int64_t get_int(std::initializer_list<const char *> keys) const {
        auto v = opt_size(keys);
        if (!v) fail("{}: \"{}\" is missing", path_, *keys.begin());
        return *v;
    }
    bool get_bool(const char *key, bool def) const {
        const json *v = find({key});
        return v && v->is_boolean() ? v->get<bool>() : def;
    }
    const json &raw() const { return j_; }
    const std::string &path() const { return path_; }

private:
    json j_;
    std::string path_;
};

// ------------------------------------------------------------ tensors

enum class Edit { None, PermuteQ, PermuteK, Transpose };

// One checkpoint tensor (or a stack of experts) becoming one GGUF tensor.
struct Source {
    std::vector<const StTensor *> parts;  // several: experts stacked along a new outer dimension
    Edit edit = Edit::None;
    float add = 0.0f;                     // added to every value (Gemma's 1 + w)
    // A 3-D [n, rows, cols] tensor cut along its rows into n_slices, of which
    // this is one (fused gate_up experts: [n_expert, 2 n_ff, n_embd]).
    int slice = 0, n_slices = 1;
};

// A checkpoint tensor name within a layer, and its GGUF name.
struct LayerName {
    const char *hf;
    const char *gguf;
    Edit edit = Edit::None;
};

const LayerName kLlamaLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight", Edit::PermuteQ},
    {"self_attn.q_proj.bias", "attn_q.bias", Edit::PermuteQ},
    {"self_attn.k_proj.weight", "attn_k.weight", Edit::PermuteK},
    {"self_attn.k_proj.bias", "attn_k.bias", Edit::PermuteK},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},  // gemma2: post_attention_norm (below)
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
};

// Experts: per-expert tensors "<prefix>.<e>.<hf>" stacked into one GGUF tensor.
struct ExpertName {
    const char *prefix;
    const char *hf;
    const char *gguf;
};
const ExpertName kExperts[] = {
    {"mlp.experts", "gate_proj.weight", "ffn_gate_exps.weight"},
    {"mlp.experts", "up_proj.weight", "ffn_up_exps.weight"},
    {"mlp.experts", "down_proj.weight", "ffn_down_exps.weight"},
    {"block_sparse_moe.experts", "w1.weight", "ffn_gate_exps.weight"},
    {"block_sparse_moe.experts", "w3.weight", "ffn_up_exps.weight"},
    {"block_sparse_moe.experts", "w2.weight", "ffn_down_exps.weight"},
};

const LayerName kGpt2Layer[] = {
    {"ln_1.weight", "attn_norm.weight"},
    {"ln_1.bias", "attn_norm.bias"},
    {"attn.c_attn.weight", "attn_qkv.weight", Edit::Transpose},  // Conv1D stores [in, out]
    {"attn.c_attn.bias", "attn_qkv.bias"},
    {"attn.c_proj.weight", "attn_output.weight", Edit::Transpose},
    {"attn.c_proj.bias", "attn_output.bias"},
    {"ln_2.weight", "ffn_norm.weight"},
    {"ln_2.bias", "ffn_norm.bias"},
    {"mlp.c_fc.weight", "ffn_up.weight", Edit::Transpose},
    {"mlp.c_fc.bias", "ffn_up.bias"},
    {"mlp.c_proj.weight", "ffn_down.weight", Edit::Transpose},
    {"mlp.c_proj.bias", "ffn_down.bias"},
};

// Checkpoint tensors no GGUF needs (rope tables and attention masks are
// recomputed at run time).
bool ignored(const std::string &name) {
    return name.ends_with(".rotary_emb.inv_freq") || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

// [rows, cols] of a head-major matrix: rows of each head reordered from two
// halves to adjacent pairs: new row 2i + j of a head is old row j * half + i.
std::vector<float> permute_rows(const std::vector<float> &v, int64_t n_rows, int64_t n_cols, int64_t n_head) {
    std::vector<float> out(v.size());
    const int64_t per_head = n_rows / n_head, half = per_head / 2;
    for (int64_t h = 0; h < n_head; ++h)
        for (int64_t i = 0; i < half; ++i)
            for (int64_t j = 0; j < 2; ++j) {
                const int64_t to = h * per_head + 2 * i + j, from = h * per_head + j * half + i;
                std::memcpy(&out[(size_t)(to * n_cols)], &v[(size_t)(from * n_cols)], (size_t)n_cols * sizeof(float));
            }
    return out;
}

// Rows [slice * r, (slice + 1) * r) of every matrix of a [n, n_slices * r, cols] tensor.
std::vector<float> slice_rows(const std::vector<float> &v, const std::vector<int64_t> &shape, int slice, int n_slices) {
    const int64_t n = shape[0], rows = shape[1] / n_slices, cols = shape[2];
    std::vector<float> out;
    out.reserve((size_t)(n * rows * cols));
    for (int64_t m = 0; m < n; ++m) {
        const auto from = v.begin() + (ptrdiff_t)((m * shape[1] + slice * rows) * cols);
        out.insert(out.end(), from, from + (ptrdiff_t)(rows * cols));
    }
    return out;
}

std::vector<float> transpose(const std::vector<float> &v, int64_t n_rows, int64_t n_cols) {
    std::vector<float> out(v.size());
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t c = 0; c < n_cols; ++c) out[(size_t)(c * n_rows + r)] = v[(size_t)(r * n_cols + c)];
    return out;
}

// Llama 3's per-frequency rope factors, in float32 as the reference converter computes them.
std::vector<float> llama3_rope_factors(float base, int64_t n_rot, float factor, float low, float high, float orig_ctx) {
    std::vector<float> f;
    const float low_wavelen = orig_ctx / low, high_wavelen = orig_ctx / high;
    for (int64_t i = 0; i < n_rot; i += 2) {
        const float freq = 1.0f / std::pow(base, (float)i / (float)n_rot);
        const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
        if (wavelen < high_wavelen) {
            f.push_back(1.0f);
        } else if (wavelen > low_wavelen) {
            f.push_back(factor);
        } else {
            const float smooth = (orig_ctx / wavelen - low) / (high - low);
            f.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
        }
    }
    return f;
}

class HfConverter {
public:
    HfConverter(const std::string &dir, Converted &out) : dir_(dir), out_(out) {}

    void run() {
        const fs::path config_path = fs::path(dir_) / "config.json";
        if (!fs::is_directory(dir_)) fail("{}: expected a Hugging Face model directory", dir_);
        if (!fs::exists(config_path)) fail("{}: config.json is missing (expected a Hugging Face model directory)", dir_);
        json cfg = read_json_file(config_path.string());
        if (!cfg.is_object()) fail("{}: expected a JSON object", config_path.string());
        if (cfg.contains("text_config") && cfg["text_config"].is_object()) cfg.update(cfg["text_config"]);
        hp_ = std::make_unique<HParams>(cfg, config_path.string());
        row_ = find_arch();
        st_ = std::shared_ptr<Safetensors>(Safetensors::open_dir(dir_).release());

        n_layer_ = hp_->get_int({"num_hidden_layers", "n_layer", "n_layers"});
        n_head_ = hp_->get_int({"num_attention_heads", "n_head", "n_heads"});
        n_head_kv_ = hp_->opt_size({"num_key_value_heads", "n_kv_heads"}).value_or(n_head_);
        n_embd_ = hp_->get_int({"hidden_size", "n_embd", "dim"});
        if (!hp_->opt_size({"head_dim"}) && n_embd_ % n_head_ != 0) {
            fail("{}: hidden size {} is not a multiple of {} attention heads (and no head_dim is given)", hp_->path(), n_embd_, n_head_);
        }
        if (n_head_ % n_head_kv_ != 0) {
            fail("{}: {} attention heads are not a multiple of {} key-value heads", hp_->path(), n_head_, n_head_kv_);
        }
        write_metadata();
        add_hf_tokenizer(dir_, hp_->raw(), vocab_size_, out_);
        if (std::string(row_.arch) == "gemma2") {
            out_.set("tokenizer.ggml.add_space_prefix", gguf::Value::boolean(false));  // Gemma's SentencePiece adds no space
        }
        map_tensors();
    }

private:
    const ArchRow &find_arch() {
        const json *a = hp_->find({"architectures"});
        if (!a || !a->is_array() || a->empty() || !(*a)[0].is_string()) {
            fail("{}: expected \"architectures\": [\"...ForCausalLM\"]", hp_->path());
        }
        const std::string name = (*a)[0].get<std::string>();
        for (const ArchRow &r : kArchs)
            for (const char *n : r.hf_names)
                if (name == n) return r;
        std::string known;
        for (const auto &n : hf_architectures()) known += (known.empty() ? "" : ", ") + n;
        fail("{}: architecture {} is not one toy converts (known: {})", hp_->path(), name, known);
    }

    std::string key(const char *k) const { return std::string(row_.arch) + "." + k; }
    void set_u32(const char *k, int64_t v) { out_.set(key(k), gguf::Value::u32((uint32_t)v)); }
    void set_f32(const char *k, double v) { out_.set(key(k), gguf::Value::f32((float)v)); }

    void write_metadata() {
        const HParams &h = *hp_;
        out_.set("general.architecture", gguf::Value::str(row_.arch));
        out_.set("general.name", gguf::Value::str(fs::path(dir_).filename().string().empty()
                                                      ? fs::path(dir_).parent_path().filename().string()
                                                      : fs::path(dir_).filename().string()));
        const bool gpt2 = row_.layout == Layout::Gpt2;
        set_u32("block_count", n_layer_);
        if (auto v = h.opt_size({"max_position_embeddings", "n_ctx", "n_positions"})) set_u32("context_length", *v);
        set_u32("embedding_length", n_embd_);
        if (gpt2) {
            set_u32("feed_forward_length", h.opt_size({"n_inner"}).value_or(4 * n_embd_));
        } else if (auto v = h.opt_size({"intermediate_size"})) {
            set_u32("feed_forward_length", *v);
        }
        set_u32("attention.head_count", n_head_);
        if (!gpt2) set_u32("attention.head_count_kv", n_head_kv_);

        // rope: the table's architectures all rotate head_dim dimensions
        const json *rope = h.find({"rope_parameters", "rope_scaling"});
        if (rope && rope->is_object()) {
            const std::string type = rope->value("rope_type", rope->value("type", ""));
            const double factor = rope->value("factor", 0.0);
            if (type == "linear" && factor > 0) {
                out_.set(key("rope.scaling.type"), gguf::Value::str("linear"));
                set_f32("rope.scaling.factor", factor);
            } else if (type == "yarn" && factor > 0) {
                out_.set(key("rope.scaling.type"), gguf::Value::str("yarn"));
                set_f32("rope.scaling.factor", factor);
                if (!rope->contains("original_max_position_embeddings")) {
                    fail("{}: rope_scaling yarn: \"original_max_position_embeddings\" is missing", h.path());
                }
                set_u32("rope.scaling.original_context_length", (*rope)["original_max_position_embeddings"].get<int64_t>());
                if (rope->contains("extrapolation_factor")) set_f32("rope.scaling.yarn_ext_factor", (*rope)["extrapolation_factor"].get<double>());
                if (rope->contains("attention_factor")) set_f32("rope.scaling.yarn_attn_factor", (*rope)["attention_factor"].get<double>());
                if (rope->contains("beta_fast")) set_f32("rope.scaling.yarn_beta_fast", (*rope)["beta_fast"].get<double>());
                if (rope->contains("beta_slow")) set_f32("rope.scaling.yarn_beta_slow", (*rope)["beta_slow"].get<double>());
            } else if (type == "llama3") {
                llama3_ = *rope;
            } else if (!type.empty() && type != "default") {
                fail("{}: rope scaling type '{}' is not supported (expected linear, yarn or llama3)", h.path(), type);
            }
        }
        const json *theta = rope && rope->is_object() && rope->contains("rope_theta") ? &(*rope)["rope_theta"] : h.find({"rope_theta"});
        // (llama.cpp's Gemma 2 converter leaves the base at its default, 10000)
        if (theta && theta->is_number() && std::string(row_.arch) != "gemma2") set_f32("rope.freq_base", theta->get<double>());

        if (auto v = h.opt_float({"rms_norm_eps"})) set_f32("attention.layer_norm_rms_epsilon", *v);
        if (auto v = h.opt_float({"layer_norm_eps", "layer_norm_epsilon"})) set_f32("attention.layer_norm_epsilon", *v);
        if (auto v = h.opt_size({"num_local_experts", "num_experts"})) set_u32("expert_count", *v), n_expert_ = *v;
        if (auto v = h.opt_size({"num_experts_per_tok"})) set_u32("expert_used_count", *v);

        const std::string arch = row_.arch;
        const auto head_dim = h.opt_size({"head_dim"});
        if (head_dim && arch != "granite") {
            set_u32("attention.key_length", *head_dim);
            set_u32("attention.value_length", *head_dim);
        }
        vocab_size_ = h.opt_size({"vocab_size"}).value_or(0);
        if (arch == "llama" || arch == "granite") {  // the keys llama.cpp's Llama converter adds
            if (vocab_size_ > 0) set_u32("vocab_size", vocab_size_);
            set_u32("rope.dimension_count", head_dim.value_or(n_embd_ / n_head_));
        }
        if (arch == "qwen3moe") {
            if (auto v = h.opt_size({"moe_intermediate_size"})) set_u32("expert_feed_forward_length", *v);
        }
        if (arch == "olmoe") set_f32("attention.layer_norm_rms_epsilon", 1e-5);  // as llama.cpp's converter writes it
        if (arch == "gemma2") {
            if (auto v = h.opt_float({"attn_logit_softcapping"})) set_f32("attn_logit_softcapping", *v);
            if (auto v = h.opt_float({"final_logit_softcapping"})) set_f32("final_logit_softcapping", *v);
            if (auto v = h.opt_size({"sliding_window"})) set_u32("attention.sliding_window", *v);
        }
        if (arch == "granite") {
            if (auto v = h.opt_float({"attention_multiplier"})) set_f32("attention.scale", *v);
            if (auto v = h.opt_float({"embedding_multiplier"})) set_f32("embedding_scale", *v);
            if (auto v = h.opt_float({"residual_multiplier"})) set_f32("residual_scale", *v);
            if (auto v = h.opt_float({"logits_scaling"})) set_f32("logit_scale", *v);
        }
    }

    // --------------------------------------------------------------- tensors

    void add(const std::string &gguf_name, Source src) {
        const StTensor &first = *src.parts[0];
        for (const StTensor *p : src.parts) {
            if (p->shape != first.shape) {
                fail("{}: tensor '{}' has shape {}, the others stacked with it {}", st_->where(), p->name, p->shape_string(),
                     first.shape_string());
            }
        }
        if (first.shape.empty() || first.shape.size() > 3) {
            fail("{}: tensor '{}' has shape {}, expected 1 to 3 dimensions", st_->where(), first.name, first.shape_string());
        }
        if (out_.first_matrix_dtype.empty() && first.shape.size() >= 2) out_.first_matrix_dtype = first.dtype;
        std::vector<int64_t> ne(first.shape.rbegin(), first.shape.rend());
        if (src.edit == Edit::Transpose) {
            if (ne.size() != 2) fail("{}: tensor '{}': expected a matrix to transpose, found {}", st_->where(), first.name, first.shape_string());
            std::swap(ne[0], ne[1]);
        }
        if (src.parts.size() > 1) ne.push_back((int64_t)src.parts.size());
        if (src.n_slices > 1) {
            if (first.shape.size() != 3 || first.shape[1] % src.n_slices != 0) {
                fail("{}: tensor '{}' has shape {}, expected [n_expert, {} x rows, cols]", st_->where(), first.name,
                     first.shape_string(), src.n_slices);
            }
            ne[1] /= src.n_slices;
        }
        const int64_t n_rows = first.shape[0];
        const int64_t n_cols = first.shape.size() > 1 ? first.shape[1] : 1;
        int64_t n_head = 0;
        if (src.edit == Edit::PermuteQ || src.edit == Edit::PermuteK) {
            n_head = src.edit == Edit::PermuteQ ? n_head_ : n_head_kv_;
            if (n_rows % (2 * n_head) != 0) {
                fail("{}: tensor '{}' has {} rows, expected a multiple of 2 x {} heads", st_->where(), first.name, n_rows, n_head);
            }
        }
        auto keep = st_;
        out_.tensors.push_back({gguf_name, ne, [keep, src, n_rows, n_cols, n_head] {
                                    std::vector<float> all;
                                    for (const StTensor *p : src.parts) {
                                        std::vector<float> v = Safetensors::read_f32(*p);
                                        if (src.n_slices > 1) v = slice_rows(v, p->shape, src.slice, src.n_slices);
                                        if (src.edit == Edit::PermuteQ || src.edit == Edit::PermuteK) v = permute_rows(v, n_rows, n_cols, n_head);
                                        if (src.edit == Edit::Transpose) v = transpose(v, n_rows, n_cols);
                                        if (src.add != 0.0f)
                                            for (float &x : v) x += src.add;
                                        if (src.parts.size() == 1) return v;
                                        all.insert(all.end(), v.begin(), v.end());
                                    }
                                    return all;
                                }});
    }

    void map_tensors() {
        std::set<std::string> used;
        auto take = [&](const std::string &name) -> const StTensor * {
            const StTensor *t = st_->find(name);
            if (t) used.insert(name);
            return t;
        };
        const bool gpt2 = row_.layout == Layout::Gpt2;
        const std::string arch = row_.arch;
        auto norm_add = [&](const std::string &gguf_name) {
            return row_.norm_plus_one && gguf_name.ends_with("norm.weight") ? 1.0f : 0.0f;
        };

        // prefix of the checkpoint's names ("model." / "transformer." / none)
        std::string pre = gpt2 ? "transformer." : "model.";
        const auto &all = st_->tensors();
        if (std::none_of(all.begin(), all.end(), [&](const StTensor &t) { return t.name.starts_with(pre); })) pre = "";
        auto global = [&](const std::string &hf, const std::string &gg, bool required) {
            const StTensor *t = take(hf);
            if (!t) {
                if (required) fail("{}: tensor '{}' is missing", st_->where(), hf);
                return false;
            }
            add(gg, {{t}, Edit::None, norm_add(gg)});
            return true;
        };
        if (gpt2) {
            global(pre + "wte.weight", "token_embd.weight", true);
            global(pre + "wpe.weight", "position_embd.weight", true);
            global(pre + "ln_f.weight", "output_norm.weight", true);
            global(pre + "ln_f.bias", "output_norm.bias", true);
            if (st_->find("lm_head.weight")) used.insert("lm_head.weight");  // GPT-2 ties it to wte
        } else {
            const bool tied = hp_->get_bool("tie_word_embeddings", arch == "gemma2");
            if (tied && !st_->find(pre + "embed_tokens.weight") && st_->find("lm_head.weight")) {
                // tied weights saved under the output's name only (TinyStories-656K):
                // the same matrix is the embedding
                global("lm_head.weight", "token_embd.weight", true);
                out_.notes.push_back("the checkpoint stores its tied embedding as lm_head.weight only; written as token_embd.weight");
            } else {
                global(pre + "embed_tokens.weight", "token_embd.weight", true);
            }
            global(pre + "norm.weight", "output_norm.weight", true);
            if (tied || arch == "gemma2") {
                if (st_->find("lm_head.weight")) used.insert("lm_head.weight");
            } else {
                global("lm_head.weight", "output.weight", true);
            }
        }
        if (!llama3_.is_null()) {
            const float base = (float)hp_->opt_float({"rope_theta"}).value_or(llama3_.value("rope_theta", 10000.0));
            const int64_t dim = hp_->opt_size({"head_dim"}).value_or(n_embd_ / n_head_);
            auto f = std::make_shared<std::vector<float>>(llama3_rope_factors(
                base, dim, llama3_.value("factor", 8.0f), llama3_.value("low_freq_factor", 1.0f),
                llama3_.value("high_freq_factor", 4.0f), (float)llama3_.value("original_max_position_embeddings", 8192)));
            out_.tensors.push_back({"rope_freqs.weight", {(int64_t)f->size()}, [f] { return *f; }});
        }

        for (int64_t l = 0; l < n_layer_; ++l) {
            const std::string hp = fmt::format("{}{}.{}.", pre, gpt2 ? "h" : "layers", l);
            const std::string gp = fmt::format("blk.{}.", l);
            const std::span<const LayerName> names = gpt2 ? std::span<const LayerName>(kGpt2Layer) : std::span<const LayerName>(kLlamaLayer);
            for (const LayerName &n : names) {
                const StTensor *t = take(hp + n.hf);
                if (!t) continue;
                std::string gg = n.gguf;
                if (arch == "gemma2" && std::string(n.hf) == "post_attention_layernorm.weight") gg = "post_attention_norm.weight";
                Edit e = n.edit;
                if ((e == Edit::PermuteQ || e == Edit::PermuteK) && !row_.permute_qk) e = Edit::None;
                add(gp + gg, {{t}, e, norm_add(gg)});
            }
            if (n_expert_ > 0) map_experts(hp, gp, take);
            for (const char *req : {"attn_norm.weight", "attn_output.weight"}) {
                bool found = false;
                for (const auto &t : out_.tensors) found |= t.name == gp + req;
                if (!found) fail("{}: layer {} has no tensor for {}{} (expected {}...)", st_->where(), l, gp, req, hp);
            }
        }
        for (const StTensor &t : st_->tensors()) {
            if (!used.count(t.name) && !ignored(t.name)) {
                fail("{}: tensor '{}' ({}) has no place in a {} GGUF; is config.json's architecture right?", st_->where(), t.name,
                     t.shape_string(), arch);
            }
        }
    }

    template <class Take>
    void map_experts(const std::string &hp, const std::string &gp, Take &take) {
        // fused layout (newer transformers): mlp.experts.gate_up_proj [n_expert, 2 n_ff, n_embd]
        // and mlp.experts.down_proj [n_expert, n_embd, n_ff], with or without ".weight"
        const StTensor *gate_up = take(hp + "mlp.experts.gate_up_proj");
        if (!gate_up) gate_up = take(hp + "mlp.experts.gate_up_proj.weight");
        if (gate_up) {
            const StTensor *down = take(hp + "mlp.experts.down_proj");
            if (!down) down = take(hp + "mlp.experts.down_proj.weight");
            if (!down) fail("{}: {}mlp.experts.gate_up_proj has no mlp.experts.down_proj beside it", st_->where(), hp);
            if (gate_up->shape.empty() || gate_up->shape[0] != n_expert_ || down->shape.empty() || down->shape[0] != n_expert_) {
                fail("{}: {}mlp.experts: shapes {} and {}, expected {} experts first", st_->where(), hp,
                     gate_up->shape_string(), down->shape_string(), n_expert_);
            }
            Source gate{{gate_up}}, up{{gate_up}};
            gate.n_slices = up.n_slices = 2;
            up.slice = 1;
            add(gp + "ffn_gate_exps.weight", gate);
            add(gp + "ffn_up_exps.weight", up);
            add(gp + "ffn_down_exps.weight", {{down}});
            return;
        }
        std::set<std::string> done;
        for (const ExpertName &x : kExperts) {
            if (done.count(x.gguf)) continue;
            std::vector<const StTensor *> parts;
            for (int64_t e = 0; e < n_expert_; ++e) {
                const StTensor *t = take(fmt::format("{}{}.{}.{}", hp, x.prefix, e, x.hf));
                if (!t) break;
                parts.push_back(t);
            }
            if (parts.empty()) continue;
            if ((int64_t)parts.size() != n_expert_) {
                fail("{}: {}{}.{}.{} is missing ({} experts expected)", st_->where(), hp, x.prefix, parts.size(), x.hf, n_expert_);
            }
            done.insert(x.gguf);
            add(gp + x.gguf, {parts, Edit::None, 0.0f});
        }
        if (done.size() != 3) fail("{}: layer {}: expected gate, up and down experts, found {}", st_->where(), gp, done.size());
    }

    std::string dir_;
    Converted &out_;
    std::unique_ptr<HParams> hp_;
    ArchRow row_;
    std::shared_ptr<Safetensors> st_;
    int64_t n_layer_ = 0, n_head_ = 0, n_head_kv_ = 0, n_embd_ = 0, n_expert_ = 0, vocab_size_ = 0;
    json llama3_;
};

}  // namespace

std::vector<std::string> hf_architectures() {
    std::vector<std::string> v;
    for (const ArchRow &r : kArchs)
        for (const char *n : r.hf_names) v.emplace_back(n);
    return v;
}

void convert_hf(const std::string &dir, Converted &out) {
    with_json_errors(dir, [&] { HfConverter(dir, out).run(); });
}

}  // namespace toy::convert
