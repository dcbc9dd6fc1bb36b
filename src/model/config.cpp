// Config::from_gguf: one table row per architecture family, then metadata.
#include "model/config.h"

#include <ggml.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numbers>
#include <optional>

namespace toy {
namespace {

// What distinguishes one architecture from another, as data.
struct ArchRow {
    const char *name;
    NormKind norm;
    FfnKind ffn;
    QkNormKind qk_norm;
    PosKind pos;
    int rope_mode;
    bool qkv_bias;
    bool fused_qkv;
    bool linear_bias;
    bool post_norms;
    bool embd_scale_sqrt;     // multiply embeddings by sqrt(n_embd)
    int swa_pattern;          // 0 = window on every layer when set; N = layer il uses it when il % N < N-1
    bool expert_weights_norm;
};

constexpr int kNorm = GGML_ROPE_TYPE_NORMAL;
constexpr int kNeox = GGML_ROPE_TYPE_NEOX;
using enum NormKind;
using enum FfnKind;
using enum QkNormKind;
using enum PosKind;

// name      norm   ffn     qk_norm  pos      rope   qkv_b  fused  lin_b  post   sqrt_e swa  moe_norm
constexpr ArchRow kArchs[] = {
    {"llama",    Rms,   SwiGlu, None,    Rope,    kNorm, false, false, false, false, false, 0, true},
    {"granite",  Rms,   SwiGlu, None,    Rope,    kNorm, false, false, false, false, false, 0, true},
    {"qwen2",    Rms,   SwiGlu, None,    Rope,    kNeox, true,  false, false, false, false, 0, true},
    {"qwen3",    Rms,   SwiGlu, PerHead, Rope,    kNeox, false, false, false, false, false, 0, true},
    {"qwen3moe", Rms,   SwiGlu, PerHead, Rope,    kNeox, false, false, false, false, false, 0, true},
    {"olmoe",    Rms,   SwiGlu, Full,    Rope,    kNeox, false, false, false, false, false, 0, false},
    {"gemma2",   Rms,   GeGlu,  None,    Rope,    kNeox, false, false, false, true,  true,  2, true},
    {"gpt2",     Layer, Gelu,   None,    Learned, kNorm, false, true,  true,  false, false, 0, true},
};

const ArchRow *find_arch(const std::string &name) {
    for (const auto &row : kArchs) {
        if (name == row.name) return &row;
    }
    return nullptr;
}

// Llama-3 rope frequency factors from its scaling parameters: wavelengths
// longer than the low-frequency bound are divided by the factor, shorter
// than the high-frequency bound kept, and the band between interpolated.
std::vector<float> llama3_freq_factors(int n_rot, float base, float factor, float low_freq_factor,
                                       float high_freq_factor, int n_ctx_orig) {
    std::vector<float> out(n_rot / 2);
    const double low_wavelen = n_ctx_orig / low_freq_factor;
    const double high_wavelen = n_ctx_orig / high_freq_factor;
    for (int i = 0; i < n_rot / 2; ++i) {
        const double freq = std::pow((double)base, -2.0 * i / n_rot);
        const double wavelen = 2.0 * std::numbers::pi / freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = factor;
        } else {
            const double smooth = (n_ctx_orig / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            // the factor divides theta: invert the interpolated frequency multiplier
            out[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
    return out;
}

// An integer key read into an int: a value past int's range is an error
// naming the key (a cast would wrap 2^32 + 8 around to 8 and run with it).
// A fallback taken from another key is clamped; that key's own range check
// names it.
int opt_int32(const gguf::File &f, const std::string &key, int64_t fallback) {
    const std::optional<int64_t> v = f.opt_int(key);
    if (!v) return (int)std::clamp<int64_t>(fallback, INT32_MIN, INT32_MAX);
    if (*v < INT32_MIN || *v > INT32_MAX) fail("{}: key '{}': expected a 32-bit integer, found {}", f.path(), key, *v);
    return (int)*v;
}

// The accepted range of every number Config takes from the metadata, in one
// place: a value outside it would reach a ggml op as nonsense (a negative
// epsilon aborts inside ggml) or silently change the model. Checked on the
// values as read (defaults pass); the error names the key.
// The rope scaling numbers as the file gives them (Config keeps only what
// they become), read once for both.
struct RopeScalingKeys {
    double factor, low_freq_factor, high_freq_factor;
};

void check_ranges(const Config &c, const gguf::File &f, const std::string &p, const char *eps_key,
                  const RopeScalingKeys &rs) {
    const RopeConfig &r = c.rope;
    const bool rope = c.pos == PosKind::Rope;
    auto fin = [](double v) { return std::isfinite(v); };
    constexpr double kMaxSize = double(int64_t(1) << 31);
    struct Check {
        std::string key;
        double value;
        bool ok;
        const char *expected;
    };
    const double factor = rs.factor, low = rs.low_freq_factor, high = rs.high_freq_factor;
    const Check checks[] = {
        {eps_key, c.norm_eps, fin(c.norm_eps) && c.norm_eps > 0 && c.norm_eps < 1, "a number between 0 and 1"},
        {"context_length", (double)c.n_ctx_train, c.n_ctx_train > 0 && c.n_ctx_train <= kMaxSize, "a positive size"},
        {"feed_forward_length", (double)c.n_ff, c.n_ff >= 0 && c.n_ff <= kMaxSize, "a size >= 0"},
        {"attention.key_length", (double)c.head_dim_k, c.head_dim_k <= 65536, "a head size up to 65536"},
        {"attention.value_length", (double)c.head_dim_v, c.head_dim_v <= 65536, "a head size up to 65536"},
        {"rope.freq_base", r.freq_base, !rope || (fin(r.freq_base) && r.freq_base > 0), "a positive number"},
        // 0 means none (llama.cpp's reading); below 0 or not finite is no scale at all
        {"rope.scaling.factor", factor, fin(factor) && factor >= 0, "a positive number (or 0: none)"},
        {"rope.scaling.original_context_length", (double)r.n_ctx_orig, !rope || r.n_ctx_orig > 0, "a positive size"},
        {"rope.scaling.attn_factor", r.attn_factor, fin(r.attn_factor) && r.attn_factor > 0, "a positive number"},
        {"rope.scaling.yarn_beta_fast", r.beta_fast, fin(r.beta_fast), "a finite number"},
        {"rope.scaling.yarn_beta_slow", r.beta_slow, fin(r.beta_slow), "a finite number"},
        {"rope.scaling.yarn_ext_factor", r.ext_factor, fin(r.ext_factor) && r.ext_factor >= 0, "a number >= 0"},
        {"rope.scaling.low_freq_factor", low, r.scaling != RopeScalingKind::Llama3 || (fin(low) && low > 0),
         "a positive number"},
        {"rope.scaling.high_freq_factor", high, r.scaling != RopeScalingKind::Llama3 || (fin(high) && high > low),
         "a number above low_freq_factor"},
        {"attention.scale", c.attn_scale, fin(c.attn_scale) && c.attn_scale >= 0, "a number >= 0"},
        {"attn_logit_softcapping", c.attn_softcap, fin(c.attn_softcap) && c.attn_softcap >= 0, "a number >= 0"},
        {"final_logit_softcapping", c.final_softcap, fin(c.final_softcap) && c.final_softcap >= 0, "a number >= 0"},
        {"attention.sliding_window", (double)c.n_swa, c.n_swa >= 0 && c.n_swa <= kMaxSize, "a size >= 0"},
        {"embedding_scale", c.embd_scale, fin(c.embd_scale) && c.embd_scale > 0, "a positive number"},
        {"residual_scale", c.residual_scale, fin(c.residual_scale) && c.residual_scale > 0, "a positive number"},
        {"logit_scale", c.logit_scale, fin(c.logit_scale) && c.logit_scale != 0, "a finite number other than 0"},
        {"expert_count", (double)c.n_expert, c.n_expert >= 0 && c.n_expert <= 65536, "0 to 65536 experts"},
        {"expert_feed_forward_length", (double)c.n_ff_exp, c.n_expert == 0 || (c.n_ff_exp > 0 && c.n_ff_exp <= kMaxSize),
         "a positive size"},
    };
    for (const Check &ch : checks) {
        if (!ch.ok) fail("{}: key '{}{}': expected {}, found {}", f.path(), p, ch.key, ch.expected, ch.value);
    }
    if (f.has("tokenizer.ggml.tokens")) {
        const int64_t n_tokens = (int64_t)f.get_string_array("tokenizer.ggml.tokens").size();
        if (n_tokens != c.n_vocab) {
            fail("{}: key 'tokenizer.ggml.tokens': expected {} tokens (the model's vocabulary), found {}", f.path(),
                 c.n_vocab, n_tokens);
        }
    }
}

}  // namespace

std::vector<std::string> supported_architectures() {
    std::vector<std::string> names;
    for (const auto &row : kArchs) names.emplace_back(row.name);
    return names;
}

Config Config::from_gguf(const gguf::File &f) {
    Config c;
    c.arch = f.get_string("general.architecture");
    const ArchRow *row = find_arch(c.arch);
    if (!row) {
        std::string list;
        for (const auto &n : supported_architectures()) list += (list.empty() ? "" : ", ") + n;
        fail("{}: unsupported architecture '{}' (supported: {})", f.path(), c.arch, list);
    }
    c.name = f.opt_string("general.name").value_or("");
    const std::string p = c.arch + ".";
    auto key = [&](const char *k) { return p + k; };
    auto positive = [&](const char *k) {
        int64_t v = f.get_int(key(k));
        if (v <= 0 || v > (int64_t(1) << 31)) fail("{}: key '{}{}': expected a positive size, found {}", f.path(), p, k, v);
        return v;
    };

    c.n_embd = positive("embedding_length");
    c.n_layer = positive("block_count");
    // every block has tensors of its own: a count the file cannot hold is a lie
    // (caught before anything is sized by it; toy init's metadata-only probe has none)
    if (!f.tensors().empty() && (size_t)c.n_layer > f.tensors().size()) {
        fail("{}: key '{}block_count': {} blocks, but the file holds only {} tensors", f.path(), p, c.n_layer, f.tensors().size());
    }
    c.n_head = positive("attention.head_count");
    c.n_head_kv = f.opt_int(key("attention.head_count_kv")).value_or(c.n_head);
    if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
        fail("{}: key '{}attention.head_count_kv': expected a divisor of head_count {}, found {}", f.path(), p,
             c.n_head, c.n_head_kv);
    }
    c.n_ctx_train = f.opt_int(key("context_length")).value_or(2048);
    c.n_ff = f.opt_int(key("feed_forward_length")).value_or(0);
    c.head_dim_k = f.opt_int(key("attention.key_length")).value_or(c.n_embd / c.n_head);
    c.head_dim_v = f.opt_int(key("attention.value_length")).value_or(c.n_embd / c.n_head);
    if (c.head_dim_k <= 0 || c.head_dim_v <= 0 || (!f.has(key("attention.key_length")) && c.n_embd % c.n_head != 0)) {
        fail("{}: cannot derive the head size: embedding_length {} is not a multiple of head_count {}", f.path(),
             c.n_embd, c.n_head);
    }
    // n_vocab: the metadata key when present, else the token list; the
    // embedding tensor has the final word (checked when weights bind).
    if (auto v = f.opt_int(key("vocab_size"))) {
        c.n_vocab = *v;
    } else if (f.has("tokenizer.ggml.tokens")) {
        c.n_vocab = (int64_t)f.get_string_array("tokenizer.ggml.tokens").size();
    } else if (const auto *t = f.find_tensor("token_embd.weight")) {
        c.n_vocab = t->ne[1];
    }
    if (c.n_vocab <= 0) fail("{}: cannot tell the vocabulary size (no {}vocab_size, token list or token_embd.weight)", f.path(), p);

    c.norm = row->norm;
    c.ffn = row->ffn;
    c.qk_norm = row->qk_norm;
    c.pos = row->pos;
    c.qkv_bias = row->qkv_bias;
    c.fused_qkv = row->fused_qkv;
    c.linear_bias = row->linear_bias;
    c.post_norms = row->post_norms;
    const char *eps_key = row->norm == NormKind::Rms ? "attention.layer_norm_rms_epsilon" : "attention.layer_norm_epsilon";
    c.norm_eps = (float)f.opt_float(key(eps_key)).value_or(1e-5);

    // ---- rope ----
    RopeConfig &r = c.rope;
    r.mode = row->rope_mode;
    r.n_rot = opt_int32(f, key("rope.dimension_count"), c.head_dim_k);
    if (c.pos == PosKind::Rope && (r.n_rot <= 0 || r.n_rot > c.head_dim_k || r.n_rot % 2 != 0)) {
        fail("{}: key '{}rope.dimension_count': expected an even number <= head size {}, found {}", f.path(), p,
             c.head_dim_k, r.n_rot);
    }
    r.freq_base = (float)f.opt_float(key("rope.freq_base")).value_or(10000.0);
    r.n_ctx_orig = opt_int32(f, key("rope.scaling.original_context_length"), c.n_ctx_train);
    const std::string scaling = f.opt_string(key("rope.scaling.type")).value_or("linear");
    const RopeScalingKeys rs{
        f.opt_float(key("rope.scaling.factor")).value_or(f.opt_float(key("rope.scale_linear")).value_or(0.0)),
        f.opt_float(key("rope.scaling.low_freq_factor")).value_or(1.0),
        f.opt_float(key("rope.scaling.high_freq_factor")).value_or(4.0)};
    const double factor = rs.factor;
    if (scaling == "none") {
        r.scaling = RopeScalingKind::None;
    } else if (scaling == "linear") {
        r.scaling = factor > 0 && factor != 1.0 ? RopeScalingKind::Linear : RopeScalingKind::None;
    } else if (scaling == "yarn") {
        r.scaling = RopeScalingKind::Yarn;
    } else if (scaling == "llama3") {
        r.scaling = RopeScalingKind::Llama3;
    } else {
        fail("{}: key '{}rope.scaling.type': expected none, linear, yarn or llama3, found '{}'", f.path(), p, scaling);
    }
    r.freq_scale = (r.scaling == RopeScalingKind::Linear || r.scaling == RopeScalingKind::Yarn) && factor > 0
                       ? (float)(1.0 / factor) : 1.0f;
    r.attn_factor = (float)f.opt_float(key("rope.scaling.attn_factor")).value_or(1.0);
    r.beta_fast = (float)f.opt_float(key("rope.scaling.yarn_beta_fast")).value_or(32.0);
    r.beta_slow = (float)f.opt_float(key("rope.scaling.yarn_beta_slow")).value_or(1.0);
    if (r.scaling == RopeScalingKind::Yarn) {
        r.ext_factor = (float)f.opt_float(key("rope.scaling.yarn_ext_factor")).value_or(1.0);
        if (r.ext_factor != 0.0f) {
            // YaRN's magnitude correction, divided back out of the factor ggml's
            // rope kernel applies itself (same convention as llama.cpp).
            const float s = 1.0f / r.freq_scale;
            const float log_mul = (float)f.opt_float(key("rope.scaling.yarn_log_multiplier")).value_or(0.0);
            auto mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; };
            float a = log_mul != 0.0f ? mscale(s, 1.0f) / mscale(s, log_mul) : mscale(s, 1.0f);
            a *= 1.0f / (1.0f + 0.1f * std::log(s));
            r.attn_factor *= a;
        }
    }
    if (r.scaling == RopeScalingKind::Llama3 && !f.has_tensor("rope_freqs.weight")) {
        if (factor <= 0) fail("{}: rope scaling llama3 needs '{}rope.scaling.factor'", f.path(), p);
        r.freq_factors = llama3_freq_factors(
            r.n_rot, r.freq_base, (float)factor, (float)rs.low_freq_factor, (float)rs.high_freq_factor,
            opt_int32(f, key("rope.scaling.original_context_length"), 8192));
    }

    // ---- attention extras ----
    c.attn_scale = (float)f.opt_float(key("attention.scale")).value_or(0.0);
    c.attn_softcap = (float)f.opt_float(key("attn_logit_softcapping")).value_or(0.0);
    c.final_softcap = (float)f.opt_float(key("final_logit_softcapping")).value_or(0.0);
    c.n_swa = f.opt_int(key("attention.sliding_window")).value_or(0);
    if (row->swa_pattern > 0 && c.n_swa == 0) c.n_swa = 4096;  // gemma2's default window
    if (c.n_swa < 0) fail("{}: key '{}attention.sliding_window': expected >= 0, found {}", f.path(), p, c.n_swa);
    c.swa_layers.assign(c.n_layer, false);
    if (c.n_swa > 0) {
        const int pattern = opt_int32(f, key("attention.sliding_window_pattern"), row->swa_pattern);
        if (pattern < 0) {
            fail("{}: key '{}attention.sliding_window_pattern': expected a layer count >= 0, found {}", f.path(), p, pattern);
        }
        for (int64_t il = 0; il < c.n_layer; ++il) {
            c.swa_layers[il] = pattern <= 0 || (il % pattern) < (pattern - 1);
        }
    }
    if (row->post_norms) {
        // gemma2: queries are scaled by 1/sqrt(head size) before attention and
        // Q·K is unscaled; the 27B configuration scales by n_embd/n_head.
        c.query_scale = c.n_layer == 46 ? 1.0f / std::sqrt((float)(c.n_embd / c.n_head))
                                        : 1.0f / std::sqrt((float)c.head_dim_k);
        c.attn_scale = 1.0f;
    }

    // ---- scales ----
    if (row->embd_scale_sqrt) c.embd_scale = std::sqrt((float)c.n_embd);
    c.embd_scale = (float)f.opt_float(key("embedding_scale")).value_or(c.embd_scale);
    c.residual_scale = (float)f.opt_float(key("residual_scale")).value_or(1.0);
    c.logit_scale = (float)f.opt_float(key("logit_scale")).value_or(1.0);
    if (c.logit_scale == 0.0f) fail("{}: key '{}logit_scale' must not be 0", f.path(), p);

    // ---- mixture of experts ----
    c.n_expert = f.opt_int(key("expert_count")).value_or(0);
    if (c.n_expert > 0) {
        c.n_expert_used = f.get_int(key("expert_used_count"));
        if (c.n_expert_used <= 0 || c.n_expert_used > c.n_expert) {
            fail("{}: key '{}expert_used_count': expected 1..{}, found {}", f.path(), p, c.n_expert, c.n_expert_used);
        }
        c.n_ff_exp = f.opt_int(key("expert_feed_forward_length")).value_or(c.n_ff);
        c.expert_weights_norm = f.opt_bool(key("expert_weights_norm")).value_or(row->expert_weights_norm);
    }
    if (c.n_expert == 0 && c.n_ff <= 0) fail("{}: missing key '{}feed_forward_length'", f.path(), p);
    check_ranges(c, f, p, eps_key, rs);
    return c;
}

}  // namespace toy
