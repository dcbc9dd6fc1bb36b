#include "apps/constraint_flags.h"

#include "apps/prompt_input.h"
#include "core/error.h"
#include "core/json.h"
#include "text/json_schema.h"

#include <fmt/format.h>

namespace toy::cli {

void ConstraintFlags::add_to(CLI::App &app) {
    const char *group = "Constrained output (one of)";
    app.add_option("--grammar", grammar, "the output is a sentence of this GBNF grammar (llama.cpp's format)")->group(group);
    app.add_option("--grammar-file", grammar_file, "the same, from a file (-: standard input)")->group(group);
    app.add_option("-j,--json-schema", json_schema, "the output is JSON valid under this JSON Schema ('{}': any JSON value)")
        ->group(group);
    app.add_option("--jf,--json-schema-file", json_schema_file, "the same, from a file (-: standard input)")->group(group);
}

std::shared_ptr<const text::Grammar> ConstraintFlags::load(const text::Vocab &vocab) const {
    if (!grammar.empty() + !grammar_file.empty() + !json_schema.empty() + !json_schema_file.empty() > 1) {
        fail("give only one of --grammar, --grammar-file, --json-schema and --json-schema-file");
    }
    std::string flag, gbnf;
    try {
        if (!grammar.empty() || !grammar_file.empty()) {
            flag = grammar_file.empty() ? "--grammar" : "--grammar-file";
            gbnf = grammar_file.empty() ? grammar : read_input_file(grammar_file, flag);
        } else if (!json_schema.empty() || !json_schema_file.empty()) {
            flag = json_schema_file.empty() ? "--json-schema" : "--json-schema-file";
            const std::string text = json_schema_file.empty() ? json_schema : read_input_file(json_schema_file, flag);
            nlohmann::ordered_json schema;
            try {
                schema = parse_json<nlohmann::ordered_json>(text, "the schema");
            } catch (const nlohmann::json::exception &e) {
                fail("the schema is not JSON: {}", e.what());
            }
            std::vector<std::string> warnings;
            gbnf = text::json_schema_to_gbnf(schema, &warnings);
            for (const std::string &w : warnings) fmt::print(stderr, "toy: warning: {}: {}\n", flag, w);
        } else {
            return nullptr;
        }
        return text::Grammar::parse(gbnf, "root", &vocab);
    } catch (const Error &e) {
        if (std::string_view(e.what()).starts_with(flag)) throw;
        fail("{}: {}", flag, e.what());
    }
}

}  // namespace toy::cli
