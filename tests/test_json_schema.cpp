// JSON Schema -> GBNF: for each schema the grammar accepts valid JSON texts
// (compact and pretty-printed) and rejects invalid ones, and the test
// validator (json_schema_check.h) agrees with it on every text that is JSON;
// integer bounds become exact digit ranges; what cannot be honoured is an
// error that names the keyword and where it is.
#include "text/json_schema.h"

#include "core/error.h"
#include "json_schema_check.h"
#include "text/grammar.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

using nlohmann::ordered_json;
using toy::test::json_schema_violation;
using toy::text::Grammar;
using toy::text::json_schema_to_gbnf;

namespace {

struct Case {
    const char *name;
    const char *schema;
    std::vector<std::string> valid;     // the grammar accepts them, pretty-printed too; they validate
    std::vector<std::string> invalid;   // the grammar rejects them; those that are JSON do not validate
    std::vector<std::string> narrower = {};  // valid JSON the grammar rejects by design (key order, ...)
};

const std::vector<Case> &cases() {
    static const std::vector<Case> all = {
        {"string", R"({"type": "string"})",
         {R"("hello")", R"("")", R"("a\"b\\c\n\t\u00e9\/")", "\"h\xc3\xa9llo\""},
         {"5", "null", R"("abc)", "\"a\nb\"", R"("bad \q escape")", R"('single')"}},
        {"number", R"({"type": "number"})",
         {"0", "-1.5", "3e10", "2.5E-3", "-0", "12345678", "1.25e+2"},
         {"01", "1.", ".5", "+1", R"("1")", "1e", "--1", "true"}},
        {"integer", R"({"type": "integer"})", {"0", "-12", "123456", "-9000000000"}, {"1.5", "01", "-01", R"("3")", "-", "null"}},
        {"boolean and null", R"({"type": ["boolean", "null"]})", {"true", "false", "null"}, {"0", R"("true")", "nul", "True"}},
        {"string or null", R"({"type": ["string", "null"], "maxLength": 2})", {R"("ab")", "null"}, {R"("abc")", "1"}},
        {"enum of mixed types", R"({"enum": ["red", 1, null, true, {"a": 1}, [1, 2], 2.5]})",
         {R"("red")", "1", "null", "true", R"({"a":1})", R"({ "a" : 1 })", "[1,2]", "[ 1, 2 ]", "2.5"},
         {R"("blue")", "2", "false", R"({"a":2})", "[2,1]", R"("1")"}},
        {"const", R"({"const": "fixed"})", {R"("fixed")"}, {R"("other")", R"("fixe")"}},
        {"object with required and bounded property",
         R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1},
             "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name"]})",
         {R"({"name":"a"})", R"({"name":"a","age":0})", R"({"name":"Bo","age":150})",
          "{\n  \"name\": \"a\",\n  \"age\": 42\n}"},
         {"{}", R"({"age":3})", R"({"name":"a","extra":1})", R"({"name":"a","age":151})", R"({"name":"a","age":-1})",
          R"({"name":"a","age":007})", R"({"name":1})", R"({"name":""})", "[]", R"({"name":"a",})"},
         {R"({"age":3,"name":"a"})"}},
        {"optional properties in any subset",
         R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}})",
         {"{}", R"({"a":1})", R"({"b":1})", R"({"c":1})", R"({"a":1,"c":1})", R"({"b":1,"c":1})", R"({"a":1,"b":2,"c":3})"},
         {R"({"d":1})", R"({"a":"x"})", R"({,"a":1})", R"({"a":1,,"b":1})"},
         {R"({"c":1,"a":1})", R"({"b":1,"a":1})"}},
        {"required between optional",
         R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
             "required": ["b"]})",
         {R"({"b":1})", R"({"a":1,"b":1})", R"({"b":1,"c":1})", R"({"a":1,"b":1,"c":1})"},
         {"{}", R"({"a":1})", R"({"a":1,"c":1})", R"({"c":1})"}},
        {"additionalProperties true",
         R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true})",
         {"{}", R"({"a":1})", R"({"a":1,"x":"y","z":[1,{"q":null}]})", R"({"x":null})", R"({"x":1,"a":1})"},
         {R"({"a":1,"x"})", R"({"a":1,"x":})"}},
        {"additionalProperties schema", R"({"type": "object", "additionalProperties": {"type": "integer"}})",
         {"{}", R"({"a":1,"b":2})", R"({"a":1,"a":2})"}, {R"({"a":"x"})", R"({"a":1,"b":null})", "[]"}},
        {"any object", R"({"type": "object"})", {"{}", R"({"a":1,"b":{"c":[]}})"}, {"[]", R"("{}")"}},
        {"required without properties", R"({"type": "object", "required": ["id"]})",
         {R"({"id":1})", R"({"id":{"x":[true]}})", R"({"id":1,"x":2})"}, {"{}", R"({"x":1})"}, {R"({"x":2,"id":1})"}},
        {"no properties and no others",
         R"({"type": "object", "properties": {}})", {"{}"}, {R"({"a":1})"}},
        {"nested objects",
         R"({"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer"},
             "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["id"]}}, "required": ["user"]})",
         {R"({"user":{"id":1}})", R"({"user":{"id":1,"tags":[]}})", R"({"user":{"id":1,"tags":["a","b"]}})"},
         {R"({"user":{}})", R"({"user":{"id":1,"tags":[1]}})", R"({"user":{"id":1,"x":1}})", R"({})"}},
        {"array of objects",
         R"({"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
             "required": ["x", "y"]}})",
         {"[]", R"([{"x":1,"y":2}])", R"([{"x":1,"y":2},{"x":-1.5,"y":0}])"},
         {R"([{"x":1}])", R"([{"x":1,"y":2},3])", R"({"x":1,"y":2})", R"([{"x":1,"y":2},])"}},
        {"minItems and maxItems", R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
         {"[1,2]", "[1,2,3]", "[ 1 , 2 ]"}, {"[]", "[1]", "[1,2,3,4]", R"([1,"a"])"}},
        {"maxItems one", R"({"type": "array", "maxItems": 1})", {"[]", "[null]", R"([{"a":[1]}])"}, {"[1,2]"}},
        {"items false", R"({"type": "array", "items": false})", {"[]"}, {"[1]"}},
        {"prefixItems tuple", R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})",
         {R"(["a",1])"}, {R"(["a"])", R"([1,"a"])", R"(["a",1,2])", "[]"}},
        {"prefixItems then items",
         R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": {"type": "boolean"}, "maxItems": 4})",
         {R"(["a",1])", R"(["a",1,true])", R"(["a",1,true,false])"}, {R"(["a",1,true,false,true])", R"(["a",1,2])"}},
        {"prefixItems with minItems", R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "minItems": 1})",
         {R"(["a"])", R"(["a",1])"}, {"[]", "[1]", R"(["a",1,2])"}},
        {"$defs reference",
         R"({"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "object",
             "properties": {"x": {"$ref": "#/$defs/pos"}, "y": {"$ref": "#/$defs/pos"}}, "required": ["x", "y"]})",
         {R"({"x":1,"y":20})"}, {R"({"x":0,"y":1})", R"({"x":1})"}},
        {"definitions reference",
         R"({"definitions": {"color": {"enum": ["red", "green"]}}, "type": "array", "items": {"$ref": "#/definitions/color"}})",
         {"[]", R"(["red","green","red"])"}, {R"(["blue"])"}},
        {"recursive definition",
         R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
             "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}},
             "$ref": "#/$defs/node"})",
         {R"({"value":1})", R"({"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4,"children":[]}]}]})"},
         {R"({"value":1,"children":[{}]})", R"({"children":[]})", R"({"value":1,"children":[{"value":"x"}]})"}},
        {"two definitions with one name",
         R"({"$defs": {"x": {"type": "object", "properties": {"inner": {"$ref": "#/definitions/x"}}, "required": ["inner"]}},
             "definitions": {"x": {"type": "integer"}}, "$ref": "#/$defs/x"})",
         {R"({"inner":1})"}, {R"({"inner":"a"})", "{}", "1"}},
        {"recursion through the root",
         R"({"type": "object", "properties": {"name": {"type": "string"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
             "required": ["name", "next"]})",
         {R"({"name":"a","next":null})", R"({"name":"a","next":{"name":"b","next":{"name":"c","next":null}}})"},
         {R"({"name":"a"})", R"({"name":"a","next":{"name":"b"}})", R"({"name":"a","next":1})"}},
        {"anyOf", R"({"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 2}]})",
         {"10", "99999", R"("ab")", R"("")"}, {"9", R"("abc")", "null"}},
        {"oneOf as anyOf", R"({"oneOf": [{"type": "boolean"}, {"const": 0}]})", {"true", "0"}, {"1", "null"}},
        {"anyOf with shared keywords",
         R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})",
         {R"({"a":1})", R"({"b":1})", R"({"a":1,"b":2})"}, {"{}", R"({"c":1})"}},
        {"allOf merges objects",
         R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
             {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
         {R"({"a":1,"b":"x"})"}, {R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":"x","c":1})"}},
        {"allOf with a reference",
         R"({"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
             "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string"}}}]})",
         {R"({"id":1})", R"({"id":1,"name":"n"})"}, {R"({"name":"n"})", R"({"id":"1"})"}},
        {"integer 0..150", R"({"type": "integer", "minimum": 0, "maximum": 150})",
         {"0", "7", "10", "99", "100", "149", "150"}, {"-1", "151", "007", "00", "1000", "160"}, {"-0"}},
        {"integer -5..5", R"({"type": "integer", "minimum": -5, "maximum": 5})", {"-5", "-1", "0", "5"}, {"-6", "6", "-05", "10"}},
        {"integer exclusiveMinimum 0", R"({"type": "integer", "exclusiveMinimum": 0})", {"1", "2", "10", "99999"}, {"0", "-1", "01"}},
        {"integer minimum only", R"({"type": "integer", "minimum": 10})", {"10", "11", "99", "100", "123456789"}, {"9", "0", "-10", "010"}},
        {"integer maximum only", R"({"type": "integer", "maximum": -3})", {"-3", "-4", "-10", "-1000000"}, {"-2", "0", "3", "-03"}},
        {"pattern anchored", R"({"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"})",
         {R"("ABC-12")", R"("XYZ-1234")"}, {R"("AB-12")", R"("ABC-1")", R"("abc-12")", R"("ABC-12345")", "12"}},
        {"pattern unanchored, whole match", R"({"type": "string", "pattern": "(cat|dog)s?"})",
         {R"("cat")", R"("dogs")"}, {R"("cats!")", R"("bird")", R"("")"}},
        {"pattern with quotes and backslashes", R"({"type": "string", "pattern": "^a\"b\\\\c[\"x]$"})",
         {R"("a\"b\\c\"")", R"("a\"b\\cx")"}, {R"("a\"b\\cy")", R"("ab\\cx")"}},
        {"pattern classes and dot", R"({"type": "string", "pattern": "^[^0-9\\s]+\\.\\w*(?:-.)?$"})",
         {R"("ab.")", R"("x.y_1")", R"("x.y-z")", R"("\"q.-\\")"}, {R"("a b.")", R"("1.")", R"("ab")", R"("a.-")"}},
        {"pattern quantifiers", R"({"type": "string", "pattern": "^a{2}b{1,}c{0,2}d*e?$"})",
         {R"("aab")", R"("aabbccdddde")", R"("aabc")"}, {R"("ab")", R"("aa")", R"("aabccc")"}},
        {"format date", R"({"type": "string", "format": "date"})", {R"("2024-01-31")", R"("1999-12-01")"},
         {R"("2024-13-01")", R"("2024-1-1")", R"("2024-01-32")", R"("today")"}},
        {"format time", R"({"type": "string", "format": "time"})", {R"("12:34:56Z")", R"("23:59:59.123+02:00")"},
         {R"("24:00:00Z")", R"("12:34:56")", R"("12:60:00Z")"}},
        {"format date-time", R"({"type": "string", "format": "date-time"})",
         {R"("2024-01-31T12:34:56Z")", R"("2024-01-31T00:00:00-05:30")"}, {R"("2024-01-31 12:34:56Z")", R"("2024-01-31")"}},
        {"format uuid", R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
         {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"}},
        {"minLength and maxLength", R"({"type": "string", "minLength": 2, "maxLength": 4})",
         {R"("ab")", R"("abcd")", R"("a\nb")", "\"\xc3\xa9\xc3\xa9\""}, {R"("a")", R"("abcde")", R"("")"}},
        {"empty schema", "{}", {"1", R"("x")", "null", R"([1,{"a":null}])", R"({"a":[true,-2.5e3]})"}, {"", "[1,]", "{a:1}"}},
        {"true schema", "true", {"false", "[]", "{}"}, {"tru"}},
        {"annotations are ignored",
         R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "title": "T", "description": "d",
             "$comment": "c", "examples": [1], "default": 1, "deprecated": false, "readOnly": true, "writeOnly": false,
             "type": "integer"})",
         {"1"}, {R"("1")"}},
    };
    return all;
}

std::string error_of(const char *schema) {
    try {
        json_schema_to_gbnf(ordered_json::parse(schema));
    } catch (const toy::Error &e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(JsonSchema, GrammarAcceptsExactlyTheValidTexts) {
    for (const Case &c : cases()) {
        SCOPED_TRACE(c.name);
        const ordered_json schema = ordered_json::parse(c.schema);
        const std::string gbnf = json_schema_to_gbnf(schema);
        SCOPED_TRACE(gbnf);
        std::shared_ptr<const Grammar> g;
        ASSERT_NO_THROW(g = Grammar::parse(gbnf));
        for (const std::string &text : c.valid) {
            EXPECT_TRUE(g->matches(text)) << text;
            const ordered_json value = ordered_json::parse(text);
            EXPECT_EQ(json_schema_violation(schema, value), "") << text;
            EXPECT_TRUE(g->matches(value.dump())) << value.dump();
            EXPECT_TRUE(g->matches(value.dump(2))) << value.dump(2);
            EXPECT_TRUE(g->matches(value.dump(1, '\t') + "\n")) << value.dump(1, '\t');
        }
        for (const std::string &text : c.invalid) {
            EXPECT_FALSE(g->matches(text)) << text;
            const ordered_json value = ordered_json::parse(text, nullptr, false);
            if (!value.is_discarded()) {
                EXPECT_NE(json_schema_violation(schema, value), "") << text;
            }
        }
        for (const std::string &text : c.narrower) {
            EXPECT_FALSE(g->matches(text)) << text;
            EXPECT_EQ(json_schema_violation(schema, ordered_json::parse(text)), "") << text;
        }
    }
}

// One-character edits of the valid texts: whatever the grammar still accepts
// is JSON that validates (the grammar is never wider than the schema).
TEST(JsonSchema, GrammarAcceptsNoInvalidEdit) {
    std::mt19937 rng(1234);
    const std::string alphabet = "{}[]\",:0123456789-+.eE abtrufnlsxyz\\\n";
    int accepted = 0;
    for (const Case &c : cases()) {
        // with other keys allowed, a declared key may come back as an other key with any value
        if (std::string(c.name).find("additionalProperties true") != std::string::npos) continue;
        SCOPED_TRACE(c.name);
        const ordered_json schema = ordered_json::parse(c.schema);
        const auto g = Grammar::parse(json_schema_to_gbnf(schema));
        for (const std::string &text : c.valid) {
            for (int k = 0; k < 300; ++k) {
                std::string t = text;
                const size_t at = rng() % (t.size() + 1);
                const char ch = alphabet[rng() % alphabet.size()];
                switch (rng() % 3) {
                case 0: if (at < t.size()) t.erase(at, 1); break;
                case 1: t.insert(at, 1, ch); break;
                default: if (at < t.size()) t[at] = ch; break;
                }
                if (!g->matches(t)) continue;
                ++accepted;
                const ordered_json value = ordered_json::parse(t, nullptr, false);
                ASSERT_FALSE(value.is_discarded()) << text << " -> " << t;
                EXPECT_EQ(json_schema_violation(schema, value), "") << text << " -> " << t;
            }
        }
    }
    EXPECT_GT(accepted, 100);  // the edits do reach valid texts (spaces, digits, letters in strings)
}

TEST(JsonSchema, WhitespaceIsBounded) {
    const auto g = Grammar::parse(json_schema_to_gbnf(ordered_json::parse(R"({"type": "array", "items": {"type": "integer"}})")));
    EXPECT_TRUE(g->matches("[1, 2]"));
    EXPECT_TRUE(g->matches("[\n" + std::string(20, ' ') + "1\n]"));
    EXPECT_TRUE(g->matches("[1]\n"));
    EXPECT_FALSE(g->matches("[\n" + std::string(21, ' ') + "1]"));
    EXPECT_FALSE(g->matches("[1,  2]"));
    EXPECT_FALSE(g->matches("[\n\n1]"));
    EXPECT_FALSE(g->matches(" [1]"));  // nothing before the value
}

TEST(JsonSchema, IntegerBoundsAreExactDigitRanges) {
    struct Bounds {
        const char *schema;
        int64_t lo, hi;  // inclusive
    };
    const int64_t kNone = 1000;  // beyond the values tried
    const Bounds all[] = {
        {R"({"minimum": 0, "maximum": 150})", 0, 150},
        {R"({"minimum": -5, "maximum": 5})", -5, 5},
        {R"({"minimum": 1, "maximum": 9})", 1, 9},
        {R"({"minimum": 10, "maximum": 99})", 10, 99},
        {R"({"minimum": -150, "maximum": -100})", -150, -100},
        {R"({"minimum": -250, "maximum": 37})", -250, 37},
        {R"({"minimum": 100, "maximum": 299})", 100, 299},
        {R"({"minimum": 101, "maximum": 289})", 101, 289},
        {R"({"minimum": -9, "maximum": 0})", -9, 0},
        {R"({"minimum": 0, "maximum": 0})", 0, 0},
        {R"({"minimum": 7, "maximum": 7})", 7, 7},
        {R"({"minimum": -10, "maximum": -10})", -10, -10},
        {R"({"minimum": 13})", 13, kNone},
        {R"({"minimum": -42})", -42, kNone},
        {R"({"maximum": -7})", -kNone, -7},
        {R"({"maximum": 200})", -kNone, 200},
        {R"({"maximum": 0})", -kNone, 0},
        {R"({"exclusiveMinimum": 0, "exclusiveMaximum": 100})", 1, 99},
        {R"({"exclusiveMinimum": -20, "maximum": 20, "minimum": -30})", -19, 20},
        {R"({"minimum": 1.5, "maximum": 99.5})", 2, 99},
        {R"({"exclusiveMinimum": 1.5, "exclusiveMaximum": 9.0})", 2, 8},
        {R"({"minimum": 5, "exclusiveMinimum": true, "maximum": 10, "exclusiveMaximum": true})", 6, 9},
    };
    for (const Bounds &b : all) {
        SCOPED_TRACE(b.schema);
        ordered_json schema = ordered_json::parse(b.schema);
        schema["type"] = "integer";
        const std::string gbnf = json_schema_to_gbnf(schema);
        SCOPED_TRACE(gbnf);
        std::shared_ptr<const Grammar> g;
        ASSERT_NO_THROW(g = Grammar::parse(gbnf));
        for (int64_t n = -300; n <= 300; ++n) {
            const bool in = n >= b.lo && n <= b.hi;
            EXPECT_EQ(g->matches(std::to_string(n)), in) << n;
            EXPECT_EQ(json_schema_violation(schema, n) == "", in) << n;
            if (n != 0) {  // a leading zero
                std::string text = std::to_string(n);
                text.insert(n < 0 ? 1 : 0, 1, '0');
                EXPECT_FALSE(g->matches(text)) << text;
            }
        }
    }
    // one-sided bounds stop at 16 digits, like an unbounded integer
    const auto g = Grammar::parse(json_schema_to_gbnf(ordered_json::parse(R"({"type": "integer", "minimum": 5})")));
    EXPECT_TRUE(g->matches("9999999999999999"));
    EXPECT_FALSE(g->matches("10000000000000000"));
    // bounds of large magnitude
    const auto big = Grammar::parse(json_schema_to_gbnf(
        ordered_json::parse(R"({"type": "integer", "minimum": -1234567890123, "maximum": 987654321098765})")));
    EXPECT_TRUE(big->matches("-1234567890123"));
    EXPECT_FALSE(big->matches("-1234567890124"));
    EXPECT_TRUE(big->matches("987654321098765"));
    EXPECT_FALSE(big->matches("987654321098766"));
    EXPECT_TRUE(big->matches("500000000000000"));
}

TEST(JsonSchema, UnsupportedConstraintsAreErrors) {
    struct Bad {
        const char *schema;
        std::vector<const char *> mentions;
    };
    const Bad all[] = {
        {R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})", {"'not'", "/properties/a"}},
        {R"({"if": {"type": "string"}, "then": {"minLength": 1}})", {"'if'", "the root"}},
        {R"({"type": "array", "uniqueItems": true})", {"'uniqueItems'"}},
        {R"({"type": "object", "patternProperties": {"^x": {}}})", {"'patternProperties'"}},
        {R"({"type": "integer", "multipleOf": 2})", {"'multipleOf'"}},
        {R"({"properties": {"a": {"$ref": "#/$defs/missing"}}})", {"#/$defs/missing", "/properties/a", "no definition"}},
        {R"({"$ref": "https://example.com/schema.json"})", {"https://example.com/schema.json", "not local"}},
        {R"({"type": "string", "pattern": "^(?=a)b$"})", {"pattern", "lookaround"}},
        {R"({"type": "string", "pattern": "^(a)\\1$"})", {"backreference"}},
        {R"({"type": "string", "pattern": "\\bword"})", {"word boundar"}},
        {R"({"type": "string", "pattern": "^(ab$"})", {"unterminated group"}},
        {R"({"type": "integer", "minimum": 10, "maximum": 5})", {"no integer", "10", "5"}},
        {R"({"type": "string", "minLength": 5, "maxLength": 2})", {"minLength", "maxLength"}},
        {R"({"type": "array", "minItems": 3, "maxItems": 2})", {"minItems", "maxItems"}},
        {R"({"type": "widget"})", {"'type'", "widget"}},
        {R"({"properties": {"a": false}, "required": ["a"]})", {"false", "/properties/a"}},
        {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", {"allOf", "conflicting", "type"}},
        {R"({"type": "object", "properties": {"a": {}}, "minProperties": 2})", {"minProperties"}},
        {R"({"type": "integer", "minimum": 1e30})", {"minimum", "range"}},
        {"[1, 2]", {"expected a schema", "array"}},
    };
    for (const Bad &b : all) {
        const std::string message = error_of(b.schema);
        ASSERT_FALSE(message.empty()) << b.schema;
        EXPECT_EQ(message.rfind("json schema: ", 0), 0u) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        for (const char *m : b.mentions) EXPECT_NE(message.find(m), std::string::npos) << message << " lacks " << m;
    }
}

TEST(JsonSchema, WarningsForWhatIsNotEnforced) {
    std::vector<std::string> warnings;
    const std::string gbnf = json_schema_to_gbnf(
        ordered_json::parse(R"({"type": "object", "properties": {"email": {"type": "string", "format": "email"},
            "price": {"type": "number", "minimum": 0, "maximum": 10}, "x": {"type": "string", "x-vendor": 1}}})"),
        &warnings);
    ASSERT_EQ(warnings.size(), 4u);
    EXPECT_NE(warnings[0].find("'email'"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("/properties/email"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[1].find("'minimum'"), std::string::npos) << warnings[1];
    EXPECT_NE(warnings[3].find("'x-vendor'"), std::string::npos) << warnings[3];
    const auto g = Grammar::parse(gbnf);
    EXPECT_TRUE(g->matches(R"({"email":"anything","price":2.5})"));
    EXPECT_TRUE(g->matches(R"({"price":0})"));
    EXPECT_FALSE(g->matches(R"({"price":-1})"));  // minimum >= 0: no sign, at least
    EXPECT_NO_THROW(json_schema_to_gbnf(ordered_json::parse(R"({"type": "string", "format": "email"})")));  // null warnings
    // a grammar spells {m,n} out, so very large maxima are not enforced
    warnings.clear();
    const auto long_text = Grammar::parse(
        json_schema_to_gbnf(ordered_json::parse(R"({"type": "string", "maxLength": 65536})"), &warnings));
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("'maxLength' 65536"), std::string::npos) << warnings[0];
    EXPECT_TRUE(long_text->matches("\"" + std::string(70000, 'a') + "\""));
    EXPECT_NE(error_of(R"({"type": "array", "minItems": 65536})").find("'minItems' 65536"), std::string::npos);
}

TEST(JsonSchema, RuleNamesFollowPropertiesAndOutputIsDeterministic) {
    const ordered_json schema = ordered_json::parse(
        R"({"type": "object", "properties": {"userName": {"type": "string", "maxLength": 8},
            "home address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^\\d{5}$"}}},
            "string": {"type": "object", "properties": {}}, "root": {"type": "array", "items": {"type": "integer", "minimum": 1}}},
            "required": ["userName"]})");
    const std::string gbnf = json_schema_to_gbnf(schema);
    EXPECT_EQ(gbnf, json_schema_to_gbnf(schema));
    EXPECT_EQ(gbnf.rfind("root ::= ", 0), 0u) << gbnf;
    for (const char *rule : {"\nusername ::= ", "\nusername-kv ::= ", "\nhome-address ::= ", "\nhome-address-zip ::= ",
                             "\nhome-address-zip-kv ::= ", "\nroot2 ::= ", "\nstring2 ::= "})
        EXPECT_NE(gbnf.find(rule), std::string::npos) << rule << " in\n" << gbnf;
    const auto g = Grammar::parse(gbnf);
    EXPECT_TRUE(g->matches(R"({"userName":"ann","home address":{"zip":"12345"},"string":{},"root":[1,2]})"));
    EXPECT_FALSE(g->matches(R"({"userName":"ann","home address":{"zip":"1234"}})"));
    EXPECT_FALSE(g->matches(R"({"userName":"ann","root":[0]})"));
}

TEST(JsonSchema, JsonObjectGrammar) {
    const auto g = Grammar::parse(toy::text::json_object_gbnf());
    EXPECT_TRUE(g->matches("{}"));
    EXPECT_TRUE(g->matches(R"({"a": [1, {"b": null}], "c": "d\n"})"));
    EXPECT_TRUE(g->matches("{\n  \"a\": true\n}\n"));
    EXPECT_FALSE(g->matches("[1]"));
    EXPECT_FALSE(g->matches("\"x\""));
    EXPECT_FALSE(g->matches(R"({"a": })"));
}

TEST(JsonSchema, CheckerReportsTheFirstViolation) {
    const ordered_json schema = ordered_json::parse(
        R"({"type": "object", "properties": {"age": {"type": "integer", "maximum": 150},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}}}, "required": ["age"]})");
    EXPECT_EQ(json_schema_violation(schema, ordered_json::parse(R"({"age": 3, "tags": ["a"]})")), "");
    EXPECT_EQ(json_schema_violation(schema, ordered_json::parse(R"({"age": 151})")), "/age: 151 is above maximum 150");
    EXPECT_NE(json_schema_violation(schema, ordered_json::parse(R"({})")).find("missing required property \"age\""),
              std::string::npos);
    EXPECT_NE(json_schema_violation(schema, ordered_json::parse(R"({"age": 1, "x": 2})")).find("\"x\" is not allowed"),
              std::string::npos);
    EXPECT_NE(json_schema_violation(schema, ordered_json::parse(R"({"age": 1, "tags": ["ok", "Bad"]})")).find("/tags/1"),
              std::string::npos);
    EXPECT_NE(json_schema_violation(schema, ordered_json::parse(R"({"age": "1"})")).find("expected integer, found string"),
              std::string::npos);
    EXPECT_EQ(json_schema_violation(schema, ordered_json::parse(R"({"age": 2.0})")), "");  // an integer by value
    EXPECT_NE(json_schema_violation(schema, ordered_json::parse("[]")), "");
    const ordered_json tree = ordered_json::parse(
        R"({"$defs": {"n": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}},
            "$ref": "#/$defs/n"})");
    EXPECT_EQ(json_schema_violation(tree, ordered_json::parse(R"({"kids": [{"kids": []}, {}]})")), "");
    EXPECT_NE(json_schema_violation(tree, ordered_json::parse(R"({"kids": [{"kids": [1]}]})")).find("/kids/0/kids/0"),
              std::string::npos);
}

TEST(JsonSchema, ABraceThatIsNoQuantifierIsText) {
    // fuzz finding: after a class, an unterminated "{2555555" (text, as in
    // JavaScript) left a repetition count of a million behind in the grammar
    auto g = toy::text::Grammar::parse(
        toy::text::json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "string", "pattern": "^[a-z]{2555555"})")));
    EXPECT_TRUE(g->matches(R"("q{2555555")"));
    EXPECT_FALSE(g->matches(R"("qq{2555555")"));
    EXPECT_FALSE(g->matches(R"("q")"));
}

TEST(JsonSchema, DeepNestingIsAnErrorNotAStackOverflow) {
    // fuzz finding: a pattern of thousands of nested groups overflowed the stack
    // of the recursive pattern parser; schemas nest by recursion too
    auto error_of = [](const auto &f) {
        try {
            f();
        } catch (const toy::Error &e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const std::string pattern = std::string(20000, '(') + "a" + std::string(20000, ')');
    const auto deep_pattern = nlohmann::ordered_json{{"type", "string"}, {"pattern", pattern}};
    EXPECT_NE(error_of([&] { toy::text::json_schema_to_gbnf(deep_pattern); }).find("groups nested more than 100 deep"),
              std::string::npos);
    nlohmann::ordered_json deep_schema = {{"type", "integer"}};
    for (int i = 0; i < 5000; ++i) deep_schema = {{"type", "array"}, {"items", deep_schema}};
    EXPECT_NE(error_of([&] { toy::text::json_schema_to_gbnf(deep_schema); }).find("schemas nested more than 100 deep"),
              std::string::npos);
    // 40 levels are fine
    const std::string ok = std::string(40, '(') + "a" + std::string(40, ')');
    auto g = toy::text::Grammar::parse(toy::text::json_schema_to_gbnf({{"type", "string"}, {"pattern", ok}}));
    EXPECT_TRUE(g->matches("\"a\""));
}

// An object's properties make a grammar in proportion to their number: one
// expression per optional property that repeated all the later ones made
// 10 MB of grammar in 4.6 s for 1000 of them and 44 MB in 46 s for 2000 (a
// request body of 60 KB held a server slot that long), nested deeper than a
// grammar may nest (so more than about 100 could not be used at all); the
// required ones were looked up in a list (quadratic).
TEST(JsonSchema, ManyPropertiesMakeAGrammarInProportion) {
    ordered_json props = ordered_json::object(), required = ordered_json::array();
    for (int i = 0; i < 1000; ++i) props[fmt::format("p{}", i)] = {{"type", "integer"}};
    const std::string gbnf = json_schema_to_gbnf({{"type", "object"}, {"properties", props}});
    EXPECT_LT(gbnf.size(), 1000u * 200) << "bytes of grammar";
    auto g = Grammar::parse(gbnf);
    EXPECT_TRUE(g->matches(R"({"p3": 1, "p999": 2})"));
    EXPECT_TRUE(g->matches("{}"));
    EXPECT_TRUE(g->matches(R"({"p0":0,"p1":1,"p998":998,"p999":999})"));
    EXPECT_FALSE(g->matches(R"({"p999": 2, "p3": 1})")) << "properties come in their order";
    EXPECT_FALSE(g->matches(R"({"p3": 1, "p3": 1})"));
    for (int i = 0; i < 20000; ++i) {
        props[fmt::format("q{}", i)] = {{"type", "boolean"}};
        required.push_back(fmt::format("q{}", i));
    }
    const std::string all = json_schema_to_gbnf({{"type", "object"}, {"properties", props}, {"required", required}});
    EXPECT_LT(all.size(), 21000u * 200) << "bytes of grammar";
    std::string text = R"({"p5": 5)";
    for (int i = 0; i < 20000; ++i) text += fmt::format(", \"q{}\": true", i);
    EXPECT_TRUE(Grammar::parse(all)->matches(text + "}"));
    EXPECT_FALSE(Grammar::parse(all)->matches(R"({"p5": 5})")) << "the required ones are missing";
}
