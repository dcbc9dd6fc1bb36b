// JSON Schema -> GBNF. A Converter walks the schema once and returns, for each
// subschema, a GBNF expression that is safe to put in a sequence (a top-level
// alternation comes wrapped in parentheses). Property values, items, anyOf
// branches and referenced definitions become named rules; the fixed pieces
// (space, string, number, ...) are added only when used. Values never carry
// whitespace of their own: objects and arrays allow `space` around their
// punctuation and the root allows it once after the value.
#include "text/json_schema.h"

#include "core/error.h"
#include "core/escape.h"
#include "text/unicode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace toy::text {
namespace {

using Json = nlohmann::ordered_json;

constexpr uint64_t kDigitCap = 9999999999999999ULL;      // 16 digits: the longest integer part a model may write
constexpr uint64_t kMaxBound = 1000000000000000000ULL;   // 10^18: integer bounds beyond this are refused
constexpr int kMaxRepeat = 10000;                        // largest count in a pattern's {m,n}
constexpr int kMaxMergeDepth = 64;

// The fixed rules, by name, with the fixed rules their bodies name.
struct Fixed {
    const char *name;
    const char *body;
    std::vector<const char *> uses;
};
const Fixed kFixed[] = {
    {"space", R"(| " " | "\n" [ \t]{0,20})", {}},
    {"char", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))", {}},
    {"string", R"("\"" char* "\"")", {"char"}},
    {"integral-part", R"("0" | [1-9] [0-9]{0,15})", {}},
    {"integer", R"("-"? integral-part)", {"integral-part"}},
    {"unsigned-number", R"(integral-part ("." [0-9]{1,16})? ([eE] [\-+]? [0-9]{1,2})?)", {"integral-part"}},
    {"number", R"("-"? unsigned-number)", {"unsigned-number"}},
    {"boolean", R"("true" | "false")", {}},
    {"null", R"("null")", {}},
    {"value", R"(object | array | string | number | boolean | null)", {"object", "array", "string", "number", "boolean", "null"}},
    {"object",
     R"("{" space (string space ":" space value space ("," space string space ":" space value space)*)? "}")",
     {"space", "string", "value"}},
    {"array", R"("[" space (value space ("," space value space)*)? "]")", {"space", "value"}},
    {"date", R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))", {}},
    {"time",
     R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+\-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))",
     {}},
    {"date-time", R"(date "T" time)", {"date", "time"}},
    {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})", {}},
};

constexpr const char *kQuote = R"("\"")";

const std::set<std::string> kAnnotations = {
    "title",    "description", "$schema",  "$id",       "$comment",        "examples",         "default",
    "deprecated", "readOnly",  "writeOnly", "$defs",    "definitions",     "contentEncoding",  "contentMediaType",
    "$anchor",  "$vocabulary"};
const std::set<std::string> kSupported = {
    "type",      "enum",     "const",        "anyOf",     "oneOf",         "allOf",         "$ref",
    "properties", "required", "additionalProperties", "unevaluatedProperties", "minProperties", "maxProperties",
    "items",     "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
    "maxLength", "pattern",  "format",       "minimum",   "maximum",       "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string> kUnsupported = {
    "not",          "if",           "then",        "else",           "patternProperties", "propertyNames",
    "dependentRequired", "dependentSchemas", "dependencies", "contains", "minContains",     "maxContains",
    "unevaluatedItems", "multipleOf", "$dynamicRef", "$recursiveRef", "$dynamicAnchor",  "$recursiveAnchor",
    "contentSchema"};

std::string where(const std::string &ptr) { return ptr.empty() ? "the root" : ptr; }

std::string child_ptr(const std::string &ptr, std::string_view key) {
    std::string out = ptr + "/";
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}
std::string child_ptr(const std::string &ptr, size_t index) { return ptr + "/" + std::to_string(index); }

// A GBNF literal for UTF-8 text.
std::string literal(std::string_view s) { return quote_escaped(s); }

// Lowercase and dashed: "userName" -> "username", "first name" -> "first-name".
std::string sanitize(std::string_view s) {
    std::string out;
    bool dash = false;
    for (unsigned char c : s) {
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            if (dash && !out.empty()) out += '-';
            dash = false;
            out += (char)c;
        } else if (c >= 'A' && c <= 'Z') {
            if (dash && !out.empty()) out += '-';
            dash = false;
            out += (char)(c - 'A' + 'a');
        } else {
            dash = true;
        }
    }
    return out.empty() ? "x" : out;
}

std::string child_name(const std::string &name, std::string_view suffix) {
    return name.empty() ? std::string(suffix) : name + "-" + std::string(suffix);
}

bool is_rule_name(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    });
}

// Alternatives as one element of a sequence.
std::string choice(const std::vector<std::string> &alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

// The GBNF suffix for between min and max (-1: no limit) repetitions.
std::string repeat(int64_t min, int64_t max) {
    if (min == 0 && max < 0) return "*";
    if (min == 1 && max < 0) return "+";
    if (min == 0 && max == 1) return "?";
    if (min == max) return min == 1 ? "" : fmt::format("{{{}}}", min);
    if (max < 0) return fmt::format("{{{},}}", min);
    return fmt::format("{{{},{}}}", min, max);
}

std::string join_seq(const std::string &a, const std::string &b) {
    if (a.empty()) return b;
    if (b.empty()) return a;
    return a + " " + b;
}

// ---- integer ranges as digit patterns ----

std::string digit_class(char a, char b) {
    if (a == b) return std::string("\"") + a + "\"";
    return std::string("[") + a + "-" + b + "]";
}

std::string any_digits(size_t n) { return n == 0 ? "" : "[0-9]" + repeat((int64_t)n, (int64_t)n); }

// Alternatives for the digit strings from x to y, both of the same length.
void same_length(const std::string &x, const std::string &y, const std::string &prefix, std::vector<std::string> &out) {
    size_t k = 0;
    while (k < x.size() && x[k] == y[k]) ++k;
    std::string pre = k > 0 ? join_seq(prefix, literal(x.substr(0, k))) : prefix;
    if (k == x.size()) {
        out.push_back(pre);
        return;
    }
    const std::string xs = x.substr(k + 1), ys = y.substr(k + 1);
    const size_t rest = xs.size();
    const bool low_full = std::all_of(xs.begin(), xs.end(), [](char c) { return c == '0'; });
    const bool high_full = std::all_of(ys.begin(), ys.end(), [](char c) { return c == '9'; });
    const char a = (char)(x[k] + (low_full ? 0 : 1)), b = (char)(y[k] - (high_full ? 0 : 1));
    if (!low_full) same_length(xs, std::string(rest, '9'), join_seq(pre, literal(std::string(1, x[k]))), out);
    if (a <= b) out.push_back(join_seq(pre, join_seq(digit_class(a, b), any_digits(rest))));
    if (!high_full) same_length(std::string(rest, '0'), ys, join_seq(pre, literal(std::string(1, y[k]))), out);
}

uint64_t pow10(size_t n) {
    uint64_t v = 1;
    while (n--) v *= 10;
    return v;
}

// Alternatives for the decimal strings, without leading zeros, of lo..hi.
void digit_range(uint64_t lo, uint64_t hi, std::vector<std::string> &out) {
    const size_t len_lo = std::to_string(lo).size(), len_hi = std::to_string(hi).size();
    for (size_t d = len_lo; d <= len_hi; ++d) {
        const uint64_t a = d == len_lo ? lo : pow10(d - 1), b = d == len_hi ? hi : pow10(d) - 1;
        if (d >= 2 && a == pow10(d - 1) && b == pow10(d) - 1) {
            // whole lengths d..e at once: [1-9] [0-9]{d-1,e-1}
            size_t e = d;
            while (e + 1 < len_hi || (e + 1 == len_hi && hi == pow10(len_hi) - 1)) ++e;
            out.push_back(e == d ? "[1-9] " + any_digits(d - 1) : fmt::format("[1-9] [0-9]{{{},{}}}", d - 1, e - 1));
            d = e;
            continue;
        }
        same_length(std::to_string(a), std::to_string(b), "", out);
    }
    for (auto &alt : out) {  // "2" "5" "0" -> "250"
        size_t p;
        while ((p = alt.find("\" \"")) != std::string::npos) alt.erase(p, 3);
    }
}

uint64_t nines(uint64_t v) { return pow10(std::to_string(v).size()) - 1; }

// The integers lo..hi (either side open) as one GBNF element.
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {
        const uint64_t a = hi && *hi < 0 ? (uint64_t)(-*hi) : 1;
        const uint64_t b = lo ? (uint64_t)(-*lo) : std::max(kDigitCap, nines(a));
        std::vector<std::string> neg;
        if (a <= b) digit_range(a, b, neg);
        if (!neg.empty()) alts.push_back("\"-\" " + choice(neg));
    }
    if (!hi || *hi >= 0) {
        const uint64_t a = lo && *lo > 0 ? (uint64_t)*lo : 0;
        const uint64_t b = hi ? (uint64_t)*hi : std::max(kDigitCap, nines(a));
        if (a <= b) digit_range(a, b, alts);
    }
    return choice(alts);
}

// ---- patterns: an ECMAScript regular expression over a string's characters,
// rewritten over its JSON text (each character in its shortest escaping) ----

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code points

Ranges normalized(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto &p : r) {
        if (!out.empty() && p.first <= out.back().second + 1) out.back().second = std::max(out.back().second, p.second);
        else out.push_back(p);
    }
    return out;
}

Ranges complement(const Ranges &in) {
    Ranges r = normalized(in), out;
    uint32_t next = 0;
    for (const auto &p : r) {
        if (p.first > next) out.push_back({next, p.first - 1});
        next = p.second + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
}

Ranges subtract(const Ranges &a, const Ranges &b) {
    Ranges keep = complement(b), out;
    for (const auto &x : normalized(a))
        for (const auto &y : keep) {
            const uint32_t lo = std::max(x.first, y.first), hi = std::min(x.second, y.second);
            if (lo <= hi) out.push_back({lo, hi});
        }
    return normalized(out);
}

bool contains(const Ranges &r, uint32_t c) {
    return std::any_of(r.begin(), r.end(), [c](const auto &p) { return p.first <= c && c <= p.second; });
}

// A character as it appears inside a JSON string (the shortest escaping).
std::string json_char(uint32_t c) {
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
    }
    if (c < 0x20) return fmt::format("\\u{:04x}", c);
    std::string out;
    append_utf8(out, c);
    return out;
}

std::string class_char(uint32_t c) {
    if (c == ']' || c == '\\' || c == '^' || c == '-') return std::string("\\") + (char)c;
    if (c < 0x20 || c == 0x7f) return fmt::format("\\x{:02X}", c);
    if (c < 0x7f) return std::string(1, (char)c);
    if (c <= 0xFFFF) return fmt::format("\\u{:04X}", c);
    return fmt::format("\\U{:08X}", c);
}

// A set of characters as one element over JSON text; empty when it has none a
// JSON string can hold. Control characters without a short escape are left
// out (a model writes them rarely, and leaving them out keeps it a subset).
std::string charset_expr(const Ranges &set) {
    std::vector<std::string> alts;
    const Ranges plain = subtract(set, {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}});
    if (plain.size() == 1 && plain[0].first == plain[0].second) {
        alts.push_back(literal(json_char(plain[0].first)));
    } else if (!plain.empty()) {
        std::string cls = "[";
        for (const auto &[lo, hi] : plain) cls += hi == lo ? class_char(lo) : class_char(lo) + "-" + class_char(hi);
        alts.push_back(cls + "]");
    }
    for (uint32_t c : {(uint32_t)'"', (uint32_t)'\\', (uint32_t)'\b', (uint32_t)'\f', (uint32_t)'\n', (uint32_t)'\r',
                       (uint32_t)'\t'})
        if (contains(set, c)) alts.push_back(literal(json_char(c)));
    if (alts.empty()) return "";
    return choice(alts);
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

class PatternParser {
public:
    PatternParser(std::string_view pattern, std::string ptr) : p_(pattern), ptr_(std::move(ptr)) {}

    // The pattern over the characters between a string's quotes; empty when it
    // matches only the empty string.
    std::string parse() {
        Alternation a = alternation();
        if (i_ < p_.size()) error(fmt::format("unmatched ')' at offset {}", i_));
        return a.element();
    }

private:
    struct Alternation {
        std::vector<std::string> alts;
        bool nullable = false;
        std::string element() const {
            if (alts.empty()) return "";
            std::string body = choice(alts);
            if (nullable) return (alts.size() == 1 && !is_element(body) ? "(" + body + ")" : body) + "?";
            return body;
        }
        static bool is_element(const std::string &s) {
            return is_rule_name(s) || (s.size() > 1 && s.front() == '(' && s.back() == ')' && balanced(s)) ||
                   (s.size() > 1 && s.front() == '"' && s.back() == '"' && s.find("\" ") == std::string::npos) ||
                   (s.size() > 1 && s.front() == '[' && s.back() == ']' && s.find(' ') == std::string::npos);
        }
        // the parentheses at both ends belong together
        static bool balanced(const std::string &s) {
            int depth = 0;
            bool quoted = false, cls = false;
            for (size_t i = 0; i < s.size(); ++i) {
                const char c = s[i];
                if (c == '\\') {
                    ++i;
                    continue;
                }
                if (quoted) {
                    quoted = c != '"';
                } else if (cls) {
                    cls = c != ']';
                } else if (c == '"') {
                    quoted = true;
                } else if (c == '[') {
                    cls = true;
                } else if (c == '(') {
                    ++depth;
                } else if (c == ')') {
                    if (--depth == 0 && i + 1 < s.size()) return false;
                }
            }
            return depth == 0;
        }
    };
    // One atom: `text` is one element ("" when it matches only ""), `c` set
    // when it is a single character.
    struct Atom {
        std::string text;
        std::optional<uint32_t> c;
    };

    [[noreturn]] void error(const std::string &what) const {
        fail("json schema: pattern {} at {}: {}", Json(std::string(p_)).dump(), where(ptr_), what);
    }

    bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }
    static constexpr int kMaxDepth = 100;
    int depth_ = 0;

    Alternation alternation() {
        // groups nest by recursion: a bound keeps a hostile pattern off the stack's end
        if (++depth_ > kMaxDepth) error(fmt::format("groups nested more than {} deep", kMaxDepth));
        struct Leave {
            int &d;
            ~Leave() { --d; }
        } leave{depth_};
        Alternation a;
        for (;;) {
            std::string seq = sequence();
            if (seq.empty()) a.nullable = true;
            else if (std::find(a.alts.begin(), a.alts.end(), seq) == a.alts.end()) a.alts.push_back(seq);
            if (!at('|')) break;
            ++i_;
        }
        return a;
    }

    std::string sequence() {
        std::vector<std::string> items;
        std::string text;  // pending single characters, as JSON text
        auto flush = [&] {
            if (!text.empty()) items.push_back(literal(text));
            text.clear();
        };
        while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
            if (at('^')) {
                if (!items.empty() || !text.empty()) error("'^' is supported only at the start");
                ++i_;
                continue;
            }
            if (at('$')) {
                ++i_;
                if (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') error("'$' is supported only at the end");
                continue;
            }
            Atom atom = this->atom();
            int64_t min = 1, max = 1;
            const bool quantified = quantifier(min, max);
            if (!quantified && atom.c) {
                text += json_char(*atom.c);
                continue;
            }
            flush();
            if (atom.text.empty() || max == 0) continue;
            items.push_back(atom.text + repeat(min, max));
        }
        flush();
        std::string out;
        for (const auto &item : items) out = join_seq(out, item);
        return out;
    }

    // Reads {m}, {m,}, {m,n} at offset `i` without consuming; false if there is none.
    bool braces(size_t i, int64_t &min_out, int64_t &max_out, size_t &end) const {
        int64_t min = 0, max = 0;  // written out only when the braces are a quantifier
        if (i >= p_.size() || p_[i] != '{') return false;
        size_t j = i + 1;
        auto number = [&](int64_t &v) {
            const size_t start = j;
            v = 0;
            while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
                v = std::min<int64_t>(v * 10 + (p_[j] - '0'), 1000000);
                ++j;
            }
            return j > start;
        };
        if (!number(min)) return false;
        max = min;
        if (j < p_.size() && p_[j] == ',') {
            ++j;
            if (!number(max)) max = -1;
        }
        if (j >= p_.size() || p_[j] != '}') return false;
        end = j + 1;
        min_out = min;
        max_out = max;
        return true;
    }

    bool quantifier(int64_t &min, int64_t &max) {
        size_t end = 0;
        if (at('*')) min = 0, max = -1, end = i_ + 1;
        else if (at('+')) min = 1, max = -1, end = i_ + 1;
        else if (at('?')) min = 0, max = 1, end = i_ + 1;
        else if (!braces(i_, min, max, end)) return false;
        if (max >= 0 && min > max) error(fmt::format("{{{},{}}} has its minimum above its maximum", min, max));
        if (min > kMaxRepeat || max > kMaxRepeat) error(fmt::format("repetition counts above {} are not supported", kMaxRepeat));
        i_ = end;
        if (at('?')) ++i_;  // lazy: the same strings
        return true;
    }

    uint32_t code_point() {
        const auto b = (unsigned char)p_[i_];
        int n = b < 0x80 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : -1;
        if (n < 0 || i_ + (size_t)n >= p_.size()) error("invalid UTF-8");
        uint32_t c = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
        for (int k = 1; k <= n; ++k) {
            const auto cont = (unsigned char)p_[i_ + (size_t)k];
            if ((cont & 0xC0) != 0x80) error("invalid UTF-8");
            c = (c << 6) | (cont & 0x3F);
        }
        i_ += (size_t)n + 1;
        return c;
    }

    uint32_t hex(size_t digits) {
        if (i_ + digits > p_.size()) error("incomplete hex escape");
        uint32_t v = 0;
        for (size_t k = 0; k < digits; ++k) {
            const char c = p_[i_ + k];
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) error(fmt::format("'{}' is not a hex digit", c));
            v = v * 16 + (uint32_t)d;
        }
        i_ += digits;
        return v;
    }

    // After a backslash: a class escape fills `set`, a character returns it.
    std::optional<uint32_t> escape(Ranges &set, bool in_class) {
        if (i_ >= p_.size()) error("'\\' at the end");
        const char c = p_[i_++];
        switch (c) {
        case 'd': set = kDigit; return std::nullopt;
        case 'D': set = complement(kDigit); return std::nullopt;
        case 'w': set = kWord; return std::nullopt;
        case 'W': set = complement(kWord); return std::nullopt;
        case 's': set = kSpace; return std::nullopt;
        case 'S': set = complement(kSpace); return std::nullopt;
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'f': return '\f';
        case 'v': return '\v';
        case '0': return 0;
        case 'x': return hex(2);
        case 'u': {
            const uint32_t u = hex(4);
            if (u >= 0xDC00 && u <= 0xDFFF) error("a lone low surrogate escape");
            if (u < 0xD800 || u > 0xDBFF) return u;
            // a UTF-16 pair: one character
            if (!p_.substr(i_).starts_with("\\u")) error("a high surrogate escape without its low half");
            i_ += 2;
            const uint32_t low = hex(4);
            if (low < 0xDC00 || low > 0xDFFF) error("a high surrogate escape without its low half");
            return 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
        }
        case 'b':
            if (in_class) return '\b';
            error("word boundaries (\\b) are not supported");
        case 'B': error("word boundaries (\\B) are not supported");
        case 'k': error("backreferences are not supported");
        case 'p':
        case 'P': error("unicode property escapes are not supported");
        case 'c': error("control escapes (\\c) are not supported");
        default: break;
        }
        if (c >= '1' && c <= '9') error("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) error(fmt::format("unknown escape '\\{}'", c));
        --i_;
        return code_point();
    }

    Ranges char_class() {
        ++i_;  // '['
        bool negated = false;
        if (at('^')) negated = true, ++i_;
        Ranges set;
        for (;;) {
            if (i_ >= p_.size()) error("unterminated character class");
            if (at(']')) {
                ++i_;
                break;
            }
            Ranges escaped;
            std::optional<uint32_t> lo;
            if (at('\\')) {
                ++i_;
                lo = escape(escaped, true);
            } else {
                lo = code_point();
            }
            if (!lo) {
                set.insert(set.end(), escaped.begin(), escaped.end());
                continue;
            }
            if (at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
                ++i_;
                std::optional<uint32_t> hi;
                if (at('\\')) {
                    ++i_;
                    hi = escape(escaped, true);
                    if (!hi) error("a class escape cannot end a range");
                } else {
                    hi = code_point();
                }
                if (*hi < *lo) error("a character range goes backwards");
                set.push_back({*lo, *hi});
            } else {
                set.push_back({*lo, *lo});
            }
        }
        return negated ? complement(set) : normalized(set);
    }

    Atom set_atom(const Ranges &set) {
        std::string text = charset_expr(set);
        if (text.empty()) error("a character class matches no character a JSON string can hold");
        return {text, std::nullopt};
    }

    Atom atom() {
        const char c = p_[i_];
        int64_t min = 0, max = 0;
        size_t end = 0;
        if (c == '*' || c == '+' || c == '?' || braces(i_, min, max, end)) error(fmt::format("nothing to repeat at offset {}", i_));
        if (c == '(') {
            ++i_;
            if (at('?')) {
                const std::string_view rest = p_.substr(i_);
                if (rest.starts_with("?:")) {
                    i_ += 2;
                } else if (rest.starts_with("?=") || rest.starts_with("?!") || rest.starts_with("?<=") ||
                           rest.starts_with("?<!")) {
                    error("lookarounds are not supported");
                } else if (rest.starts_with("?<") || rest.starts_with("?P<")) {
                    const size_t close = rest.find('>');
                    if (close == std::string_view::npos) error("unterminated group name");
                    i_ += close + 1;
                } else {
                    error(fmt::format("unsupported group syntax at offset {}", i_ - 1));
                }
            }
            Alternation inner = alternation();
            if (!at(')')) error("unterminated group");
            ++i_;
            const std::string e = inner.element();
            if (e.empty() || Alternation::is_element(e)) return {e, std::nullopt};
            return {"(" + e + ")", std::nullopt};
        }
        if (c == '[') return set_atom(char_class());
        if (c == '.') {
            ++i_;
            return set_atom(complement(kLineTerminators));
        }
        if (c == '\\') {
            ++i_;
            Ranges set;
            const auto ch = escape(set, false);
            if (!ch) return set_atom(set);
            return {literal(json_char(*ch)), *ch};
        }
        const uint32_t cp = code_point();
        return {literal(json_char(cp)), cp};
    }

    std::string_view p_;
    std::string ptr_;
    size_t i_ = 0;
};

// ---- the converter ----

class Converter {
public:
    static constexpr int kMaxDepth = 100;
    int depth_ = 0;

    Converter(const Json &root, std::vector<std::string> *warnings) : root_(root), warnings_(warnings) {
        for (const auto &f : kFixed) reserved_.insert(f.name);
        reserve("root");
    }

    std::string convert() {
        std::string value;
        if (refers_to_root(root_)) {
            value = ref_rule("#", "");
        } else {
            value = visit(root_, "", "");
        }
        return finish(value);
    }

    // The GBNF text with `value` (one element) as the root's value.
    std::string finish(const std::string &value) {
        define("root", join_seq(value, fixed("space")));
        std::string out;
        for (const auto &[name, body] : rules_) out += name + " ::= " + body + "\n";
        return out;
    }

    std::string fixed(const std::string &name) {
        if (index_.count(name)) return name;
        const auto *f = std::find_if(std::begin(kFixed), std::end(kFixed), [&](const Fixed &x) { return name == x.name; });
        index_[name] = rules_.size();
        rules_.push_back({name, f->body});
        for (const char *dep : f->uses) fixed(dep);
        return name;
    }

private:
    static constexpr const char *kUndefined = "\x01";

    void warn(const std::string &message) {
        if (warnings_) warnings_->push_back(message);
    }

    // A free name from `base` (base, base2, base3, ...), or the rule of that
    // family that already has this body (none for nullptr). Each family
    // remembers its next suffix and its bodies: probing from 2 every time was
    // quadratic in the number of properties whose names sanitize alike.
    std::string unique(const std::string &base, const std::string *body) {
        const std::string name = sanitize(base);
        if (body) {
            if (auto it = by_body_.find(name + '\0' + *body); it != by_body_.end()) return it->second;
        }
        int &next = next_suffix_[name];
        for (int k = std::max(next, 1);; ++k) {
            // (not name-k: GBNF parsers name their helper rules so)
            const std::string n = k == 1 ? name : name + std::to_string(k);
            if (!index_.count(n) && !reserved_.count(n)) {
                next = k + 1;
                family_[n] = name;
                return n;
            }
        }
    }

    std::string add_rule(const std::string &base, const std::string &body) {
        const std::string n = unique(base, &body);
        if (!index_.count(n)) {
            index_[n] = rules_.size();
            rules_.push_back({n, body});
            by_body_.emplace(family_.at(n) + '\0' + body, n);
        }
        return n;
    }

    std::string reserve(const std::string &base) {
        const std::string n = base == "root" ? base : unique(base, nullptr);
        index_[n] = rules_.size();
        rules_.push_back({n, kUndefined});
        return n;
    }

    void define(const std::string &name, const std::string &body) {
        rules_[index_.at(name)].second = body;
        if (auto f = family_.find(name); f != family_.end()) by_body_.emplace(f->second + '\0' + body, name);
    }

    // An expression as a rule name (a new rule unless it already is one).
    std::string rule_for(const std::string &expr, const std::string &name) {
        return is_rule_name(expr) ? expr : add_rule(name, expr);
    }
    std::string rule_for(const Json &schema, const std::string &name, const std::string &ptr) {
        return rule_for(visit(schema, name, ptr), name);
    }

    static bool refers_to_root(const Json &j) {
        if (j.is_object()) {
            for (const auto &[k, v] : j.items()) {
                if (k == "$ref" && v.is_string() && v.get<std::string>() == "#") return true;
                if (refers_to_root(v)) return true;
            }
        } else if (j.is_array()) {
            for (const auto &v : j)
                if (refers_to_root(v)) return true;
        }
        return false;
    }

    // The schema a local reference names.
    const Json &resolve(const std::string &ref, const std::string &ptr) {
        if (ref.empty() || ref[0] != '#')
            fail("json schema: $ref '{}' at {} is not local (only '#...' references are supported)", ref, where(ptr));
        if (ref.size() > 1 && ref[1] != '/')
            fail("json schema: $ref '{}' at {}: anchors are not supported, expected a pointer like '#/$defs/name'", ref,
                 where(ptr));
        std::string pointer;
        for (size_t i = 1; i < ref.size(); ++i) {  // percent-decoding (URI fragment)
            if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit((unsigned char)ref[i + 1]) &&
                std::isxdigit((unsigned char)ref[i + 2])) {
                pointer += (char)std::stoi(ref.substr(i + 1, 2), nullptr, 16);
                i += 2;
            } else {
                pointer += ref[i];
            }
        }
        try {
            const Json::json_pointer jp(pointer);
            if (root_.contains(jp)) return root_.at(jp);
        } catch (const nlohmann::json::exception &) {
        }
        fail("json schema: $ref '{}' at {} names no definition in the schema", ref, where(ptr));
    }

    std::string ref_rule(const std::string &ref, const std::string &ptr) {
        if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
        const Json &target = resolve(ref, ptr);
        std::string base;
        if (ref == "#") {
            base = "root-value";
        } else {
            const size_t slash = ref.rfind('/');
            base = sanitize(ref.substr(slash + 1));
        }
        const std::string name = reserve(base);
        refs_[ref] = name;
        const std::string expr = visit(target, ref == "#" ? "" : name, ref.substr(1));
        define(name, expr);
        return name;
    }

    void check_keywords(const Json &s, const std::string &ptr) {
        for (const auto &[k, v] : s.items()) {
            if (kAnnotations.count(k) || kSupported.count(k)) continue;
            if (kUnsupported.count(k)) fail("json schema: unsupported keyword '{}' at {}", k, where(ptr));
            warn(fmt::format("json schema: ignoring unknown keyword '{}' at {}", k, where(ptr)));
        }
        if (s.contains("uniqueItems") && s["uniqueItems"] != false)
            fail("json schema: unsupported keyword 'uniqueItems' at {} (only false is supported)", where(ptr));
    }

    // allOf, and $ref beside other keywords: one schema with the keywords of all.
    void merge_into(Json &acc, const Json &part, const std::string &ptr, int depth) {
        if (depth > kMaxMergeDepth) fail("json schema: allOf at {} nests or refers to itself too deeply", where(ptr));
        if (part.is_boolean()) {
            if (!part.get<bool>()) fail("json schema: allOf at {} contains false and accepts nothing", where(ptr));
            return;
        }
        if (!part.is_object())
            fail("json schema: expected a schema (an object or a boolean) in allOf at {}, found {}", where(ptr),
                 part.type_name());
        check_keywords(part, ptr);
        for (const auto &[k, v] : part.items()) {
            if (kAnnotations.count(k)) continue;
            if (k == "allOf") {
                if (!v.is_array()) fail("json schema: 'allOf' at {}: expected an array, found {}", where(ptr), v.type_name());
                for (size_t i = 0; i < v.size(); ++i) merge_into(acc, v[i], child_ptr(child_ptr(ptr, "allOf"), i), depth + 1);
            } else if (k == "$ref") {
                if (!v.is_string()) fail("json schema: '$ref' at {}: expected a string, found {}", where(ptr), v.type_name());
                merge_into(acc, resolve(v.get<std::string>(), ptr), v.get<std::string>().substr(1), depth + 1);
            } else if (k == "properties") {
                if (!v.is_object())
                    fail("json schema: 'properties' at {}: expected an object, found {}", where(ptr), v.type_name());
                Json &props = acc["properties"];
                if (props.is_null()) props = Json::object();
                for (const auto &[pk, pv] : v.items()) {
                    if (!props.contains(pk) || props[pk] == pv) props[pk] = pv;
                    else props[pk] = Json{{"allOf", Json::array({props[pk], pv})}};
                }
            } else if (k == "required") {
                if (!v.is_array()) fail("json schema: 'required' at {}: expected an array, found {}", where(ptr), v.type_name());
                Json &req = acc["required"];
                if (req.is_null()) req = Json::array();
                for (const auto &r : v)
                    if (std::find(req.begin(), req.end(), r) == req.end()) req.push_back(r);
            } else if (acc.contains(k) && acc[k] != v) {
                fail("json schema: allOf at {} has conflicting values for '{}' ({} and {})", where(ptr), k, acc[k].dump(),
                     v.dump());
            } else {
                acc[k] = v;
            }
        }
    }

    std::string const_expr(const Json &v) {
        if (v.is_object()) {
            std::string out = "\"{\" space";
            bool first = true;
            for (const auto &[k, x] : v.items()) {
                if (!first) out += " \",\" space";
                first = false;
                out += " " + literal(Json(k).dump()) + " space \":\" space " + const_expr(x) + " space";
            }
            fixed("space");
            return out + " \"}\"";
        }
        if (v.is_array()) {
            std::string out = "\"[\" space";
            for (size_t i = 0; i < v.size(); ++i) out += std::string(i ? " \",\" space " : " ") + const_expr(v[i]) + " space";
            fixed("space");
            return out + " \"]\"";
        }
        return literal(v.dump());
    }

    std::string visit(const Json &s, const std::string &name, const std::string &ptr) {
        // subschemas are visited by recursion: a bound keeps a hostile schema off the stack's end
        if (++depth_ > kMaxDepth) fail("json schema: schemas nested more than {} deep at {}", kMaxDepth, where(ptr));
        struct Leave {
            int &d;
            ~Leave() { --d; }
        } leave{depth_};
        if (s.is_boolean()) {
            if (s.get<bool>()) return fixed("value");
            fail("json schema: the schema at {} is false and accepts nothing", where(ptr));
        }
        if (!s.is_object()) fail("json schema: expected a schema (an object or a boolean) at {}, found {}", where(ptr), s.type_name());
        check_keywords(s, ptr);

        // keywords that constrain (not annotations), for "beside" checks
        auto others = [&](std::initializer_list<const char *> except) {
            Json out = Json::object();
            for (const auto &item : s.items()) {
                const std::string &k = item.key();  // a plain variable: clang before 16 cannot capture a binding
                if (kAnnotations.count(k)) continue;
                if (std::any_of(except.begin(), except.end(), [&](const char *e) { return k == e; })) continue;
                out[k] = item.value();
            }
            return out;
        };

        if (s.contains("allOf") || (s.contains("$ref") && !others({"$ref"}).empty())) {
            Json merged = Json::object();
            merge_into(merged, s, ptr, 0);
            return visit(merged, name, ptr);
        }
        if (s.contains("$ref")) {
            if (!s["$ref"].is_string()) fail("json schema: '$ref' at {}: expected a string, found {}", where(ptr), s["$ref"].type_name());
            return ref_rule(s["$ref"].get<std::string>(), ptr);
        }
        if (s.contains("anyOf") || s.contains("oneOf")) {
            if (s.contains("anyOf") && s.contains("oneOf"))
                fail("json schema: anyOf together with oneOf at {} is not supported", where(ptr));
            const char *key = s.contains("anyOf") ? "anyOf" : "oneOf";
            const Json &branches = s[key];
            if (!branches.is_array() || branches.empty())
                fail("json schema: '{}' at {}: expected a non-empty array of schemas, found {}", key, where(ptr), branches.dump());
            const Json rest = others({"anyOf", "oneOf"});
            std::vector<std::string> alts;
            for (size_t i = 0; i < branches.size(); ++i) {
                const std::string bptr = child_ptr(child_ptr(ptr, key), i);
                const std::string bname = child_name(name, "alt" + std::to_string(i));
                std::string expr = rest.empty() ? visit(branches[i], bname, bptr)
                                                : visit(Json{{"allOf", Json::array({rest, branches[i]})}}, bname, bptr);
                if (!is_rule_name(expr) && expr.find(' ') != std::string::npos) expr = add_rule(bname, expr);
                if (std::find(alts.begin(), alts.end(), expr) == alts.end()) alts.push_back(expr);
            }
            return choice(alts);
        }
        if (s.contains("const")) return const_expr(s["const"]);
        if (s.contains("enum")) {
            const Json &values = s["enum"];
            if (!values.is_array() || values.empty())
                fail("json schema: 'enum' at {}: expected a non-empty array, found {}", where(ptr), values.dump());
            std::vector<std::string> alts;
            for (const auto &v : values) {
                std::string e = const_expr(v);
                if (std::find(alts.begin(), alts.end(), e) == alts.end()) alts.push_back(e);
            }
            return choice(alts);
        }

        std::vector<std::string> types;
        if (s.contains("type")) {
            const Json &t = s["type"];
            if (t.is_string()) {
                types.push_back(t.get<std::string>());
            } else if (t.is_array() && !t.empty() && std::all_of(t.begin(), t.end(), [](const Json &x) { return x.is_string(); })) {
                for (const auto &x : t) types.push_back(x.get<std::string>());
            } else {
                fail("json schema: 'type' at {}: expected a type name or a non-empty array of them, found {}", where(ptr), t.dump());
            }
        } else {
            const std::string implied = json_schema_implied_type(s);
            if (implied.empty()) return fixed("value");
            types.push_back(implied);
        }
        if (types.size() == 1) return typed(s, types[0], name, ptr);
        std::vector<std::string> alts;
        for (const auto &t : types) {
            std::string expr = typed(s, t, child_name(name.empty() ? "root" : name, t), ptr);
            if (!is_rule_name(expr) && expr.find(' ') != std::string::npos) expr = add_rule(child_name(name.empty() ? "root" : name, t), expr);
            if (std::find(alts.begin(), alts.end(), expr) == alts.end()) alts.push_back(expr);
        }
        return choice(alts);
    }

    std::string typed(const Json &s, const std::string &type, const std::string &name, const std::string &ptr) {
        if (type == "string") return string_expr(s, ptr);
        if (type == "integer") return integer_expr(s, ptr);
        if (type == "number") return number_expr(s, ptr);
        if (type == "boolean") return fixed("boolean");
        if (type == "null") return fixed("null");
        if (type == "object") return object_expr(s, name, ptr);
        if (type == "array") return array_expr(s, name, ptr);
        fail("json schema: 'type' at {}: expected string, number, integer, boolean, null, object or array, found '{}'",
             where(ptr), type);
    }

    int64_t non_negative(const Json &s, const char *key, const std::string &ptr) {
        const Json &v = s[key];
        if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
        if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>()) && v.get<double>() < 1e15)
            return (int64_t)v.get<double>();
        fail("json schema: '{}' at {}: expected a non-negative integer, found {}", key, where(ptr), v.dump());
    }

    // A length or item count as a repetition bound: a grammar spells {m,n} out
    // as n rules, so a maximum above kMaxRepeat is not enforced (a warning).
    int64_t count(const Json &s, const char *key, const std::string &ptr) {
        const int64_t n = non_negative(s, key, ptr);
        if (n <= kMaxRepeat) return n;
        if (std::string_view(key).starts_with("min"))
            fail("json schema: '{}' {} at {} is above the supported {}", key, n, where(ptr), kMaxRepeat);
        warn(fmt::format("json schema: '{}' {} at {} is above {} and not enforced", key, n, where(ptr), kMaxRepeat));
        return -1;
    }

    std::string string_expr(const Json &s, const std::string &ptr) {
        const bool has_length = s.contains("minLength") || s.contains("maxLength");
        const int64_t min = s.contains("minLength") ? count(s, "minLength", ptr) : 0;
        const int64_t max = s.contains("maxLength") ? count(s, "maxLength", ptr) : -1;
        if (max >= 0 && min > max) fail("json schema: minLength {} is above maxLength {} at {}", min, max, where(ptr));
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) fail("json schema: 'pattern' at {}: expected a string, found {}", where(ptr), s["pattern"].type_name());
            if (has_length) fail("json schema: minLength/maxLength together with pattern at {} is not supported", where(ptr));
            if (s.contains("format")) fail("json schema: format together with pattern at {} is not supported", where(ptr));
            const std::string inner = PatternParser(s["pattern"].get<std::string>(), ptr).parse();
            return join_seq(join_seq(kQuote, inner), kQuote);
        }
        if (s.contains("format")) {
            if (!s["format"].is_string()) fail("json schema: 'format' at {}: expected a string, found {}", where(ptr), s["format"].type_name());
            const std::string format = s["format"].get<std::string>();
            if (format == "date" || format == "time" || format == "date-time" || format == "uuid") {
                if (has_length) fail("json schema: minLength/maxLength together with format '{}' at {} is not supported", format, where(ptr));
                const std::string rule = fixed(format);
                return std::string(kQuote) + " " + rule + " " + kQuote;
            }
            warn(fmt::format("json schema: format '{}' at {} is not enforced (any string)", format, where(ptr)));
        }
        if (!has_length || (min == 0 && max < 0)) return fixed("string");
        if (max == 0) return std::string(kQuote) + " " + kQuote;
        return std::string(kQuote) + " " + fixed("char") + repeat(min, max) + " " + kQuote;
    }

    // An integer bound, rounded inwards; nullopt when absent.
    std::optional<int64_t> bound(const Json &s, const char *key, bool lower, bool exclusive, const std::string &ptr) {
        if (!s.contains(key)) return std::nullopt;
        const Json &v = s[key];
        if (!v.is_number()) fail("json schema: '{}' at {}: expected a number, found {}", key, where(ptr), v.dump());
        const double d = v.get<double>();
        if (!(std::fabs(d) <= (double)kMaxBound))
            fail("json schema: '{}' {} at {} is out of the supported range (|bound| <= 10^18)", key, v.dump(), where(ptr));
        int64_t x;
        if (v.is_number_integer()) {
            x = v.get<int64_t>();
            if (exclusive) x += lower ? 1 : -1;
        } else if (lower) {
            x = exclusive ? (int64_t)std::floor(d) + 1 : (int64_t)std::ceil(d);
        } else {
            x = exclusive ? (int64_t)std::ceil(d) - 1 : (int64_t)std::floor(d);
        }
        return x;
    }

    std::string integer_expr(const Json &s, const std::string &ptr) {
        // draft 4: exclusiveMinimum/exclusiveMaximum are booleans that modify minimum/maximum
        const bool old_ex_min = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean();
        const bool old_ex_max = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean();
        std::optional<int64_t> lo = bound(s, "minimum", true, old_ex_min && s["exclusiveMinimum"].get<bool>(), ptr);
        std::optional<int64_t> hi = bound(s, "maximum", false, old_ex_max && s["exclusiveMaximum"].get<bool>(), ptr);
        if (!old_ex_min)
            if (auto x = bound(s, "exclusiveMinimum", true, true, ptr)) lo = lo ? std::max(*lo, *x) : *x;
        if (!old_ex_max)
            if (auto x = bound(s, "exclusiveMaximum", false, true, ptr)) hi = hi ? std::min(*hi, *x) : *x;
        if (!lo && !hi) return fixed("integer");
        if (lo && hi && *lo > *hi) fail("json schema: no integer at {} is within its bounds ({} to {})", where(ptr), *lo, *hi);
        return integer_range(lo, hi);
    }

    std::string number_expr(const Json &s, const std::string &ptr) {
        bool non_negative = false;
        for (const char *key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
            if (!s.contains(key)) continue;
            const Json &v = s[key];
            if (v.is_boolean()) continue;
            if (!v.is_number()) fail("json schema: '{}' at {}: expected a number, found {}", key, where(ptr), v.dump());
            if ((std::string_view(key) == "minimum" || std::string_view(key) == "exclusiveMinimum") && v.get<double>() >= 0)
                non_negative = true;
            warn(fmt::format("json schema: '{}' on a number at {} is not enforced", key, where(ptr)));
        }
        return fixed(non_negative ? "unsigned-number" : "number");
    }

    std::string object_expr(const Json &s, const std::string &name, const std::string &ptr) {
        struct Kv {
            std::string rule, base;
            bool required;
        };
        std::vector<Kv> kvs;
        std::vector<std::string> required;
        std::unordered_set<std::string> required_set;
        if (s.contains("required")) {
            const Json &r = s["required"];
            if (!r.is_array() || !std::all_of(r.begin(), r.end(), [](const Json &x) { return x.is_string(); }))
                fail("json schema: 'required' at {}: expected an array of strings, found {}", where(ptr), r.dump());
            for (const auto &x : r)
                if (required_set.insert(x.get<std::string>()).second) required.push_back(x.get<std::string>());
        }
        auto is_required = [&](const std::string &k) { return required_set.count(k) != 0; };

        std::string ap_key = "additionalProperties";
        if (!s.contains(ap_key) && s.contains("unevaluatedProperties")) ap_key = "unevaluatedProperties";
        // absent: no other keys when there are properties (llama.cpp's default), any keys when there are none
        const Json ap = s.contains(ap_key) ? s[ap_key] : Json(!s.contains("properties"));
        std::string extra_value;  // the value rule of other keys; empty when there may be none
        if (!(ap.is_boolean() && !ap.get<bool>()))
            extra_value = rule_for(ap, child_name(name, "additional"), child_ptr(ptr, ap_key));

        auto kv_rule = [&](const std::string &key, const std::string &value, const std::string &base) {
            return add_rule(base + "-kv", literal(Json(key).dump()) + " space \":\" space " + value + " space");
        };
        fixed("space");
        std::set<std::string> declared;
        if (s.contains("properties")) {
            const Json &props = s["properties"];
            if (!props.is_object()) fail("json schema: 'properties' at {}: expected an object, found {}", where(ptr), props.type_name());
            for (const auto &[k, sub] : props.items()) {
                const std::string base = child_name(name, sanitize(k));
                const std::string value = rule_for(sub, base, child_ptr(child_ptr(ptr, "properties"), k));
                kvs.push_back({kv_rule(k, value, base), base, is_required(k)});
                declared.insert(k);
            }
        }
        for (const auto &k : required) {  // required but not declared: any value (or the additional ones')
            if (declared.count(k)) continue;
            const std::string value = extra_value.empty() ? fixed("value") : extra_value;
            const std::string base = child_name(name, sanitize(k));
            kvs.push_back({kv_rule(k, value, base), base, true});
        }
        std::string extra_kv;
        if (!extra_value.empty())
            extra_kv = add_rule(child_name(name, "additional-kv"), fixed("string") + " space \":\" space " + extra_value + " space");

        size_t n_required = 0;
        for (const auto &kv : kvs) n_required += kv.required;
        if (s.contains("minProperties") && non_negative(s, "minProperties", ptr) > (int64_t)n_required)
            fail("json schema: minProperties above the number of required properties at {} is not supported", where(ptr));
        if (s.contains("maxProperties") && (!extra_kv.empty() || non_negative(s, "maxProperties", ptr) < (int64_t)kvs.size()))
            fail("json schema: maxProperties below the number of possible properties at {} is not supported", where(ptr));

        // The properties in order, each optional one skippable. then[j]: the
        // properties from j on after something was written, each with its
        // comma; from[i]: from property i on with nothing written yet. Each
        // is a rule naming the next one (a chain, built from the end): as
        // nested expressions that repeated the rest for every property, 2000
        // optional properties made 44 MB of grammar in 46 s, nested beyond
        // what a grammar may nest.
        const size_t n = kvs.size();
        std::vector<std::string> then(n + 1), from(n + 1);
        then[n] = extra_kv.empty() ? "" : "(\",\" space " + extra_kv + ")*";
        from[n] = extra_kv.empty() ? "" : "(" + extra_kv + " (\",\" space " + extra_kv + ")*)?";
        for (size_t j = n; j-- > 0;) {
            if (j > 0) {  // (then[0] would follow nothing)
                const std::string piece = "\",\" space " + kvs[j].rule;
                const std::string body = join_seq(kvs[j].required ? piece : "(" + piece + ")?", then[j + 1]);
                then[j] = j + 1 == n ? body : add_rule(kvs[j].base + "-then", body);
            }
            const std::string seq = join_seq(kvs[j].rule, then[j + 1]);
            if (kvs[j].required) from[j] = seq;
            else if (from[j + 1].empty()) from[j] = "(" + seq + ")?";
            else from[j] = add_rule(kvs[j].base + "-from", seq + " | " + from[j + 1]);
        }
        return join_seq(join_seq("\"{\" space", from[0]), "\"}\"");
    }

    std::string array_expr(const Json &s, const std::string &name, const std::string &ptr) {
        const int64_t min = s.contains("minItems") ? count(s, "minItems", ptr) : 0;
        const int64_t max = s.contains("maxItems") ? count(s, "maxItems", ptr) : -1;
        if (max >= 0 && min > max) fail("json schema: minItems {} is above maxItems {} at {}", min, max, where(ptr));
        fixed("space");

        // a tuple: prefixItems (or draft 4's items array) then items (additionalItems)
        const Json *prefix = nullptr;
        std::string prefix_key, rest_key;
        if (s.contains("prefixItems")) {
            prefix = &s["prefixItems"], prefix_key = "prefixItems", rest_key = "items";
            if (!prefix->is_array()) fail("json schema: 'prefixItems' at {}: expected an array, found {}", where(ptr), prefix->type_name());
        } else if (s.contains("items") && s["items"].is_array()) {
            prefix = &s["items"], prefix_key = "items", rest_key = "additionalItems";
        }
        std::string item;  // the rule of each further item; empty when there may be none
        if (prefix) {
            if (s.contains(rest_key) && s[rest_key] != false)
                item = rule_for(s[rest_key], child_name(name.empty() ? "root" : name, "item"), child_ptr(ptr, rest_key));
        } else if (!(s.contains("items") && s["items"] == false)) {
            item = s.contains("items") ? rule_for(s["items"], child_name(name.empty() ? "root" : name, "item"), child_ptr(ptr, "items"))
                                       : fixed("value");
        }

        const size_t k = prefix ? std::min<size_t>(prefix->size(), max >= 0 ? (size_t)max : prefix->size()) : 0;
        if (k == 0) {
            if (item.empty() || max == 0) {
                if (min > 0) fail("json schema: minItems {} at {} cannot be met: no items are allowed", min, where(ptr));
                return "\"[\" space \"]\"";
            }
            std::string body = item + " space";
            if (max != 1) body += " (\",\" space " + item + " space)" + repeat(std::max<int64_t>(0, min - 1), max < 0 ? -1 : max - 1);
            return min == 0 ? "\"[\" space (" + body + ")? \"]\"" : "\"[\" space " + body + " \"]\"";
        }
        const int64_t more_min = std::max<int64_t>(0, min - (int64_t)k), more_max = max < 0 ? -1 : max - (int64_t)k;
        if (more_min > 0 && item.empty())
            fail("json schema: minItems {} at {} cannot be met: {} has {} items and no more are allowed", min, where(ptr), prefix_key, k);
        const size_t n_required = s.contains("minItems") ? std::min<size_t>((size_t)min, k) : k;
        std::string tail = item.empty() || more_max == 0 ? "" : "(\",\" space " + item + " space)" + repeat(more_min, more_max);
        for (size_t i = k; i-- > 0;) {
            const std::string elem = rule_for((*prefix)[i], child_name(name.empty() ? "root" : name, "item" + std::to_string(i)),
                                              child_ptr(child_ptr(ptr, prefix_key), i));
            const std::string piece = join_seq((i ? "\",\" space " : "") + elem + " space", tail);
            tail = i >= n_required ? "(" + piece + ")?" : piece;
        }
        return "\"[\" space " + tail + " \"]\"";
    }

    const Json &root_;
    std::vector<std::string> *warnings_;
    std::vector<std::pair<std::string, std::string>> rules_;  // in the order they are made; root first
    std::map<std::string, size_t> index_;
    std::set<std::string> reserved_;
    std::unordered_map<std::string, int> next_suffix_;            // name family -> next suffix to try
    std::unordered_map<std::string, std::string> family_;         // rule -> its family (unique())
    std::unordered_map<std::string, std::string> by_body_;        // family '\0' body -> rule
    std::map<std::string, std::string> refs_;  // $ref -> rule
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json &schema, std::vector<std::string> *warnings) {
    return Converter(schema, warnings).convert();
}

std::string json_schema_implied_type(const nlohmann::ordered_json &s) {
    auto has = [&](std::initializer_list<const char *> keys) {
        return std::any_of(keys.begin(), keys.end(), [&](const char *k) { return s.contains(k); });
    };
    if (has({"properties", "required", "additionalProperties", "unevaluatedProperties", "minProperties", "maxProperties"}))
        return "object";
    if (has({"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) return "array";
    if (has({"minLength", "maxLength", "pattern", "format"})) return "string";
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) return "number";
    return "";
}

std::string json_object_gbnf() {
    Converter c(nlohmann::ordered_json::object(), nullptr);
    return c.finish(c.fixed("object"));
}

}  // namespace toy::text
