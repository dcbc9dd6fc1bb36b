// Constrained output end to end: models that wander (a tiny story model at
// temperature 1, a random-weight byte-level BPE model) write only sentences
// of the grammar, and JSON that parses and validates against the schema,
// over many seeds; the same models unconstrained do not.
#include "json_schema_check.h"
#include "model/model.h"
#include "runtime/session.h"
#include "test_util.h"
#include "text/generation.h"
#include "text/grammar.h"
#include "text/json_schema.h"

#include <gtest/gtest.h>

using namespace toy;

namespace {

struct Loaded {
    std::unique_ptr<Model> model;
    text::Vocab vocab;
    explicit Loaded(const std::string &path) : model(Model::load(path)), vocab(text::Vocab::load(model->file())) {}
};

struct Output {
    std::string text;
    text::StopReason reason;
    size_t n_tokens;
};

// Generates from `prompt` with the grammar (or none), sampling at
// temperature 1 with no truncation so the model wanders.
Output generate(const Loaded &m, const std::string &prompt, std::shared_ptr<const text::Grammar> grammar, uint64_t seed,
                int64_t max_tokens, std::vector<std::pair<int32_t, float>> bias = {}) {
    Session s(*m.model);
    text::SamplerParams p;
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    p.logit_bias = std::move(bias);
    text::Sampler sampler(p);
    text::Generation gen(&m.vocab, sampler, {max_tokens, false, {}, false, std::move(grammar)});
    s.eval(m.vocab.tokenize(prompt, true));
    Output out;
    for (;;) {
        const text::Step st = gen.next(std::span<const float>(s.last_logits(), (size_t)s.n_vocab()));
        out.text += st.text;
        if (st.done) break;
        s.eval(std::span<const int32_t>(&st.token, 1));
    }
    out.text += gen.flush();
    out.reason = gen.reason();
    out.n_tokens = gen.tokens().size();
    return out;
}

// a trained SPM model with byte fallback, and a random-weight byte-level BPE
// model whose learned positions end at 128
struct TestModel {
    const char *path;
    int64_t max_tokens;
};
constexpr TestModel kModels[] = {{"models/stories260K.gguf", 400}, {"fixtures/gpt2.f32.gguf", 120}};
constexpr int kSeeds = 25;

}  // namespace

TEST(Constrained, GbnfOutputsAreSentencesOfTheGrammar) {
    const std::string gbnf = R"(
root ::= item{2,3} "end."
item ::= "- " word (" " word){0,2} "\n"
word ::= [a-z]{1,5} | [0-9]{1,3}
)";
    for (const TestModel &tm : kModels) {
        SCOPED_TRACE(tm.path);
        Loaded m(test::shared_path(tm.path));
        auto grammar = text::Grammar::parse(gbnf, "root", &m.vocab);
        size_t distinct = 0;
        std::string previous;
        for (int seed = 1; seed <= kSeeds; ++seed) {
            const Output out = generate(m, "Once upon a time", grammar, seed, tm.max_tokens);
            EXPECT_EQ(out.reason, text::StopReason::EndOfGeneration) << out.text;
            EXPECT_TRUE(grammar->matches(out.text)) << "seed " << seed << ": " << out.text;
            distinct += out.text != previous;
            previous = out.text;
        }
        EXPECT_GT(distinct, (size_t)kSeeds / 2);  // sampling still varies the output
        // unconstrained, the same model does not write the list
        const Output free = generate(m, "Once upon a time", nullptr, 1, 60);
        EXPECT_FALSE(grammar->matches(free.text)) << free.text;
    }
}

TEST(Constrained, JsonSchemaOutputsParseAndValidate) {
    const nlohmann::ordered_json schemas[] = {
        nlohmann::ordered_json::parse(R"({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 12},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "mood": {"enum": ["happy", "sad", null, 3]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
                "ok": {"type": "boolean"}
            },
            "required": ["name", "age"]
        })"),
        nlohmann::ordered_json::parse(R"({
            "type": "array", "minItems": 1, "maxItems": 3,
            "items": {"anyOf": [
                {"type": "integer", "exclusiveMinimum": -10, "maximum": 10},
                {"type": "string", "pattern": "^[A-Z][a-z]{1,5}$"},
                {"$ref": "#/$defs/point"}
            ]},
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                "required": ["x", "y"], "additionalProperties": false}}
        })"),
    };
    // The random-weight model has 128 positions: it gets a schema whose
    // sentences are short, and no tokens that are only whitespace (the
    // grammar allows up to 21 characters of it between any two values).
    const nlohmann::ordered_json compact = nlohmann::ordered_json::parse(R"({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": -5, "maximum": 5},
                       "tag": {"enum": ["a", "b", null]}},
        "required": ["ok", "n"]
    })");
    for (const TestModel &tm : kModels) {
        SCOPED_TRACE(tm.path);
        Loaded m(test::shared_path(tm.path));
        const bool small = tm.max_tokens < 200;
        std::vector<std::pair<int32_t, float>> no_blanks;
        for (int32_t id = 0; small && id < m.vocab.n_tokens(); ++id) {
            const std::string_view piece = m.vocab.piece_view(id);
            if (!piece.empty() && piece.find_first_not_of(" \t\n") == std::string_view::npos) no_blanks.push_back({id, -INFINITY});
        }
        for (const auto &schema : small ? std::vector<nlohmann::ordered_json>{compact}
                                        : std::vector<nlohmann::ordered_json>(std::begin(schemas), std::end(schemas))) {
            auto grammar = text::Grammar::parse(text::json_schema_to_gbnf(schema), "root", &m.vocab);
            for (int seed = 1; seed <= kSeeds; ++seed) {
                const Output out = generate(m, "Data:", grammar, seed, tm.max_tokens, no_blanks);
                ASSERT_EQ(out.reason, text::StopReason::EndOfGeneration) << out.text;
                nlohmann::ordered_json value;
                ASSERT_NO_THROW(value = nlohmann::ordered_json::parse(out.text)) << "seed " << seed << ": " << out.text;
                EXPECT_EQ(test::json_schema_violation(schema, value), "") << "seed " << seed << ": " << out.text;
            }
        }
        const Output free = generate(m, "Data:", nullptr, 1, 60);
        EXPECT_FALSE(nlohmann::json::accept(free.text)) << free.text;
    }
}

TEST(Constrained, GreedyIsTheMostLikelyAllowedToken) {
    // at temperature 0 each step takes the most likely token the grammar allows
    Loaded m(test::shared_path("models/stories260K.gguf"));
    auto grammar = text::Grammar::parse(R"(root ::= [a-z ]{1,30} ".")", "root", &m.vocab);
    Session s(*m.model);
    text::SamplerParams p;
    p.temp = 0.0f;
    text::Sampler sampler(p);
    text::Generation gen(&m.vocab, sampler, {100, false, {}, false, grammar});
    text::GrammarState mirror(grammar);
    s.eval(m.vocab.tokenize("Once upon a time", true));
    std::vector<uint8_t> allowed;
    for (int i = 0; i < 100; ++i) {
        const float *l = s.last_logits();
        mirror.allowed_tokens(m.vocab, allowed);
        int32_t best = -1;
        for (int32_t id = 0; id < s.n_vocab(); ++id)
            if (allowed[(size_t)id] && (best < 0 || l[id] > l[best])) best = id;
        const text::Step st = gen.next(std::span<const float>(l, (size_t)s.n_vocab()));
        if (st.done && st.token < 0) break;
        ASSERT_EQ(st.token, best) << "step " << i;
        mirror.accept(m.vocab, st.token);
        if (st.done) break;
        s.eval(std::span<const int32_t>(&st.token, 1));
    }
    EXPECT_TRUE(mirror.complete());
}
