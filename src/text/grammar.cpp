#include "text/grammar.h"

#include "core/error.h"
#include "core/flat_map.h"
#include "text/unicode.h"
#include "text/vocab.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace toy::text {

using Kind = Grammar::Kind;
using Element = Grammar::Element;
using Range = Grammar::Range;
using Seq = std::vector<Element>;

// ---------------------------------------------------------------------------
// Parsing

class GrammarParser {
public:
    GrammarParser(std::string_view src, const Vocab *vocab) : src_(src), vocab_(vocab) {}

    std::shared_ptr<Grammar> run(std::string_view root) {
        // the names the text defines, so no helper rule takes one of them
        for (size_t at = src_.find("::="); at != std::string_view::npos; at = src_.find("::=", at + 3)) {
            size_t end = at;
            while (end > 0 && (src_[end - 1] == ' ' || src_[end - 1] == '\t')) --end;
            size_t begin = end;
            while (begin > 0 && word_char(src_[begin - 1])) --begin;
            if (begin < end) defined_names_.emplace(src_.substr(begin, end - begin));
        }
        skip_space(true);
        while (pos_ < src_.size()) {
            const size_t at = pos_;
            const std::string name = parse_name("a rule name");
            skip_space(false);
            if (src_.substr(pos_, 3) != "::=") error(pos_, fmt::format("expected '::=' after '{}'", name));
            pos_ += 3;
            skip_space(true);
            const uint32_t id = rule_id(name, at);
            if (defined_[id]) error(at, fmt::format("rule '{}' is defined twice", name));
            define(id, parse_alternatives(name, false));
            if (pos_ < src_.size() && src_[pos_] != '\n') error(pos_, fmt::format("unexpected {}", describe(pos_)));
            skip_space(true);
        }
        for (uint32_t r = 0; r < g_->rules_.size(); ++r) {
            if (!defined_[r]) error(first_use_[r], fmt::format("rule '{}' is used but never defined", g_->names_[r]));
        }
        auto it = ids_.find(std::string(root));
        if (it == ids_.end()) fail("grammar: there is no rule named '{}' to start from", root);
        g_->root_ = it->second;
        const std::vector<uint8_t> nullable = nullable_rules();
        check_left_recursion(nullable);
        drop_empty_only_rules(nullable);
        return std::move(g_);
    }

private:
    [[noreturn]] void error(size_t at, const std::string &what) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < at && i < src_.size(); ++i) {
            if (src_[i] == '\n') ++line, col = 1;
            else ++col;
        }
        fail("grammar: {} (line {}, column {})", what, line, col);
    }

    std::string describe(size_t at) const {
        if (at >= src_.size()) return "end of grammar";
        if (src_[at] == '\n') return "end of line";
        size_t p = at;
        decode_utf8(src_, p);
        return fmt::format("'{}'", src_.substr(at, p - at));
    }

    static bool word_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    // Spaces, tabs and comments; newlines too when `newlines`.
    void skip_space(bool newlines) {
        while (pos_ < src_.size()) {
            const char c = src_[pos_];
            if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++pos_;
            } else if (c == '#') {
                while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
            } else {
                break;
            }
        }
    }

    std::string parse_name(const char *what) {
        const size_t start = pos_;
        while (pos_ < src_.size() && word_char(src_[pos_])) ++pos_;
        if (pos_ == start) error(start, fmt::format("expected {}, found {}", what, describe(start)));
        return std::string(src_.substr(start, pos_ - start));
    }

    uint32_t rule_id(const std::string &name, size_t at) {
        auto [it, added] = ids_.emplace(name, (uint32_t)g_->rules_.size());
        if (added) {
            g_->rules_.emplace_back();
            g_->names_.push_back(name);
            defined_.push_back(false);
            first_use_.push_back(at);
        }
        return it->second;
    }

    // A rule of the grammar's own (groups, repetitions): base-N.
    uint32_t helper_rule(const std::string &base) {
        std::string name;
        do name = fmt::format("{}-{}", base, ++helpers_);
        while (ids_.count(name) || defined_names_.count(name));
        const uint32_t id = rule_id(name, pos_);
        defined_[id] = true;
        return id;
    }

    void define(uint32_t rule, const std::vector<Seq> &alternatives) {
        defined_[rule] = true;
        for (const Seq &seq : alternatives) {
            g_->rules_[rule].push_back((uint32_t)g_->elements_.size());
            g_->elements_.insert(g_->elements_.end(), seq.begin(), seq.end());
            g_->elements_.push_back({Kind::End, 0});
        }
    }

    uint32_t char_class(std::vector<Range> ranges) {
        std::sort(ranges.begin(), ranges.end(), [](Range a, Range b) { return a.lo < b.lo; });
        std::vector<Range> merged;
        for (Range r : ranges) {
            if (!merged.empty() && r.lo <= merged.back().hi + 1) merged.back().hi = std::max(merged.back().hi, r.hi);
            else merged.push_back(r);
        }
        std::vector<uint32_t> key;
        for (Range r : merged) key.insert(key.end(), {r.lo, r.hi});
        auto [it, added] = class_ids_.emplace(key, (uint32_t)g_->classes_.size());
        if (added) g_->classes_.push_back(std::move(merged));
        return it->second;
    }

    static constexpr int kMaxDepth = 100;
    int depth_ = 0;

    std::vector<Seq> parse_alternatives(const std::string &rule, bool nested) {
        std::vector<Seq> alts;
        alts.push_back(parse_sequence(rule, nested));
        for (;;) {
            const size_t before = pos_;
            // a '|' may also begin the next line of a rule (not only end a line)
            skip_space(true);
            if (pos_ < src_.size() && src_[pos_] == '|') {
                ++pos_;
                skip_space(true);
                alts.push_back(parse_sequence(rule, nested));
                continue;
            }
            if (!nested) pos_ = before;
            return alts;
        }
    }

    Seq parse_sequence(const std::string &rule, bool nested) {
        Seq seq;
        size_t last = SIZE_MAX;  // where the last item (what an operator repeats) begins
        for (;;) {
            skip_space(nested);
            if (pos_ >= src_.size()) break;
            const char c = src_[pos_];
            const size_t start = seq.size();
            if (c == '"') {
                ++pos_;
                while (pos_ < src_.size() && src_[pos_] != '"') {
                    if (src_[pos_] == '\n') break;
                    const uint32_t cpt = parse_char();
                    seq.push_back({Kind::Chars, char_class({{cpt, cpt}})});
                }
                if (pos_ >= src_.size() || src_[pos_] != '"') error(pos_, "unterminated string literal");
                ++pos_;
            } else if (c == '[') {
                const size_t at = pos_++;
                const bool negated = pos_ < src_.size() && src_[pos_] == '^';
                if (negated) ++pos_;
                std::vector<Range> ranges;
                while (pos_ < src_.size() && src_[pos_] != ']') {
                    if (src_[pos_] == '\n') break;
                    const uint32_t lo = parse_char();
                    uint32_t hi = lo;
                    if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
                        ++pos_;
                        hi = parse_char();
                        if (hi < lo) error(at, "character range out of order");
                    }
                    ranges.push_back({lo, hi});
                }
                if (pos_ >= src_.size() || src_[pos_] != ']') error(at, "unterminated character class");
                ++pos_;
                seq.push_back({negated ? Kind::NotChars : Kind::Chars, char_class(std::move(ranges))});
            } else if (c == '.') {
                ++pos_;
                seq.push_back({Kind::Any, 0});
            } else if (word_char(c)) {
                const size_t at = pos_;
                seq.push_back({Kind::Rule, rule_id(parse_name("a rule name"), at)});
            } else if (c == '(') {
                // groups nest by recursion: a bound keeps a hostile grammar off the stack's end
                if (++depth_ > kMaxDepth) error(pos_, fmt::format("groups nested more than {} deep", kMaxDepth));
                struct Leave {
                    int &d;
                    ~Leave() { --d; }
                } leave{depth_};
                ++pos_;
                skip_space(true);
                const uint32_t id = helper_rule(rule);
                const std::vector<Seq> alts = parse_alternatives(rule, true);
                skip_space(true);
                if (pos_ >= src_.size() || src_[pos_] != ')') error(pos_, fmt::format("expected ')', found {}", describe(pos_)));
                ++pos_;
                define(id, alts);
                seq.push_back({Kind::Rule, id});
            } else if (c == '<' || (c == '!' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '<')) {
                seq.push_back(parse_token());
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (last == SIZE_MAX) error(pos_, fmt::format("'{}' has nothing before it to repeat", c));
                auto [lo, hi] = parse_repetition();
                repeat(seq, last, lo, hi, rule);
                last = SIZE_MAX;
                continue;
            } else {
                break;  // ')', '|', a newline or something the caller reports
            }
            last = start;
        }
        return seq;
    }

    // One character of a literal or class: an escape or a UTF-8 character.
    uint32_t parse_char() {
        const size_t at = pos_;
        if (src_[pos_] != '\\') {
            size_t p = pos_;
            const uint32_t cpt = decode_utf8(src_, p);
            pos_ = p;
            return cpt;
        }
        if (++pos_ >= src_.size()) error(at, "unfinished escape");
        const char e = src_[pos_++];
        auto hex = [&](int n) {
            uint32_t v = 0;
            if (pos_ + (size_t)n > src_.size() ||
                std::from_chars(src_.data() + pos_, src_.data() + pos_ + n, v, 16).ptr != src_.data() + pos_ + n) {
                error(at, fmt::format("expected {} hex digits after '\\{}'", n, e));
            }
            pos_ += (size_t)n;
            if (v > 0x10FFFF) error(at, "code point above U+10FFFF");
            return v;
        };
        switch (e) {
            case 'x': return hex(2);
            case 'u': return hex(4);
            case 'U': return hex(8);
            case 't': return '\t';
            case 'n': return '\n';
            case 'r': return '\r';
            case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return (uint32_t)e;
            default: error(at, fmt::format("unknown escape '\\{}'", e));
        }
    }

    Element parse_token() {
        const size_t at = pos_;
        const bool negated = src_[pos_] == '!';
        if (negated) ++pos_;
        ++pos_;  // '<'
        int64_t id = -1;
        if (pos_ < src_.size() && src_[pos_] == '[') {
            ++pos_;
            const size_t digits = pos_;
            while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9') ++pos_;
            if (pos_ == digits || pos_ + 1 >= src_.size() || src_.substr(pos_, 2) != "]>") {
                error(at, "expected a token id like <[123]>");
            }
            if (std::from_chars(src_.data() + digits, src_.data() + pos_, id).ec != std::errc() || id > INT32_MAX) {
                error(at, "token id too large");
            }
            pos_ += 2;
            if (vocab_ && id >= vocab_->n_tokens()) {
                error(at, fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab_->n_tokens() - 1));
            }
        } else {
            const size_t end = src_.find('>', pos_);
            if (end == std::string_view::npos || src_.substr(pos_, end - pos_).find('\n') != std::string_view::npos) {
                error(at, "unterminated token '<...>'");
            }
            const std::string text(src_.substr(pos_, end - pos_));
            pos_ = end + 1;
            if (!vocab_) error(at, fmt::format("token <{}> needs the model's vocabulary", text));
            const std::vector<int32_t> ids = vocab_->tokenize("<" + text + ">", false, true);
            if (ids.size() != 1) error(at, fmt::format("<{}> is {} tokens in this vocabulary, not one", text, ids.size()));
            id = ids[0];
        }
        return {negated ? Kind::NotToken : Kind::Token, (uint32_t)id};
    }

    std::pair<uint32_t, int64_t> parse_repetition() {
        const size_t at = pos_;
        const char c = src_[pos_++];
        if (c == '*') return {0, -1};
        if (c == '+') return {1, -1};
        if (c == '?') return {0, 1};
        auto number = [&]() {
            skip_space(false);
            const size_t start = pos_;
            while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9') ++pos_;
            uint32_t v = 0;
            if (pos_ == start || std::from_chars(src_.data() + start, src_.data() + pos_, v).ec != std::errc()) {
                error(at, "expected a repetition count like {2}, {2,}, {2,5}");
            }
            skip_space(false);
            return v;
        };
        const uint32_t lo = number();
        int64_t hi = lo;
        if (pos_ < src_.size() && src_[pos_] == ',') {
            ++pos_;
            skip_space(false);
            hi = pos_ < src_.size() && src_[pos_] == '}' ? -1 : (int64_t)number();
        }
        if (pos_ >= src_.size() || src_[pos_] != '}') error(at, "expected '}' to close the repetition count");
        ++pos_;
        if (hi >= 0 && hi < lo) error(at, fmt::format("repetition {{{},{}}}: the maximum is below the minimum", lo, hi));
        if (lo > 10000 || hi > 10000) error(at, "repetition counts above 10000 are not supported");
        return {lo, hi};
    }

    // Replaces seq[from..] (one item) with `lo` copies of it followed by up to
    // hi - lo optional ones (nested, so an automaton state stays small) or,
    // with hi < 0, a right-recursive "any number more".
    void repeat(Seq &seq, size_t from, uint32_t lo, int64_t hi, const std::string &rule) {
        Seq item(seq.begin() + (ptrdiff_t)from, seq.end());
        seq.resize(from);
        if (item.size() > 1) {
            const uint32_t id = helper_rule(rule);
            define(id, {item});
            item = {{Kind::Rule, id}};
        }
        for (uint32_t i = 0; i < lo; ++i) seq.insert(seq.end(), item.begin(), item.end());
        if (hi < 0) {
            const uint32_t id = helper_rule(rule);
            Seq more = item;
            more.push_back({Kind::Rule, id});
            define(id, {more, {}});
            seq.push_back({Kind::Rule, id});
        } else if (hi > lo) {
            uint32_t inner = UINT32_MAX;
            for (int64_t k = lo; k < hi; ++k) {
                const uint32_t id = helper_rule(rule);
                Seq one = item;
                if (inner != UINT32_MAX) one.push_back({Kind::Rule, inner});
                define(id, {one, {}});
                inner = id;
            }
            seq.push_back({Kind::Rule, inner});
        }
    }

    // The rules that can match the empty text. A worklist, linear in the
    // grammar's size: each alternative waits on the first rule reference
    // that is not (yet) known to be nullable, and is looked at again when
    // that rule turns out to be (sweeping the rules until nothing changed
    // took a pass per link of a chain of rules: quadratic).
    std::vector<uint8_t> nullable_rules() const {
        const Grammar &g = *g_;
        const size_t n = g.rules_.size();
        std::vector<uint8_t> nullable(n, 0);
        struct Waiting {
            uint32_t rule, at;  // the alternative's rule, and where its scan stopped
        };
        std::vector<std::vector<Waiting>> waiting(n);
        std::vector<uint32_t> found;  // nullable rules whose waiters are still to resume
        auto scan = [&](Waiting w) {
            if (nullable[w.rule]) return;
            size_t i = w.at;
            while (g.elements_[i].kind == Kind::Rule && nullable[g.elements_[i].value]) ++i;
            const Element e = g.elements_[i];
            if (e.kind == Kind::End) {
                nullable[w.rule] = 1;
                found.push_back(w.rule);
            } else if (e.kind == Kind::Rule) {
                waiting[e.value].push_back({w.rule, (uint32_t)i});
            }
        };
        for (uint32_t r = 0; r < n; ++r)
            for (uint32_t a : g.rules_[r]) scan({r, a});
        while (!found.empty()) {
            const uint32_t r = found.back();
            found.pop_back();
            std::vector<Waiting> resume = std::move(waiting[r]);
            for (Waiting w : resume) scan(w);
        }
        return nullable;
    }

    // A rule that can reach itself without consuming anything would make
    // the parse stacks grow forever. Reaching itself as the last element of
    // a sequence (x ::= y? x, as `*` writes) is harmless: the stack does not
    // grow. Any other such cycle is left recursion.
    void check_left_recursion(const std::vector<uint8_t> &nullable) {
        const Grammar &g = *g_;
        const size_t n = g.rules_.size();
        struct Edge {
            uint32_t to;
            bool tail;
        };
        std::vector<std::vector<Edge>> edges(n);
        for (size_t r = 0; r < n; ++r) {
            for (uint32_t a : g.rules_[r]) {
                for (size_t i = a; g.elements_[i].kind == Kind::Rule; ++i) {
                    const uint32_t to = g.elements_[i].value;
                    edges[r].push_back({to, g.elements_[i + 1].kind == Kind::End});
                    if (!nullable[to]) break;
                }
            }
        }
        // strongly connected components (Tarjan's algorithm, with a list of
        // the rules being visited instead of a recursion: a chain of rules is
        // as long as the grammar); a non-tail edge inside one is left recursion
        std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
        std::vector<uint32_t> stack;
        std::vector<uint8_t> on_stack(n, 0);
        struct Visit {
            uint32_t rule;
            size_t next_edge;
        };
        std::vector<Visit> visiting;
        int32_t counter = 0, n_comp = 0;
        auto enter = [&](uint32_t v) {
            index[v] = low[v] = counter++;
            stack.push_back(v);
            on_stack[v] = 1;
            visiting.push_back({v, 0});
        };
        for (uint32_t root = 0; root < n; ++root) {
            if (index[root] >= 0) continue;
            enter(root);
            while (!visiting.empty()) {
                Visit &top = visiting.back();
                const uint32_t v = top.rule;
                if (top.next_edge < edges[v].size()) {
                    const uint32_t to = edges[v][top.next_edge++].to;
                    if (index[to] < 0) enter(to);
                    else if (on_stack[to]) low[v] = std::min(low[v], index[to]);
                    continue;
                }
                visiting.pop_back();
                if (!visiting.empty()) low[visiting.back().rule] = std::min(low[visiting.back().rule], low[v]);
                if (low[v] == index[v]) {
                    uint32_t w;
                    do {
                        w = stack.back();
                        stack.pop_back();
                        on_stack[w] = 0;
                        comp[w] = n_comp;
                    } while (w != v);
                    ++n_comp;
                }
            }
        }
        for (uint32_t v = 0; v < n; ++v) {
            for (const Edge &e : edges[v]) {
                if (!e.tail && comp[e.to] == comp[v]) {
                    fail("grammar: rule '{}' is left-recursive (it can begin with itself); rewrite it with repetition, "
                         "e.g. x ::= y (\"+\" y)*", g.names_[v]);
                }
            }
        }
    }

    // References to rules that match the empty text and nothing else (x ::= "",
    // or a repetition of such a rule) are removed from every sequence. Left in,
    // each one read would stay on the parse stack below what follows it:
    // `root ::= [^\n] root? x{0,5}` with `x ::= ""` nested one level deeper
    // with every character, and each step walked all the levels down to the
    // bottom (quadratic in the text, and a recursion that overflowed the
    // thread's stack after some thousands of characters). Without them every
    // level a step walks down to adds a stack of its own, so the walk ends at
    // the bound on stacks (GrammarState::Cache::kMaxStacks).
    void drop_empty_only_rules(const std::vector<uint8_t> &nullable) {
        Grammar &g = *g_;
        const size_t n = g.rules_.size();
        // the rules that can match some non-empty text: those with a terminal,
        // then (a worklist, linear) every rule that refers to one of them
        std::vector<uint8_t> nonempty(n, 0);
        std::vector<std::vector<uint32_t>> used_by(n);
        std::vector<uint32_t> found;
        for (uint32_t r = 0; r < n; ++r) {
            for (uint32_t a : g.rules_[r]) {
                for (size_t i = a; g.elements_[i].kind != Kind::End; ++i) {
                    const Element e = g.elements_[i];
                    if (e.kind == Kind::Rule) {
                        used_by[e.value].push_back(r);
                    } else if (!nonempty[r]) {
                        nonempty[r] = 1;
                        found.push_back(r);
                    }
                }
            }
        }
        while (!found.empty()) {
            const uint32_t r = found.back();
            found.pop_back();
            for (uint32_t user : used_by[r]) {
                if (nonempty[user]) continue;
                nonempty[user] = 1;
                found.push_back(user);
            }
        }
        auto empty_only = [&](Element e) { return e.kind == Kind::Rule && nullable[e.value] && !nonempty[e.value]; };
        if (std::none_of(g.elements_.begin(), g.elements_.end(), empty_only)) return;
        std::vector<Element> kept;
        for (std::vector<uint32_t> &alts : g.rules_) {
            for (uint32_t &a : alts) {
                const uint32_t from = a;
                a = (uint32_t)kept.size();
                for (size_t i = from;; ++i) {
                    if (!empty_only(g.elements_[i])) kept.push_back(g.elements_[i]);
                    if (g.elements_[i].kind == Kind::End) break;
                }
            }
        }
        g.elements_ = std::move(kept);
    }

    std::string_view src_;
    size_t pos_ = 0;
    const Vocab *vocab_;
    std::shared_ptr<Grammar> g_ = std::make_shared<Grammar>();
    std::unordered_map<std::string, uint32_t> ids_;
    std::unordered_set<std::string> defined_names_;
    std::vector<bool> defined_;
    std::vector<size_t> first_use_;
    std::map<std::vector<uint32_t>, uint32_t> class_ids_;
    uint32_t helpers_ = 0;
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::string_view root, const Vocab *vocab) {
    return GrammarParser(gbnf, vocab).run(root);
}

// ---------------------------------------------------------------------------
// Matching
//
// A parse stack is a chain of nodes, each a position in the flat element
// array (the element still to match) over the stack below it; -1 is the
// empty stack (the grammar is complete). Nodes are hash-consed, so equal
// stacks are equal ids, and a set of stacks is interned as a sorted vector.
// A stack's top is always a terminal (or the stack is empty): pushing a
// rule reference expands it into its alternatives right away.

struct GrammarState::Cache {
    explicit Cache(const Grammar &g) : g(g) { empty = intern({}); }

    const Grammar &g;
    struct Node {
        uint32_t pos;
        int32_t parent;
    };
    std::vector<Node> nodes;
    U64Map node_ids;                               // (pos, parent) -> node
    std::vector<std::vector<int32_t>> sets;
    std::map<std::vector<int32_t>, int32_t> set_ids;
    // A set's stacks by their top character element (kind and class; classes
    // are interned, so equal tops admit the same characters): a step checks
    // each distinct top once, and the characters that the same tops admit
    // lead to the same set, found once. An ambiguous grammar's thousands of
    // readings mostly share a few tops ([^"]*, [^\n]*): a walk of a
    // 152k-token vocabulary from a new set closed them all again for every
    // distinct character (1500 readings: 1.2 s per token, now 0.05 s; with
    // 1500 distinct classes among them 2.1 s, now 0.8 s).
    struct Tops {
        static constexpr uint32_t kNone = UINT32_MAX;  // a token or the empty stack: no character
        std::vector<Element> elements;                 // the distinct tops
        std::vector<uint32_t> of;                      // per stack of the set: its top's index, or kNone
        std::map<std::vector<uint64_t>, int32_t> next; // the tops that admit a character (a bit each) -> next set
    };
    std::vector<std::unique_ptr<Tops>> tops;           // by set, made when first stepped from
    size_t tops_bytes = 0;                             // held by the `next` maps, up to:
    static constexpr size_t kMaxTopsBytes = 64u << 20; // (then steps are found without them)
    U64Map steps;                                  // (set, code point) -> set
    std::vector<uint32_t> seen;                    // closure marks, by node
    std::vector<int32_t> todo;                     // close()'s stacks still to expand
    uint32_t epoch = 0;
    uint32_t empty_seen = 0;                       // the epoch that last added the empty stack
    int32_t empty = 0;                             // the set with no stacks: nothing can follow

    static constexpr size_t kMaxNodes = 1u << 21;  // start afresh beyond this (a long, varied output)
    // An ambiguous grammar can read one text in a number of ways that grows
    // exponentially with its length (`root ::= [a-z] root? [a-z]? root? [a-z]?`
    // doubles them with every letter); each way is a stack, and every step
    // walks them all. JSON-schema grammars stay below a few hundred.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    static constexpr size_t kMaxStacks = 256;  // fuzz builds meet the bound sooner (fuzz/README.md)
#else
    static constexpr size_t kMaxStacks = 4096;
#endif

    int32_t node(uint32_t pos, int32_t parent) {
        if (g.elements()[pos].kind == Kind::End) return parent;
        const uint64_t key = (uint64_t)pos << 32 | (uint32_t)parent;
        const auto [id, added] = node_ids.try_emplace(key, (int32_t)nodes.size());
        if (added) nodes.push_back({pos, parent});
        return id;
    }

    [[noreturn]] static void too_ambiguous() {
        fail("grammar: the output so far can be read in more than {} ways (the grammar is ambiguous: its rules "
             "can match the same text in many ways); write it so that each text has one reading",
             kMaxStacks);
    }

    // The terminal-topped stacks `stack` stands for, each added to `out`
    // once per epoch; more than kMaxStacks is the ambiguity error as soon as
    // it is certain (a closure could otherwise build tens of thousands of
    // stacks before intern refuses them). A loop over a list of stacks still
    // to expand, not a recursion: a step can walk down through as many levels
    // as the bound on stacks.
    void close(int32_t stack, std::vector<int32_t> &out) {
        todo.assign(1, stack);
        while (!todo.empty()) {
            const int32_t s = todo.back();
            todo.pop_back();
            if (s < 0) {
                if (empty_seen == epoch) continue;
                empty_seen = epoch;
            } else {
                if (seen.size() <= (size_t)s) seen.resize(nodes.size() * 2, 0);
                if (seen[s] == epoch) continue;
                seen[s] = epoch;
                const Node n = nodes[s];
                const Element e = g.elements()[n.pos];
                if (e.kind == Kind::Rule) {
                    const int32_t rest = node(n.pos + 1, n.parent);
                    for (uint32_t alt : g.alternatives(e.value)) todo.push_back(node(alt, rest));
                    continue;
                }
            }
            out.push_back(s);
            if (out.size() > kMaxStacks) too_ambiguous();
        }
    }

    int32_t intern(std::vector<int32_t> stacks) {
        std::sort(stacks.begin(), stacks.end());
        stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
        if (stacks.size() > kMaxStacks) too_ambiguous();
        auto [it, added] = set_ids.try_emplace(stacks, (int32_t)sets.size());
        if (added) sets.push_back(std::move(stacks));
        return it->second;
    }

    int32_t start() {
        ++epoch;
        std::vector<int32_t> out;
        for (uint32_t alt : g.alternatives(g.root())) close(node(alt, -1), out);
        return intern(std::move(out));
    }

    bool admits(Element e, uint32_t cpt) const {
        switch (e.kind) {
            case Kind::Any: return true;
            case Kind::Chars:
            case Kind::NotChars: {
                const std::vector<Range> &rs = g.char_class(e.value);
                auto it = std::upper_bound(rs.begin(), rs.end(), cpt, [](uint32_t c, Range r) { return c < r.lo; });
                const bool in = it != rs.begin() && cpt <= std::prev(it)->hi;
                return in == (e.kind == Kind::Chars);
            }
            default: return false;
        }
    }

    Tops &tops_of(int32_t set) {
        if (tops.size() <= (size_t)set) tops.resize(sets.size());
        std::unique_ptr<Tops> &t = tops[(size_t)set];
        if (t) return *t;
        t = std::make_unique<Tops>();
        std::map<std::pair<Kind, uint32_t>, uint32_t> index;
        for (int32_t s : sets[set]) {
            const Element e = s < 0 ? Element{Kind::End, 0} : g.elements()[nodes[s].pos];
            if (e.kind != Kind::Any && e.kind != Kind::Chars && e.kind != Kind::NotChars) {
                t->of.push_back(Tops::kNone);
                continue;
            }
            const auto [it, added] = index.try_emplace({e.kind, e.value}, (uint32_t)t->elements.size());
            if (added) t->elements.push_back(e);
            t->of.push_back(it->second);
        }
        return *t;
    }

    // Whether some code point in [lo, hi] could be next (a character whose
    // UTF-8 bytes have only begun).
    bool admits_some(int32_t set, uint32_t lo, uint32_t hi) {
        for (const Element e : tops_of(set).elements) {
            if (e.kind == Kind::Any) return true;
            const std::vector<Range> &rs = g.char_class(e.value);
            if (e.kind == Kind::Chars) {
                for (Range r : rs)
                    if (r.lo <= hi && r.hi >= lo) return true;
            } else {
                // some point of [lo, hi] outside every range
                uint32_t c = lo;
                for (Range r : rs) {
                    if (r.hi < c) continue;
                    if (r.lo > c) break;
                    if (r.hi >= hi) {
                        c = UINT32_MAX;
                        break;
                    }
                    c = r.hi + 1;
                }
                if (c <= hi) return true;
            }
        }
        return false;
    }

    int32_t advance(int32_t set, uint32_t cpt) {
        const uint64_t key = (uint64_t)set << 32 | cpt;
        if (const int32_t *known = steps.find(key)) return *known;
        Tops &t = tops_of(set);
        std::vector<uint64_t> admitted((t.elements.size() + 63) / 64);
        bool any = false;
        for (size_t j = 0; j < t.elements.size(); ++j) {
            if (!admits(t.elements[j], cpt)) continue;
            admitted[j / 64] |= 1ull << (j % 64);
            any = true;
        }
        // the same tops admitted as for an earlier character: the same set
        int32_t next = empty;
        if (const auto found = t.next.find(admitted); found != t.next.end()) {
            next = found->second;
        } else if (any) {
            ++epoch;
            std::vector<int32_t> out;
            const std::vector<int32_t> &stacks = sets[set];
            for (size_t i = 0; i < stacks.size(); ++i) {
                const uint32_t top = t.of[i];
                if (top == Tops::kNone || !(admitted[top / 64] >> (top % 64) & 1)) continue;
                close(node(nodes[stacks[i]].pos + 1, nodes[stacks[i]].parent), out);
            }
            next = intern(std::move(out));
            if (tops_bytes < kMaxTopsBytes) {
                tops_bytes += admitted.size() * 8 + 64;
                t.next.emplace(std::move(admitted), next);
            }
        }
        steps.try_emplace(key, next);
        return next;
    }

    int32_t advance_token(int32_t set, int32_t token) {
        ++epoch;
        std::vector<int32_t> out;
        const size_t n = sets[set].size();
        for (size_t i = 0; i < n; ++i) {
            const int32_t s = sets[set][i];
            if (s < 0) continue;
            const Element e = g.elements()[nodes[s].pos];
            if ((e.kind == Kind::Token && (int32_t)e.value == token) || (e.kind == Kind::NotToken && (int32_t)e.value != token)) {
                close(node(nodes[s].pos + 1, nodes[s].parent), out);
            }
        }
        return intern(std::move(out));
    }

    int32_t merge(int32_t a, int32_t b) {
        if (a == empty) return b;
        if (b == empty) return a;
        std::vector<int32_t> both = sets[a];
        both.insert(both.end(), sets[b].begin(), sets[b].end());
        return intern(std::move(both));
    }

    bool complete(int32_t set) const { return !sets[set].empty() && sets[set].front() == -1; }

    // A copy of a set's stacks in another cache (to drop what a long output
    // accumulated), each stack copied from the bottom up (a loop: stacks can
    // be as deep as the output is long).
    int32_t copy_into(Cache &to, int32_t set) const {
        std::vector<int32_t> out;
        std::unordered_map<int32_t, int32_t> done{{-1, -1}};
        std::vector<int32_t> chain;
        for (int32_t s : sets[set]) {
            for (int32_t d = s; !done.count(d); d = nodes[d].parent) chain.push_back(d);
            for (; !chain.empty(); chain.pop_back()) {
                const Node n = nodes[chain.back()];
                done.emplace(chain.back(), to.node(n.pos, done.at(n.parent)));
            }
            out.push_back(done.at(s));
        }
        return to.intern(std::move(out));
    }
};

namespace {

// A position in a code point's UTF-8 bytes on top of a set of stacks.
struct Cursor {
    int32_t set;
    uint32_t partial;
    uint8_t need;
    uint8_t len;  // the character's length in bytes
};

// Moves a cursor past one byte; false when the grammar rejects it.
bool step(GrammarState::Cache &c, Cursor &cur, uint8_t byte) {
    if (cur.need == 0) {
        if (byte < 0x80) {
            cur.set = c.advance(cur.set, byte);
            return cur.set != c.empty;
        }
        if (byte < 0xC2 || byte > 0xF4) return false;  // a continuation byte, or no valid character begins so
        cur.len = (uint8_t)utf8_lead_len(byte);
        cur.need = (uint8_t)(cur.len - 1);
        cur.partial = byte & (0x7F >> cur.len);
    } else {
        if ((byte & 0xC0) != 0x80) return false;
        cur.partial = cur.partial << 6 | (byte & 0x3F);
        if (--cur.need == 0) {
            if (cur.partial >= 0xD800 && cur.partial <= 0xDFFF) return false;
            cur.set = c.advance(cur.set, cur.partial);
            return cur.set != c.empty;
        }
    }
    // the characters these bytes can still become: never an overlong
    // encoding (F0 80 81 BB is not '{'), a surrogate or beyond U+10FFFF
    static constexpr uint32_t kShortest[] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = cur.partial << (6 * cur.need), hi = lo | ((1u << (6 * cur.need)) - 1);
    lo = std::max(lo, kShortest[cur.len]);
    hi = std::min(hi, 0x10FFFFu);
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return false;
    return c.admits_some(cur.set, lo, hi);
}

bool step_text(GrammarState::Cache &c, Cursor &cur, std::string_view text) {
    for (char ch : text)
        if (!step(c, cur, (uint8_t)ch)) return false;
    return true;
}

}  // namespace

bool Grammar::matches(std::string_view text) const {
    GrammarState::Cache c(*this);
    Cursor cur{c.start(), 0, 0, 0};
    return step_text(c, cur, text) && cur.need == 0 && c.complete(cur.set);
}

GrammarState::GrammarState(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), cache_(std::make_shared<Cache>(*grammar_)) {
    set_ = cache_->start();
}

bool GrammarState::complete() const { return need_ == 0 && cache_->complete(set_); }

bool GrammarState::finished() const { return complete() && cache_->sets[set_].size() == 1; }

void GrammarState::allowed_tokens(const Vocab &vocab, std::vector<uint8_t> &allowed) const {
    Cache &c = *cache_;
    allowed.assign((size_t)vocab.n_tokens(), 0);
    // text: walk the tokens in sorted order, keeping the cursor after each
    // byte of the current path; a prefix the grammar rejects rejects every
    // token that begins with it (they follow each other)
    std::vector<Cursor> at{{set_, partial_, need_, len_}};  // at[i]: after path[0, i)
    std::string path;
    for (int32_t id : vocab.ids_by_piece()) {
        const std::string_view piece = vocab.piece_view(id);
        size_t common = 0;
        const size_t limit = std::min(path.size(), piece.size());
        while (common < limit && path[common] == piece[common]) ++common;
        const size_t alive = at.size() - 1;
        if (path.size() > alive && common > alive) continue;  // begins with the prefix that failed
        const size_t keep = std::min(common, alive);
        at.resize(keep + 1);
        path.resize(keep);
        bool ok = true;
        for (size_t i = keep; i < piece.size(); ++i) {
            Cursor next = at.back();
            path.push_back(piece[i]);
            if (!step(c, next, (uint8_t)piece[i])) {
                ok = false;
                break;
            }
            at.push_back(next);
        }
        if (ok) allowed[(size_t)id] = 1;
    }
    if (need_ != 0) return;
    // tokens the grammar names, and the end of generation once complete
    for (int32_t s : c.sets[set_]) {
        if (s < 0) continue;
        const Element e = grammar_->elements()[c.nodes[s].pos];
        if (e.kind == Kind::Token && e.value < allowed.size()) allowed[e.value] = 1;
        if (e.kind == Kind::NotToken) {
            for (size_t id = 0; id < allowed.size(); ++id)
                if (id != e.value) allowed[id] = 1;
        }
    }
    if (c.complete(set_)) {
        for (int32_t id : vocab.eog_ids())
            if (id >= 0 && id < vocab.n_tokens()) allowed[(size_t)id] = 1;
    }
}

bool GrammarState::allows(const Vocab &vocab, int32_t token) const {
    Cache &c = *cache_;
    if (need_ == 0) {
        if (vocab.is_eog(token) && c.complete(set_)) return true;
        if (c.advance_token(set_, token) != c.empty) return true;
    }
    const std::string_view piece = vocab.piece_view(token);
    Cursor cur{set_, partial_, need_, len_};
    return !piece.empty() && step_text(c, cur, piece);
}

void GrammarState::accept(const Vocab &vocab, int32_t token) {
    Cache &c = *cache_;
    const std::string_view piece = vocab.piece_view(token);
    Cursor text{c.empty, 0, 0, 0};
    if (!piece.empty()) {
        text = {set_, partial_, need_, len_};
        if (!step_text(c, text, piece)) text = {c.empty, 0, 0, 0};
    }
    const int32_t by_token = need_ == 0 ? c.advance_token(set_, token) : c.empty;
    if (text.set == c.empty && by_token == c.empty) {
        if (vocab.is_eog(token) && complete()) return;  // the end: nothing changes
        fail("grammar: token {} ('{}') is not allowed after the output so far", token, sanitize_utf8(piece));
    }
    if (text.set != c.empty && by_token != c.empty && text.need != 0) {
        text.set = c.empty;  // one way has a character half done: keep the whole-token way
    }
    set_ = c.merge(text.set, by_token);
    partial_ = text.set != c.empty ? text.partial : 0;
    need_ = text.set != c.empty ? text.need : 0;
    len_ = text.len;
    if (c.nodes.size() > Cache::kMaxNodes) {
        auto fresh = std::make_shared<Cache>(*grammar_);
        set_ = c.copy_into(*fresh, set_);
        cache_ = std::move(fresh);
    }
}

bool GrammarState::accept_text(std::string_view text) {
    Cursor cur{set_, partial_, need_, len_};
    if (!step_text(*cache_, cur, text)) return false;
    set_ = cur.set;
    partial_ = cur.partial;
    need_ = cur.need;
    len_ = cur.len;
    return true;
}

}  // namespace toy::text
