// toy convert (issue 15): Hugging Face and llama2.c checkpoints to GGUF.
//
// References (tests/data/convert, made by scripts/make-convert-reference.sh
// with the pinned bundle's own convert_hf_to_gguf.py and llama.cpp's
// refdump): for a tiny random checkpoint of every architecture toy runs and
// every --outtype, toy's file has the same tensors, byte for byte, and the
// same metadata; run, it gives llama.cpp's logits and greedy tokens. The
// real TinyStories-656K checkpoint converts, runs like llama.cpp and
// tokenizes as Hugging Face's tokenizer does; the llama2.c stories260K gives
// the logits of stories260K.gguf.
#include "convert/hf_model.h"
#include "convert/hf_tokenizer.h"
#include "convert/llama2c.h"
#include "convert/output.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "runtime/session.h"
#include "text/pre_tokenizer.h"
#include "text/vocab.h"
#include "test_util.h"
#include "vocab_cases.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

using namespace toy;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kData = std::string(TOY_SOURCE_DIR) + "/tests/data/convert";

const std::vector<std::string> kCheckpoints = {"gemma2", "gpt2", "granite", "llama", "llama3-rope", "mistral",
                                               "mixtral", "olmoe", "qwen2", "qwen3", "qwen3moe"};

uint64_t fnv1a64(const void *data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
    const auto *p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

std::string hex(uint64_t h) { return fmt::format("{:016x}", h); }

struct StBytes {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::string bytes;
};

void write_safetensors(const fs::path &path, const std::vector<StBytes> &tensors) {
    json header = json::object();
    std::string data;
    for (const auto &t : tensors) {
        header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
        data += t.bytes;
    }
    const std::string h = header.dump();
    const uint64_t n = h.size();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(&n), 8);
    out << h << data;
}

StBytes bytes_of(const convert::StTensor &t) {
    return {t.name, t.dtype, t.shape, std::string(reinterpret_cast<const char *>(t.data), t.nbytes)};
}

// A copy of a test checkpoint's directory without its weights.
fs::path checkpoint_dir_without_weights(const test::TempDir &tmp, const std::string &name, const std::string &as) {
    const fs::path d = tmp.path / as;
    fs::create_directories(d);
    for (const char *f : {"config.json", "tokenizer.model", "tokenizer_config.json"}) fs::copy_file(kData + "/hf/" + name + "/" + f, d / f);
    return d;
}

std::string convert_hf_to(const std::string &dir, convert::OutType type, const std::string &path) {
    convert::Converted m;
    convert::convert_hf(dir, m);
    convert::write_converted(m, type, path, 2);
    return path;
}

// Does toy's value equal describe_gguf.py's description of the reference's?
bool same_value(const gguf::Value &v, const json &ref) {
    using gguf::ValueType;
    if (ref.is_object()) {  // a long array: length and hash of its raw elements
        if (v.type != ValueType::ARRAY || v.n != ref["n"].get<uint64_t>()) return false;
        uint64_t h = 0xcbf29ce484222325ull;
        if (v.elem_type == ValueType::STRING) {
            for (const auto &s : v.strings) {
                const uint64_t len = s.size();
                h = fnv1a64(&len, 8, h);
                h = fnv1a64(s.data(), s.size(), h);
            }
        } else {
            h = fnv1a64(v.raw.data(), v.raw.size(), h);
        }
        return hex(h) == ref["fnv1a64"].get<std::string>();
    }
    if (ref.is_array()) {
        if (v.type != ValueType::ARRAY || v.n != ref.size()) return false;
        for (size_t k = 0; k < ref.size(); ++k) {
            if (v.elem_type == ValueType::STRING ? v.strings[k] != ref[k].get<std::string>()
                                                 : v.number_at(k) != ref[k].get<double>()) {
                return false;
            }
        }
        return true;
    }
    if (ref.is_boolean()) return v.type == ValueType::BOOL && (v.u != 0) == ref.get<bool>();
    if (ref.is_string()) return v.type == ValueType::STRING && v.s == ref.get<std::string>();
    if (v.is_integer()) return ref.is_number_integer() && (v.type == ValueType::INT32 || v.type == ValueType::INT64 ? v.i == ref.get<int64_t>() : (int64_t)v.u == ref.get<int64_t>());
    if (v.is_float()) return ref.is_number() && v.f == ref.get<double>();
    return false;
}

struct Allowed {
    std::set<std::string> keys;                  // metadata keys allowed to differ
    std::map<std::string, std::string> renamed;  // reference tensor name -> toy's
};

// Every difference between toy's file and the reference description, one line each.
std::vector<std::string> differences(const std::string &path, const json &ref, const Allowed &allowed = {}) {
    auto f = gguf::File::open(path);
    std::vector<std::string> diff;
    std::set<std::string> seen;
    for (const auto &[key, want] : ref["metadata"].items()) {
        seen.insert(key);
        if (allowed.keys.count(key)) continue;
        const gguf::Value *v = f->find(key);
        if (!v) diff.push_back("missing key " + key);
        else if (!same_value(*v, want)) diff.push_back(fmt::format("key {}: {} where the reference has {}", key, v->to_string(), want.dump().substr(0, 80)));
    }
    for (const auto &kv : f->metadata()) {
        if (!kv.key.starts_with("general.") && !seen.count(kv.key) && !allowed.keys.count(kv.key)) diff.push_back("extra key " + kv.key);
    }
    std::set<std::string> names;
    for (const auto &[ref_name, want] : ref["tensors"].items()) {
        auto it = allowed.renamed.find(ref_name);
        const std::string name = it == allowed.renamed.end() ? ref_name : it->second;
        names.insert(name);
        const gguf::TensorInfo *t = f->find_tensor(name);
        if (!t) {
            diff.push_back("missing tensor " + name);
            continue;
        }
        std::string type = ggml_type_name(t->type);
        std::transform(type.begin(), type.end(), type.begin(), ::toupper);
        std::vector<int64_t> ne(t->ne.begin(), t->ne.begin() + t->n_dims);
        if (type != want[0].get<std::string>()) diff.push_back(fmt::format("tensor {}: type {} where the reference has {}", name, type, want[0].get<std::string>()));
        if (ne != want[1].get<std::vector<int64_t>>()) diff.push_back(fmt::format("tensor {}: shape {}", name, t->shape_string()));
        if (hex(fnv1a64(f->tensor_data(*t), t->nbytes)) != want[2].get<std::string>()) diff.push_back(fmt::format("tensor {}: other bytes", name));
    }
    for (const auto &t : f->tensors()) {
        if (!names.count(t.name)) diff.push_back("extra tensor " + t.name);
    }
    return diff;
}

std::string joined(const std::vector<std::string> &v) {
    std::string s;
    for (const auto &x : v) s += "\n  " + x;
    return s;
}

// The logits of every token of refdump's teacher-forced ids, and the greedy continuation.
void expect_llama_cpp_outputs(const std::string &model_path, const std::string &ref_prefix, size_t n_greedy) {
    const json meta = test::read_json(ref_prefix + ".json");
    const std::vector<float> want = test::read_f32(kData + "/" + meta["logits_file"].get<std::string>());
    const auto tokens = meta["tokens"].get<std::vector<int32_t>>();
    auto model = Model::load(model_path);
    SessionOptions o;
    o.n_ctx = 256;
    o.n_threads = 2;
    o.type_k = o.type_v = GGML_TYPE_F32;
    o.flash_attn = FlashAttn::Off;
    Session s(*model, o);
    s.eval(tokens, true);
    const auto st = test::compare_rows(s.logits(), want, meta["n_vocab"].get<size_t>());
    EXPECT_LE(st.d_max, 1e-3) << model_path;
    EXPECT_EQ(st.argmax_equal, 1.0) << model_path;

    const auto greedy = meta["greedy"].get<std::vector<int32_t>>();
    const size_t n_prompt = meta["greedy_prompt_len"].get<size_t>();
    s.reset();
    s.eval(std::span<const int32_t>(tokens.data(), n_prompt));
    std::vector<int32_t> got;
    for (size_t i = 0; i < std::min(n_greedy, greedy.size()); ++i) {
        int32_t next = test::argmax(s.last_logits(), s.n_vocab());
        got.push_back(next);
        s.eval(std::span<const int32_t>(&next, 1));
    }
    EXPECT_EQ(got, std::vector<int32_t>(greedy.begin(), greedy.begin() + (ptrdiff_t)got.size())) << model_path;
}

}  // namespace

TEST(Convert, EveryArchitectureAndOutTypeMatchesLlamaCppsConverter) {
    test::TempDir tmp;
    int compared = 0;
    for (const auto &name : kCheckpoints) {
        for (const char *type : {"f32", "f16", "bf16", "q8_0", "auto"}) {
            const std::string out = convert_hf_to(kData + "/hf/" + name, convert::parse_out_type(type), tmp.file(name + "." + type + ".gguf"));
            const auto diff = differences(out, test::read_json(kData + "/" + name + "." + type + ".json"));
            EXPECT_TRUE(diff.empty()) << name << " --outtype " << type << ":" << joined(diff);
            ++compared;
        }
    }
    EXPECT_EQ(compared, 55);
}

TEST(Convert, ConvertedCheckpointsRunLikeLlamaCpp) {
    test::TempDir tmp;
    for (const auto &name : kCheckpoints) {
        SCOPED_TRACE(name);
        const std::string out = convert_hf_to(kData + "/hf/" + name, convert::OutType::F32, tmp.file(name + ".gguf"));
        expect_llama_cpp_outputs(out, kData + "/" + name, 8);
    }
}

// TinyStories-656K, a real Hugging Face checkpoint. Two differences from the
// bundle's converter, both deliberate:
// - its tied embedding is stored as lm_head.weight only; the reference names
//   it output.weight and its file has no token_embd.weight, which llama.cpp
//   refuses to load; toy writes it as token_embd.weight (same bytes);
// - its tokenizer is a byte-fallback BPE; the reference gives every token the
//   score -1000, so llama's score-driven merging picks pairs left to right
//   and splits text unlike Hugging Face; toy scores tokens by merge rank.
TEST(Convert, TinyStoriesConvertsRunsAndTokenizesLikeHuggingFace) {
    test::TempDir tmp;
    const std::string src = test::shared_path("models/TinyStories-656K");
    const std::string out = convert_hf_to(src, convert::OutType::F32, tmp.file("tinystories.gguf"));
    Allowed allowed;
    allowed.keys = {"tokenizer.ggml.scores", "tokenizer.ggml.add_sep_token"};
    allowed.renamed = {{"output.weight", "token_embd.weight"}};
    const auto diff = differences(out, test::read_json(kData + "/tinystories.f32.json"), allowed);
    EXPECT_TRUE(diff.empty()) << joined(diff);

    expect_llama_cpp_outputs(out, kData + "/tinystories", 32);

    auto f = gguf::File::open(out);
    const text::Vocab vocab = text::Vocab::load(*f);
    int n = 0;
    for (const auto &c : test::read_json(kData + "/tinystories.hf_tokens.json")) {
        const std::string text = c["text"];
        EXPECT_EQ(vocab.tokenize(text, false), c["ids"].get<std::vector<int32_t>>()) << "'" << text << "'";
        EXPECT_EQ(vocab.detokenize(vocab.tokenize(text, false)), text);
        ++n;
    }
    EXPECT_EQ(n, 10);
}

TEST(Convert, Llama2cCheckpointGivesStories260KLogits) {
    test::TempDir tmp;
    convert::Converted m;
    convert::convert_llama2c(test::shared_path("models/stories260K.bin"), test::shared_path("models/tok512.bin"), m);
    const std::string out = tmp.file("stories.gguf");
    convert::write_converted(m, convert::OutType::F32, out, 2);

    auto ours = Model::load(out);
    auto ref = Model::load(test::shared_path("models/stories260K.gguf"));
    const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 64, 259, 300, 411, 290};
    SessionOptions o;
    o.n_threads = 2;
    Session a(*ours, o), b(*ref, o);
    a.eval(tokens, true);
    b.eval(tokens, true);
    EXPECT_EQ(a.logits(), b.logits());  // the same weights: the same numbers

    auto fa = gguf::File::open(out), fb = gguf::File::open(test::shared_path("models/stories260K.gguf"));
    for (const char *key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
        EXPECT_TRUE(*fa->find(key) == *fb->find(key)) << key;
    }
    const text::Vocab va = text::Vocab::load(*fa), vb = text::Vocab::load(*fb);
    const std::string story = "Once upon a time, there was a little girl named Lily.";
    EXPECT_EQ(va.tokenize(story, true), vb.tokenize(story, true));
}

// A byte-level BPE tokenizer.json, written from llama.cpp's vocabulary files
// with the pre-tokenizer its model's tokenizer.json has, converts back to the
// same vocabulary, merges and pre-tokenizer behaviour, and passes the
// vocabulary's test vectors.
TEST(Convert, ByteLevelTokenizerJsonConvertsToTheSameVocabulary) {
    const std::string kLlama3 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string kQwen2 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    auto split_then_byte_level = [&](const std::string &re) {
        return json{{"type", "Sequence"},
                    {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}}, byte_level}}};
    };
    struct Case {
        std::string vocab;
        json pre;
        bool ignore_merges, clean;
    };
    const std::vector<Case> cases = {
        {"gpt-2", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}, false, true},
        {"llama-bpe", split_then_byte_level(kLlama3), true, true},
        {"qwen2", split_then_byte_level(kQwen2), false, false},
        {"starcoder", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
                        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}}, false, true},
    };
    test::TempDir tmp;
    for (const Case &c : cases) {
        SCOPED_TRACE(c.vocab);
        const std::string src = std::string(TOY_LLAMA_SOURCE_DIR) + "/models/ggml-vocab-" + c.vocab + ".gguf";
        auto f = gguf::File::open(src);
        const auto &tokens = f->get_string_array("tokenizer.ggml.tokens");
        const auto types = f->get_int_array("tokenizer.ggml.token_type");
        json vocab = json::object(), added = json::array();
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (types[i] == 3 || types[i] == 4) {
                added.push_back({{"id", i}, {"content", tokens[i]}, {"special", types[i] == 3}, {"normalized", false}});
            }
            vocab[tokens[i]] = i;
        }
        json tj = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", f->get_string_array("tokenizer.ggml.merges")},
                              {"ignore_merges", c.ignore_merges}}},
                   {"added_tokens", added}, {"pre_tokenizer", c.pre}, {"decoder", {{"type", "ByteLevel"}}}};
        const fs::path dir = tmp.path / c.vocab;
        fs::create_directories(dir);
        std::ofstream(dir / "tokenizer.json") << tj.dump();
        std::ofstream(dir / "tokenizer_config.json") << json{{"clean_up_tokenization_spaces", c.clean}}.dump();

        convert::Converted m;
        convert::add_hf_tokenizer(dir.string(), json::object(), (int64_t)tokens.size(), m);
        EXPECT_EQ(m.find("tokenizer.ggml.model")->s, "gpt2");
        EXPECT_EQ(m.find("tokenizer.ggml.tokens")->strings, tokens);
        EXPECT_EQ(m.find("tokenizer.ggml.merges")->strings, f->get_string_array("tokenizer.ggml.merges"));
        const std::string pre = m.find("tokenizer.ggml.pre")->s;
        EXPECT_EQ(text::find_bpe_style(pre)->regexes, text::find_bpe_style(f->get_string("tokenizer.ggml.pre"))->regexes) << pre;

        // the converted tokenizer passes the vocabulary's test vectors
        gguf::Writer w;
        for (const auto &kv : m.metadata) w.set(kv.key, kv.value);
        w.set("general.architecture", gguf::Value::str("llama"));
        const std::string out = tmp.file(c.vocab + ".gguf");
        w.write(out);
        const text::Vocab v = text::Vocab::load(*gguf::File::open(out));
        int n = 0;
        for (const auto &tc : test::read_cases(src)) {
            EXPECT_EQ(v.tokenize(tc.text, false, false), tc.ids) << "'" << tc.text << "'";
            ++n;
        }
        EXPECT_GT(n, 20);
    }
}

// The same checkpoint cut into shards listed by model.safetensors.index.json
// converts to the same file.
TEST(Convert, ShardedCheckpointConvertsLikeOneFile) {
    test::TempDir tmp;
    const fs::path d = checkpoint_dir_without_weights(tmp, "mixtral", "sharded");
    auto st = convert::Safetensors::open_file(kData + "/hf/mixtral/model.safetensors");
    // shard k holds the tensors whose index is k mod 3
    const int n_shards = 3;
    json map = json::object();
    for (int k = 0; k < n_shards; ++k) {
        const std::string file = fmt::format("model-{:05}-of-{:05}.safetensors", k + 1, n_shards);
        std::vector<StBytes> shard;
        for (size_t i = k; i < st->tensors().size(); i += n_shards) {
            shard.push_back(bytes_of(st->tensors()[i]));
            map[st->tensors()[i].name] = file;
        }
        write_safetensors(d / file, shard);
    }
    std::ofstream(d / "model.safetensors.index.json") << json{{"metadata", json::object()}, {"weight_map", map}}.dump();
    const std::string out = convert_hf_to(d.string(), convert::OutType::BF16, tmp.file("sharded.gguf"));
    const auto diff = differences(out, test::read_json(kData + "/mixtral.bf16.json"));
    EXPECT_TRUE(diff.empty()) << joined(diff);
}

// Newer transformers save a layer's experts fused: gate_up_proj [n_expert,
// 2 n_ff, n_embd] and down_proj [n_expert, n_embd, n_ff]. Same GGUF.
TEST(Convert, FusedExpertTensorsConvertLikePerExpertOnes) {
    test::TempDir tmp;
    const fs::path d = checkpoint_dir_without_weights(tmp, "qwen3moe", "fused");
    auto st = convert::Safetensors::open_file(kData + "/hf/qwen3moe/model.safetensors");
    const int n_expert = 4;
    std::vector<StBytes> out;
    for (const auto &t : st->tensors()) {
        if (t.name.find(".mlp.experts.") == std::string::npos) out.push_back(bytes_of(t));
    }
    for (int l = 0; l < 2; ++l) {
        const std::string p = fmt::format("model.layers.{}.mlp.experts.", l);
        StBytes gate_up{p + "gate_up_proj", "BF16", {}, ""}, down{p + "down_proj", "BF16", {}, ""};
        for (int e = 0; e < n_expert; ++e) {
            const auto &g = st->get(fmt::format("{}{}.gate_proj.weight", p, e));
            const auto &u = st->get(fmt::format("{}{}.up_proj.weight", p, e));
            const auto &dn = st->get(fmt::format("{}{}.down_proj.weight", p, e));
            gate_up.bytes += bytes_of(g).bytes + bytes_of(u).bytes;
            down.bytes += bytes_of(dn).bytes;
            gate_up.shape = {n_expert, 2 * g.shape[0], g.shape[1]};
            down.shape = {n_expert, dn.shape[0], dn.shape[1]};
        }
        out.push_back(gate_up);
        out.push_back(down);
    }
    write_safetensors(d / "model.safetensors", out);
    const std::string gguf_path = convert_hf_to(d.string(), convert::OutType::F32, tmp.file("fused.gguf"));
    const auto diff = differences(gguf_path, test::read_json(kData + "/qwen3moe.f32.json"));
    EXPECT_TRUE(diff.empty()) << joined(diff);
}

// --outtype of a quantized file type: the checkpoint converted to F32, then
// toy quantize's mix; the same file as the two steps by hand.
TEST(Convert, QuantizedOutTypeEqualsConvertingThenQuantizing) {
    test::TempDir tmp;
    const std::string src = test::shell_quote(kData + "/hf/qwen2");
    ASSERT_EQ(test::run_toy("convert " + src + " --outtype q4_k_m -o " + tmp.file("direct.gguf")).code, 0);
    ASSERT_EQ(test::run_toy("convert " + src + " --outtype f32 -o " + tmp.file("f32.gguf")).code, 0);
    ASSERT_EQ(test::run_toy("quantize " + tmp.file("f32.gguf") + " " + tmp.file("two-steps.gguf") + " Q4_K_M").code, 0);
    std::ifstream a(tmp.file("direct.gguf"), std::ios::binary), b(tmp.file("two-steps.gguf"), std::ios::binary);
    const std::string da((std::istreambuf_iterator<char>(a)), {}), db((std::istreambuf_iterator<char>(b)), {});
    EXPECT_FALSE(da.empty());
    EXPECT_TRUE(da == db);
    EXPECT_EQ(gguf::File::open(tmp.file("direct.gguf"))->get_int("general.file_type"), 15);
    std::vector<std::string> left;
    for (const auto &e : fs::directory_iterator(tmp.path)) left.push_back(e.path().filename().string());
    EXPECT_EQ(left.size(), 3u) << "the F32 stage is removed";
}

TEST(Convert, BadInputsAreOneLineErrorsAndWriteNothing) {
    test::TempDir tmp;
    const std::string good = kData + "/hf/llama";
    auto copy_of = [&](const std::string &name) {
        const fs::path d = tmp.path / name;
        fs::create_directories(d);
        for (const auto &e : fs::directory_iterator(good)) fs::copy_file(e.path(), d / e.path().filename());
        return d;
    };
    auto expect_error = [&](const std::string &args, const std::string &needle) {
        const std::string out = tmp.file("out.gguf");
        const auto r = test::run_toy("convert " + args + " -o " + test::shell_quote(out));
        EXPECT_EQ(r.code, 1) << args;
        EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_FALSE(fs::exists(out)) << args;
    };
    {  // no config.json
        const fs::path d = copy_of("no-config");
        fs::remove(d / "config.json");
        expect_error(test::shell_quote(d.string()), "config.json is missing");
    }
    {  // JSON nested a million levels: printing or copying it would recurse off the stack
        const fs::path d = copy_of("deep");
        std::ofstream(d / "tokenizer.json") << std::string(1000000, '[') << std::string(1000000, ']');
        expect_error(test::shell_quote(d.string()), "tokenizer.json: JSON nested deeper than 512 levels");
    }
    {  // an architecture toy does not convert
        const fs::path d = copy_of("bert");
        json c = test::read_json((d / "config.json").string());
        c["architectures"] = {"BertForMaskedLM"};
        std::ofstream(d / "config.json") << c.dump();
        expect_error(test::shell_quote(d.string()), "architecture BertForMaskedLM is not one toy converts");
    }
    {  // a shard the index lists is missing
        const fs::path d = copy_of("sharded");
        fs::rename(d / "model.safetensors", d / "model-00001-of-00002.safetensors");
        auto st = convert::Safetensors::open_file((d / "model-00001-of-00002.safetensors").string());
        json map = json::object();
        for (const auto &t : st->tensors()) map[t.name] = t.name.find("layers.1.") != std::string::npos ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
        std::ofstream(d / "model.safetensors.index.json") << json{{"metadata", json::object()}, {"weight_map", map}}.dump();
        expect_error(test::shell_quote(d.string()), "shard model-00002-of-00002.safetensors is missing");
    }
    {  // a truncated checkpoint
        const fs::path d = copy_of("truncated");
        fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 1000);
        expect_error(test::shell_quote(d.string()), "outside the");
    }
    {  // a tokenizer.json of a model type toy does not convert
        const fs::path d = copy_of("wordpiece");
        fs::remove(d / "tokenizer.model");
        std::ofstream(d / "tokenizer.json") << json{{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}}.dump();
        expect_error(test::shell_quote(d.string()), "tokenizer model type WordPiece is not supported");
    }
    {  // fuzz finding: a tokenizer.json that is JSON but not an object (nlohmann's type errors escaped)
        const fs::path d = copy_of("number-tokenizer");
        fs::remove(d / "tokenizer.model");
        std::ofstream(d / "tokenizer.json") << "99999999999999999999";
        expect_error(test::shell_quote(d.string()), "tokenizer model type (none) is not supported");
        std::ofstream(d / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": "zero"}}})";
        expect_error(test::shell_quote(d.string()), "token 'a' has id \"zero\", expected an integer 0..");
        // fuzz finding: a float id past int64's range was converted (undefined behaviour)
        std::ofstream(d / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 1.62e85}}})";
        expect_error(test::shell_quote(d.string()), "token 'a' has id 1.62e+85, expected an integer 0..");
    }
    {  // fuzz finding: 0 key-value heads divided by zero when Q/K rows were permuted
        const fs::path d = copy_of("zero-kv-heads");
        json c = test::read_json((d / "config.json").string());
        c["num_key_value_heads"] = 0;
        std::ofstream(d / "config.json") << c.dump();
        expect_error(test::shell_quote(d.string()), "\"num_key_value_heads\" = 0, expected a positive size");
    }
    {  // fuzz finding: a tokenizer.json object without "model" was read out of bounds
        // (nlohmann's const operator[] on a missing key), and a negative added-token id
        const fs::path d = copy_of("no-model");
        fs::remove(d / "tokenizer.model");
        std::ofstream(d / "tokenizer.json") << R"({"version": "1.0", "added_tokens": []})";
        expect_error(test::shell_quote(d.string()), "tokenizer model type (none) is not supported");
        std::ofstream(d / "tokenizer.json") << R"({"added_tokens": [{"id": -5, "content": "x"}], "model": {"type": "BPE", "vocab": {"a": 0}}})";
        expect_error(test::shell_quote(d.string()), "added token 'x' has id -5, expected 0..");
    }
    {  // config.json values of the wrong type
        const fs::path d = copy_of("bad-config");
        json c = test::read_json((d / "config.json").string());
        c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", "many"}};
        std::ofstream(d / "config.json") << c.dump();
        expect_error(test::shell_quote(d.string()), "unexpected JSON");
    }
    {  // a truncated llama2.c checkpoint
        const std::string bin = tmp.file("short.bin");
        fs::copy_file(test::shared_path("models/stories260K.bin"), bin);
        fs::resize_file(bin, 100000);
        expect_error(bin + " --tokenizer " + test::shell_quote(test::shared_path("models/tok512.bin")), "(truncated)");
    }
    {  // a llama2.c tokenizer with a NaN score (SPM orders its merges by score; the GGUF reader refuses it too)
        std::ifstream in(test::shared_path("models/tok512.bin"), std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const float nan = std::nanf("");
        bytes.replace(4, 4, reinterpret_cast<const char *>(&nan), 4);  // token 0's score, after max_token_length
        const std::string tok = tmp.file("nan-tok.bin");
        std::ofstream(tok, std::ios::binary) << bytes;
        expect_error(test::shell_quote(test::shared_path("models/stories260K.bin")) + " --tokenizer " + test::shell_quote(tok),
                     "token 0 has score NaN");
    }
    expect_error(test::shell_quote(good) + " --outtype q3", "--outtype: unknown type 'q3' (expected auto, f32, f16, bf16, q8_0 or a type of toy quantize");
    expect_error(test::shell_quote(tmp.file("nothing-here")), "no such file or directory");
    // weights the output type cannot hold: past F16's range (llama.cpp's converter writes infinities), a NaN
    const std::tuple<float, const char *, const char *> unheld[] = {
        {131072.0f, "f16", "tensor 'blk.0.attn_q.weight': rows 0..31 hold values up to 131072, beyond what f16 can hold"},
        {std::nanf(""), "f32", "tensor 'blk.0.attn_q.weight': row 0 holds a non-finite value (nan)"},
    };
    for (const auto &[value, outtype, needle] : unheld) {
        const fs::path d = copy_of(std::string("unheld-") + outtype);
        auto st = convert::Safetensors::open_file((fs::path(good) / "model.safetensors").string());
        std::vector<StBytes> tensors;
        for (const auto &t : st->tensors()) {
            tensors.push_back(bytes_of(t));
            if (t.name != "model.layers.0.self_attn.q_proj.weight") continue;
            uint32_t bits;  // the first value, as bfloat16: the upper half of its float32
            std::memcpy(&bits, &value, 4);
            const uint16_t bf16 = (uint16_t)(bits >> 16);
            tensors.back().bytes.replace(0, 2, reinterpret_cast<const char *>(&bf16), 2);
        }
        st.reset();
        write_safetensors(d / "model.safetensors", tensors);
        expect_error(test::shell_quote(d.string()) + " --outtype " + outtype, needle);
    }
}
