// Grammar: constrained output in llama.cpp's GBNF format. A grammar is parsed
// once into flat rules (repetitions become helper rules); a GrammarState is
// the set of places the output so far can have reached in it (a set of
// parse stacks, shared between states), advanced one code point at a time.
// The sampler asks a state which tokens may come next: it walks the
// vocabulary in sorted order so tokens that share a prefix share the work,
// and a prefix no stack survives skips every token that starts with it.
//
// GBNF: `name ::= alternatives`, "literals", [character classes] and [^...],
// `.` (any character), (groups), `*` `+` `?` `{m}` `{m,}` `{m,n}`, `#`
// comments, escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, and
// tokens: <[id]>, <text> (a text that is one token) and their negations
// !<[id]> / !<text>. Left-recursive rules are rejected.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace toy::text {

class Vocab;

class Grammar {
public:
    // Parses GBNF text with `root` as the start rule. Throws toy::Error naming
    // the line and column of a syntax error, an undefined rule, a token that
    // is not one token of `vocab` (needed only when the grammar names tokens
    // by their text), or left recursion.
    static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::string_view root = "root",
                                                const Vocab *vocab = nullptr);

    // True when the whole of `text` is a sentence of the grammar (tests,
    // validation). Token elements never match plain text.
    bool matches(std::string_view text) const;

    // One element of a sequence.
    enum class Kind : uint8_t { End, Chars, NotChars, Any, Rule, Token, NotToken };
    struct Element {
        Kind kind;
        uint32_t value;  // Chars/NotChars: index of a class; Rule: rule id; Token/NotToken: token id
    };
    struct Range {
        uint32_t lo, hi;  // inclusive code points
    };

    const std::vector<Element> &elements() const { return elements_; }
    // A rule's alternatives: offsets into elements(), each sequence ends with End.
    const std::vector<uint32_t> &alternatives(uint32_t rule) const { return rules_[rule]; }
    const std::vector<Range> &char_class(uint32_t i) const { return classes_[i]; }
    uint32_t root() const { return root_; }
    size_t n_rules() const { return rules_.size(); }
    const std::string &rule_name(uint32_t rule) const { return names_[rule]; }

private:
    friend class GrammarParser;
    std::vector<Element> elements_;
    std::vector<std::vector<uint32_t>> rules_;
    std::vector<std::vector<Range>> classes_;
    std::vector<std::string> names_;
    uint32_t root_ = 0;
};

// Where generation stands in a grammar.
class GrammarState {
public:
    explicit GrammarState(std::shared_ptr<const Grammar> grammar);

    // Marks allowed[id] for every token that may come next (end-of-generation
    // tokens: when the output so far is complete). allowed has n_vocab entries.
    void allowed_tokens(const Vocab &vocab, std::vector<uint8_t> &allowed) const;
    // Whether one token may come next (cheaper than allowed_tokens).
    bool allows(const Vocab &vocab, int32_t token) const;
    // Moves past a token (its text, or the token itself for token elements).
    // Throws toy::Error when the grammar does not allow it.
    void accept(const Vocab &vocab, int32_t token);
    // Moves past text; false (state unchanged) when the grammar rejects it.
    bool accept_text(std::string_view text);

    // Nothing more may follow (every stack is complete and none can go on).
    bool finished() const;
    // The output so far is a whole sentence (end of generation is allowed).
    bool complete() const;

    const Grammar &grammar() const { return *grammar_; }

    // The parse stacks, sets of them and the transitions between sets met so
    // far (a lazily built automaton). Copies of a state share it: use them
    // from one thread.
    struct Cache;

private:
    std::shared_ptr<const Grammar> grammar_;
    std::shared_ptr<Cache> cache_;
    int32_t set_ = 0;        // the stacks reached, an id in cache_
    uint32_t partial_ = 0;   // bits of a code point whose UTF-8 bytes have begun
    uint8_t need_ = 0;       // ... how many of its bytes are still to come
    uint8_t len_ = 0;        // ... and how many it has
};

}  // namespace toy::text
