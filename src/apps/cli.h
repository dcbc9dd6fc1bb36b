// Subcommand registry for the `toy` executable. Each command lives in its own
// cmd_*.cpp file and registers itself with a static Command object, so adding
// a command never touches a shared file:
//
//   static toy::cli::Command reg("inspect", "Describe a GGUF file", [](CLI::App &app) {
//       auto opts = std::make_shared<Options>();
//       app.add_option("file", opts->path)->required();
//       return [opts] { return run_inspect(*opts); };   // exit code
//   });
#pragma once

#include "apps/prompt_input.h"
#include "text/sampler.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace toy::cli {

using Handler = std::function<int()>;
using Setup = std::function<Handler(CLI::App &)>;

struct Command {
    Command(std::string name, std::string description, Setup setup);
};

struct Registered {
    std::string name;
    std::string description;
    Setup setup;
};
std::vector<Registered> &registry();

// Checks the text of every numeric flag (type INT, UINT or FLOAT, or such
// a value of a flag that takes several, as --lora-scaled's SCALE) of
// `app` and its commands before CLI11 converts it, which CLI11 2.1 does
// loosely: an empty value was 0, a negative unsigned wrapped, a number past
// 64 bits saturated, 010 was octal and 1e39 infinity. Call it after the
// flags are added.
void check_numeric_flags(CLI::App &app);

// Adds --temp, --top-k, --top-p, --min-p, penalties and -s to a command;
// their values' ranges (text::check_params) are checked once it is parsed.
void add_sampling_flags(CLI::App &app, toy::text::SamplerParams &s);
// -l / --logit-bias's TOKEN+BIAS or TOKEN-BIAS (BIAS may be inf); throws toy::Error.
std::pair<int32_t, float> parse_logit_bias(const std::string &v);

// Generated text to stdout as it comes (flushed). An error raised while text
// streams (an ambiguous grammar, a failed device) is printed by main, which
// first calls end_text_line: a newline when the text stopped mid-line, so
// that the error's one line stands alone.
void print_text(std::string_view s);
void end_text_line();

}  // namespace toy::cli
