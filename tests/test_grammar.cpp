// GBNF grammars: parsing (llama.cpp's own example grammars included), whole
// texts matched or refused, errors that name the line, and the token walk
// the sampler relies on checked token by token against the plain definition.
#include "core/flat_map.h"
#include "gguf/gguf_reader.h"
#include "test_util.h"
#include "text/grammar.h"
#include "text/vocab.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

using namespace toy;
using text::Grammar;
using text::GrammarState;

namespace {

std::string read_text(const std::filesystem::path &p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string bundle_grammar(const std::string &name) {
    return read_text(std::filesystem::path(TOY_LLAMA_SOURCE_DIR) / "grammars" / name);
}

bool matches(const std::string &gbnf, const std::string &text) { return Grammar::parse(gbnf)->matches(text); }

std::string parse_error(const std::string &gbnf) {
    try {
        Grammar::parse(gbnf);
    } catch (const Error &e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Grammar, ParsesEveryExampleGrammarOfLlamaCpp) {
    size_t n = 0;
    for (const auto &entry : std::filesystem::directory_iterator(std::filesystem::path(TOY_LLAMA_SOURCE_DIR) / "grammars")) {
        if (entry.path().extension() != ".gbnf") continue;
        SCOPED_TRACE(entry.path().filename().string());
        EXPECT_NO_THROW(Grammar::parse(read_text(entry.path())));
        ++n;
    }
    EXPECT_GE(n, 8u);
}

TEST(Grammar, JsonExampleAcceptsJsonAndRefusesTheRest) {
    auto g = Grammar::parse(bundle_grammar("json.gbnf"));
    for (const char *ok : {R"({})", R"({"a": 1})", R"({"a": [1, 2.5, -3e4, true, null, "x\"y\u00e9"]})",
                           "{\n  \"nested\": {\"k\": {}}\n}", R"({"caf\u00e9": "日本"})"}) {
        EXPECT_TRUE(g->matches(ok)) << ok;
    }
    for (const char *bad : {R"([])", R"({"a": })", R"({"a" 1})", R"({"a": 01})", R"({"a": tru})", R"({)", "{\"a\": \"\x01\"}"}) {
        EXPECT_FALSE(g->matches(bad)) << bad;
    }
}

TEST(Grammar, OperatorsClassesAndEscapes) {
    EXPECT_TRUE(matches(R"(root ::= "ab"*)", ""));
    EXPECT_TRUE(matches(R"(root ::= "ab"*)", "ababab"));
    EXPECT_FALSE(matches(R"(root ::= "ab"*)", "aba"));
    EXPECT_FALSE(matches(R"(root ::= "ab"+)", ""));
    EXPECT_TRUE(matches(R"(root ::= "x" "y"?)", "x"));
    EXPECT_TRUE(matches(R"(root ::= "x" "y"?)", "xy"));
    for (int n = 0; n <= 6; ++n) {
        const std::string s(n, 'a');
        EXPECT_EQ(matches(R"(root ::= [a]{2,4})", s), n >= 2 && n <= 4) << n;
        EXPECT_EQ(matches(R"(root ::= [a]{3})", s), n == 3) << n;
        EXPECT_EQ(matches(R"(root ::= [a]{3,})", s), n >= 3) << n;
        EXPECT_EQ(matches(R"(root ::= [a]{0,2})", s), n <= 2) << n;
    }
    EXPECT_TRUE(matches(R"(root ::= [^"\\\n]+)", "hello world"));
    EXPECT_FALSE(matches(R"(root ::= [^"\\\n]+)", "a\"b"));
    EXPECT_TRUE(matches(R"(root ::= [a-cx-z0-9]+)", "abz09"));
    EXPECT_FALSE(matches(R"(root ::= [a-cx-z0-9]+)", "abd"));
    EXPECT_TRUE(matches(R"(root ::= "\x41\u00e9\U0001F600\t\n\\\"")", "A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\""));
    EXPECT_TRUE(matches(R"(root ::= . . .)", "a\xC3\xA9z"));
    EXPECT_TRUE(matches(R"(root ::= [ぁ-ゟ]+)", "ひらがな"));
    EXPECT_FALSE(matches(R"(root ::= [ぁ-ゟ]+)", "カタカナ"));
    EXPECT_TRUE(matches("root ::= a | b\na ::= \"a\"  # comment\nb ::= (\n  \"b\"\n  | \"c\"\n)", "c"));
    // a rule named like the grammar's own helper rules, defined after its use
    EXPECT_TRUE(matches("root ::= (\"a\") root-1\nroot-1 ::= \"b\"", "ab"));
    // a '|' may begin the next line of a rule
    EXPECT_TRUE(matches("root ::= \"a\"\n     | \"b\"\n", "b"));
    // repetition of something that can be empty, and right recursion, stay finite
    EXPECT_TRUE(matches(R"(root ::= ("a"?)* "b")", "aab"));
    EXPECT_TRUE(matches("root ::= \"(\" root \")\" | \"\"", "((()))"));
    EXPECT_FALSE(matches("root ::= \"(\" root \")\" | \"\"", "(()"));
}

TEST(Grammar, ArithmeticExample) {
    auto g = Grammar::parse(bundle_grammar("arithmetic.gbnf"));
    EXPECT_TRUE(g->matches("1+2*(3-4)= 5\nx=y\n"));
    EXPECT_FALSE(g->matches("1+*2=3\n"));
}

TEST(Grammar, ErrorsNameWhatAndWhere) {
    EXPECT_NE(parse_error("root ::= foo").find("rule 'foo' is used but never defined (line 1, column 10)"), std::string::npos)
        << parse_error("root ::= foo");
    EXPECT_NE(parse_error("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a").find("unterminated string literal"), std::string::npos);
    EXPECT_NE(parse_error("root ::= [a-").find("unterminated character class"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"\\q\"").find("unknown escape '\\q'"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a\"{3,1}").find("maximum is below the minimum"), std::string::npos);
    EXPECT_NE(parse_error("root ::= * \"a\"").find("nothing before it"), std::string::npos);
    EXPECT_NE(parse_error("root ::= (\"a\"").find("expected ')'"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a\"\nroot ::= \"b\"").find("defined twice (line 2"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a\" @").find("unexpected '@'"), std::string::npos);
    EXPECT_NE(parse_error("root = \"a\"").find("expected '::='"), std::string::npos);
    EXPECT_NE(parse_error("root ::= <think>").find("needs the model's vocabulary"), std::string::npos);
    // fuzz finding: an id beyond 64 bits was taken as -1 (and indexed the token mask)
    EXPECT_NE(parse_error("root ::= <[" + std::string(80, '6') + "]>").find("token id too large"), std::string::npos);
    EXPECT_NE(parse_error("root ::= <[4294967295]>").find("token id too large"), std::string::npos);
    const std::string left = parse_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]");
    EXPECT_NE(left.find("rule 'expr' is left-recursive"), std::string::npos) << left;
    EXPECT_NE(parse_error("root ::= a \"x\"\na ::= \"y\"? root").find("left-recursive"), std::string::npos);
}

namespace {

struct VocabFile {
    std::unique_ptr<gguf::File> file;
    text::Vocab vocab;
    explicit VocabFile(const std::string &path) : file(gguf::File::open(path)), vocab(text::Vocab::load(*file)) {}
};

// allowed_tokens (the sorted walk) against the plain definition: a token is
// allowed when its text moves the state on, an end-of-generation token when
// the output is complete.
void expect_walk_matches_definition(const text::Vocab &vocab, const GrammarState &st) {
    std::vector<uint8_t> allowed;
    st.allowed_tokens(vocab, allowed);
    size_t n_allowed = 0;
    for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
        bool expect;
        if (vocab.is_eog(id)) {
            expect = st.complete();
        } else {
            GrammarState copy = st;
            const std::string_view piece = vocab.piece_view(id);
            expect = !piece.empty() && copy.accept_text(piece);
        }
        ASSERT_EQ(allowed[(size_t)id] != 0, expect) << "token " << id << " '" << vocab.token_to_piece(id) << "'";
        EXPECT_EQ(st.allows(vocab, id), expect) << id;
        n_allowed += expect;
    }
    EXPECT_GT(n_allowed, 0u);
}

}  // namespace

TEST(Grammar, TokenWalkEqualsTheDefinitionOnByteLevelAndSpmVocabularies) {
    for (const char *name : {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf"}) {
        SCOPED_TRACE(name);
        VocabFile v(test::shared_path(std::string("models/") + name));
        // (an SPM vocabulary puts a space before the first word)
        std::string json = bundle_grammar("json.gbnf");
        json.replace(json.find("::= object"), 10, "::= \" \"? object");
        GrammarState st(Grammar::parse(json));
        // walk a JSON text token by token, checking every state on the way
        const std::vector<int32_t> ids = v.vocab.tokenize(R"({"name": "Zoë 日本", "n": [1, -2.5e3, true]})", false);
        expect_walk_matches_definition(v.vocab, st);
        for (int32_t id : ids) {
            st.accept(v.vocab, id);
            expect_walk_matches_definition(v.vocab, st);
        }
        EXPECT_TRUE(st.complete());
        // a character class over multi-byte characters: tokens that end inside one
        GrammarState cjk(Grammar::parse("root ::= \" \"? [ぁ-ゟ一-龯]+ \"。\""));
        expect_walk_matches_definition(v.vocab, cjk);
        for (int32_t id : v.vocab.tokenize("ひらがな日本", false)) cjk.accept(v.vocab, id);
        expect_walk_matches_definition(v.vocab, cjk);
    }
}

TEST(Grammar, ReadingsThatShareTheirNextCharactersAreSteppedOnce) {
    // A step checks each distinct top of the readings once and reuses the set
    // it reached for every later character that the same tops admit (a bit
    // per top up to 64; beyond, only "all of them"). The walk, memos warm,
    // must equal each token read by a state on a cache of its own (memos
    // cold). Reading i is [class_i]* "." w_i: which readings a memo keeps
    // alive decides the letters allowed after the "." (a capital for each of
    // readings 64 to 89).
    VocabFile v(test::shared_path("models/stories260K.gguf"));
    std::mt19937 rng(3);
    auto letters = [&](size_t n) {
        std::string az = "abcdefghijklmnopqrstuvwxyz";
        std::shuffle(az.begin(), az.end(), rng);
        return az.substr(0, n);
    };
    for (const bool many_tops : {false, true}) {
        SCOPED_TRACE(many_tops);
        const std::vector<std::string> few = {letters(13), letters(13), letters(13), letters(13), letters(13)};
        std::string gbnf = "root ::= a0";
        for (int i = 1; i < 90; ++i) gbnf += " | a" + std::to_string(i);
        for (int i = 0; i < 90; ++i) {
            // many: 64 classes that admit every letter (and one character of their own), 26 of some letters
            std::string cls = !many_tops ? few[i % 5] : i < 64 ? "a-z\\u" + fmt::format("{:04X}", 0x4E00 + i) : letters(13);
            // readings 64 to 89 end in words that begin with their own capital
            const std::string word = {(char)(i < 64 ? 'a' + i % 26 : 'A' + i - 64), (char)('a' + i / 26)};
            gbnf += "\na" + std::to_string(i) + " ::= [ " + cls + "]* \".\" \"" + word + "\"";
        }
        const auto grammar = Grammar::parse(gbnf);
        std::string said;
        GrammarState st(grammar);
        for (int step = 0; step < 14; ++step) {
            std::vector<uint8_t> allowed;
            st.allowed_tokens(v.vocab, allowed);
            std::vector<int32_t> ok;
            for (int32_t id = 0; id < v.vocab.n_tokens(); ++id) {
                const std::string_view piece = v.vocab.piece_view(id);
                if (piece.empty() || v.vocab.is_eog(id)) continue;
                GrammarState cold(grammar);
                const bool expect = cold.accept_text(said) && cold.accept_text(piece);
                ASSERT_EQ(allowed[(size_t)id] != 0, expect) << "token '" << piece << "' after '" << said << "'";
                if (expect) ok.push_back(id);
            }
            if (ok.empty()) {  // a whole sentence: only the end may follow
                ASSERT_TRUE(st.complete()) << said;
                ASSERT_GT(step, 8) << said;
                break;
            }
            // on: a dot half way, else a token of letters when there is one
            // on: a dot at step 7, before it text of the letters of "eat" only
            // (some of the 13-letter classes hold them all: some readings live)
            std::vector<int32_t> pick;
            for (int32_t id : ok) {
                const std::string_view piece = v.vocab.piece_view(id);
                if (step == 7 ? piece == "." : step > 7 || piece.find_first_not_of("eat ") == std::string_view::npos) pick.push_back(id);
            }
            const int32_t next = pick.empty() ? ok[rng() % ok.size()] : pick[rng() % pick.size()];
            said += v.vocab.piece_view(next);
            st.accept(v.vocab, next);
        }
    }
}

TEST(Grammar, AcceptRefusesATokenTheGrammarDoesNotAllow) {
    VocabFile v(test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf"));
    GrammarState st(Grammar::parse(R"(root ::= "yes" | "no")"));
    const std::vector<int32_t> maybe = v.vocab.tokenize("maybe", false);
    try {
        st.accept(v.vocab, maybe[0]);
        FAIL() << "accepted";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("is not allowed after the output so far"), std::string::npos) << e.what();
    }
    for (int32_t id : v.vocab.tokenize("yes", false)) st.accept(v.vocab, id);
    EXPECT_TRUE(st.finished());
}

TEST(Grammar, TokensByIdAndByText) {
    VocabFile v(test::shared_path("models/vocab/ggml-vocab-llama-spm.gguf"));
    const int32_t eos = v.vocab.eos();
    // <[id]> matches that token whatever its text; !<[id]> any other token
    auto g = Grammar::parse(fmt::format("root ::= \" a\" <[{}]> !<[{}]>", 13, 29900), "root", &v.vocab);
    GrammarState st(g);
    st.accept(v.vocab, v.vocab.tokenize("a", false).back());
    std::vector<uint8_t> allowed;
    st.allowed_tokens(v.vocab, allowed);
    EXPECT_TRUE(allowed[13]);
    st.accept(v.vocab, 13);
    st.allowed_tokens(v.vocab, allowed);
    EXPECT_FALSE(allowed[29900]);
    EXPECT_TRUE(allowed[100]);
    st.accept(v.vocab, 100);
    EXPECT_TRUE(st.complete());
    // by text: a control token spelled out
    auto by_text = Grammar::parse("root ::= \"x\" </s>", "root", &v.vocab);
    EXPECT_EQ(by_text->elements()[by_text->alternatives(by_text->root())[0] + 1].value, (uint32_t)eos);
    try {
        Grammar::parse("root ::= <two words>", "root", &v.vocab);
        FAIL();
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("not one"), std::string::npos) << e.what();
    }
}

TEST(Grammar, DeeplyNestedGroupsAreAnErrorNotAStackOverflow) {
    const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
    EXPECT_NE(test::error_of([&] { Grammar::parse(deep); }).find("groups nested more than 100 deep"), std::string::npos);
    const std::string ok = "root ::= " + std::string(50, '(') + "\"a\"" + std::string(50, ')');
    EXPECT_TRUE(Grammar::parse(ok)->matches("a"));
}

// Rules that match only the empty text: the same sentences as without them,
// and no deeper stacks. A fuzzer's grammar (`x ::=` empty, `x{0,5}` after a
// recursion) nested one stack level per character that every step walked
// down again: 4000 characters took 3.5 s and 16000 overflowed the stack.
TEST(Grammar, RulesThatMatchOnlyTheEmptyTextAddNoDepth) {
    auto deep = Grammar::parse("root ::= [^\\n] root? x{0,5}\nx ::=\n");
    EXPECT_TRUE(deep->matches(std::string(200000, 'a')));
    EXPECT_FALSE(deep->matches(std::string(1000, 'a') + "\n"));
    EXPECT_FALSE(deep->matches(""));
    GrammarState st(deep);
    ASSERT_TRUE(st.accept_text(std::string(200000, 'b')));
    EXPECT_TRUE(st.complete());
    // empty-only rules anywhere: between terminals, as a whole alternative,
    // repeated, nested in groups, and the root itself
    auto g = Grammar::parse("root ::= \"a\" e \"b\" (e | \"c\") e* f\n"
                            "e ::= \"\" | f f\nf ::= (\"\")?\n");
    for (const char *yes : {"ab", "abc"}) EXPECT_TRUE(g->matches(yes)) << yes;
    for (const char *no : {"", "a", "b", "ac", "abcc", "abe"}) EXPECT_FALSE(g->matches(no)) << no;
    EXPECT_TRUE(Grammar::parse("root ::= e e\ne ::= \"\"")->matches(""));
    EXPECT_FALSE(Grammar::parse("root ::= e e\ne ::= \"\"")->matches("a"));
    // a rule that matches nothing at all (it never ends) stays what it is
    EXPECT_FALSE(Grammar::parse("root ::= \"a\" n | \"b\"\nn ::= e n\ne ::= \"\"")->matches("a"));
}

// Chains of 100000 rules (a grammar of 2 MB): parsed in one pass each, not a
// pass per link (finding the nullable rules swept them all until nothing
// changed) and without a recursion per link (the left-recursion check
// overflowed the stack).
TEST(Grammar, ALongChainOfRulesIsNeitherQuadraticNorARecursion) {
    const int n = 100000;
    std::string chain = "root ::= r0\n", links = chain, left = chain;
    for (int i = 0; i < n; ++i) {
        chain += fmt::format("r{} ::= \"a\" r{} | \"\"\n", i, i + 1);
        links += fmt::format("r{} ::= r{}\n", i, i + 1);
    }
    chain += fmt::format("r{} ::= \"b\"\n", n);
    left = links + fmt::format("r{} ::= r0 \"a\"\n", n);
    links += fmt::format("r{} ::= \"b\" | \"\"\n", n);  // nullable at the far end only
    auto g = Grammar::parse(chain);
    EXPECT_TRUE(g->matches(""));
    EXPECT_TRUE(g->matches("aaa"));
    EXPECT_TRUE(g->matches(std::string(n, 'a') + "b"));
    EXPECT_FALSE(g->matches(std::string(n - 1, 'a') + "b"));
    auto l = Grammar::parse(links);
    EXPECT_TRUE(l->matches("") && l->matches("b"));
    EXPECT_FALSE(l->matches("bb"));
    const std::string err = test::error_of([&] { Grammar::parse(left); });
    EXPECT_NE(err.find("is left-recursive"), std::string::npos) << err;
}

// A state's cache of stacks starts afresh past 2 M nodes, copying the stacks
// it holds: 1.1 M nested parentheses are stacks 700 thousand deep when that
// happens, and the copy (a recursion per level) overflowed the stack.
TEST(Grammar, AStackDeeperThanTheCacheIsCopiedWithoutRecursion) {
    VocabFile v(test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf"));
    GrammarState st(Grammar::parse("root ::= \"(\" root \")\" | \"x\""));
    const int32_t open = v.vocab.tokenize("(", false).at(0), close = v.vocab.tokenize(")", false).at(0);
    const int n = 1100000;
    for (int i = 0; i < n; ++i) st.accept(v.vocab, open);
    st.accept(v.vocab, v.vocab.tokenize("x", false).at(0));
    for (int i = 0; i < n - 1; ++i) st.accept(v.vocab, close);
    EXPECT_FALSE(st.complete());
    EXPECT_FALSE(st.allows(v.vocab, open));
    st.accept(v.vocab, close);
    EXPECT_TRUE(st.finished());
}

TEST(Grammar, AnAmbiguousGrammarIsRefusedBeforeItsReadingsExplode) {
    // each letter may be any of three optional ones or open another `root`:
    // the readings double with every letter, and were all kept (a fuzzer's
    // grammar held a server slot for minutes and gigabytes)
    auto g = Grammar::parse(R"(root ::= [a-z] root? [a-z]? root? [a-z]?)");
    const std::string ok(6, 'a'), long_text(20, 'a');
    EXPECT_TRUE(g->matches(ok));
    const std::string err = test::error_of([&] { g->matches(long_text); });
    EXPECT_NE(err.find("grammar: the output so far can be read in more than 4096 ways"), std::string::npos) << err;
    GrammarState st(g);
    ASSERT_TRUE(st.accept_text(ok));
    EXPECT_EQ(test::error_of([&] { st.accept_text(long_text); }), err);
    EXPECT_TRUE(st.accept_text("aa")) << "a refused text leaves the state as it was";
    // the fuzzer's input: refused within a step, not after minutes
    auto found = Grammar::parse("root ::= \"a\"{0,5} [^\\n]root? x{0,5} [^\\n]root? x*\n"
                                "x ::= [\\u00e9z\\U0001F600] | \"\\x41  |\"\n");
    EXPECT_NE(test::error_of([&] { found->matches(std::string(60, 'a')); }).find("more than 4096 ways"), std::string::npos);
    // the same through the token walk the sampler uses
    VocabFile v(test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf"));
    GrammarState walk(found);
    std::vector<uint8_t> allowed;
    const std::string walk_err = test::error_of([&] {
        for (int i = 0; i < 60; ++i) {
            walk.allowed_tokens(v.vocab, allowed);
            walk.accept(v.vocab, v.vocab.tokenize("a", false).at(0));
        }
    });
    EXPECT_NE(walk_err.find("more than 4096 ways"), std::string::npos) << walk_err;
}

// The parse-stack cache's map: every key found again with its first value
// across growth, including keys that differ only in their high bits (a
// node's position is the high half of its key).
TEST(Grammar, StackCacheMapKeepsEveryKey) {
    U64Map map;
    std::unordered_map<uint64_t, int32_t> plain;
    std::mt19937_64 rng(7);
    for (int32_t i = 0; i < 50000; ++i) {
        const uint64_t key = i % 2 ? rng() % 1000 : (uint64_t)(rng() % 5000) << 32;
        const auto [value, added] = map.try_emplace(key, i);
        const auto [it, plain_added] = plain.try_emplace(key, i);
        ASSERT_EQ(added, plain_added) << key;
        ASSERT_EQ(value, it->second) << key;
    }
    EXPECT_EQ(map.size(), plain.size());
    for (const auto &[key, value] : plain) {
        const int32_t *found = map.find(key);
        ASSERT_NE(found, nullptr) << key;
        EXPECT_EQ(*found, value);
    }
    EXPECT_EQ(map.find(123456789), nullptr);
    EXPECT_EQ(U64Map().find(0), nullptr);
}
