// toy: command-line entry point. Subcommands register themselves (cli.h).
#include "apps/cli.h"
#include "core/error.h"
#include "core/ggml_log.h"
#include "core/progress.h"

#include <ggml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

// llama.cpp's multi-letter single-dash spellings that have another long name
// in toy (llama-server's -np, llama-finetune's -lr, -wd, -epochs, ...).
const std::map<std::string, std::string> kAliases = {
    {"-ub", "--ubatch-size"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-fa", "--flash-attn"},
    {"-sys", "--system-prompt"}, {"-lr", "--learning-rate"}, {"-lr-min", "--lr-min"}, {"-wd", "--weight-decay"},
    {"-epochs", "--epochs"}, {"-opt", "--optimizer"}, {"-val-split", "--val-split"}, {"-np", "--parallel"},
    {"-no-cnv", "--no-conversation"}, {"-st", "--single-turn"}, {"-md", "--model-draft"},
    {"-ngl", "--n-gpu-layers"}, {"-sm", "--split-mode"}, {"-ts", "--tensor-split"}, {"-mg", "--main-gpu"},
    {"-dev", "--device"},
};

// ggml stops the process where it cannot go on: a failed assertion, or an
// RPC server that died or closed the connection mid-run. Say it on one line
// as every other error ("toy: error: ggml: ..."), and exit 1 instead of
// dumping core. (Temporary files of an interrupted write are removed by the
// next write to the same target, core/atomic_file.h.)
void on_ggml_abort(const char *message) {
    std::string m = message;
    // "/path/to/ggml-rpc.cpp:354: text" -> "text (ggml-rpc.cpp:354)"
    const size_t colon = m.find(": ");
    if (colon != std::string::npos) {
        std::string where = m.substr(0, colon);
        where = where.substr(where.find_last_of('/') + 1);
        m = m.substr(colon + 2) + " (" + where + ")";
    }
    std::replace(m.begin(), m.end(), '\n', ' ');
    while (!m.empty() && m.back() == ' ') m.pop_back();
    if (const std::string before = toy::take_held_ggml_error(); !before.empty()) m += "; before it: " + before;
    toy::cli::end_text_line();
    std::fflush(stdout);
    std::fprintf(stderr, "toy: error: ggml: %s\n", m.c_str());
    std::_Exit(1);
}

size_t edit_distance(const std::string &a, const std::string &b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

[[noreturn]] void unknown_command(const std::string &name) {
    std::string best;
    size_t best_d = 3;  // suggest only near misses
    for (const auto &c : toy::cli::registry()) {
        const size_t d = edit_distance(name, c.name);
        if (d < best_d || (c.name.rfind(name, 0) == 0 && best.empty())) best = c.name, best_d = d;
    }
    toy::fail("unknown command '{}'{} (see toy --help)", name, best.empty() ? "" : fmt::format("; did you mean '{}'?", best));
}

// The arguments as CLI11 should see them. llama.cpp spells many long flags
// with one dash (-ngl, -ctk, -no-cnv), which CLI11 would read as a short
// flag with the rest as its value (-n "gl"). So a single-dash word of two or
// more characters in a flag position is a long flag: an alias above, or the
// command's own --word, or else an error naming it.
std::vector<std::string> normalize_args(int argc, char **argv, CLI::App &app) {
    std::vector<std::string> args(argv + 1, argv + argc);
    CLI::App *sub = nullptr;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        if (!sub) {
            if (!a.empty() && a[0] == '-') continue;  // toy --help, --version
            const auto &reg = toy::cli::registry();
            if (std::none_of(reg.begin(), reg.end(), [&](const auto &c) { return c.name == a; })) unknown_command(a);
            sub = app.get_subcommand(a);
            continue;
        }
        if (a == "--") break;
        if (a.size() < 2 || a[0] != '-' || std::isdigit((unsigned char)a[1]) || a[1] == '.') continue;  // values
        std::string flag = a.substr(0, a.find('='));
        const bool inline_value = flag.size() < a.size();
        if (flag[1] != '-' && flag.size() > 2) {
            auto alias = kAliases.find(flag);
            if (alias != kAliases.end()) {
                flag = alias->second;
            } else if (sub->get_option_no_throw("-" + flag)) {
                flag = "-" + flag;
            } else {
                toy::fail("unknown flag '{}' for toy {} (see toy {} --help)", flag, sub->get_name(), sub->get_name());
            }
            args[i] = inline_value ? flag + a.substr(a.find('=')) : flag;
        }
        const CLI::Option *opt = sub->get_option_no_throw(flag);
        if (opt && !inline_value) i += (size_t)std::max(0, opt->get_items_expected_min());  // its values are not flags
    }
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    return args;
}

// A flag of one value given again takes the last value, as llama.cpp's tools
// do (a script's defaults, then the user's own), where CLI11 would refuse
// it. Flags of several values (--lora, -r, ...) keep every one.
void last_value_wins(CLI::App &app) {
    for (CLI::Option *opt : app.get_options()) {
        if (opt->get_items_expected_max() == 1 && opt->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw) {
            opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        }
    }
    for (CLI::App *sub : app.get_subcommands({})) last_value_wins(*sub);
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"toy: run and train transformer language models stored as GGUF"};
    app.name("toy");
    app.require_subcommand(1);
    app.option_defaults()->always_capture_default();  // --help shows each option's default
    bool quiet = false;
    app.add_flag("-q,--quiet", quiet, "no progress bars on long work (loading, writing models)");
    app.set_version_flag("--version", "toy 0.1.0 (ggml 0.25.1 from node-llama-cpp 3.22.1)");

    auto &commands = toy::cli::registry();
    std::sort(commands.begin(), commands.end(), [](auto &a, auto &b) { return a.name < b.name; });
    std::map<CLI::App *, toy::cli::Handler> handlers;
    for (auto &c : commands) {
        CLI::App *sub = app.add_subcommand(c.name, c.description);
        sub->fallthrough();  // --quiet after the command name
        handlers[sub] = c.setup(*sub);
    }
    toy::cli::check_numeric_flags(app);
    last_value_wins(app);
    ggml_set_abort_callback(on_ggml_abort);
    toy::backend_start_notes();  // held: said by `toy devices` and -ngl's error, not at every exit
    try {
        auto args = normalize_args(argc, argv, app);
        app.parse(args);
    } catch (const toy::Error &e) {
        std::fprintf(stderr, "toy: error: %s\n", e.what());
        return 1;
    } catch (const CLI::Success &e) {
        return app.exit(e);  // --help, --version
    } catch (const CLI::ParseError &e) {
        // bad flags: one line, exit code 1, like every other error
        std::string what = e.what();
        std::replace(what.begin(), what.end(), '\n', ' ');
        std::fprintf(stderr, "toy: error: %s (see --help)\n", what.c_str());
        return 1;
    }
    toy::Progress::set_quiet(quiet);
    try {
        for (auto &[sub, handler] : handlers) {
            if (sub->parsed()) return handler();
        }
    } catch (const toy::Error &e) {
        toy::cli::end_text_line();
        // what ggml logged as an error on the way (an allocation it could not make) joins the line
        std::string message = e.what();
        if (const std::string ggml = toy::take_held_ggml_error(); !ggml.empty()) message += " (ggml: " + ggml + ")";
        std::fprintf(stderr, "toy: error: %s\n", message.c_str());
        return 1;
    } catch (const std::bad_alloc &) {
        toy::cli::end_text_line();
        std::fprintf(stderr, "toy: error: out of memory\n");
        return 1;
    } catch (const std::exception &e) {
        // not a toy::Error: a bug, but still one line and a clean exit
        toy::cli::end_text_line();
        std::fprintf(stderr, "toy: error: internal: %s\n", e.what());
        return 1;
    }
    return 0;
}
