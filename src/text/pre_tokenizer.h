// Pre-tokenization for BPE vocabularies: the text is cut into words before
// any merge runs, so merges never cross a word boundary.
//
// A pre-tokenizer is a list of regexes applied one after the other: each
// regex cuts every piece produced by the previous one into its matches and
// the gaps between them (both kept; nothing is dropped). Regexes run under
// PCRE2 in UTF + UCP mode, so \p{L}, \p{N}, \s are real Unicode classes.
//
// The `tokenizer.ggml.pre` names and their regexes follow llama.cpp's
// choices, so token ids agree with models converted by its scripts.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace toy::text {

// How a BPE vocabulary named by `tokenizer.ggml.pre` behaves.
struct BpeStyle {
    std::string name;                  // the canonical family name
    std::vector<std::string> regexes;  // applied in order
    bool byte_encode = true;           // GPT-2 byte->unicode mapping of the words
    bool escape_whitespace = false;    // ' ' -> U+2581 before splitting (SPM-style BPE)
    bool clean_spaces = true;          // detokenize drops " ," " ." " 's" ... spaces
    bool ignore_merges = false;        // a word that is a whole token is taken as is
    std::optional<bool> add_bos;       // default before tokenizer.ggml.add_bos_token
    bool no_default_bos = false;       // the family has no default BOS token
};

// The style for a `tokenizer.ggml.pre` value ("" means the default). Returns
// nullptr for names this engine does not know.
const BpeStyle *find_bpe_style(std::string_view pre);

// Every `tokenizer.ggml.pre` value find_bpe_style accepts (for messages).
std::vector<std::string> known_bpe_pre_names();

class PreTokenizer {
public:
    // Compiles the regexes; throws toy::Error naming a regex that fails.
    explicit PreTokenizer(const std::vector<std::string> &regexes);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer &) = delete;
    PreTokenizer &operator=(const PreTokenizer &) = delete;

    // Cuts valid UTF-8 text into non-empty pieces whose concatenation is the
    // text. Thread-safe.
    std::vector<std::string_view> split(std::string_view text) const;

private:
    struct Regex;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace toy::text
