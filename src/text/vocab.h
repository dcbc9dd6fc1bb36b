// Vocabulary and tokenizer of a GGUF model.
//
// Two tokenizer families are supported, chosen by `tokenizer.ggml.model`:
//   "llama"  SentencePiece-style (SPM): characters merged by token score,
//            spaces written as U+2581, unknown bytes as <0xXX> tokens.
//   "gpt2"   byte-level BPE: the text is cut into words by the pre-tokenizer
//            named in `tokenizer.ggml.pre`, every byte of a word is mapped
//            to a printable character and merges apply by rank.
//   "gemma4" BPE over raw UTF-8 with U+2581 for spaces and <0xXX> fallback.
// Token ids agree with llama.cpp for the same file (its test vectors are
// checked in tests/test_tokenizer.cpp).
#pragma once

#include "gguf/gguf_reader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace toy::text {

class PreTokenizer;
struct BpeStyle;

enum class VocabType { Spm, Bpe };

// Token attributes (a bit set; GGUF stores one token type per token).
enum TokenAttr : uint32_t {
    kAttrUndefined = 0,
    kAttrUnknown = 1u << 0,
    kAttrUnused = 1u << 1,
    kAttrNormal = 1u << 2,
    kAttrControl = 1u << 3,
    kAttrUserDefined = 1u << 4,
    kAttrByte = 1u << 5,
    kAttrLstrip = 1u << 6,  // a matched special token swallows whitespace on its left
    kAttrRstrip = 1u << 7,  // ... and on its right
};

class Vocab {
public:
    static constexpr int32_t kNoToken = -1;

    // Reads the tokenizer.* metadata. Throws toy::Error naming the file and
    // key for a missing or malformed key, an unsupported tokenizer model or
    // an unknown pre-tokenizer.
    static Vocab load(const gguf::File &file);

    // Text -> ids. add_special: BOS/EOS as the metadata asks
    // (tokenizer.ggml.add_bos_token / add_eos_token). parse_special: text that
    // spells a control token (e.g. "<s>", "<|im_start|>") becomes that token;
    // when false it is tokenized as plain text. User-defined tokens are always
    // matched whole. Never throws on any input bytes.
    std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special = false) const;

    // The bytes a token stands for. Control/unknown tokens give "" unless
    // `special`; an id outside the vocabulary gives "".
    std::string token_to_piece(int32_t id, bool special = false) const;

    // Ids -> text, as llama.cpp's llama_detokenize(remove_special = false):
    // the space an SPM tokenizer prefixed is dropped from the first token and
    // BPE families that ask for it get their " ," / " 's" spaces cleaned.
    std::string detokenize(const std::vector<int32_t> &ids, bool special = false) const;

    int32_t n_tokens() const { return (int32_t)tokens_.size(); }
    // token_to_piece(id) without a copy ("" for control and unknown tokens).
    std::string_view piece_view(int32_t id) const;
    // The ids whose piece_view is not empty, sorted by it (bytewise): tokens
    // that share a prefix are neighbours (the grammar walks them so).
    const std::vector<int32_t> &ids_by_piece() const { return by_piece_; }
    VocabType type() const { return type_; }
    const std::string &model_name() const { return model_; }  // tokenizer.ggml.model
    const std::string &pre_name() const { return pre_; }      // tokenizer.ggml.pre ("" for SPM)
    const std::string &token_text(int32_t id) const;          // raw vocabulary text ("" if out of range)
    float token_score(int32_t id) const;
    uint32_t token_attr(int32_t id) const;
    bool is_control(int32_t id) const { return token_attr(id) & kAttrControl; }
    bool is_byte(int32_t id) const { return token_attr(id) & kAttrByte; }
    // Id of a token with exactly this text, or kNoToken.
    int32_t find_token(std::string_view text) const;

    int32_t bos() const { return bos_; }  // kNoToken when the vocabulary has none
    int32_t eos() const { return eos_; }
    int32_t eot() const { return eot_; }
    int32_t unk() const { return unk_; }
    int32_t pad() const { return pad_; }
    int32_t newline() const { return newline_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    // detokenize() removes the space in " ," " ." " ?" " !" " 's" " 'm" " 're" " 've" and " ' ".
    bool clean_spaces() const { return clean_spaces_; }
    // End of generation: EOS, EOT, EOM and the end-of-turn tokens chat models use.
    bool is_eog(int32_t id) const { return eog_.count(id) > 0; }
    const std::unordered_set<int32_t> &eog_ids() const { return eog_; }

    Vocab(Vocab &&) noexcept;
    Vocab &operator=(Vocab &&) noexcept;
    ~Vocab();

    // What loading noticed but did not refuse (a special-token id out of
    // range, replaced by its default as llama.cpp does): one line each.
    const std::vector<std::string> &notes() const { return notes_; }

private:
    std::vector<std::string> notes_;
    Vocab();
    struct Token {
        std::string text;
        float score = 0;
        uint32_t attr = kAttrNormal;
    };
    struct Fragment;

    void finish_special_tokens(const gguf::File &file);
    std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
    void tokenize_spm(std::string_view text, std::vector<int32_t> &out) const;
    void tokenize_bpe(std::string_view text, std::vector<int32_t> &out) const;
    void bpe_word(std::string_view word, std::vector<int32_t> &out) const;
    int32_t byte_token(uint8_t byte) const;
    int merge_rank(std::string_view left, std::string_view right) const;
    std::string compute_piece(int32_t id) const;

    VocabType type_ = VocabType::Spm;
    std::string model_, pre_;
    std::vector<Token> tokens_;
    struct StringHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
    StringMap index_;
    StringMap merges_;  // key: 4-byte length of left, left, right
    std::vector<int32_t> specials_;                    // control/user-defined/unknown, longest text first
    std::vector<std::string> pieces_;                  // token_to_piece(id, special = true)
    std::vector<int32_t> by_piece_;

    std::unique_ptr<BpeStyle> style_;
    std::unique_ptr<PreTokenizer> pre_tokenizer_;

    int32_t bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken, unk_ = kNoToken;
    int32_t pad_ = kNoToken, newline_ = kNoToken;
    bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
    bool clean_spaces_ = false;
    std::unordered_set<int32_t> eog_;
};

// Streaming detokenizer: feed generated ids one at a time and get back text
// that only ever ends on a complete UTF-8 character, so a character whose
// bytes arrive in several tokens (byte fallback, byte-level BPE) is printed
// whole. Bytes that can never complete a character are passed through.
class Detokenizer {
public:
    explicit Detokenizer(const Vocab &vocab, bool special = false) : vocab_(vocab), special_(special) {}
    std::string push(int32_t id);
    // Whatever is still held back (an incomplete character at the very end).
    std::string flush();

private:
    const Vocab &vocab_;
    bool special_;
    std::string pending_;
};

}  // namespace toy::text
