// Random models. The order of work:
//   options -> metadata (read back through Config::from_gguf from a small
//   probe file: the Config is never computed twice) -> tensor_specs(cfg)
//   -> per tensor: type (llama.cpp's rules), initializer -> streamed write.
#include "model/init.h"

#include "core/hash.h"
#include "core/parallel.h"
#include "gguf/gguf_writer.h"
#include "model/weights.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <numbers>
#include <random>

namespace toy {
namespace {

namespace fs = std::filesystem;
using gguf::Value;

// ------------------------------------------------------------ types

struct TypeRow {
    InitType type;
    const char *name;
    quant::FileType ftype;  // general.file_type, and the mix's file type
    bool pure;              // one type for every matrix (llama-quantize --pure)
};

// Pure K-quant files carry the file type of the llama.cpp mix whose base type
// they share (Q4_K_S, Q5_K_S): llama.cpp has no "all Q4_K" file type.
constexpr TypeRow kTypes[] = {
    {InitType::F32, "f32", quant::FileType::F32, true},        {InitType::F16, "f16", quant::FileType::F16, true},
    {InitType::Q8_0, "q8_0", quant::FileType::Q8_0, true},     {InitType::Q4_0, "q4_0", quant::FileType::Q4_0, true},
    {InitType::Q4_K, "q4_k", quant::FileType::Q4_K_S, true},   {InitType::Q5_K, "q5_k", quant::FileType::Q5_K_S, true},
    {InitType::Q6_K, "q6_k", quant::FileType::Q6_K, true},     {InitType::Q4_K_M, "q4_k_m", quant::FileType::Q4_K_M, false},
};

const TypeRow &type_row(InitType t) {
    for (const auto &r : kTypes) {
        if (r.type == t) return r;
    }
    return kTypes[0];
}

// ------------------------------------------------------------ architectures

// What `toy init` needs to know about an architecture beyond Config's table:
// usual hyper-parameters for `--preset custom` and which optional features
// llama.cpp reads for it. Architectures missing here get the first row's
// defaults (so a new Config row works with `toy init` at once).
struct ArchDefaults {
    const char *name;
    float norm_eps;
    float rope_base;
    bool moe_required;   // the architecture is mixture-of-experts only
    bool moe_allowed;
    bool tied;           // default for custom models
    bool tied_only;      // llama.cpp always ties the output (gemma2)
    bool kv_eq_heads;    // custom default n_head_kv = n_head
    bool softcaps;       // gemma2: attention/final soft-caps and sliding window
    bool scales;         // granite: embedding/residual/logit/attention scales
    bool bpe_vocab;      // byte-level BPE tokenizer (else SentencePiece)
};

// name        eps    rope  moe_req moe_ok tied  tied_only kv=h  softcap scales bpe
constexpr ArchDefaults kArchDefaults[] = {
    {"llama",    1e-5f, 1e4f, false, true,  true,  false, false, false, false, false},
    {"granite",  1e-5f, 1e4f, false, false, true,  false, false, false, true,  false},
    {"qwen2",    1e-6f, 1e6f, false, false, true,  false, false, false, false, false},
    {"qwen3",    1e-6f, 1e6f, false, false, true,  false, false, false, false, false},
    {"qwen3moe", 1e-6f, 1e6f, true,  true,  true,  false, false, false, false, false},
    {"olmoe",    1e-5f, 1e4f, true,  true,  false, false, true,  false, false, false},
    {"gemma2",   1e-6f, 1e4f, false, false, true,  true,  false, true,  false, false},
    {"gpt2",     1e-5f, 1e4f, false, false, true,  false, true,  false, false, true},
};

const ArchDefaults &arch_defaults(const std::string &arch) {
    for (const auto &d : kArchDefaults) {
        if (arch == d.name) return d;
    }
    return kArchDefaults[0];
}

std::string join(const std::vector<std::string> &v) {
    std::string s;
    for (const auto &x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

// ------------------------------------------------------------ presets

struct Preset {
    const char *name;
    const char *arch;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base, norm_eps;
    bool tied;
    float llama3_factor;  // 0: no Llama-3 rope scaling
};

constexpr Preset kPresets[] = {
    {"smollm2-135m", "llama", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, 1e-5f, true, 0.0f},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, 0.0f},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, true, 32.0f},
    {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f, false, 0.0f},
};

// ------------------------------------------------------------ synthetic tokenizers

std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += (char)cp;
    } else if (cp < 0x800) {
        s += (char)(0xC0 | (cp >> 6));
        s += (char)(0x80 | (cp & 0x3F));
    } else {
        s += (char)(0xE0 | (cp >> 12));
        s += (char)(0x80 | ((cp >> 6) & 0x3F));
        s += (char)(0x80 | (cp & 0x3F));
    }
    return s;
}

// "a", "b", ..., "z", "aa", "ab", ...
std::string letters(int64_t k) {
    int64_t len = 1, span = 26;
    while (k >= span) {
        k -= span;
        ++len;
        span *= 26;
    }
    std::string s((size_t)len, 'a');
    for (int64_t i = len - 1; i >= 0; --i) {
        s[(size_t)i] = (char)('a' + k % 26);
        k /= 26;
    }
    return s;
}

constexpr int kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokByte = 6;

struct SynthVocab {
    std::string model, pre;
    std::vector<std::string> tokens;
    std::vector<float> scores;     // empty: not written
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    uint32_t bos = 0, eos = 0;
    int64_t unk = -1;
    bool add_bos = false;
};

constexpr int64_t kSpmMinVocab = 3 + 256;
constexpr int64_t kBpeMinVocab = 256 + 1;

// SentencePiece-style: <unk> <s> </s>, the 256 byte tokens <0xXX>, then
// distinct pieces ("▁", the printable ASCII characters, "▁a", "▁b", ...)
// with decreasing scores, like a real llama vocabulary's layout.
SynthVocab spm_vocab(int64_t n) {
    SynthVocab v;
    v.model = "llama";
    v.pre = "default";
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    v.add_bos = true;
    v.tokens.reserve(n);
    auto add = [&](std::string t, float score, int type) {
        v.tokens.push_back(std::move(t));
        v.scores.push_back(score);
        v.types.push_back(type);
    };
    add("<unk>", 0.0f, kTokUnknown);
    add("<s>", 0.0f, kTokControl);
    add("</s>", 0.0f, kTokControl);
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, kTokByte);
    const std::string space = utf8(0x2581);
    int64_t k = 0;
    while ((int64_t)v.tokens.size() < n) {
        std::string piece;
        if (k == 0) {
            piece = space;
        } else if (k <= 94) {
            piece = std::string(1, (char)(32 + k));  // '!' .. '~'
        } else {
            piece = space + letters(k - 95);
        }
        add(std::move(piece), -(float)(k + 1), kTokNormal);
        ++k;
    }
    return v;
}

// GPT-2 byte-level BPE: the 256 byte characters (in GPT-2's order), pieces
// built by merges over "Ġ", letters and digits (every merge joins two
// existing tokens), and <|endoftext|> last as BOS and EOS.
SynthVocab bpe_vocab(int64_t n) {
    SynthVocab v;
    v.model = "gpt2";
    v.pre = "gpt-2";
    v.bos = v.eos = (uint32_t)(n - 1);
    v.add_bos = false;
    v.tokens.reserve(n);
    auto add = [&](std::string t, int type) {
        v.tokens.push_back(std::move(t));
        v.types.push_back(type);
    };
    // GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest
    // to U+0100 onwards in byte order; the vocabulary lists the first group first.
    std::vector<int> order;
    std::vector<uint32_t> cp(256, 0);
    for (int b = 0; b < 256; ++b) {
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
            order.push_back(b);
            cp[b] = (uint32_t)b;
        }
    }
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        if (cp[b] == 0) {
            order.push_back(b);
            cp[b] = next++;
        }
    }
    for (int b : order) add(utf8(cp[b]), kTokNormal);

    std::vector<std::string> symbols = {utf8(cp[' '])};
    for (char c = 'a'; c <= 'z'; ++c) symbols.emplace_back(1, c);
    for (char c = 'A'; c <= 'Z'; ++c) symbols.emplace_back(1, c);
    for (char c = '0'; c <= '9'; ++c) symbols.emplace_back(1, c);
    std::vector<std::string> level = symbols;
    const int64_t n_fill = n - 1;
    while ((int64_t)v.tokens.size() < n_fill) {
        std::vector<std::string> grown;
        for (const auto &left : level) {
            for (const auto &right : symbols) {
                if ((int64_t)v.tokens.size() >= n_fill) break;
                v.merges.push_back(left + " " + right);
                add(left + right, kTokNormal);
                grown.push_back(left + right);
            }
            if ((int64_t)v.tokens.size() >= n_fill) break;
        }
        level = std::move(grown);
    }
    add("<|endoftext|>", kTokControl);
    return v;
}

void set_tokenizer(gguf::Writer &w, const SynthVocab &v) {
    w.set("tokenizer.ggml.model", Value::str(v.model));
    w.set("tokenizer.ggml.pre", Value::str(v.pre));
    w.set("tokenizer.ggml.tokens", Value::str_array(v.tokens));
    if (!v.scores.empty()) w.set("tokenizer.ggml.scores", Value::f32_array(v.scores));
    w.set("tokenizer.ggml.token_type", Value::i32_array(v.types));
    if (!v.merges.empty()) w.set("tokenizer.ggml.merges", Value::str_array(v.merges));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(v.bos));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(v.eos));
    if (v.unk >= 0) w.set("tokenizer.ggml.unknown_token_id", Value::u32((uint32_t)v.unk));
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(v.add_bos));
    w.set("tokenizer.ggml.add_eos_token", Value::boolean(false));
}

// ------------------------------------------------------------ metadata

int64_t head_dim_of(const InitOptions &o) { return o.head_dim > 0 ? o.head_dim : o.n_embd / o.n_head; }

// Keys every architecture has; enough for Config::from_gguf to tell the
// norm and position kinds, which decide the remaining keys.
void set_base_metadata(gguf::Writer &w, const InitOptions &o) {
    const std::string a = o.arch + ".";
    auto u32 = [](int64_t v) { return Value::u32((uint32_t)v); };
    w.set("general.architecture", Value::str(o.arch));
    w.set("general.name", Value::str(o.name.empty() ? "toy-" + o.arch : o.name));
    w.set("general.file_type", Value::u32((uint32_t)init_file_type(o.type)));
    if (ggml_is_quantized(quant::file_type_base(type_row(o.type).ftype))) {
        w.set("general.quantization_version", Value::u32(GGML_QNT_VERSION));
    }
    w.set(a + "vocab_size", u32(o.n_vocab));
    w.set(a + "context_length", u32(o.n_ctx));
    w.set(a + "embedding_length", u32(o.n_embd));
    w.set(a + "block_count", u32(o.n_layer));
    w.set(a + "feed_forward_length", u32(o.n_ff));
    w.set(a + "attention.head_count", u32(o.n_head));
    w.set(a + "attention.head_count_kv", u32(o.n_head_kv));
    if (o.head_dim > 0 && (o.n_embd % o.n_head != 0 || o.head_dim != o.n_embd / o.n_head)) {
        w.set(a + "attention.key_length", u32(o.head_dim));
        w.set(a + "attention.value_length", u32(o.head_dim));
    }
    if (o.n_expert > 0) {
        w.set(a + "expert_count", u32(o.n_expert));
        w.set(a + "expert_used_count", u32(o.n_expert_used));
        w.set(a + "expert_feed_forward_length", u32(o.n_ff_exp > 0 ? o.n_ff_exp : o.n_ff));
    }
}

void set_block_metadata(gguf::Writer &w, const InitOptions &o, const Config &base) {
    const std::string a = o.arch + ".";
    const ArchDefaults &d = arch_defaults(o.arch);
    if (base.norm == NormKind::Layer) {
        w.set(a + "attention.layer_norm_epsilon", Value::f32(o.norm_eps));
    } else {
        w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(o.norm_eps));
    }
    if (base.pos == PosKind::Rope) {
        w.set(a + "rope.dimension_count", Value::u32((uint32_t)head_dim_of(o)));
        w.set(a + "rope.freq_base", Value::f32(o.rope_base));
        // Llama-3 scaling is carried by rope_freqs.weight alone, as llama.cpp's
        // converter writes it (llama.cpp does not know a "llama3" scaling type).
    }
    if (d.softcaps) {
        w.set(a + "attn_logit_softcapping", Value::f32(o.attn_softcap));
        w.set(a + "final_logit_softcapping", Value::f32(o.final_softcap));
        w.set(a + "attention.sliding_window", Value::u32((uint32_t)o.n_swa));
    }
    if (d.scales) {
        w.set(a + "embedding_scale", Value::f32(o.embd_scale));
        w.set(a + "residual_scale", Value::f32(o.residual_scale));
        w.set(a + "logit_scale", Value::f32(o.logit_scale));
        w.set(a + "attention.scale", Value::f32(o.attn_scale > 0 ? o.attn_scale : 1.0f / (float)head_dim_of(o)));
    }
}

// Config::from_gguf is the one reader of metadata: write the keys to a small
// temporary GGUF and read them back.
Config probe_config(const gguf::Writer &w) {
    static std::atomic<int> counter{0};
    std::error_code ec;
    fs::path dir = fs::temp_directory_path(ec);
    if (ec) dir = "/tmp";
    const fs::path path = dir / fmt::format("toy-init-probe-{}-{}.gguf", (long)getpid(), counter.fetch_add(1));
    struct Remove {
        fs::path p;
        ~Remove() {
            std::error_code ec;
            fs::remove(p, ec);
        }
    } remove{path};
    w.write(path.string());
    auto file = gguf::File::open(path.string());
    try {
        return Config::from_gguf(*file);
    } catch (const Error &e) {
        fail("toy init wrote metadata its own reader rejects (a bug): {}", e.what());
    }
}

// ------------------------------------------------------------ tensor types

// What a tensor is, for its initializer.
enum class Kind { Other, TokenEmbd, Output, AttnV, AttnK, AttnOut, FfnDown };

// ------------------------------------------------------------ random values

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Standard normal values by Box-Muller over mt19937_64 (the same sequence on
// every platform, unlike std::normal_distribution).
class Normal {
public:
    explicit Normal(uint64_t seed) : rng_(seed) {}
    float next() {
        if (have_) {
            have_ = false;
            return spare_;
        }
        double u1 = ((rng_() >> 11) + 1) * 0x1.0p-53;  // (0, 1]
        double u2 = (rng_() >> 11) * 0x1.0p-53;        // [0, 1)
        double r = std::sqrt(-2.0 * std::log(u1));
        double t = 2.0 * std::numbers::pi * u2;
        spare_ = (float)(r * std::sin(t));
        have_ = true;
        return (float)(r * std::cos(t));
    }

private:
    std::mt19937_64 rng_;
    float spare_ = 0;
    bool have_ = false;
};

enum class Init { Normal, Constant, Values };

struct Plan {
    std::string name;
    ggml_type type;
    std::array<int64_t, 4> ne{1, 1, 1, 1};
    int n_dims = 1;
    Init init = Init::Normal;
    float scale = 0.0f;          // standard deviation or the constant
    std::vector<float> values;   // Init::Values
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// Rows are produced in chunks of a fixed size, each from its own generator
// seeded by (seed, tensor name, chunk index): the bytes do not depend on the
// number of threads.
constexpr int64_t kChunkElements = 1 << 18;

void fill_tensor(const Plan &p, uint64_t seed, int n_threads, uint8_t *out, uint64_t nbytes) {
    const int64_t n_per_row = p.ne[0];
    const int64_t n_rows = p.ne[1] * p.ne[2] * p.ne[3];
    const size_t row_size = ggml_row_size(p.type, n_per_row);
    if (nbytes != row_size * (uint64_t)n_rows) {
        fail("tensor '{}': expected {} bytes, the writer asked for {}", p.name, row_size * n_rows, nbytes);
    }
    if (ggml_quantize_requires_imatrix(p.type)) fail("tensor '{}': type {} needs an importance matrix", p.name, ggml_type_name(p.type));
    ggml_quantize_init(p.type);
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / n_per_row);
    const int64_t n_chunks = (n_rows + rows_per_chunk - 1) / rows_per_chunk;
    const uint64_t tensor_seed = splitmix64(seed ^ fnv1a(p.name));

    parallel_for(n_chunks, n_threads, [&](int64_t c) {
        const int64_t r0 = c * rows_per_chunk;
        const int64_t nr = std::min(rows_per_chunk, n_rows - r0);
        const int64_t n = nr * n_per_row;
        std::vector<float> buf((size_t)n);
        if (p.init == Init::Normal) {
            Normal gen(splitmix64(tensor_seed + (uint64_t)c));
            for (int64_t i = 0; i < n; ++i) buf[i] = p.scale * gen.next();
        } else if (p.init == Init::Constant) {
            std::fill(buf.begin(), buf.end(), p.scale);
        } else {
            for (int64_t i = 0; i < n; ++i) buf[i] = p.values[(size_t)(r0 * n_per_row + i)];
        }
        ggml_quantize_chunk(p.type, buf.data(), out + r0 * row_size, 0, nr, n_per_row, nullptr);
    });
}

// Llama-3 frequency factors, computed as llama.cpp's converter does.
std::vector<float> llama3_factors(const InitOptions &o, int n_rot) {
    std::vector<float> f((size_t)(n_rot / 2));
    const double low_wavelen = o.rope_orig_ctx / o.rope_low_freq_factor;
    const double high_wavelen = o.rope_orig_ctx / o.rope_high_freq_factor;
    for (int i = 0; i < n_rot / 2; ++i) {
        const double freq = 1.0 / std::pow((double)o.rope_base, (2.0 * i) / n_rot);
        const double wavelen = 2.0 * std::numbers::pi / freq;
        if (wavelen < high_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            f[i] = o.rope_llama3_factor;
        } else {
            const double smooth =
                (o.rope_orig_ctx / wavelen - o.rope_low_freq_factor) / (o.rope_high_freq_factor - o.rope_low_freq_factor);
            f[i] = (float)(1.0 / ((1.0 - smooth) / o.rope_llama3_factor + smooth));
        }
    }
    return f;
}

// What a spec (bound into w by tensor_specs) is, for the type rules.
Kind kind_of(const TensorSpec &s, const Weights &w) {
    auto is = [&](ggml_tensor *const &slot) { return s.slot == &slot; };
    auto in_layer = [&](ggml_tensor *LayerWeights::*member) {
        return s.layer >= 0 && s.slot == &(w.layers[(size_t)s.layer].*member);
    };
    if (is(w.tok_embd)) return Kind::TokenEmbd;
    if (is(w.output)) return Kind::Output;
    if (in_layer(&LayerWeights::wv) || in_layer(&LayerWeights::wqkv)) return Kind::AttnV;
    if (in_layer(&LayerWeights::wk)) return Kind::AttnK;
    if (in_layer(&LayerWeights::wo)) return Kind::AttnOut;
    if (in_layer(&LayerWeights::ffn_down) || in_layer(&LayerWeights::ffn_down_exps)) return Kind::FfnDown;
    return Kind::Other;
}

}  // namespace

quant::MixOptions init_mix(InitType type) {
    quant::MixOptions m;
    m.ftype = type_row(type).ftype;
    m.pure = type_row(type).pure;
    return m;
}

quant::MixModel init_mix_model(const Config &cfg) {
    quant::MixModel m;
    m.arch = cfg.arch;
    m.n_layer = cfg.n_layer;
    m.n_head = cfg.n_head;
    m.n_head_kv = cfg.n_head_kv;
    m.n_expert = cfg.n_expert;
    return m;
}

std::vector<quant::TypeChoice> storage_types(InitType type, const std::vector<quant::TensorDesc> &tensors, const Config &cfg) {
    return quant::choose_types(tensors, init_mix_model(cfg), init_mix(type));
}

namespace {

std::vector<Plan> plan_tensors(const InitOptions &o, const Config &cfg, std::vector<std::string> &notes) {
    Weights w;
    std::vector<TensorSpec> specs = tensor_specs(cfg, &w);

    const double std_linear = 0.02;
    // GPT-2's scaled init: projections that write into the residual stream.
    const double std_residual = 0.02 / std::sqrt(2.0 * (double)cfg.n_layer);
    std::map<std::string, int> fallbacks;
    std::vector<Plan> plans;
    for (const TensorSpec &s : specs) {
        const Kind kind = kind_of(s, w);
        const bool output = kind == Kind::Output;
        if (!s.required) {
            const bool wanted = (output && !o.tied) || (s.role == TensorRole::RopeFactors && o.rope_llama3_factor > 0);
            if (!wanted) continue;
        }
        Plan p;
        p.name = s.name;
        p.n_dims = (int)s.ne.size();
        for (size_t d = 0; d < s.ne.size() && d < 4; ++d) p.ne[d] = s.ne[d];

        switch (s.role) {
            case TensorRole::Norm:
                p.type = GGML_TYPE_F32;
                p.init = Init::Constant;
                p.scale = 1.0f;
                break;
            case TensorRole::NormBias:
            case TensorRole::Bias:
                p.type = GGML_TYPE_F32;
                p.init = Init::Constant;
                p.scale = 0.0f;
                break;
            case TensorRole::RopeFactors:
                p.type = GGML_TYPE_F32;
                p.init = Init::Values;
                p.values = llama3_factors(o, (int)(2 * s.ne[0]));
                break;
            case TensorRole::Positions:
            case TensorRole::Router:
                p.type = GGML_TYPE_F32;
                p.scale = (float)std_linear;
                break;
            case TensorRole::Embedding:
            case TensorRole::Linear:
            case TensorRole::Experts: {
                const bool residual = kind == Kind::AttnOut || kind == Kind::FfnDown;
                p.scale = (float)(residual ? std_residual : std_linear);
                p.type = GGML_TYPE_F32;  // generated as F32; stored as the mix says (below)
                break;
            }
        }
        plans.push_back(std::move(p));
    }
    // the types of all tensors at once: the mix looks at the whole model (tied output, positions among layers)
    std::vector<quant::TensorDesc> descs;
    for (const Plan &p : plans) descs.push_back({p.name, p.type, {p.ne[0], p.ne[1], p.ne[2], p.ne[3]}});
    const std::vector<quant::TypeChoice> types = storage_types(o.type, descs, cfg);
    for (size_t k = 0; k < plans.size(); ++k) {
        const quant::TypeChoice &c = types[k];
        plans[k].type = c.type;
        if (c.type != c.wanted) {
            fallbacks[fmt::format("use {} instead of {}: rows of {} are not a multiple of {}", ggml_type_name(c.type),
                                  ggml_type_name(c.wanted), plans[k].ne[0], ggml_blck_size(c.wanted))]++;
        }
    }
    for (const auto &[what, n] : fallbacks) {
        notes.push_back(fmt::format("{} tensor{} {} (llama.cpp's fallback)", n, n == 1 ? "" : "s", what));
    }
    return plans;
}

void check_size(const char *flag, int64_t v, int64_t max = (int64_t)UINT32_MAX) {
    if (v <= 0) fail("{}: expected a positive size, found {}", flag, v);
    if (v > max) fail("{}: expected at most {}, found {}", flag, max, v);
}

}  // namespace

// ------------------------------------------------------------ public

InitType parse_init_type(const std::string &name) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    for (const auto &r : kTypes) {
        if (lower == r.name) return r.type;
    }
    fail("--type: unknown type '{}' (expected one of {})", name, join(init_type_names()));
}

const char *init_type_name(InitType t) { return type_row(t).name; }

std::vector<std::string> init_type_names() {
    std::vector<std::string> v;
    for (const auto &r : kTypes) v.emplace_back(r.name);
    return v;
}

int init_file_type(InitType t) { return (int)type_row(t).ftype; }

std::vector<std::string> init_presets() {
    std::vector<std::string> v;
    for (const auto &p : kPresets) v.emplace_back(p.name);
    v.emplace_back("custom");
    return v;
}

InitOptions preset_options(const std::string &preset, const std::string &arch) {
    const auto archs = supported_architectures();
    if (!arch.empty() && std::find(archs.begin(), archs.end(), arch) == archs.end()) {
        fail("--arch: unknown architecture '{}' (supported: {})", arch, join(archs));
    }
    InitOptions o;
    if (preset == "custom") {
        if (arch.empty()) fail("--preset custom: expected --arch (one of {})", join(archs));
        const ArchDefaults &d = arch_defaults(arch);
        o.arch = arch;
        o.norm_eps = d.norm_eps;
        o.rope_base = d.rope_base;
        o.tied = d.tied;
        o.n_head_kv = d.kv_eq_heads ? o.n_head : o.n_head_kv;
        if (d.moe_required) {
            o.n_expert = 4;
            o.n_expert_used = 2;
        }
        if (d.softcaps) {
            o.attn_softcap = 50.0f;
            o.final_softcap = 30.0f;
            o.n_swa = 4096;
        }
        if (d.scales) {  // granite-3.0's multipliers; attention scale 1/head size (muP)
            o.embd_scale = 12.0f;
            o.residual_scale = 0.22f;
            o.logit_scale = 8.0f;
        }
        return o;
    }
    for (const auto &p : kPresets) {
        if (preset != p.name) continue;
        if (!arch.empty() && arch != p.arch) {
            fail("--arch: preset '{}' is a {} model, found --arch {}", preset, p.arch, arch);
        }
        o.arch = p.arch;
        o.name = p.name;
        o.n_embd = p.n_embd;
        o.n_layer = p.n_layer;
        o.n_head = p.n_head;
        o.n_head_kv = p.n_head_kv;
        o.n_ff = p.n_ff;
        o.n_vocab = p.n_vocab;
        o.n_ctx = p.n_ctx;
        o.rope_base = p.rope_base;
        o.norm_eps = p.norm_eps;
        o.tied = p.tied;
        if (p.llama3_factor > 0) {
            o.rope_llama3_factor = p.llama3_factor;
            o.rope_low_freq_factor = 1.0f;
            o.rope_high_freq_factor = 4.0f;
            o.rope_orig_ctx = 8192;
        }
        return o;
    }
    fail("--preset: unknown preset '{}' (expected one of {})", preset, join(init_presets()));
}

void validate_init_options(const InitOptions &o) {
    const auto archs = supported_architectures();
    if (std::find(archs.begin(), archs.end(), o.arch) == archs.end()) {
        fail("--arch: unknown architecture '{}' (supported: {})", o.arch, join(archs));
    }
    const ArchDefaults &d = arch_defaults(o.arch);
    // Bounds far above any real model, low enough that a typo is an error
    // rather than an attempt to allocate terabytes.
    check_size("--n-vocab", o.n_vocab, 1 << 24);
    check_size("--n-ctx", o.n_ctx, 1 << 24);
    check_size("--n-embd", o.n_embd, 1 << 18);
    check_size("--n-layer", o.n_layer, 512);  // llama.cpp's LLAMA_MAX_LAYERS
    check_size("--n-head", o.n_head, 1 << 12);
    check_size("--n-head-kv", o.n_head_kv, 1 << 12);
    check_size("--n-ff", o.n_ff, 1 << 20);
    if (o.n_head % o.n_head_kv != 0) {
        fail("--n-head-kv: expected a divisor of --n-head {}, found {}", o.n_head, o.n_head_kv);
    }
    if (o.head_dim < 0 || o.head_dim > (1 << 16)) fail("--head-dim: expected 1..{}, found {}", 1 << 16, o.head_dim);
    if (o.head_dim == 0 && o.n_embd % o.n_head != 0) {
        fail("--n-head: {} does not divide --n-embd {} (give --head-dim for another head size)", o.n_head, o.n_embd);
    }
    const int64_t min_vocab = d.bpe_vocab ? kBpeMinVocab : kSpmMinVocab;
    if (o.vocab_from.empty() && o.n_vocab < min_vocab) {
        fail("--n-vocab: the synthetic {} tokenizer needs at least {} tokens, found {}",
             d.bpe_vocab ? "byte-level BPE" : "SentencePiece", min_vocab, o.n_vocab);
    }
    if (d.moe_required && o.n_expert <= 0) {
        fail("--n-expert: {} is a mixture-of-experts architecture, expected at least 1 expert, found {}", o.arch,
             o.n_expert);
    }
    if (o.n_expert < 0) fail("--n-expert: expected >= 0, found {}", o.n_expert);
    if (o.n_expert > 0) {
        if (!d.moe_allowed) fail("--n-expert: {} has no mixture-of-experts layers, found {} experts", o.arch, o.n_expert);
        if (o.n_expert > 1024) fail("--n-expert: expected at most 1024, found {}", o.n_expert);
        if (o.n_expert_used <= 0 || o.n_expert_used > o.n_expert) {
            fail("--n-expert-used: expected 1..{} (--n-expert), found {}", o.n_expert, o.n_expert_used);
        }
        if (o.n_ff_exp < 0 || o.n_ff_exp > (1 << 20)) fail("--n-ff-exp: expected 1..{}, found {}", 1 << 20, o.n_ff_exp);
    } else {
        if (o.n_expert_used != 0) fail("--n-expert-used: needs --n-expert, found {} experts used of 0", o.n_expert_used);
        if (o.n_ff_exp != 0) fail("--n-ff-exp: needs --n-expert (a dense model has no expert FFN)");
    }
    if (!(o.norm_eps > 0.0f) || !std::isfinite(o.norm_eps)) fail("--norm-eps: expected a positive number, found {}", o.norm_eps);
    if (!(o.rope_base > 0.0f) || !std::isfinite(o.rope_base)) fail("--rope-freq-base: expected a positive number, found {}", o.rope_base);
    if (d.tied_only && !o.tied) {
        fail("--untied: {} always ties the output projection to the token embeddings", o.arch);
    }
    if (o.rope_llama3_factor < 0 || !std::isfinite(o.rope_llama3_factor)) {
        fail("--rope-scale: expected a positive factor, found {}", o.rope_llama3_factor);
    }
    if (o.rope_llama3_factor > 0) {
        if (!(o.rope_low_freq_factor > 0) || !(o.rope_high_freq_factor > o.rope_low_freq_factor)) {
            fail("--rope-low-freq-factor/--rope-high-freq-factor: expected 0 < low < high, found {} and {}",
                 o.rope_low_freq_factor, o.rope_high_freq_factor);
        }
        check_size("--rope-orig-ctx", o.rope_orig_ctx, INT32_MAX);
    }
    if (!d.softcaps && (o.attn_softcap != 0 || o.final_softcap != 0 || o.n_swa != 0)) {
        fail("--attn-softcap/--final-softcap/--sliding-window: {} has no soft-caps or sliding window (gemma2 has)", o.arch);
    }
    if (o.attn_softcap < 0 || o.final_softcap < 0) {
        fail("--attn-softcap/--final-softcap: expected >= 0 (0 = none), found {} and {}", o.attn_softcap, o.final_softcap);
    }
    if (o.n_swa < 0 || o.n_swa > INT32_MAX) fail("--sliding-window: expected 0..{}, found {}", INT32_MAX, o.n_swa);
    if (!d.scales && (o.embd_scale != 0 || o.residual_scale != 0 || o.logit_scale != 0 || o.attn_scale != 0)) {
        fail("--embedding-scale/--residual-scale/--logit-scale/--attention-scale: {} has no such scales (granite has)",
             o.arch);
    }
    if (d.scales && (!(o.embd_scale > 0) || !(o.residual_scale > 0) || !(o.logit_scale > 0) || o.attn_scale < 0)) {
        fail("--embedding-scale/--residual-scale/--logit-scale: expected positive numbers, found {}, {}, {}",
             o.embd_scale, o.residual_scale, o.logit_scale);
    }
}

namespace {

// The options with the vocabulary size of --vocab-from's tokenizer, and that file.
InitOptions resolve_vocab(const InitOptions &in, std::unique_ptr<gguf::File> *donor) {
    InitOptions o = in;
    if (o.vocab_from.empty()) return o;
    auto f = gguf::File::open_model(o.vocab_from);
    if (!f->has("tokenizer.ggml.tokens")) fail("--vocab-from {}: the file has no tokenizer (tokenizer.ggml.tokens)", o.vocab_from);
    o.n_vocab = (int64_t)f->get_string_array("tokenizer.ggml.tokens").size();
    if (donor) *donor = std::move(f);
    return o;
}

// Metadata in the writer and the Config it describes.
Config build_metadata(gguf::Writer &w, const InitOptions &o_in) {
    const InitOptions o = resolve_vocab(o_in, nullptr);
    validate_init_options(o);
    set_base_metadata(w, o);
    // The base keys alone tell the norm and position kinds. A placeholder
    // rotary size keeps that probe from rejecting an odd head size before
    // we know whether the architecture rotates at all (gpt2 does not).
    gguf::Writer base_keys;
    set_base_metadata(base_keys, o);
    base_keys.set(o.arch + ".rope.dimension_count", Value::u32(2));
    const Config base = probe_config(base_keys);
    if (base.pos == PosKind::Rope && head_dim_of(o) % 2 != 0) {
        fail("--head-dim: rotary embeddings need an even head size, found {}", head_dim_of(o));
    }
    if (base.pos != PosKind::Rope && o.rope_llama3_factor > 0) {
        fail("--rope-scaling: {} has learned positions, not rotary embeddings", o.arch);
    }
    set_block_metadata(w, o, base);
    return probe_config(w);
}

}  // namespace

Config init_config(const InitOptions &o) {
    gguf::Writer w;
    return build_metadata(w, o);
}

InitResult init_model(const InitOptions &o_in, const std::string &path) {
    if (path.empty()) fail("-o: an output file is required");
    gguf::Writer w;
    InitResult r;
    std::unique_ptr<gguf::File> donor;
    const InitOptions o = resolve_vocab(o_in, &donor);
    r.config = build_metadata(w, o);
    const Config &cfg = r.config;
    if (donor) {
        w.copy_metadata(*donor, [](const std::string &k) { return !k.starts_with("tokenizer."); });
    } else {
        set_tokenizer(w, arch_defaults(o.arch).bpe_vocab ? bpe_vocab(o.n_vocab) : spm_vocab(o.n_vocab));
    }

    // The fills point into `plans`, which outlives write().
    const std::vector<Plan> plans = plan_tensors(o, cfg, r.notes);
    for (const Plan &p : plans) {
        const Plan *pp = &p;
        const uint64_t seed = o.seed;
        const int n_threads = o.n_threads;
        w.add_tensor(p.name, p.type, p.ne, p.n_dims,
                     [pp, seed, n_threads](uint8_t *out, uint64_t nbytes) { fill_tensor(*pp, seed, n_threads, out, nbytes); });
        r.tensors.push_back({p.name, p.type, std::vector<int64_t>(p.ne.begin(), p.ne.begin() + p.n_dims)});
        r.n_params += p.n_elements();
    }
    r.file_bytes = w.write(path);
    return r;
}

}  // namespace toy
