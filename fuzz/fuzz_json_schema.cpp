// fuzz_json_schema: JSON Schema -> GBNF (text/json_schema.h) as `toy run
// --json-schema` and the server's response_format take schemas. The input is
// a JSON text; a schema either converts or throws toy::Error, and every GBNF
// the converter emits must parse with Grammar::parse (one that does not is a
// finding: the user would get an internal error). For a schema that is just
// {"const": X} or {"enum": [...]}, the grammar must match each value's
// compact JSON text.
#include "fuzz_common.h"

#include "core/error.h"
#include "text/grammar.h"
#include "text/json_schema.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace toy;

namespace {
[[noreturn]] void finding(const char *what, const std::string &schema, const std::string &gbnf, const char *detail) {
    std::fprintf(stderr, "fuzz_json_schema: %s\nschema: %s\ngbnf:\n%s\n%s\n", what, schema.c_str(), gbnf.c_str(), detail);
    std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    (void)text::Grammar::parse(text::json_object_gbnf());
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(data, data + size, nullptr, false);
    if (schema.is_discarded()) return 0;
    std::string gbnf;
    std::vector<std::string> warnings;
    try {
        gbnf = text::json_schema_to_gbnf(schema, &warnings);
    } catch (const Error &) {
        return 0;
    }
    std::shared_ptr<const text::Grammar> g;
    try {
        g = text::Grammar::parse(gbnf);
    } catch (const Error &e) {
        finding("the converter's GBNF does not parse", schema.dump(), gbnf, e.what());
    }
    if (schema.is_object() && schema.size() == 1) {
        std::vector<nlohmann::ordered_json> values;
        if (schema.contains("const")) values.push_back(schema["const"]);
        if (schema.contains("enum") && schema["enum"].is_array()) {
            for (const auto &v : schema["enum"]) values.push_back(v);
        }
        for (const auto &v : values) {
            const std::string text = v.dump();
            if (!g->matches(text)) finding("the grammar rejects a const/enum value", schema.dump(), gbnf, text.c_str());
        }
    }
    return 0;
}
