// Where a command's input text comes from, one rule for every command, as in
// llama.cpp: -p TEXT, -f FILE (`-f -`: standard input) or --tokens IDS;
// backslash escapes (\n, \t, \xHH, ...) processed unless --no-escape.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace toy::cli {

// \n \r \t \' \" \\ and \xHH; any other backslash sequence stays as written.
std::string process_escapes(const std::string &in);

// A file's bytes, or standard input's for "-"; `flag` names the flag in errors.
std::string read_input_file(const std::string &path, const std::string &flag);

// Token ids as `1,2,3`, `1 2 3` or `[1, 2, 3]` (what tokenize --ids and
// run --tokens print); throws toy::Error naming `flag`.
std::vector<int32_t> parse_id_list(const std::string &text, const std::string &flag);

struct PromptFlags {
    std::string prompt, file, tokens;
    bool no_escape = false;
    CLI::Option *prompt_opt = nullptr, *file_opt = nullptr, *tokens_opt = nullptr;
    CLI::Option *stdin_opt = nullptr;  // a command's own --stdin flag (as -f -), when it has one

    // -p, -f, --no-escape, and --tokens when `with_tokens`.
    void add_to(CLI::App &app, bool with_tokens);
    // How many sources were given (an empty -p counts).
    size_t given() const;
    // Exactly one source given (at most one when not `required`); else an
    // error naming what was given.
    void check_one(bool required = true) const;
    bool as_ids() const { return tokens_opt && tokens_opt->count() > 0; }
    // The text of -p or -f, escapes processed unless --no-escape.
    std::string text() const;
    // The ids of --tokens.
    std::vector<int32_t> ids() const { return parse_id_list(tokens, "--tokens"); }
};

}  // namespace toy::cli
