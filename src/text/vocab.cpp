#include "text/vocab.h"

#include "core/error.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <queue>

namespace toy::text {

namespace {

constexpr const char *kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (true) {
        size_t hit = s.find(from, pos);
        if (hit == std::string_view::npos) break;
        out.append(s.substr(pos, hit - pos));
        out.append(to);
        pos = hit + from.size();
    }
    out.append(s.substr(pos));
    return out;
}

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string byte_token_text(uint8_t b) {
    static const char *hex = "0123456789ABCDEF";
    return std::string{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
}

// "<0xXX>" -> the byte. Malformed text reads as far as the hex digits go.
char byte_of_token_text(const std::string &text) {
    int v = 0;
    for (size_t k = 3; k < 5 && k < text.size(); ++k) {
        int h = hex_value(text[k]);
        if (h < 0) break;
        v = v * 16 + h;
    }
    return (char)v;
}

// Byte-level BPE token text -> bytes. A character outside the 256 byte
// images is reported inline, as llama.cpp does, instead of being dropped.
std::string decode_byte_level(const std::string &text) {
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
        const uint32_t cpt = decode_utf8(text, pos);
        const int b = unicode_to_byte(cpt);
        if (b >= 0) {
            out.push_back((char)b);
        } else {
            out += "[UNK_BYTE_0x";
            for (unsigned char c : cpt_to_utf8(cpt)) out += fmt::format("{:02x}", c);
            out += text + "]";
        }
    }
    return out;
}

// The three space-cleaning passes llama.cpp applies when detokenizing
// BPE vocabularies with clean_spaces: " ?" " !" " ." " ,"; " ' "; " 's" " 'm"
// " 're" " 've".
std::string clean_up_spaces(std::string s) {
    const size_t n1 = s.size();
    std::string a;
    a.reserve(n1);
    for (size_t i = 0; i < n1; ++i) {
        const bool drop = s[i] == ' ' && i + 1 < n1 &&
                          (s[i + 1] == '?' || s[i + 1] == '!' || s[i + 1] == '.' || s[i + 1] == ',');
        if (!drop) a.push_back(s[i]);
    }

    std::string b;
    b.reserve(a.size());
    if (!a.empty()) b.push_back(a[0]);
    for (size_t i = 1; i < a.size(); ++i) {
        const char x = a[i];
        if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
            b.pop_back();   // the space before
            a[i + 1] = 0;   // the space after is skipped and no longer counts as a space
            ++i;
        }
        b.push_back(x);
    }

    std::string c;
    c.reserve(b.size());
    if (!b.empty()) c.push_back(b[0]);
    for (size_t i = 1; i < b.size(); ++i) {
        const char x = b[i];
        if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
            const char x1 = b[i + 1];
            if (x1 == 's' || x1 == 'm') {
                c.pop_back();
            } else if (x1 != 't' && x1 != 'd' && i + 2 < b.size()) {
                const char x2 = b[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) c.pop_back();
            }
        }
        c.push_back(x);
    }
    return c;
}

std::string lowercase_ascii(std::string s) {
    for (auto &c : s) c = (char)std::tolower((unsigned char)c);
    return s;
}

}  // namespace

// A piece of the input after special-token splitting: either raw text
// [off, off + len) of the input, or one token.
struct Vocab::Fragment {
    int32_t token = kNoToken;
    size_t off = 0, len = 0;
};

Vocab::Vocab() = default;
Vocab::Vocab(Vocab &&) noexcept = default;
Vocab &Vocab::operator=(Vocab &&) noexcept = default;
Vocab::~Vocab() = default;

Vocab Vocab::load(const gguf::File &file) {
    const std::string &path = file.path();
    Vocab v;
    v.model_ = file.get_string("tokenizer.ggml.model");
    const std::string pre = file.opt_string("tokenizer.ggml.pre").value_or("");

    if (v.model_ == "llama") {
        v.type_ = VocabType::Spm;
        v.bos_ = 1;
        v.eos_ = 2;
        v.unk_ = 0;
        v.add_bos_ = true;
        v.add_space_prefix_ = true;
    } else if (v.model_ == "gpt2" || v.model_ == "gemma4") {
        v.type_ = VocabType::Bpe;
        v.pre_ = v.model_ == "gemma4" ? "gemma4" : pre;
        const BpeStyle *style = find_bpe_style(v.pre_);
        if (!style) {
            std::string known;
            for (auto &n : known_bpe_pre_names()) known += (known.empty() ? "" : ", ") + n;
            fail("{}: tokenizer.ggml.pre: expected a known pre-tokenizer ({}), found '{}'", path, known, v.pre_);
        }
        v.style_ = std::make_unique<BpeStyle>(*style);
        v.pre_tokenizer_ = std::make_unique<PreTokenizer>(style->regexes);
        if (v.model_ == "gpt2" && !style->no_default_bos) v.bos_ = v.eos_ = 11;
        v.add_bos_ = style->add_bos.value_or(false);
        v.clean_spaces_ = style->clean_spaces;
    } else {
        fail("{}: tokenizer.ggml.model: expected 'llama' (SentencePiece), 'gpt2' (byte-level BPE) or 'gemma4', "
             "found '{}' (not supported)", path, v.model_);
    }

    // ---- tokens ----
    const auto &texts = file.get_string_array("tokenizer.ggml.tokens");
    const size_t n = texts.size();
    if (n == 0) fail("{}: tokenizer.ggml.tokens: expected at least one token, found none", path);
    if (n > (size_t)INT32_MAX) fail("{}: tokenizer.ggml.tokens: {} tokens do not fit 32-bit ids", path, n);
    std::vector<float> scores;
    if (file.has("tokenizer.ggml.scores")) {
        scores = file.get_float_array("tokenizer.ggml.scores");
        if (scores.size() < n) {
            fail("{}: tokenizer.ggml.scores: expected {} scores (one per token), found {}", path, n, scores.size());
        }
        // (infinities are fine: -inf marks a token that never wins a merge)
        for (size_t i = 0; i < n; ++i) {
            if (std::isnan(scores[i])) fail("{}: tokenizer.ggml.scores: token {} has score NaN", path, i);
        }
    }
    std::vector<int64_t> types;
    if (file.has("tokenizer.ggml.token_type")) {
        types = file.get_int_array("tokenizer.ggml.token_type");
        if (types.size() < n) {
            fail("{}: tokenizer.ggml.token_type: expected {} types (one per token), found {}", path, n, types.size());
        }
    }
    v.tokens_.resize(n);
    v.index_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        Token &t = v.tokens_[i];
        t.text = texts[i].empty() ? fmt::format("[EMPTY_{}]", i) : texts[i];
        t.score = scores.empty() ? 0.0f : scores[i];
        if (!types.empty()) {
            switch (types[i]) {
                case 1: t.attr = kAttrNormal; break;
                case 2: t.attr = kAttrUnknown; break;
                case 3: t.attr = kAttrControl; break;
                case 4: t.attr = kAttrUserDefined; break;
                case 5: t.attr = kAttrUnused; break;
                case 6: t.attr = kAttrByte; break;
                default: t.attr = kAttrUndefined; break;
            }
        }
        v.index_[t.text] = (int32_t)i;  // a repeated text maps to its last id
    }

    // ---- merges ----
    if (v.type_ == VocabType::Bpe) {
        const auto &merges = file.get_string_array("tokenizer.ggml.merges");
        v.merges_.reserve(merges.size());
        for (size_t i = 0; i < merges.size(); ++i) {
            const std::string &m = merges[i];
            const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            if (sp == std::string::npos) continue;  // malformed: can never apply
            const uint32_t left_len = (uint32_t)sp;
            std::string key(reinterpret_cast<const char *>(&left_len), 4);
            key.append(m, 0, sp);
            key.append(m, sp + 1);
            v.merges_.emplace(std::move(key), (int32_t)i);  // the first rank of a repeated pair wins
        }
    }

    // ---- special ids and flags ----
    for (int32_t *id : {&v.bos_, &v.eos_, &v.unk_}) {
        if (*id >= (int32_t)n) *id = kNoToken;
    }
    const auto read_id = [&](const char *key, int32_t &id) {
        if (auto val = file.opt_int(key)) {
            if (*val >= 0 && *val < (int64_t)n) {
                id = (int32_t)*val;
            } else if (*val != -1 && *val != 0xFFFFFFFFll) {  // those two mean "none"
                // out of range: keep the default, as llama.cpp does, and say so
                v.notes_.push_back(fmt::format("{}: key '{}' = {} is not a token id (the vocabulary has {}); using {}",
                                               file.path(), key, *val, n,
                                               id == kNoToken ? std::string("none") : std::to_string(id)));
            }
        }
    };
    read_id("tokenizer.ggml.bos_token_id", v.bos_);
    read_id("tokenizer.ggml.eos_token_id", v.eos_);
    read_id("tokenizer.ggml.eot_token_id", v.eot_);
    read_id("tokenizer.ggml.eom_token_id", v.eom_);
    read_id("tokenizer.ggml.unknown_token_id", v.unk_);
    read_id("tokenizer.ggml.padding_token_id", v.pad_);
    if (auto b = file.opt_bool("tokenizer.ggml.add_bos_token")) v.add_bos_ = *b;
    if (auto b = file.opt_bool("tokenizer.ggml.add_eos_token")) v.add_eos_ = *b;
    if (auto b = file.opt_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix_ = *b;
    if (v.style_ && v.style_->name == "gemma4") v.add_bos_ = true;  // Gemma 4 style always starts with BOS

    v.finish_special_tokens(file);

    // The token a line break becomes.
    if (v.type_ == VocabType::Spm) {
        v.newline_ = v.byte_token('\n');
    } else {
        auto ids = v.tokenize("\n", false, false);
        v.newline_ = ids.empty() ? v.pad_ : ids[0];
    }
    return v;
}

// Text-based detection of end-of-turn, FIM and end-of-generation tokens that
// conversion scripts do not always label, per-model strip flags, and the
// caches derived from the attributes.
void Vocab::finish_special_tokens(const gguf::File &file) {
    const auto mark_control = [&](int32_t id) { tokens_[id].attr |= kAttrControl; };
    // First text of the list that the vocabulary has.
    const auto detect = [&](int32_t &slot, std::initializer_list<const char *> texts) {
        if (slot != kNoToken) return;
        for (const char *t : texts) {
            int32_t id = find_token(t);
            if (id != kNoToken) {
                slot = id;
                mark_control(id);
                return;
            }
        }
    };
    detect(eot_, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                  "<EOT>", "_<EOT>", "[EOT]", ("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"),
                  "<end_of_utterance>"});
    detect(eom_, {"<|eom_id|>"});
    int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
    int32_t fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
    const auto read_id = [&](const char *key, int32_t &id) {
        if (auto val = file.opt_int(key)) {
            if (*val >= 0 && *val < n_tokens()) id = (int32_t)*val;
        }
    };
    read_id("tokenizer.ggml.fim_pre_token_id", fim_pre);
    read_id("tokenizer.ggml.fim_suf_token_id", fim_suf);
    read_id("tokenizer.ggml.fim_mid_token_id", fim_mid);
    read_id("tokenizer.ggml.fim_pad_token_id", fim_pad);
    read_id("tokenizer.ggml.fim_rep_token_id", fim_rep);
    read_id("tokenizer.ggml.fim_sep_token_id", fim_sep);
    detect(fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                     "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>", "\xE2\x96\x81<PRE>",
                     "<|code_prefix|>", "<|prefix|>"});
    detect(fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                     "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>",
                     "<|code_suffix|>", "<|suffix|>"});
    detect(fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                     "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>",
                     "<|code_middle|>", "<|middle|>"});
    detect(fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
    detect(fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    detect(fim_sep, {"<|file_sep|>"});

    // Control tokens named "unused..." are placeholders.
    for (auto &t : tokens_) {
        if ((t.attr & kAttrControl) && t.text.find("unused") != std::string::npos) t.attr |= kAttrUnused;
    }

    // End of generation.
    eog_.clear();
    for (int32_t id : {fim_pad, fim_rep, fim_sep}) {
        if (id != kNoToken) eog_.insert(id);
    }
    static const char *const kEogTexts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        ("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"), "[e~[",
    };
    for (const char *t : kEogTexts) {
        int32_t id = find_token(t);
        if (id != kNoToken) {
            eog_.insert(id);
            mark_control(id);
        }
    }
    // gpt-oss formatting tokens are printed like ordinary text.
    for (const char *t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
        int32_t id = find_token(t);
        if (id != kNoToken) tokens_[id].attr = kAttrUserDefined;
    }
    for (int32_t id : {eos_, eot_, eom_}) {
        if (id != kNoToken) eog_.insert(id);
    }
    // Harmony-style (<|return|> + <|call|>) and Solar-open (<|calls|> + <|flush|>)
    // vocabularies use <|end|> between messages, not at the end.
    {
        const auto has = [&](const char *t) { int32_t id = find_token(t); return id != kNoToken && eog_.count(id); };
        const int32_t end_id = find_token("<|end|>");
        if (end_id != kNoToken && eog_.count(end_id) &&
            ((has("<|return|>") && (has("<|call|>") || has("<|calls|>"))) || (has("<|calls|>") && has("<|flush|>")))) {
            eog_.erase(end_id);
            tokens_[end_id].attr = kAttrUserDefined;
        }
        // Gemma 4 (with <|tool_response>) uses </s> as ordinary text.
        const int32_t s_id = find_token("</s>");
        if (s_id != kNoToken && eog_.count(s_id) && has("<|tool_response>")) {
            eog_.erase(s_id);
            tokens_[s_id].attr = kAttrNormal;
        }
    }

    // Special tokens, longest text first, for matching in raw text.
    specials_.clear();
    for (int32_t id = 0; id < n_tokens(); ++id) {
        if (tokens_[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) specials_.push_back(id);
    }
    std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
        return tokens_[a].text.size() > tokens_[b].text.size();
    });

    pieces_.resize(tokens_.size());
    for (int32_t id = 0; id < n_tokens(); ++id) pieces_[id] = compute_piece(id);
    by_piece_.clear();
    for (int32_t id = 0; id < n_tokens(); ++id)
        if (!piece_view(id).empty()) by_piece_.push_back(id);
    std::sort(by_piece_.begin(), by_piece_.end(), [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });

    // Whitespace stripping around special tokens, by model (not stored in GGUF).
    const std::string name = lowercase_ascii(file.opt_string("general.name").value_or(""));
    const std::string arch = file.opt_string("general.architecture").value_or("");
    const auto set_attr = [&](const char *text, uint32_t attr, bool on) {
        int32_t id = find_token(text);
        if (id == kNoToken) return;
        if (on) tokens_[id].attr |= attr;
        else tokens_[id].attr &= ~attr;
    };
    if (pre_.find("jina-v2-de") != std::string::npos || pre_.find("jina-v2-es") != std::string::npos ||
        pre_.find("jina-v2-code") != std::string::npos || arch.find("nomic-bert-moe") != std::string::npos ||
        arch.find("jina-bert-v3") != std::string::npos) {
        set_attr("<mask>", kAttrLstrip, true);
    } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
        for (int32_t id : specials_) tokens_[id].attr |= kAttrRstrip;
        set_attr("</s>", kAttrRstrip, true);
        for (const char *t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
    } else if (name.find("modern-bert") != std::string::npos) {
        set_attr("[MASK]", kAttrLstrip, true);
    }
}

// ---- lookups ----

const std::string &Vocab::token_text(int32_t id) const {
    static const std::string empty;
    return (id >= 0 && id < n_tokens()) ? tokens_[id].text : empty;
}

float Vocab::token_score(int32_t id) const { return (id >= 0 && id < n_tokens()) ? tokens_[id].score : 0.0f; }

uint32_t Vocab::token_attr(int32_t id) const { return (id >= 0 && id < n_tokens()) ? tokens_[id].attr : 0; }

int32_t Vocab::find_token(std::string_view text) const {
    auto it = index_.find(text);
    return it == index_.end() ? kNoToken : it->second;
}

int32_t Vocab::byte_token(uint8_t byte) const {
    if (type_ == VocabType::Bpe && style_->byte_encode) {
        // Byte-level vocabularies cover every byte image; this is the last resort.
        return find_token(std::string(1, (char)byte));
    }
    int32_t id = find_token(byte_token_text(byte));
    if (id != kNoToken || type_ == VocabType::Bpe) return id;
    id = find_token(std::string(1, (char)byte));
    return id != kNoToken ? id : unk_;
}

int Vocab::merge_rank(std::string_view left, std::string_view right) const {
    thread_local std::string key;
    const uint32_t left_len = (uint32_t)left.size();
    key.assign(reinterpret_cast<const char *>(&left_len), 4);
    key.append(left);
    key.append(right);
    auto it = merges_.find(std::string_view(key));
    return it == merges_.end() ? -1 : it->second;
}

// ---- text -> ids ----

std::vector<Vocab::Fragment> Vocab::split_special(std::string_view text, bool parse_special) const {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({kNoToken, 0, text.size()});
    for (int32_t id : specials_) {
        const Token &tok = tokens_[id];
        if (!parse_special && (tok.attr & (kAttrControl | kAttrUnknown))) continue;  // user-defined: always
        const std::string_view pat = tok.text;
        bool any = false;
        for (const auto &f : frags) {
            if (f.token == kNoToken && text.substr(f.off, f.len).find(pat) != std::string_view::npos) {
                any = true;
                break;
            }
        }
        if (!any) continue;
        std::vector<Fragment> next;
        next.reserve(frags.size() + 4);
        for (const auto &f : frags) {
            if (f.token != kNoToken) {
                next.push_back(f);
                continue;
            }
            size_t off = f.off, len = f.len;
            while (len > 0) {
                const size_t hit = text.substr(off, len).find(pat);
                if (hit == std::string_view::npos) {
                    next.push_back({kNoToken, off, len});
                    break;
                }
                size_t left_len = hit;
                if (tok.attr & kAttrLstrip) {
                    while (left_len > 0 && is_ascii_space(text[off + left_len - 1])) --left_len;
                }
                if (left_len > 0) next.push_back({kNoToken, off, left_len});
                next.push_back({id, 0, 0});
                size_t r_off = off + hit + pat.size();
                size_t r_len = off + len - r_off;
                if (tok.attr & kAttrRstrip) {
                    while (r_len > 0 && is_ascii_space(text[r_off])) {
                        ++r_off;
                        --r_len;
                    }
                }
                off = r_off;
                len = r_len;
            }
        }
        frags = std::move(next);
    }
    return frags;
}

std::vector<int32_t> Vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    std::vector<int32_t> out;
    const auto frags = split_special(text, parse_special);
    if (add_special && add_bos_ && bos_ != kNoToken) out.push_back(bos_);
    if (type_ == VocabType::Spm) {
        bool prev_special = true;  // the text start counts as a boundary
        for (const auto &f : frags) {
            if (f.token != kNoToken) {
                out.push_back(f.token);
                prev_special = true;
                continue;
            }
            std::string s = (add_space_prefix_ && prev_special) ? " " : "";
            s.append(text.substr(f.off, f.len));
            tokenize_spm(replace_all(s, " ", kSpaceMark), out);
            prev_special = false;
        }
    } else {
        for (const auto &f : frags) {
            if (f.token != kNoToken) {
                out.push_back(f.token);
                continue;
            }
            const std::string_view raw = text.substr(f.off, f.len);
            if (style_->escape_whitespace) {
                tokenize_bpe(replace_all(raw, " ", kSpaceMark), out);
            } else {
                tokenize_bpe(raw, out);
            }
        }
    }
    if (add_special && add_eos_ && eos_ != kNoToken) out.push_back(eos_);
    return out;
}

namespace {

// A run of bytes in the word being merged, kept as a doubly linked list in
// text order; n == 0 marks a symbol merged into its left neighbour.
struct Symbol {
    int prev, next;
    size_t off, n;
};

std::vector<Symbol> split_chars(std::string_view s) {
    std::vector<Symbol> syms;
    size_t off = 0;
    while (off < s.size()) {
        const size_t n = std::min(utf8_lead_len((uint8_t)s[off]), s.size() - off);
        const int k = (int)syms.size();
        syms.push_back({k - 1, off + n < s.size() ? k + 1 : -1, off, n});
        off += n;
    }
    return syms;
}

void merge_into_left(std::vector<Symbol> &syms, int left, int right) {
    Symbol &l = syms[left];
    Symbol &r = syms[right];
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = left;
}

// Each symbol left after merging as its token, or as byte tokens when its
// text is no token (bytes without a byte token are dropped).
template <class FindToken, class ByteToken>
void emit_symbols(std::string_view text, const std::vector<Symbol> &syms, std::vector<int32_t> &out, FindToken find,
                  ByteToken byte) {
    for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
        const std::string_view piece = text.substr(syms[i].off, syms[i].n);
        const int32_t id = find(piece);
        if (id != Vocab::kNoToken) {
            out.push_back(id);
            continue;
        }
        for (char c : piece) {
            const int32_t b = byte((uint8_t)c);
            if (b != Vocab::kNoToken) out.push_back(b);
        }
    }
}

// The merge loop SPM and BPE share: repeatedly merge the adjacent pair with
// the highest priority (leftmost on ties). `priority(l, r)` gives a pair's
// priority, or nothing when the pair may not merge.
template <class Priority>
void merge_pairs(std::string_view text, std::vector<Symbol> &syms, Priority priority) {
    struct Candidate {
        int left, right;
        double priority;
        size_t size;
    };
    const auto worse = [](const Candidate &a, const Candidate &b) {
        return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
    const auto propose = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const Symbol &l = syms[left], &r = syms[right];
        const std::optional<double> p = priority(text.substr(l.off, l.n), text.substr(r.off, r.n));
        if (p) queue.push({left, right, *p, l.n + r.n});
    };
    for (int i = 1; i < (int)syms.size(); ++i) propose(i - 1, i);
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        const Symbol &l = syms[c.left], &r = syms[c.right];
        if (l.n == 0 || r.n == 0 || l.n + r.n != c.size) continue;  // stale
        merge_into_left(syms, c.left, c.right);
        propose(syms[c.left].prev, c.left);
        propose(c.left, syms[c.left].next);
    }
}

}  // namespace

// SentencePiece BPE: repeatedly merge the adjacent pair whose concatenation
// is the highest-scoring token (leftmost on ties); what remains unmatched
// falls back to byte tokens.
void Vocab::tokenize_spm(std::string_view s, std::vector<int32_t> &out) const {
    std::vector<Symbol> syms = split_chars(s);
    // SPM: a pair merges when the joined text is a token; higher score first
    merge_pairs(s, syms, [&](std::string_view l, std::string_view r) -> std::optional<double> {
        const int32_t id = find_token(std::string_view(l.data(), l.size() + r.size()));
        if (id == kNoToken) return std::nullopt;
        return tokens_[id].score;
    });
    emit_symbols(s, syms, out, [&](std::string_view p) { return find_token(p); },
                 [&](uint8_t b) { return byte_token(b); });
}

void Vocab::tokenize_bpe(std::string_view raw, std::vector<int32_t> &out) const {
    const std::string text = sanitize_utf8(raw);
    for (std::string_view piece : pre_tokenizer_->split(text)) {
        if (style_->byte_encode) {
            bpe_word(bytes_to_unicode(piece), out);
        } else {
            bpe_word(piece, out);
        }
    }
}

// Rank-ordered BPE merges within one word (lowest rank first, leftmost on
// ties); symbols that are not tokens fall back to byte tokens.
void Vocab::bpe_word(std::string_view word, std::vector<int32_t> &out) const {
    if (word.empty()) return;
    if (style_->ignore_merges || (style_->name == "gemma4" && word.find_first_not_of('\n') == std::string_view::npos)) {
        const int32_t id = find_token(word);
        if (id != kNoToken) {
            out.push_back(id);
            return;
        }
    }
    std::vector<Symbol> syms = split_chars(word);
    // BPE: a pair merges when the merge list has it; lowest rank first
    merge_pairs(word, syms, [&](std::string_view l, std::string_view r) -> std::optional<double> {
        const int rank = merge_rank(l, r);
        if (rank < 0) return std::nullopt;
        return -(double)rank;
    });
    emit_symbols(word, syms, out, [&](std::string_view p) { return find_token(p); },
                 [&](uint8_t b) { return byte_token(b); });
}

// ---- ids -> text ----

std::string Vocab::compute_piece(int32_t id) const {
    const Token &t = tokens_[id];
    if (t.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t.text;
    if (t.attr & kAttrNormal) {
        if (type_ == VocabType::Spm || style_->escape_whitespace) return replace_all(t.text, kSpaceMark, " ");
        return decode_byte_level(t.text);
    }
    if (t.attr & kAttrByte) return std::string(1, byte_of_token_text(t.text));
    return "";  // unused / undefined tokens print as nothing
}

std::string Vocab::token_to_piece(int32_t id, bool special) const {
    if (id < 0 || id >= n_tokens()) return "";
    return special ? pieces_[id] : std::string(piece_view(id));
}

std::string_view Vocab::piece_view(int32_t id) const {
    if (id < 0 || id >= n_tokens() || (tokens_[id].attr & (kAttrUnknown | kAttrControl))) return {};
    return pieces_[id];
}

std::string Vocab::detokenize(const std::vector<int32_t> &ids, bool special) const {
    std::string out;
    bool strip_space = add_space_prefix_;  // only the very first token's space was added by us
    for (int32_t id : ids) {
        std::string piece = token_to_piece(id, special);
        if (strip_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
        strip_space = false;
        out += piece;
    }
    if (clean_spaces_) out = clean_up_spaces(std::move(out));
    return out;
}

// ---- streaming ----

std::string Detokenizer::push(int32_t id) {
    pending_ += vocab_.token_to_piece(id, special_);
    const size_t hold = utf8_incomplete_tail(pending_);
    std::string ready = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return ready;
}

std::string Detokenizer::flush() {
    std::string rest;
    rest.swap(pending_);
    return rest;
}

}  // namespace toy::text
