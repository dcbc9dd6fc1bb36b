// Bounds on one rendering of a chat template. A template comes with the model
// file (tokenizer.chat_template), toy chat and toy serve run it at load, and
// Jinja loops and recurses: a macro that called itself without end
// overflowed the stack (SIGSEGV), range(100000000) was OOM-killed at 23 GB, a
// nested loop ran for hours.
//
// The Jinja interpreter is the pinned llama.cpp bundle's (a dependency);
// CMakeLists.txt compiles a copy of its jinja directory with a few lines
// added that call this header: a Scope in statement::execute (which every
// statement and expression goes through), a DataScope in the walks over a
// value, a ParseScope in the parser's recursive entries, a step per loop
// item, and size checks where one step can build a large value.
// ChatTemplate gives each rendering (and the capability probes) a fresh
// budget with reset().
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace toy::jinja_guard {

// Deepest nesting of statements and expressions: a recursive macro's calls
// are a few levels each, and the bundle's recursive templates (JSON schemas
// of tools) stay below 100. 500 levels take about 0.8 MB of stack (more
// under ASan): well inside a thread's 8 MB.
inline constexpr int kMaxDepth = 500;
// Statements and expressions one rendering may execute (each item a loop
// goes over, each item or piece a step builds, is one more): the bundle's
// templates take at most 56 thousand for a conversation of 101 messages
// (ChatTemplate.RealTemplatesStayFarBelowTheStepBound); the bound allows some
// 35 times that work, and stops a runaway loop within seconds.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
inline constexpr int64_t kMaxSteps = 200'000;  // fuzz builds reach the bound sooner (fuzz/README.md)
#else
inline constexpr int64_t kMaxSteps = 2'000'000;
#endif

struct Budget {
    int64_t steps_left = kMaxSteps;
    int depth = 0;
    long double written = 0;  // bytes of text (write())
};
inline thread_local Budget budget;

// The most a single value may hold: items of an array (range(), a + b), and
// bytes and pieces of a string (repetition, concatenation). Any of them, built
// in one step or by doubling in a few, could take all the memory there is
// (range(100000000) did).
inline constexpr int64_t kMaxItems = 1 << 20;
inline constexpr int64_t kMaxText = 64 << 20;

inline void reset() { budget = Budget{}; }

// Text one rendering may write in all, each copy counted: gathering its
// output, tojson, printing a list or dict, indent(). A 60 MB string written
// 100 times by a loop, or a list of 100 references to it printed or turned
// into JSON, took 6 GB and minutes; indent(3000000000) and
// tojson(indent=1000000000) likewise. The bundle's templates write a few
// times the conversation: the bound is that of one value, and a
// conversation some millions of tokens long.
inline constexpr int64_t kMaxWritten = kMaxText;
inline void write(long double bytes) {
    if ((budget.written += bytes) > kMaxWritten) {
        throw std::runtime_error("the template writes more than " + std::to_string(kMaxWritten) + " bytes of text");
    }
}

// Work beyond one step: building n items or pieces costs n steps (a loop
// over a long range() with an empty body executes no statements per item).
inline void spend(long double n) {
    if (n > 0 && (budget.steps_left -= (int64_t)std::min<long double>(n, kMaxSteps + 1)) < 0) {
        throw std::runtime_error("the template ran more than " + std::to_string(kMaxSteps) +
                                 " steps (a loop without end?)");
    }
}

// Reading a string whole (printing, comparing, indexing, hashing it, its
// length, its case) walks every piece it was joined from: a step per 16
// pieces. A string of 512 thousand pieces (a one-byte string doubled 19
// times) was charged for its 512 KB, 128 steps, where indexing it took 70
// ms: a loop indexing it ran for hours inside the bound. Some of the walks
// cannot throw, so the steps are taken from the rendering in progress and
// the next statement stops it (outside a rendering nothing is charged).
inline void walk_pieces(size_t pieces) {
    if (budget.depth > 0 && pieces > 16) budget.steps_left -= (int64_t)(pieces / 16);
}

// Builtins whose work does not grow with the value they are called on cost
// their call's step, not the size of that value (their other arguments are
// charged as usual): a list's or dict's length, its first or last item, a
// dict's value by key, appending to a list, default().
// Charged by size, `messages|length` in a loop over the messages (the
// bundle's Qwen3, Qwen3.5, StepFun, Ling and MiniCPM5 templates read it for
// every message) made a conversation of n messages cost n^2 steps: 1500
// messages ran past the bound. A string's length is not among them: the
// builtin copies the string.
inline bool costs_one_step(const std::string &name, bool of_list_or_dict) {
    if (name == "default" || name == "get" || name == "append") return true;
    return of_list_or_dict && (name == "length" || name == "first" || name == "last");
}

// A test (`x is ...`) costs its step, like the type tests, unless its work
// grows with its operands: comparing them (a list of 950 thousand items
// compared with another 5000 times was 3.5 s within one step each), searching
// one in the other, or reading a string's case. Those cost what a builtin
// costs for its arguments.
inline bool test_walks_values(const std::string &test) {
    for (const char *t : {"eq", "equalto", "ne", "lt", "lessthan", "gt", "greaterthan", "ge", "in", "lower", "upper"}) {
        if (test == t) return true;
    }
    return false;
}

inline void check_items(long double n) {
    if (n > kMaxItems) {
        throw std::runtime_error("the template builds a list of more than " + std::to_string(kMaxItems) + " items");
    }
    spend(n);
}

// One more item of a list built piece by piece (split): its n-th, a step.
inline void add_item(size_t n) {
    if (n > kMaxItems) check_items((long double)n);
    spend(1);
}

// range(start, stop, step)'s length, before it is built.
inline void check_range(int64_t start, int64_t stop, int64_t step) {
    if (step != 0) check_items(((long double)stop - start) / step);  // (step 0: the interpreter's own error)
}

// A string of `bytes` in `parts` (the interpreter keeps a string as the
// pieces it was joined from, each a std::string: doubling a one-byte string
// 24 times took 2 GB for 16 MB of text).
inline void check_text(long double bytes, long double parts) {
    if (bytes > kMaxText) {
        throw std::runtime_error("the template builds a string of more than " + std::to_string(kMaxText) + " bytes");
    }
    if (parts > kMaxItems) {
        throw std::runtime_error("the template builds a string of more than " + std::to_string(kMaxItems) + " pieces");
    }
    spend(parts);
}

// One more level of nesting on `depth`, or an error past `most`: "the
// template<what> more than <most> <unit>" (built only when thrown).
class Level {
public:
    Level(int &depth, int most, const char *what, const char *unit) : depth_(depth) {
        if (depth_ >= most) {
            throw std::runtime_error(std::string("the template") + what + " more than " + std::to_string(most) + " " + unit);
        }
        ++depth_;
    }
    ~Level() { --depth_; }
    Level(const Level &) = delete;
    Level &operator=(const Level &) = delete;

private:
    int &depth_;
};

// A statement or expression: a level and a step.
struct Scope : Level {
    Scope() : Level(budget.depth, kMaxDepth, " nests calls", "deep (a macro that calls itself without end?)") { spend(1); }
};

// The deepest a value may be walked (printed, written as JSON, marked by the
// capability probes): a list or dict can hold itself (l.append(l)), and
// printing it recursed until the stack overflowed. The walk shares the
// nesting count with statements, so this is depth on top of theirs.
struct DataScope : Level {
    DataScope() : Level(budget.depth, kMaxDepth, "'s values nest", "deep (a list or dict that holds itself?)") {}
};

// The deepest the parser may recurse: template source nested 100000 deep
// ("[[[[...", "((((...", {% if %} in {% if %}) overflowed the stack while
// parsing. A level of nesting is about a dozen parser frames; the bundle's
// templates nest a few dozen levels at most.
inline constexpr int kMaxParseDepth = 300;
inline thread_local int parse_depth = 0;
struct ParseScope : Level {
    ParseScope() : Level(parse_depth, kMaxParseDepth, " nests", "levels deep") {}
};

// replace(): the longest result it could build (every place an occurrence).
inline void check_replace(size_t length, size_t old_length, size_t new_length) {
    const long double occurrences = old_length == 0 ? (long double)length + 1 : (long double)length / old_length;
    check_text(length + occurrences * new_length, 1);
}

// A search for a pattern in a text compares up to text x pattern bytes
// (std::string::find: "aaa...a" for "aa...ab"); each 4 KiB of that is a step,
// so a search the step bound allows takes seconds at most. Real templates
// search messages for short markers: a few steps.
inline constexpr long double kSearchBytesPerStep = 4096;
inline void check_search(size_t text, size_t pattern) { spend((long double)text * pattern / kSearchBytesPerStep); }

// replace()'s loop, in linear time: the interpreter replaced each occurrence
// in place, moving the rest of the string every time (replacing one
// character by two in a 10 MB string took hours). The same result: left to
// right, no occurrence overlapping the one before it.
inline void replace_all(std::string &str, const std::string &from, const std::string &to) {
    check_search(str.size(), from.size());
    size_t at = str.find(from);
    if (at == std::string::npos) return;
    std::string out;
    size_t done = 0;
    for (; at != std::string::npos; at = str.find(from, done)) {
        out.append(str, done, at - done);
        out += to;
        done = at + from.size();
    }
    out.append(str, done, std::string::npos);
    str = std::move(out);
}

// Integer arithmetic. The interpreter computes +, -, * and % in double and
// converts the result, negates and takes abs() in int64, and converts a float
// for int(): a result past int64 (9223372036854775807 * 3, -(-2^63)) or not a
// number (7 % 0, int() of NaN) was undefined behaviour, and `x is divisibleby(0)` (or -2^63
// by -1) stopped the process with SIGFPE. Each is an error now.
inline int64_t to_int(long double x) {
    if (x != x) throw std::runtime_error("the template's integer arithmetic has no result (a modulo by zero, or int() of NaN)");
    if (!(x >= -0x1p63L && x < 0x1p63L)) throw std::runtime_error("the template's integer arithmetic leaves 64 bits");
    return (int64_t)x;
}
inline bool divisible(int64_t a, int64_t b) {
    if (b == 0) throw std::runtime_error("the template tests divisibleby(0)");
    return b == -1 || a % b == 0;
}

// The next value of a walk from i by step that ends at `end` (range()'s
// stop; a slice's len, or -1 going backwards): i + step, or `end` where that
// would pass it or leave int64. range(0, 2**63 - 1, 2**62) wrapped to
// negative numbers and went on until the process was killed for memory, and a
// slice's step near 2^63 overflowed.
inline int64_t advance(int64_t i, int64_t step, int64_t end) {
    int64_t next;
    if (__builtin_add_overflow(i, step, &next)) return end;
    return step > 0 ? std::min(next, end) : std::max(next, end);
}

}  // namespace toy::jinja_guard
