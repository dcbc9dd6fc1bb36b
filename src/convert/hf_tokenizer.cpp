#include "convert/hf_tokenizer.h"

#include "convert/json_file.h"
#include "core/error.h"
#include "core/read_file.h"
#include "text/pre_tokenizer.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

namespace toy::convert {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// GGUF token types (SentencePiece's numbering).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct TokenList {
    std::string model;  // tokenizer.ggml.model
    std::vector<std::string> tokens;
    std::vector<float> scores;     // empty: none written
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    std::string pre;
    std::optional<bool> add_space_prefix;

    // An added token (tokenizer.json's added_tokens, tokenizer_config.json's
    // added_tokens_decoder): a control token when flagged special or shaped
    // like one; else user-defined text, its U+2581 written as spaces
    // (llama.cpp's converter pre-normalizes them so).
    void set_added(size_t i, const std::string &content, bool special);
    // Unused [PAD<id>] tokens up to n (the embedding has rows for them).
    void resize(size_t n, float score) {
        for (size_t i = tokens.size(); i < n; ++i) {
            tokens.push_back(fmt::format("[PAD{}]", i));
            types.push_back(kUnused);
            if (!scores.empty()) scores.push_back(score);
        }
    }
};

// Added tokens that are control tokens whatever their flag says (llama.cpp's list).
bool looks_special(const std::string &t) {
    auto wrapped = [&](const char *a, const char *b) { return t.starts_with(a) && t.ends_with(b) && t.size() >= std::strlen(a) + std::strlen(b); };
    return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
           wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, const std::string &from, const std::string &to) {
    for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
    return s;
}

const std::string kSpaceMark = "\xe2\x96\x81";  // U+2581, SentencePiece's space

void TokenList::set_added(size_t i, const std::string &content, bool special) {
    if (special || looks_special(content)) {
        types[i] = kControl;
        tokens[i] = content;
    } else {
        types[i] = kUserDefined;
        tokens[i] = replace_all(content, kSpaceMark, " ");
    }
}

// ---------------------------------------------------------------- SentencePiece

// The pieces of a SentencePiece ModelProto (field 1: repeated SentencePiece
// {1: piece, 2: score, 3: type}; field 3: NormalizerSpec {3: add_dummy_prefix}).
class ProtoReader {
public:
    ProtoReader(const uint8_t *p, size_t n, std::string where) : p_(p), end_(p + n), where_(std::move(where)) {}
    bool done() const { return p_ >= end_; }
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p_ >= end_) fail("{}: truncated protobuf varint", where_);
            const uint8_t b = *p_++;
            v |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        fail("{}: protobuf varint longer than 10 bytes", where_);
    }
    // The next field: its number and wire type; length-delimited bytes in *sub.
    bool next(uint32_t &field, uint32_t &wire, ProtoReader *sub, uint64_t &value) {
        if (done()) return false;
        const uint64_t key = varint();
        field = (uint32_t)(key >> 3), wire = (uint32_t)(key & 7);
        switch (wire) {
            case 0: value = varint(); break;
            case 1: value = take(8); break;
            case 5: value = take(4); break;
            case 2: {
                const uint64_t n = varint();
                if (n > (uint64_t)(end_ - p_)) fail("{}: protobuf field {} claims {} bytes, {} remain (truncated?)", where_, field, n, end_ - p_);
                *sub = ProtoReader(p_, (size_t)n, where_);
                p_ += n;
                break;
            }
            default: fail("{}: protobuf wire type {} is not one SentencePiece uses (not a tokenizer.model?)", where_, wire);
        }
        return true;
    }
    std::string str() const { return std::string(reinterpret_cast<const char *>(p_), reinterpret_cast<const char *>(end_)); }

private:
    uint64_t take(int n) {
        if (end_ - p_ < n) fail("{}: truncated protobuf field", where_);
        uint64_t v = 0;
        std::memcpy(&v, p_, (size_t)n);
        p_ += n;
        return v;
    }
    const uint8_t *p_, *end_;
    std::string where_;
};

TokenList read_sentencepiece(const std::string &path, int64_t n_vocab) {
    const std::string bytes = read_whole_file(path, "convert");
    ProtoReader r(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), path);
    TokenList t;
    t.model = "llama";
    uint32_t field = 0, wire = 0;
    uint64_t value = 0;
    ProtoReader sub(nullptr, 0, path);
    while (r.next(field, wire, &sub, value)) {
        if (field == 1 && wire == 2) {  // a piece
            std::string piece;
            float score = 0;
            int32_t type = kNormal;
            uint32_t f2 = 0, w2 = 0;
            uint64_t v2 = 0;
            ProtoReader s2(nullptr, 0, path);
            while (sub.next(f2, w2, &s2, v2)) {
                if (f2 == 1 && w2 == 2) piece = s2.str();
                else if (f2 == 2 && w2 == 5) std::memcpy(&score, &v2, 4);
                else if (f2 == 3 && w2 == 0) type = (int32_t)v2;
            }
            // SentencePiece's user-defined pieces are ordinary text to llama.cpp
            if (type < kNormal || type > kByte || type == kUserDefined) type = kNormal;
            t.tokens.push_back(std::move(piece));
            t.scores.push_back(score);
            t.types.push_back(type);
        } else if (field == 3 && wire == 2) {  // normalizer spec
            uint32_t f2 = 0, w2 = 0;
            uint64_t v2 = 0;
            ProtoReader s2(nullptr, 0, path);
            bool add_prefix = true;  // SentencePiece's default
            while (sub.next(f2, w2, &s2, v2)) {
                if (f2 == 3 && w2 == 0) add_prefix = v2 != 0;
            }
            t.add_space_prefix = add_prefix;
        }
    }
    if (t.tokens.empty()) fail("{}: no pieces (expected a SentencePiece tokenizer.model)", path);
    t.pre = "default";
    if (n_vocab > 0 && (int64_t)t.tokens.size() > n_vocab) {
        fail("{}: {} pieces, but the model's embedding has {} rows", path, t.tokens.size(), n_vocab);
    }
    return t;
}

// ---------------------------------------------------------------- tokenizer.json

// Regexes of a tokenizer.json pre-tokenizer, in toy's PreTokenizer semantics
// (each cuts every piece into its matches and the gaps). Empty optional:
// a component toy cannot express.
std::optional<std::vector<std::string>> hf_regexes(const json &pre, bool &byte_level) {
    std::vector<std::string> out;
    if (pre.is_null()) return out;
    const std::string type = pre.value("type", "");
    if (type == "Sequence") {
        for (const auto &p : pre.value("pretokenizers", json::array())) {
            auto r = hf_regexes(p, byte_level);
            if (!r) return std::nullopt;
            out.insert(out.end(), r->begin(), r->end());
        }
        return out;
    }
    if (type == "Split") {
        if (pre.value("behavior", "") != "Isolated" || pre.value("invert", false)) return std::nullopt;
        const json &pat = member(pre, "pattern");
        if (pat.contains("Regex")) {
            out.push_back(pat["Regex"].get<std::string>());
        } else if (pat.contains("String")) {
            std::string lit;
            for (char c : pat["String"].get<std::string>()) {
                if (std::strchr("\\^$.|?*+()[]{}", c)) lit += '\\';
                lit += c;
            }
            out.push_back(lit);
        } else {
            return std::nullopt;
        }
        return out;
    }
    if (type == "ByteLevel") {
        byte_level = true;
        if (pre.value("add_prefix_space", false)) return std::nullopt;
        if (pre.value("use_regex", true)) {
            out.push_back(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))");
        }
        return out;
    }
    if (type == "Digits") {
        out.push_back(pre.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
        return out;
    }
    return std::nullopt;
}

// Text that tells pre-tokenizers apart: contractions in both cases, digit
// runs of every length, punctuation runs, newlines and space runs, letters
// of several scripts, marks, emoji.
const char *kProbe =
    "Hello World! I'M you're WE'LL they've he'd It'S 1 12 123 1234 12345 3.14159 1,000,000\n"
    "\n\n  spaces   and\ttabs \t\n ending   \r\nCamelCaseWords lowerUPPER ALLCAPS mixedCASE123abc\n"
    "(parens) [brackets] {braces} <angle> \"quoted\" 'single' a-b_c/d\\e @user #tag $5 %x ^y &z *w +v =u ~t `s |r\n"
    "...!!! ??? ,,, ;;; ::: --- ___ /// >>> <<< \xe2\x80\x94 \xe2\x80\xa6 \xc2\xbfqu\xc3\xa9? na\xc3\xafve "
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xce\x95\xce\xbb\xce\xbb\xce\xac\xce\xb4\xce\xb1 "
    "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf "
    "\xea\xb0\x80\xeb\x82\x98 \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 "
    "e\xcc\x81 \xf0\x9f\x98\x80\xf0\x9f\x9a\x80 \xe2\x85\xa0\xe2\x85\xa1 \xd9\xa1\xd9\xa2\xd9\xa3 ''' '' 'x 's \n";

std::vector<std::string> split_with(const std::vector<std::string> &regexes, const std::string &text) {
    text::PreTokenizer p(regexes);
    std::vector<std::string> out;
    for (auto v : p.split(text)) out.emplace_back(v);
    return out;
}

// tokens listed in tokenizer.json's "added_tokens": id -> (content, special)
struct Added {
    std::string content;
    bool special = false;
};

// A token id: a JSON integer in 0..INT32_MAX (a float such as 1e85 is not
// converted: that would be undefined), else a one-line error naming `what`.
int64_t token_id(const json &v, const std::string &path, const std::string &what) {
    if (!v.is_number_integer()) fail("{}: {} has id {}, expected an integer 0..{}", path, what, v.dump(), INT32_MAX);
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= (uint64_t)INT32_MAX
                                                 : v.get<int64_t>() >= 0 && v.get<int64_t>() <= (int64_t)INT32_MAX;
    if (!in_range) fail("{}: {} has id {}, expected 0..{}", path, what, v.dump(), INT32_MAX);
    return v.get<int64_t>();
}

std::map<int64_t, Added> added_tokens(const json &tj, const std::string &path) {
    std::map<int64_t, Added> m;
    for (const auto &a : tj.value("added_tokens", json::array())) {
        if (!a.contains("id") || !a.contains("content")) continue;
        const int64_t id = token_id(a["id"], path, "added token '" + (a["content"].is_string() ? a["content"].get<std::string>() : a["content"].dump()) + "'");
        m[id] = {a["content"].get<std::string>(), a.value("special", false)};
    }
    return m;
}

TokenList read_tokenizer_json(const std::string &path, const json &tj, int64_t n_vocab, bool clean_spaces) {
    const json &model = member(tj, "model");
    if (!model.is_object() || model.value("type", "") != "BPE") {
        fail("{}: tokenizer model type {} is not supported (expected BPE; a SentencePiece model needs tokenizer.model)", path,
             model.is_object() ? model.value("type", "(none)") : "(none)");
    }
    if (!model.contains("vocab") || !model["vocab"].is_object()) fail("{}: model.vocab: expected an object", path);
    const auto added = added_tokens(tj, path);
    int64_t max_id = -1;
    for (const auto &[tok, id] : model["vocab"].items()) {
        max_id = std::max(max_id, token_id(id, path, "token '" + tok + "'"));
    }
    for (const auto &[id, a] : added) max_id = std::max(max_id, id);
    const int64_t n = std::max(n_vocab, max_id + 1);
    if (n_vocab > 0 && max_id >= n_vocab) fail("{}: token id {} is beyond the model's {} embedding rows", path, max_id, n_vocab);

    TokenList t;
    t.tokens.assign((size_t)n, "");
    t.types.assign((size_t)n, kUnused);
    std::vector<bool> set((size_t)n, false);
    for (const auto &[tok, id] : model["vocab"].items()) {
        const int64_t i = id.get<int64_t>();
        if (set[(size_t)i]) fail("{}: id {} is given to two tokens", path, i);
        t.tokens[(size_t)i] = tok, t.types[(size_t)i] = kNormal, set[(size_t)i] = true;
    }
    const bool byte_fallback = model.value("byte_fallback", false);
    for (int64_t i = 0; i < n; ++i) {
        if (!set[(size_t)i] && !added.count(i)) t.tokens[(size_t)i] = fmt::format("[PAD{}]", i);
    }

    std::vector<std::string> merges;
    for (const auto &m : model.value("merges", json::array())) {
        if (m.is_string()) merges.push_back(m.get<std::string>());
        else if (m.is_array() && m.size() == 2) {
            // a space inside a part is written U+0120, as GPT-2's byte mapping writes it
            merges.push_back(replace_all(m[0].get<std::string>(), " ", "\xc4\xa0") + " " +
                             replace_all(m[1].get<std::string>(), " ", "\xc4\xa0"));
        }
        else fail("{}: model.merges: expected \"a b\" strings or [a, b] pairs", path);
    }

    if (byte_fallback) {
        // SentencePiece exported as BPE: pieces over U+2581 with <0xXX> byte
        // tokens. llama's tokenizer merges the best-scoring adjacent pair, so
        // a token made by merge k scores -k: merging then follows the ranks.
        t.model = "llama";
        t.pre = "default";
        t.scores.assign((size_t)n, 0.0f);
        for (size_t k = 0; k < merges.size(); ++k) {
            const std::string &m = merges[k];
            const size_t sp = m.find(' ');
            if (sp == std::string::npos) fail("{}: merge {} '{}' has no space", path, k, m);
            auto it = model["vocab"].find(m.substr(0, sp) + m.substr(sp + 1));
            if (it != model["vocab"].end() && t.scores[(size_t)it->get<int64_t>()] == 0.0f) {
                t.scores[(size_t)it->get<int64_t>()] = -(float)(k + 1);
            }
        }
        for (int64_t i = 0; i < n; ++i) {
            const std::string &s = t.tokens[(size_t)i];
            if (set[(size_t)i] && s.size() == 6 && s.starts_with("<0x") && s.ends_with(">")) t.types[(size_t)i] = kByte;
        }
        bool prepend = false;
        const json &norm = member(tj, "normalizer");
        std::vector<json> parts;
        if (norm.is_object() && norm.value("type", "") == "Sequence") parts = norm.value("normalizers", std::vector<json>{});
        else if (norm.is_object()) parts.push_back(norm);
        for (const auto &p : parts) prepend |= p.value("type", "") == "Prepend" && p.value("prepend", "") == kSpaceMark;
        const json &pre = member(tj, "pre_tokenizer");
        if (pre.is_object() && pre.value("type", "") == "Metaspace") prepend = pre.value("prepend_scheme", "always") != "never";
        t.add_space_prefix = prepend;
    } else {
        t.model = "gpt2";
        t.merges = std::move(merges);
        t.pre = detect_bpe_pre(tj, clean_spaces, path);
    }
    for (const auto &[id, a] : added) t.set_added((size_t)id, a.content, a.special);
    return t;
}

// ---------------------------------------------------------------- special tokens

std::string token_content(const json &v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return "";
}

// Special-token ids as llama.cpp's converter finds them: tokenizer_config.json
// names the token, tokenizer.json's added tokens give its id; else config.json's
// <kind>_token_id.
void add_special_tokens(const std::string &dir, const json &config, const json &tcfg, const json *tj, TokenList &t,
                        Converted &out) {
    std::map<std::string, int64_t> by_text;
    if (tj) {
        for (const auto &[id, a] : added_tokens(*tj, (fs::path(dir) / "tokenizer.json").string())) by_text.emplace(a.content, id);
    }
    // tokenizer_config.json's <kind>_token, config.json's <kind>_token_id -> GGUF key
    const std::pair<const char *, const char *> kinds[] = {
        {"bos", "bos_token_id"}, {"eos", "eos_token_id"}, {"unk", "unknown_token_id"},
        {"sep", "seperator_token_id"}, {"pad", "padding_token_id"},
    };
    for (const auto &[kind, gguf_key] : kinds) {
        std::optional<int64_t> id;
        const std::string key = std::string(kind) + "_token";
        if (tcfg.contains(key)) {
            const std::string content = token_content(tcfg[key]);
            auto it = by_text.find(content);
            if (!content.empty() && it != by_text.end()) id = it->second;
        }
        const std::string id_key = key + "_id";
        if (!id && config.contains(id_key) && config[id_key].is_number_integer()) id = config[id_key].get<int64_t>();
        if (!id) continue;
        if (*id < 0 || *id >= (int64_t)t.tokens.size()) {
            out.notes.push_back(fmt::format("{} id {} is outside the vocabulary of {}; not written", kind, *id, t.tokens.size()));
            continue;
        }
        out.set(std::string("tokenizer.ggml.") + gguf_key, gguf::Value::u32((uint32_t)*id));
    }
    // add_bos / add_eos: tokenizer_config.json, else the post-processor's template
    for (const char *kind : {"bos", "eos"}) {
        const std::string key = fmt::format("add_{}_token", kind);
        if (tcfg.contains(key) && tcfg[key].is_boolean()) {
            out.set("tokenizer.ggml." + key, gguf::Value::boolean(tcfg[key].get<bool>()));
        }
    }
    if (tj && !tcfg.contains("add_bos_token") && member(*tj, "post_processor").is_object()) {
        const json &pp = member(*tj, "post_processor");
        if (pp.value("type", "") == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array()) {
            const json &single = pp["single"];
            const bool bos_first = !single.empty() && single.front().contains("SpecialToken");
            const bool eos_last = single.size() > 1 && single.back().contains("SpecialToken");
            out.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(bos_first));
            out.set("tokenizer.ggml.add_eos_token", gguf::Value::boolean(eos_last));
        }
    }
    // chat template: a .jinja file wins over tokenizer_config.json's
    const fs::path jinja = fs::path(dir) / "chat_template.jinja";
    if (fs::exists(jinja)) {
        out.set("tokenizer.chat_template", gguf::Value::str(read_whole_file(jinja.string(), "convert")));
    } else if (tcfg.contains("chat_template")) {
        const json &ct = tcfg["chat_template"];
        if (ct.is_string()) {
            out.set("tokenizer.chat_template", gguf::Value::str(ct.get<std::string>()));
        } else if (ct.is_array()) {  // [{name, template}, ...]: "default" is the main one
            std::vector<std::string> names;
            for (const auto &e : ct) {
                if (!e.is_object() || !e.contains("name") || !e.contains("template")) continue;
                const std::string name = e["name"].get<std::string>();
                if (name == "default") {
                    out.set("tokenizer.chat_template", gguf::Value::str(e["template"].get<std::string>()));
                } else {
                    out.set("tokenizer.chat_template." + name, gguf::Value::str(e["template"].get<std::string>()));
                    names.push_back(name);
                }
            }
            if (!names.empty()) out.set("tokenizer.chat_templates", gguf::Value::str_array(names));
        }
    }
}

void add_tokenizer(const std::string &dir, const json &config, int64_t n_vocab, Converted &out) {
    const fs::path d(dir);
    json tcfg = json::object();
    if (fs::exists(d / "tokenizer_config.json")) tcfg = read_json_file((d / "tokenizer_config.json").string());
    const bool clean_spaces = tcfg.value("clean_up_tokenization_spaces", true);

    TokenList t;
    json tj;
    const bool has_json = fs::exists(d / "tokenizer.json");
    if (has_json) tj = read_json_file((d / "tokenizer.json").string());
    if (fs::exists(d / "tokenizer.model")) {
        t = read_sentencepiece((d / "tokenizer.model").string(), n_vocab);
        if (fs::exists(d / "added_tokens.json")) {
            const json a = read_json_file((d / "added_tokens.json").string());
            for (const auto &[text, id] : a.items()) {
                if (!id.is_number_integer()) continue;
                const int64_t i = id.get<int64_t>();
                if (i < 0 || (n_vocab > 0 && i >= n_vocab)) continue;
                if ((size_t)i >= t.tokens.size()) t.resize((size_t)i + 1, -1000.0f);
                t.tokens[(size_t)i] = text, t.scores[(size_t)i] = -1000.0f, t.types[(size_t)i] = kUserDefined;
            }
        }
        if (tcfg.contains("added_tokens_decoder") && tcfg["added_tokens_decoder"].is_object()) {
            for (const auto &[key, tok] : tcfg["added_tokens_decoder"].items()) {
                int64_t i = -1;
                if (auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), i); ec != std::errc() || p != key.data() + key.size()) {
                    fail("tokenizer_config.json: added_tokens_decoder key '{}' is not a token id", key);
                }
                if (i < 0 || (n_vocab > 0 && i >= n_vocab) || !tok.contains("content")) continue;
                if ((size_t)i >= t.tokens.size()) t.resize((size_t)i + 1, -1000.0f);
                t.set_added((size_t)i, tok["content"].get<std::string>(), tok.value("special", false));
                t.scores[(size_t)i] = -1000.0f;
            }
        }
        if (n_vocab > 0) t.resize((size_t)n_vocab, -1000.0f);
    } else if (has_json) {
        t = read_tokenizer_json((d / "tokenizer.json").string(), tj, n_vocab, clean_spaces);
    } else {
        fail("{}: no tokenizer.model or tokenizer.json", dir);
    }

    out.set("tokenizer.ggml.model", gguf::Value::str(t.model));
    if (!t.pre.empty()) out.set("tokenizer.ggml.pre", gguf::Value::str(t.pre));
    out.set("tokenizer.ggml.tokens", gguf::Value::str_array(t.tokens));
    if (!t.scores.empty()) out.set("tokenizer.ggml.scores", gguf::Value::f32_array(t.scores));
    out.set("tokenizer.ggml.token_type", gguf::Value::i32_array(t.types));
    if (!t.merges.empty()) out.set("tokenizer.ggml.merges", gguf::Value::str_array(t.merges));
    // llama's default is true: written when false, or when tokenizer_config.json says
    if (tcfg.contains("add_prefix_space") && tcfg["add_prefix_space"].is_boolean()) t.add_space_prefix = tcfg["add_prefix_space"].get<bool>();
    if (t.add_space_prefix == false || tcfg.contains("add_prefix_space")) {
        out.set("tokenizer.ggml.add_space_prefix", gguf::Value::boolean(*t.add_space_prefix));
    }
    add_special_tokens(dir, config, tcfg, has_json ? &tj : nullptr, t, out);
}

}  // namespace

std::string detect_bpe_pre(const json &tj, bool clean_spaces, const std::string &where) {
    bool byte_level = false;
    const auto regexes = hf_regexes(member(tj, "pre_tokenizer"), byte_level);
    if (!regexes) {
        fail("{}: its pre_tokenizer ({}) has a step toy cannot reproduce", where, member(tj, "pre_tokenizer").dump().substr(0, 200));
    }
    const json &dec = member(tj, "decoder");
    if (!byte_level && !(dec.is_object() && dec.value("type", "") == "ByteLevel")) {
        fail("{}: a BPE tokenizer without byte fallback or a ByteLevel step is not supported", where);
    }
    const bool ignore_merges = member(tj, "model").value("ignore_merges", false);
    std::vector<std::string> want;
    try {
        want = split_with(*regexes, kProbe);
    } catch (const Error &e) {
        fail("{}: its pre-tokenizer regex does not compile here ({})", where, e.what());
    }
    // Names in order of preference where several behave alike.
    const std::vector<std::string> preferred = {"gpt-2", "llama-bpe", "qwen2", "smollm", "starcoder", "gpt-4o", "deepseek-v3"};
    std::vector<std::string> names = preferred;
    for (const auto &n : text::known_bpe_pre_names())
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    for (const auto &name : names) {
        const text::BpeStyle *s = text::find_bpe_style(name);
        if (!s || !s->byte_encode || s->ignore_merges != ignore_merges || s->clean_spaces != clean_spaces) continue;
        if (split_with(s->regexes, kProbe) == want) return name;
    }
    fail("{}: no known pre-tokenizer splits text as its pre_tokenizer does (ignore_merges {}, clean_up_tokenization_spaces {})",
         where, ignore_merges, clean_spaces);
}

void add_hf_tokenizer(const std::string &dir, const json &config, int64_t n_vocab, Converted &out) {
    with_json_errors(dir + " (tokenizer files)", [&] { add_tokenizer(dir, config, n_vocab, out); });
}

}  // namespace toy::convert
