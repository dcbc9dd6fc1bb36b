// toy init: random models of every architecture load back with the Config
// that was asked for and every tensor tensor_specs lists, run to finite
// logits, follow llama.cpp's quantization mix and fallbacks, are byte-for-byte
// reproducible from their seed, and bad flags are one-line errors.
#include "gguf/gguf_reader.h"
#include "model/init.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/session.h"
#include "test_util.h"
#include "text/vocab.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numbers>
#include <set>

namespace fs = std::filesystem;
using namespace toy;

namespace {

class TempDir {
public:
    TempDir() {
        path_ = fs::temp_directory_path() / fmt::format("toy_test_init_{}_{}", getpid(), counter_++);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string &name) const { return (path_ / name).string(); }

private:
    static inline int counter_ = 0;
    fs::path path_;
};

std::string read_bytes(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// A small custom model of `arch` whose matrices all have rows of 256 (so
// every type, K-quants included, applies without fallback).
InitOptions tiny(const std::string &arch, InitType type) {
    InitOptions o = preset_options("custom", arch);
    o.type = type;
    o.n_embd = 256;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_head_kv = (arch == "olmoe" || arch == "gpt2") ? 4 : 2;
    o.n_ff = 256;
    o.n_vocab = 300;
    o.n_ctx = 64;
    o.n_threads = 2;
    if (o.n_expert > 0) {
        o.n_expert = 4;
        o.n_expert_used = 2;
    }
    return o;
}

void expect_config(const InitOptions &o, const Config &c) {
    EXPECT_EQ(c.arch, o.arch);
    EXPECT_EQ(c.n_vocab, o.n_vocab);
    EXPECT_EQ(c.n_ctx_train, o.n_ctx);
    EXPECT_EQ(c.n_embd, o.n_embd);
    EXPECT_EQ(c.n_layer, o.n_layer);
    EXPECT_EQ(c.n_ff, o.n_ff);
    EXPECT_EQ(c.n_head, o.n_head);
    EXPECT_EQ(c.n_head_kv, o.n_head_kv);
    const int64_t hd = o.head_dim > 0 ? o.head_dim : o.n_embd / o.n_head;
    EXPECT_EQ(c.head_dim_k, hd);
    EXPECT_EQ(c.head_dim_v, hd);
    EXPECT_FLOAT_EQ(c.norm_eps, o.norm_eps);
    if (c.pos == PosKind::Rope) {
        EXPECT_FLOAT_EQ(c.rope.freq_base, o.rope_base);
        EXPECT_EQ(c.rope.n_rot, hd);
    }
    EXPECT_EQ(c.n_expert, o.n_expert);
    EXPECT_EQ(c.n_expert_used, o.n_expert_used);
    if (o.n_expert > 0) {
        EXPECT_EQ(c.n_ff_exp, o.n_ff_exp > 0 ? o.n_ff_exp : o.n_ff);
    }
    if (o.arch == "gemma2") {
        EXPECT_FLOAT_EQ(c.attn_softcap, o.attn_softcap);
        EXPECT_FLOAT_EQ(c.final_softcap, o.final_softcap);
        EXPECT_EQ(c.n_swa, o.n_swa);
    }
    if (o.arch == "granite") {
        EXPECT_FLOAT_EQ(c.embd_scale, o.embd_scale);
        EXPECT_FLOAT_EQ(c.residual_scale, o.residual_scale);
        EXPECT_FLOAT_EQ(c.logit_scale, o.logit_scale);
        EXPECT_FLOAT_EQ(c.attn_scale, o.attn_scale > 0 ? o.attn_scale : 1.0f / (float)hd);
    }
}

// Every tensor tensor_specs lists is in the file with its shape; optional
// ones exactly when asked for; nothing else.
void expect_tensors(const InitOptions &o, const InitResult &r, const gguf::File &f) {
    size_t expected = 0;
    for (const TensorSpec &s : tensor_specs(r.config)) {
        bool want = s.required;
        if (!s.required && s.role == TensorRole::Linear) want = !o.tied;                      // output.weight
        if (!s.required && s.role == TensorRole::RopeFactors) want = o.rope_llama3_factor > 0;
        const gguf::TensorInfo *t = f.find_tensor(s.name);
        if (!want) {
            EXPECT_EQ(t, nullptr) << s.name;
            continue;
        }
        ++expected;
        ASSERT_NE(t, nullptr) << "missing " << s.name;
        ASSERT_EQ(t->n_dims, (int)s.ne.size()) << s.name;
        for (size_t d = 0; d < s.ne.size(); ++d) EXPECT_EQ(t->ne[d], s.ne[d]) << s.name << " dim " << d;
    }
    EXPECT_EQ(f.tensors().size(), expected);
    ASSERT_EQ(r.tensors.size(), f.tensors().size());
    for (const auto &t : r.tensors) EXPECT_EQ(f.tensor(t.name).type, t.type) << t.name;
}

void expect_runs(const Model &m) {
    SessionOptions so;
    so.n_ctx = 64;
    so.n_threads = 2;
    Session s(m, so);
    const std::vector<int32_t> tokens = {1, 17, 42, 100, (int32_t)m.config().n_vocab - 1};
    s.eval(tokens, true);
    const auto &logits = s.logits();
    ASSERT_EQ(logits.size(), tokens.size() * (size_t)m.config().n_vocab);
    float lo = logits[0], hi = logits[0];
    for (float x : logits) {
        ASSERT_TRUE(std::isfinite(x));
        lo = std::min(lo, x);
        hi = std::max(hi, x);
    }
    EXPECT_GT(hi - lo, 1e-4f) << "logits are constant";
}

struct Cli {
    int code;
    std::string err;
};

std::string quote(const std::string &s) { return "'" + s + "'"; }

Cli run_toy(const std::string &args) {
    TempDir dir;
    const std::string err = dir.file("stderr");
    const std::string cmd = quote(toy::test::toy_bin()) + " " + args + " >/dev/null 2>" + quote(err);
    int st = std::system(cmd.c_str());
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_bytes(err)};
}

}  // namespace

TEST(Init, EveryArchitectureLoadsAndRuns) {
    const InitType types[] = {InitType::F16, InitType::Q8_0, InitType::Q4_K, InitType::Q4_K_M, InitType::Q4_0,
                              InitType::Q5_K, InitType::Q6_K};
    int k = 0;
    for (const std::string &arch : supported_architectures()) {
        for (InitType type : {InitType::F32, types[k++ % std::size(types)]}) {
            SCOPED_TRACE(arch + " " + init_type_name(type));
            TempDir dir;
            InitOptions o = tiny(arch, type);
            const std::string path = dir.file("m.gguf");
            InitResult r = init_model(o, path);
            EXPECT_EQ(r.file_bytes, fs::file_size(path));
            auto m = Model::load(path);
            expect_config(o, m->config());
            expect_tensors(o, r, m->file());
            EXPECT_EQ(m->file().get_int("general.file_type"), init_file_type(type));
            int64_t n = 0;
            for (const auto &t : m->file().tensors()) n += t.n_elements();
            EXPECT_EQ(n, r.n_params);
            expect_runs(*m);
        }
    }
}

TEST(Init, UntiedHeadDimAndExperts) {
    TempDir dir;
    {
        InitOptions o = tiny("qwen3", InitType::Q8_0);
        o.head_dim = 32;  // != n_embd / n_head: written as key_length / value_length
        o.tied = false;
        InitResult r = init_model(o, dir.file("a.gguf"));
        auto m = Model::load(dir.file("a.gguf"));
        expect_config(o, m->config());
        expect_tensors(o, r, m->file());
        EXPECT_NE(m->weights().output, m->weights().tok_embd);
        expect_runs(*m);
    }
    {
        InitOptions o = tiny("llama", InitType::F16);  // Mixtral-style experts on llama
        o.n_expert = 4;
        o.n_expert_used = 2;
        InitResult r = init_model(o, dir.file("b.gguf"));
        auto m = Model::load(dir.file("b.gguf"));
        expect_config(o, m->config());
        expect_tensors(o, r, m->file());
        EXPECT_EQ(m->file().tensor("blk.0.ffn_gate_inp.weight").type, GGML_TYPE_F32);
        expect_runs(*m);
    }
    {
        InitOptions o = tiny("gemma2", InitType::F32);
        o.n_swa = 2;  // exercised by 5 tokens
        init_model(o, dir.file("c.gguf"));
        auto m = Model::load(dir.file("c.gguf"));
        expect_config(o, m->config());
        EXPECT_TRUE(m->config().layer_uses_swa(0));
        EXPECT_FALSE(m->config().layer_uses_swa(1));
        expect_runs(*m);
    }
}

TEST(Init, Llama3RopeFactorsAsTheConverterWritesThem) {
    TempDir dir;
    InitOptions o = preset_options("llama-3.2-1b", "");
    o.n_embd = 256;
    o.n_layer = 1;
    o.n_head = 4;
    o.n_head_kv = 1;
    o.n_ff = 256;
    o.n_vocab = 300;
    o.n_ctx = 64;
    InitResult r = init_model(o, dir.file("l3.gguf"));
    auto m = Model::load(dir.file("l3.gguf"));
    expect_config(o, m->config());
    expect_tensors(o, r, m->file());
    EXPECT_FALSE(m->file().has("llama.rope.scaling.type"));  // llama.cpp has no "llama3" scaling type
    ASSERT_NE(m->weights().rope_freqs, nullptr);
    std::array<int64_t, 4> ne{};
    std::vector<float> f = m->read_weight("rope_freqs.weight", &ne);
    ASSERT_EQ(ne[0], 32);
    // Llama 3.1's rule with factor 32, low 1, high 4, original context 8192, base 5e5.
    for (int i = 0; i < 32; ++i) {
        const double freq = std::pow(500000.0, -2.0 * i / 64);
        const double wavelen = 2 * std::numbers::pi / freq;
        double want;
        if (wavelen < 8192.0 / 4) {
            want = 1;
        } else if (wavelen > 8192.0 / 1) {
            want = 32;
        } else {
            const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
            want = 1 / ((1 - smooth) / 32 + smooth);
        }
        EXPECT_NEAR(f[i], want, 1e-4 * want) << i;
    }
    EXPECT_FLOAT_EQ(f[0], 1.0f);
    EXPECT_FLOAT_EQ(f[31], 32.0f);
    expect_runs(*m);
}

TEST(Init, QuantizationMixFollowsLlamaCpp) {
    TempDir dir;
    auto types_of = [](const InitResult &r) {
        std::map<std::string, ggml_type> t;
        for (const auto &x : r.tensors) t[x.name] = x.type;
        return t;
    };
    {   // Q4_K_M, 8 layers: attn_v and ffn_down of layers 0, 3, 6, 7 get Q6_K; tied embedding Q6_K
        InitOptions o = tiny("llama", InitType::Q4_K_M);
        o.n_layer = 8;
        auto t = types_of(init_model(o, dir.file("a.gguf")));
        EXPECT_EQ(t["token_embd.weight"], GGML_TYPE_Q6_K);
        EXPECT_EQ(t["output_norm.weight"], GGML_TYPE_F32);
        const std::set<int> more = {0, 3, 6, 7};
        for (int il = 0; il < 8; ++il) {
            const ggml_type want = more.count(il) ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
            EXPECT_EQ(t[fmt::format("blk.{}.attn_v.weight", il)], want) << il;
            EXPECT_EQ(t[fmt::format("blk.{}.ffn_down.weight", il)], want) << il;
            EXPECT_EQ(t[fmt::format("blk.{}.attn_q.weight", il)], GGML_TYPE_Q4_K) << il;
            EXPECT_EQ(t[fmt::format("blk.{}.ffn_up.weight", il)], GGML_TYPE_Q4_K) << il;
            EXPECT_EQ(t[fmt::format("blk.{}.attn_norm.weight", il)], GGML_TYPE_F32) << il;
        }
    }
    {   // untied: the embedding keeps Q4_K, the output gets Q6_K
        InitOptions o = tiny("llama", InitType::Q4_K_M);
        o.tied = false;
        auto t = types_of(init_model(o, dir.file("b.gguf")));
        EXPECT_EQ(t["token_embd.weight"], GGML_TYPE_Q4_K);
        EXPECT_EQ(t["output.weight"], GGML_TYPE_Q6_K);
    }
    {   // rows of 320: Q4_K falls back to Q5_0, the tied embedding/output to Q8_0 (SmolLM2's 576 does the same)
        InitOptions o = tiny("llama", InitType::Q4_K_M);
        o.n_embd = 320;
        o.n_head = 5;
        o.n_head_kv = 5;
        InitResult r = init_model(o, dir.file("c.gguf"));
        auto t = types_of(r);
        EXPECT_EQ(t["token_embd.weight"], GGML_TYPE_Q8_0);
        EXPECT_EQ(t["blk.0.attn_q.weight"], GGML_TYPE_Q5_0);
        EXPECT_EQ(t["blk.1.attn_v.weight"], GGML_TYPE_Q8_0);      // Q6_K -> Q8_0
        EXPECT_EQ(t["blk.0.ffn_down.weight"], GGML_TYPE_Q4_K);    // rows of n_ff = 256
        EXPECT_FALSE(r.notes.empty());
        auto m = Model::load(dir.file("c.gguf"));
        expect_runs(*m);
    }
    {   // pure types: Q5_K -> Q5_1, Q6_K -> Q8_0; 32-block types on rows of 48 -> F16
        InitOptions o = tiny("llama", InitType::Q5_K);
        o.n_embd = 320;
        o.n_head = 5;
        o.n_head_kv = 5;
        EXPECT_EQ(types_of(init_model(o, dir.file("d.gguf")))["blk.0.attn_k.weight"], GGML_TYPE_Q5_1);
        o.type = InitType::Q6_K;
        EXPECT_EQ(types_of(init_model(o, dir.file("e.gguf")))["blk.0.attn_k.weight"], GGML_TYPE_Q8_0);
        o = tiny("llama", InitType::Q8_0);
        o.n_embd = 48;
        o.n_head = 4;
        o.n_head_kv = 2;
        auto t = types_of(init_model(o, dir.file("f.gguf")));
        EXPECT_EQ(t["blk.0.attn_q.weight"], GGML_TYPE_F16);
        EXPECT_EQ(t["blk.0.ffn_down.weight"], GGML_TYPE_Q8_0);  // rows of 256
        auto m = Model::load(dir.file("f.gguf"));
        expect_runs(*m);
    }
}

TEST(Init, WeightStatistics) {
    TempDir dir;
    InitOptions o = tiny("llama", InitType::F32);
    o.n_layer = 8;
    init_model(o, dir.file("s.gguf"));
    auto m = Model::load(dir.file("s.gguf"));
    auto stddev = [&](const std::string &name) {
        std::vector<float> v = m->read_weight(name);
        double s = 0, s2 = 0;
        for (float x : v) {
            s += x;
            s2 += (double)x * x;
        }
        const double mean = s / v.size();
        EXPECT_NEAR(mean, 0.0, 0.002) << name;
        return std::sqrt(s2 / v.size() - mean * mean);
    };
    EXPECT_NEAR(stddev("token_embd.weight"), 0.02, 0.001);
    EXPECT_NEAR(stddev("blk.0.attn_q.weight"), 0.02, 0.001);
    EXPECT_NEAR(stddev("blk.0.ffn_up.weight"), 0.02, 0.001);
    EXPECT_NEAR(stddev("blk.3.attn_output.weight"), 0.02 / std::sqrt(16.0), 0.0005);
    EXPECT_NEAR(stddev("blk.5.ffn_down.weight"), 0.02 / std::sqrt(16.0), 0.0005);
    for (float x : m->read_weight("blk.2.ffn_norm.weight")) ASSERT_EQ(x, 1.0f);
    // different tensors draw different numbers
    EXPECT_NE(m->read_weight("blk.0.attn_q.weight"), m->read_weight("blk.1.attn_q.weight"));
}

TEST(Init, SeedDeterminism) {
    TempDir dir;
    InitOptions o = tiny("qwen2", InitType::Q4_K_M);
    o.seed = 7;
    o.n_threads = 1;
    init_model(o, dir.file("a.gguf"));
    o.n_threads = 3;  // chunks are seeded, so threads do not change the bytes
    init_model(o, dir.file("b.gguf"));
    o.seed = 8;
    init_model(o, dir.file("c.gguf"));
    const std::string a = read_bytes(dir.file("a.gguf"));
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, read_bytes(dir.file("b.gguf")));
    const std::string c = read_bytes(dir.file("c.gguf"));
    EXPECT_EQ(a.size(), c.size());
    EXPECT_NE(a, c);
}

TEST(Init, PresetsDescribeTheRealModels) {
    struct Want {
        const char *preset, *arch;
        int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
        float rope_base, eps;
        bool tied, llama3;
    };
    const Want wants[] = {
        {"smollm2-135m", "llama", 576, 30, 9, 3, 1536, 49152, 8192, 1e5f, 1e-5f, true, false},
        {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1e6f, 1e-6f, true, false},
        {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 5e5f, 1e-5f, true, true},
        {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 1e4f, 1e-5f, false, false},
    };
    for (const Want &w : wants) {
        SCOPED_TRACE(w.preset);
        InitOptions o = preset_options(w.preset, "");
        EXPECT_EQ(o.arch, w.arch);
        EXPECT_EQ(o.tied, w.tied);
        EXPECT_EQ(o.rope_llama3_factor > 0, w.llama3);
        const Config c = init_config(o);  // metadata only: cheap even for 1B models
        EXPECT_EQ(c.name, w.preset);
        EXPECT_EQ(c.n_embd, w.n_embd);
        EXPECT_EQ(c.n_layer, w.n_layer);
        EXPECT_EQ(c.n_head, w.n_head);
        EXPECT_EQ(c.n_head_kv, w.n_head_kv);
        EXPECT_EQ(c.n_ff, w.n_ff);
        EXPECT_EQ(c.n_vocab, w.n_vocab);
        EXPECT_EQ(c.n_ctx_train, w.n_ctx);
        EXPECT_FLOAT_EQ(c.rope.freq_base, w.rope_base);
        EXPECT_FLOAT_EQ(c.norm_eps, w.eps);
    }
    EXPECT_EQ(preset_options("custom", "gemma2").attn_softcap, 50.0f);
    EXPECT_GT(preset_options("custom", "qwen3moe").n_expert, 0);
    EXPECT_THROW(preset_options("custom", ""), Error);
    EXPECT_THROW(preset_options("smollm2-135m", "qwen2"), Error);
    EXPECT_THROW(preset_options("gpt-5", ""), Error);
    EXPECT_THROW(parse_init_type("q3_k"), Error);
    EXPECT_EQ(parse_init_type("Q4_K_M"), InitType::Q4_K_M);
}

TEST(Init, SyntheticTokenizers) {
    TempDir dir;
    for (const char *arch : {"llama", "gpt2"}) {
        SCOPED_TRACE(arch);
        InitOptions o = tiny(arch, InitType::F32);
        o.n_vocab = 5000;
        init_model(o, dir.file("t.gguf"));
        auto f = gguf::File::open(dir.file("t.gguf"));
        const auto &tokens = f->get_string_array("tokenizer.ggml.tokens");
        ASSERT_EQ((int64_t)tokens.size(), o.n_vocab);
        std::set<std::string> distinct(tokens.begin(), tokens.end());
        EXPECT_EQ(distinct.size(), tokens.size());  // llama.cpp aborts on duplicates
        const auto types = f->get_int_array("tokenizer.ggml.token_type");
        ASSERT_EQ(types.size(), tokens.size());
        if (std::string(arch) == "llama") {
            EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
            EXPECT_EQ(tokens[0], "<unk>");
            EXPECT_EQ(tokens[1], "<s>");
            EXPECT_EQ(tokens[2], "</s>");
            EXPECT_EQ(tokens[3 + 0x0A], "<0x0A>");
            EXPECT_EQ(types[3 + 0x41], 6);
            EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores").size(), tokens.size());
            EXPECT_TRUE(f->get_bool("tokenizer.ggml.add_bos_token"));
        } else {
            EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
            EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "gpt-2");
            EXPECT_EQ(tokens.back(), "<|endoftext|>");
            EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), o.n_vocab - 1);
            // every merge joins two tokens into a third
            for (const auto &merge : f->get_string_array("tokenizer.ggml.merges")) {
                const size_t sp = merge.find(' ', 1);
                ASSERT_NE(sp, std::string::npos) << merge;
                const std::string l = merge.substr(0, sp), r = merge.substr(sp + 1);
                ASSERT_TRUE(distinct.count(l) && distinct.count(r) && distinct.count(l + r)) << merge;
            }
        }
        // toy's own tokenizer reads it and round-trips text
        text::Vocab v = text::Vocab::load(*f);
        EXPECT_EQ(v.n_tokens(), o.n_vocab);
        const std::vector<int32_t> ids = v.tokenize("hello world, 42!", false);
        EXPECT_FALSE(ids.empty());
        EXPECT_EQ(v.detokenize(ids), "hello world, 42!");
    }
}

TEST(Init, CliWritesAModel) {
    TempDir dir;
    const std::string out = dir.file("q.gguf");
    Cli r = run_toy("init --arch qwen2 --type q8_0 --n-layer 1 --n-vocab 400 -s 3 -o " + quote(out));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("parameters"), std::string::npos) << r.err;
    auto m = Model::load(out);
    EXPECT_EQ(m->config().arch, "qwen2");
    EXPECT_EQ(m->config().n_layer, 1);
    EXPECT_EQ(m->config().n_vocab, 400);
    EXPECT_EQ(m->file().get_int("general.file_type"), 7);
    expect_runs(*m);

    // a preset with overrides keeps the preset's other choices
    const std::string p = dir.file("p.gguf");
    r = run_toy("init --preset tinyllama-1.1b --n-embd 256 --n-layer 1 --n-head 4 --n-head-kv 2 --n-ff 256 "
                "--n-vocab 300 --type f16 -o " + quote(p));
    ASSERT_EQ(r.code, 0) << r.err;
    auto t = Model::load(p);
    EXPECT_EQ(t->config().name, "tinyllama-1.1b");
    EXPECT_EQ(t->config().n_ctx_train, 2048);
    EXPECT_TRUE(t->file().has_tensor("output.weight"));
}

TEST(Init, BadFlagsAreOneLineErrors) {
    TempDir dir;
    const std::string out = dir.file("bad.gguf");
    const std::string o = " -o " + quote(out);
    const std::pair<std::string, std::string> cases[] = {
        {"init --arch mamba" + o, "--arch"},
        {"init --preset gpt-5" + o, "--preset"},
        {"init --arch llama --type q3_k" + o, "--type"},
        {"init --preset custom" + o, "--arch"},
        {"init --preset smollm2-135m --arch qwen2" + o, "--arch"},
        {"init --arch llama --n-embd 100 --n-head 3" + o, "--n-head"},
        {"init --arch llama --n-head 4 --n-head-kv 3" + o, "--n-head-kv"},
        {"init --arch llama --n-layer 0" + o, "--n-layer"},
        {"init --arch llama --n-embd 0" + o, "--n-embd"},
        {"init --arch llama --n-vocab 100" + o, "--n-vocab"},
        {"init --arch qwen3moe --n-expert 0" + o, "--n-expert"},
        {"init --arch qwen2 --n-expert 4" + o, "--n-expert"},
        {"init --arch olmoe --n-expert 4 --n-expert-used 5" + o, "--n-expert-used"},
        {"init --arch gemma2 --untied" + o, "--untied"},
        {"init --arch llama --attn-softcap 30" + o, "softcap"},
        {"init --arch llama --n-embd 96 --n-head 4 --head-dim 7" + o, "--head-dim"},
        {"init --arch gpt2 --rope-scaling llama3" + o, "--rope-scaling"},
        {"init --arch llama --rope-scaling yarn" + o, "--rope-scaling"},
        {"init --arch llama --rope-scale 4" + o, "--rope-scaling llama3"},
        {"init --arch llama", "-o"},
        {"init --arch llama --tied --untied" + o, "--tied"},
        {"init --arch llama -o " + quote(dir.file("no/such/dir/x.gguf")), "no/such/dir"},
    };
    for (const auto &[args, needle] : cases) {
        SCOPED_TRACE(args);
        Cli r = run_toy(args);
        EXPECT_EQ(r.code, 1);
        ASSERT_FALSE(r.err.empty());
        EXPECT_EQ(r.err.rfind("toy: error: ", 0), 0u) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(out));
    }
}
