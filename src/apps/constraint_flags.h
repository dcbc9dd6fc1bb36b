// Constrained output flags, llama.cpp's: --grammar GBNF, --grammar-file FILE,
// -j/--json-schema SCHEMA, -jf/--json-schema-file FILE (at most one).
#pragma once

#include "text/grammar.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace toy::cli {

struct ConstraintFlags {
    std::string grammar, grammar_file, json_schema, json_schema_file;

    void add_to(CLI::App &app);
    bool given() const { return !grammar.empty() || !grammar_file.empty() || !json_schema.empty() || !json_schema_file.empty(); }
    // The grammar the flags ask for, null when none; a syntax error, an
    // unreadable file or a schema toy cannot honour is a toy::Error that
    // names the flag. Warnings (unsupported string formats) go to stderr.
    std::shared_ptr<const text::Grammar> load(const text::Vocab &vocab) const;
};

}  // namespace toy::cli
