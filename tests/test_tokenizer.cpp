// Tokenizer tests: llama.cpp's tokenizer test vectors (ggml-vocab-*.gguf with
// .inp/.out) for every vocabulary we support, plus special tokens, streaming
// detokenization and error reporting.
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"
#include "test_util.h"
#include "text/vocab.h"
#include "vocab_cases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using toy::text::Detokenizer;
using toy::text::Vocab;
using toy::test::read_cases;

namespace {

const std::string kShared = TOY_SHARED_DIR;
const std::string kLlamaSrc = TOY_LLAMA_SOURCE_DIR;

struct VocabFile {
    std::string label;  // "shared_gpt_2", "llama_cpp_qwen2"
    std::string path;
};

std::vector<VocabFile> vocab_files() {
    std::vector<VocabFile> files;
    const std::vector<std::pair<std::string, std::string>> dirs = {
        {"shared", kShared + "/models/vocab"},
        {"llama_cpp", kLlamaSrc + "/models"},
    };
    for (const auto &[tag, dir] : dirs) {
        std::error_code ec;
        std::vector<std::string> names;
        for (const auto &e : fs::directory_iterator(dir, ec)) {
            const std::string name = e.path().filename().string();
            if (name.rfind("ggml-vocab-", 0) == 0 && e.path().extension() == ".gguf" &&
                fs::exists(e.path().string() + ".inp") && fs::exists(e.path().string() + ".out")) {
                names.push_back(name);
            }
        }
        std::sort(names.begin(), names.end());
        for (const auto &name : names) {
            std::string label = tag + "_" + name.substr(11, name.size() - 11 - 5);
            for (auto &c : label) {
                if (!std::isalnum((unsigned char)c)) c = '_';
            }
            files.push_back({label, dir + "/" + name});
        }
    }
    return files;
}

bool is_supported_model(const std::string &m) { return m == "llama" || m == "gpt2" || m == "gemma4"; }

std::string describe_model(const std::string &m) {
    if (m == "bert") return "bert (WordPiece)";
    if (m == "t5") return "t5 (Unigram)";
    if (m == "rwkv") return "rwkv";
    return m;
}

// Cache: loading a 260k-token vocabulary takes a moment.
const Vocab &cached_vocab(const std::string &path) {
    static std::map<std::string, std::unique_ptr<Vocab>> cache;
    auto &slot = cache[path];
    if (!slot) {
        auto file = toy::gguf::File::open(path);
        slot = std::make_unique<Vocab>(Vocab::load(*file));
    }
    return *slot;
}

std::string show_ids(const std::vector<int32_t> &ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s + "]";
}

}  // namespace

// ---- llama.cpp test vectors, one test per vocabulary file ----

class TokVocabFile : public ::testing::TestWithParam<VocabFile> {};

TEST_P(TokVocabFile, MatchesLlamaCppIds) {
    const VocabFile &vf = GetParam();
    auto file = toy::gguf::File::open(vf.path);
    const std::string model = file->get_string("tokenizer.ggml.model");
    if (!is_supported_model(model)) {
        GTEST_SKIP() << fs::path(vf.path).filename().string() << ": tokenizer model " << describe_model(model)
                     << " is not supported (only llama/SPM, gpt2/BPE and gemma4)";
    }
    const Vocab &vocab = cached_vocab(vf.path);
    const auto cases = read_cases(vf.path);
    ASSERT_FALSE(cases.empty());

    size_t n_ok = 0, n_roundtrip = 0;
    for (const auto &c : cases) {
        // As test-tokenizer-0: no BOS/EOS, special text is plain text.
        const auto ids = vocab.tokenize(c.text, /*add_special=*/false, /*parse_special=*/false);
        EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'\n  got:      " << show_ids(ids)
                              << "\n  expected: " << show_ids(c.ids) << "\n  got detokenizes to '"
                              << vocab.detokenize(ids, true) << "', expected to '"
                              << vocab.detokenize(c.ids, true) << "'";
        if (ids == c.ids) ++n_ok;

        // Round trip: lossless unless the text has a character the vocabulary
        // cannot express (<unk>), is not valid UTF-8, or has a space that the
        // vocabulary's detokenizer cleans away (" ," " 's" ...).
        const std::string back = vocab.detokenize(ids, true);
        if (back == c.text) ++n_roundtrip;
        const bool has_unk = vocab.unk() != Vocab::kNoToken &&
                             std::find(ids.begin(), ids.end(), vocab.unk()) != ids.end();
        bool cleanable = false;
        for (const char *p : {" ?", " !", " .", " ,", " '"}) cleanable |= c.text.find(p) != std::string::npos;
        if (!has_unk && toy::text::sanitize_utf8(c.text) == c.text && !(vocab.clean_spaces() && cleanable)) {
            EXPECT_EQ(back, c.text) << "round trip";
        }
        // Whatever the cleaning rules, our ids and the reference ids must give
        // the same text (and the same as llama.cpp's detokenizer would print).
        EXPECT_EQ(back, vocab.detokenize(c.ids, true)) << "text: '" << c.text << "'";
    }
    std::cout << "[ vocab    ] " << fs::path(vf.path).filename().string() << ": " << n_ok << "/" << cases.size()
              << " cases match, " << n_roundtrip << " detokenize to the exact input\n";
}

INSTANTIATE_TEST_SUITE_P(TokVectors, TokVocabFile, ::testing::ValuesIn(vocab_files()),
                         [](const ::testing::TestParamInfo<VocabFile> &info) { return info.param.label; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TokVocabFile);

// ---- special tokens ----

namespace {
const std::string kLlama2 = kShared + "/models/llama-2-tiny-random.gguf";
const std::string kStories = kShared + "/models/stories260K.gguf";
const std::string kQwen2 = kLlamaSrc + "/models/ggml-vocab-qwen2.gguf";
}  // namespace

TEST(TokSpecial, LlamaMetadata) {
    const Vocab &v = cached_vocab(kLlama2);
    EXPECT_EQ(v.type(), toy::text::VocabType::Spm);
    EXPECT_EQ(v.n_tokens(), 32000);
    EXPECT_EQ(v.bos(), 1);
    EXPECT_EQ(v.eos(), 2);
    EXPECT_EQ(v.unk(), 0);
    EXPECT_TRUE(v.is_eog(2));
    EXPECT_FALSE(v.is_eog(1));
    EXPECT_TRUE(v.add_bos());
    EXPECT_FALSE(v.add_eos());
    EXPECT_EQ(v.token_text(1), "<s>");
    EXPECT_EQ(v.newline(), 13);  // <0x0A>
}

TEST(TokSpecial, AddSpecialPrependsBos) {
    const Vocab &v = cached_vocab(kLlama2);
    EXPECT_EQ(v.tokenize("Hello", true), (std::vector<int32_t>{1, 15043}));
    EXPECT_EQ(v.tokenize("Hello", false), (std::vector<int32_t>{15043}));
    EXPECT_TRUE(v.tokenize("", false).empty());
    EXPECT_EQ(v.tokenize("", true), (std::vector<int32_t>{1}));
}

TEST(TokSpecial, ParseSpecialOnAndOff) {
    const Vocab &v = cached_vocab(kLlama2);
    // On: control token text becomes the token; the text after it gets the SPM space prefix.
    const auto on = v.tokenize("<s>Hello</s>", false, true);
    EXPECT_EQ(on, (std::vector<int32_t>{1, 15043, 2}));
    // Off: the same text is ordinary characters.
    const auto off = v.tokenize("<s>Hello</s>", false, false);
    EXPECT_EQ(std::count(off.begin(), off.end(), 1), 0);
    EXPECT_EQ(std::count(off.begin(), off.end(), 2), 0);
    EXPECT_GT(off.size(), 3u);
    EXPECT_EQ(v.detokenize(off), "<s>Hello</s>");
    // Detokenizing control tokens prints them only when asked.
    EXPECT_EQ(v.detokenize(on, true), "<s> Hello</s>");
    EXPECT_EQ(v.detokenize(on, false), " Hello");
    EXPECT_EQ(v.detokenize({15043}, false), "Hello");
}

TEST(TokSpecial, StoriesSmallVocab) {
    const Vocab &v = cached_vocab(kStories);
    EXPECT_EQ(v.n_tokens(), 512);
    const auto on = v.tokenize("Once upon</s>", true, true);
    ASSERT_GE(on.size(), 3u);
    EXPECT_EQ(on.front(), 1);
    EXPECT_EQ(on.back(), 2);
    const auto off = v.tokenize("Once upon</s>", true, false);
    EXPECT_EQ(std::count(off.begin(), off.end(), 2), 0);
    EXPECT_EQ(v.detokenize(off, false), " Once upon</s>");  // BOS prints nothing, the prefix space stays
    EXPECT_EQ(v.detokenize(std::vector<int32_t>(off.begin() + 1, off.end())), "Once upon</s>");
}

TEST(TokSpecial, BpeControlTokens) {
    const Vocab &v = cached_vocab(kQwen2);
    const int32_t im_start = v.find_token("<|im_start|>");
    ASSERT_NE(im_start, Vocab::kNoToken);
    EXPECT_TRUE(v.is_control(im_start));
    const auto on = v.tokenize("<|im_start|>user\nhi<|im_end|>", false, true);
    ASSERT_GE(on.size(), 3u);
    EXPECT_EQ(on.front(), im_start);
    EXPECT_EQ(on.back(), v.find_token("<|im_end|>"));
    EXPECT_TRUE(v.is_eog(on.back()));
    const auto off = v.tokenize("<|im_start|>user\nhi<|im_end|>", false, false);
    EXPECT_EQ(std::count(off.begin(), off.end(), im_start), 0);
    EXPECT_EQ(v.detokenize(off), "<|im_start|>user\nhi<|im_end|>");
    EXPECT_EQ(v.detokenize(on, false), "user\nhi");
    EXPECT_EQ(v.detokenize(on, true), "<|im_start|>user\nhi<|im_end|>");
}

TEST(TokSpecial, UserDefinedTokensAlwaysMatch) {
    const Vocab &v = cached_vocab(kShared + "/models/vocab/ggml-vocab-deepseek-coder.gguf");
    int32_t user = Vocab::kNoToken;
    for (int32_t id = 0; id < v.n_tokens(); ++id) {
        // (FIM tokens are user-defined in the file but detected as control.)
        const uint32_t attr = v.token_attr(id);
        if ((attr & toy::text::kAttrUserDefined) && !(attr & toy::text::kAttrControl) && v.token_text(id).size() > 3) {
            user = id;
            break;
        }
    }
    ASSERT_NE(user, Vocab::kNoToken);
    const std::string text = "x = " + v.token_text(user) + " y";
    for (bool parse : {false, true}) {
        const auto ids = v.tokenize(text, false, parse);
        EXPECT_EQ(std::count(ids.begin(), ids.end(), user), 1) << "parse_special=" << parse;
    }
}

// ---- streaming ----

TEST(TokDetokenizer, HoldsBackSplitCharacters) {
    const Vocab &v = cached_vocab(kStories);
    // stories260K has no token for these characters: each becomes byte tokens.
    const std::string text = "a\xE4\xB8\xAD\xF0\x9F\x98\x80\xD0\xB6 b";  // "a中😀ж b"
    const auto ids = v.tokenize(text, false);
    size_t n_byte_tokens = 0;
    for (int32_t id : ids) n_byte_tokens += v.is_byte(id);
    ASSERT_GE(n_byte_tokens, 9u) << show_ids(ids);

    Detokenizer d(v);
    std::string streamed;
    size_t held = 0;
    for (int32_t id : ids) {
        const std::string part = d.push(id);
        if (part.empty()) ++held;
        EXPECT_EQ(toy::text::sanitize_utf8(part), part) << "incomplete UTF-8 emitted after id " << id;
        streamed += part;
    }
    streamed += d.flush();
    EXPECT_EQ(held, 6u);  // the first 2, 3 and 1 bytes of 中, 😀, ж wait for the rest
    EXPECT_EQ(streamed, " " + text);  // the streamed text keeps the SPM prefix space
    EXPECT_EQ(v.detokenize(ids), text);
}

TEST(TokDetokenizer, FlushReturnsIncompleteTail) {
    const Vocab &v = cached_vocab(kStories);
    const int32_t c3 = v.find_token("<0xC3>");
    ASSERT_NE(c3, Vocab::kNoToken);
    Detokenizer d(v);
    EXPECT_EQ(d.push(c3), "");
    EXPECT_EQ(d.flush(), "\xC3");
    EXPECT_EQ(d.flush(), "");
    // A byte that can never start a character is not held back.
    const int32_t ff = v.find_token("<0xFF>");
    ASSERT_NE(ff, Vocab::kNoToken);
    EXPECT_EQ(d.push(ff), "\xFF");
}

TEST(TokUnicode, IncompleteTail) {
    using toy::text::utf8_incomplete_tail;
    EXPECT_EQ(utf8_incomplete_tail(""), 0u);
    EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("a\xC3"), 1u);
    EXPECT_EQ(utf8_incomplete_tail("a\xC3\xA9"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98\x80"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // overlong: never valid
    EXPECT_EQ(utf8_incomplete_tail("\x80\x80"), 0u);
}

TEST(TokUnicode, ByteLevelMappingIsABijection) {
    std::set<std::string> images;
    for (int b = 0; b < 256; ++b) {
        const std::string &u = toy::text::byte_to_unicode((uint8_t)b);
        images.insert(u);
        size_t pos = 0;
        EXPECT_EQ(toy::text::unicode_to_byte(toy::text::decode_utf8(u, pos)), b);
    }
    EXPECT_EQ(images.size(), 256u);
    EXPECT_EQ(toy::text::byte_to_unicode(' '), "\xC4\xA0");  // 'Ġ'
}

TEST(TokPreTokenizer, SequentialSplitKeepsGaps) {
    const auto *style = toy::text::find_bpe_style("gpt-2");
    ASSERT_NE(style, nullptr);
    toy::text::PreTokenizer pre(style->regexes);
    const std::string text = "Hello world's  123!!\n";
    std::vector<std::string> got;
    for (auto p : pre.split(text)) got.emplace_back(p);
    EXPECT_EQ(got, (std::vector<std::string>{"Hello", " world", "'s", " ", " 123", "!!", "\n"}));
    // An empty-match regex only cuts: "1234567" -> "1", "234", "567".
    toy::text::PreTokenizer digits({"(?=([0-9]{3})+(?![0-9]))"});
    got.clear();
    for (auto p : digits.split("1234567")) got.emplace_back(p);
    EXPECT_EQ(got, (std::vector<std::string>{"1", "234", "567"}));
}

// ---- errors ----

namespace {

std::string write_tiny_vocab(const std::string &name, const std::string &model, const std::string &pre) {
    toy::gguf::Writer w;
    w.set("general.architecture", toy::gguf::Value::str("llama"));
    w.set("tokenizer.ggml.model", toy::gguf::Value::str(model));
    if (!pre.empty()) w.set("tokenizer.ggml.pre", toy::gguf::Value::str(pre));
    w.set("tokenizer.ggml.tokens", toy::gguf::Value::str_array({"a", "b", "ab"}));
    w.set("tokenizer.ggml.merges", toy::gguf::Value::str_array({"a b"}));
    const std::string path = (fs::temp_directory_path() / name).string();
    w.write(path);
    return path;
}

// The error loading a tiny vocabulary of this model and pre-tokenizer gives.
std::string vocab_load_error(const std::string &name, const std::string &model, const std::string &pre) {
    const std::string path = write_tiny_vocab(name, model, pre);
    auto file = toy::gguf::File::open(path);
    const std::string msg = toy::test::error_of([&] { (void)Vocab::load(*file); });
    fs::remove(path);
    return msg;
}

}  // namespace

TEST(TokVocab, UnknownPreTokenizerIsAnError) {
    const std::string msg = vocab_load_error("toy_tok_bad_pre.gguf", "gpt2", "no-such-pre");
    EXPECT_NE(msg.find("tokenizer.ggml.pre"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no-such-pre"), std::string::npos) << msg;
}

TEST(TokVocab, UnknownModelIsAnError) {
    const std::string msg = vocab_load_error("toy_tok_bad_model.gguf", "wordsalad", "");
    EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("wordsalad"), std::string::npos) << msg;
}

TEST(TokVocab, TinyBpeWithoutPreUsesDefault) {
    const std::string path = write_tiny_vocab("toy_tok_tiny.gguf", "gpt2", "");
    auto file = toy::gguf::File::open(path);
    const Vocab v = Vocab::load(*file);
    EXPECT_EQ(v.tokenize("abab", false), (std::vector<int32_t>{2, 2}));
    EXPECT_EQ(v.detokenize({2, 0}), "aba");
    // Bytes the vocabulary cannot express are dropped, never a crash.
    EXPECT_EQ(v.tokenize("a\xFF\x80z", false), (std::vector<int32_t>{0}));
    EXPECT_EQ(v.bos(), Vocab::kNoToken);  // default id 11 is out of range
    fs::remove(path);
}

TEST(TokVocab, HostileInputNeverCrashes) {
    const Vocab &spm = cached_vocab(kStories);
    const Vocab &bpe = cached_vocab(kQwen2);
    std::string junk;
    for (int i = 0; i < 2000; ++i) junk.push_back((char)((i * 7919) & 0xFF));
    junk += std::string(5000, ' ') + std::string(3000, '\n') + std::string(4000, '9');
    for (const Vocab *v : {&spm, &bpe}) {
        for (bool special : {false, true}) {
            const auto ids = v->tokenize(junk, true, special);
            EXPECT_FALSE(ids.empty());
            (void)v->detokenize(ids, special);
        }
        EXPECT_EQ(v->token_to_piece(-5), "");
        EXPECT_EQ(v->token_to_piece(v->n_tokens()), "");
        EXPECT_EQ(v->detokenize({-1, 1 << 30}), "");
    }
}

// ---- CLI ----

namespace {

std::string run_toy(const std::string &args, int *status) {
    const std::string cmd = std::string(toy::test::toy_bin()) + " " + args + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    std::string out;
    if (!p) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    *status = pclose(p);
    return out;
}

}  // namespace

TEST(TokCli, TokenizeAndDetokenize) {
    int status = -1;
    EXPECT_EQ(run_toy("tokenize -m " + kLlama2 + " -p 'Hello world' --ids", &status), "[1, 15043, 3186]\n");
    EXPECT_EQ(status, 0);
    EXPECT_EQ(run_toy("tokenize -m " + kLlama2 + " -p 'Hello<s>' --ids --no-bos --special", &status),
              "[15043, 1]\n");
    EXPECT_EQ(run_toy("tokenize -m " + kLlama2 + " -p 'Hello\\n'", &status),
              "     1 -> '<s>'\n 15043 -> ' Hello'\n    13 -> '\n'\n");
    EXPECT_EQ(run_toy("detokenize -m " + kLlama2 + " --ids 15043,3186", &status), "Hello world\n");
    EXPECT_EQ(status, 0);
    const std::string err = run_toy("detokenize -m " + kLlama2 + " --ids 1,99999", &status);
    EXPECT_NE(status, 0);
    EXPECT_NE(err.find("99999"), std::string::npos) << err;
}
