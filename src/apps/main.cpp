// toy: command-line entry point. Subcommands register themselves (cli.h).
#include "apps/cli.h"
#include "core/error.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace toy::cli {

std::vector<Registered> &registry() {
    static std::vector<Registered> commands;
    return commands;
}

Command::Command(std::string name, std::string description, Setup setup) {
    registry().push_back({std::move(name), std::move(description), std::move(setup)});
}

std::vector<int32_t> parse_id_list(const std::string &text, const std::string &flag) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < text.size()) {
        if (text[i] == ',' || text[i] == ' ' || text[i] == '\t' || text[i] == '\n') { ++i; continue; }
        size_t j = i;
        if (text[j] == '-') ++j;
        while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
        if (j == i || (j == i + 1 && text[i] == '-') ||
            (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != '\t' && text[j] != '\n')) {
            fail("{}: expected comma-separated token ids, found '{}'", flag, text.substr(i, 20));
        }
        long long v = std::stoll(text.substr(i, j - i));
        if (v < INT32_MIN || v > INT32_MAX) fail("{}: token id {} is out of range", flag, v);
        ids.push_back((int32_t)v);
        i = j;
    }
    return ids;
}

}  // namespace toy::cli

namespace {

// llama.cpp spells some flags as multi-letter single-dash names (-ub, -ctk,
// -ctv, -fa, -sys, llama-server's -np, and llama-finetune's -lr, -wd, -epochs, -opt, -val-split);
// CLI11 does not, so they are rewritten to the long names.
std::vector<std::string> normalize_args(int argc, char **argv) {
    static const std::map<std::string, std::string> kAliases = {
        {"-ub", "--ubatch-size"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-fa", "--flash-attn"},
        {"-sys", "--system-prompt"}, {"-lr", "--learning-rate"}, {"-lr-min", "--lr-min"}, {"-wd", "--weight-decay"},
        {"-epochs", "--epochs"}, {"-opt", "--optimizer"}, {"-val-split", "--val-split"}, {"-np", "--parallel"},
    };
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
        auto it = kAliases.find(argv[i]);
        args.push_back(it != kAliases.end() ? it->second : argv[i]);
    }
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    return args;
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"toy: run and train transformer language models stored as GGUF"};
    app.name("toy");
    app.require_subcommand(1);
    app.set_version_flag("--version", "toy 0.1.0 (ggml 0.25.1 from node-llama-cpp 3.22.1)");

    auto &commands = toy::cli::registry();
    std::sort(commands.begin(), commands.end(), [](auto &a, auto &b) { return a.name < b.name; });
    std::map<CLI::App *, toy::cli::Handler> handlers;
    for (auto &c : commands) {
        CLI::App *sub = app.add_subcommand(c.name, c.description);
        handlers[sub] = c.setup(*sub);
    }
    try {
        auto args = normalize_args(argc, argv);
        app.parse(args);
    } catch (const CLI::Success &e) {
        return app.exit(e);  // --help, --version
    } catch (const CLI::ParseError &e) {
        // bad flags: one line, exit code 1, like every other error
        std::string what = e.what();
        std::replace(what.begin(), what.end(), '\n', ' ');
        std::fprintf(stderr, "toy: error: %s (see --help)\n", what.c_str());
        return 1;
    }
    try {
        for (auto &[sub, handler] : handlers) {
            if (sub->parsed()) return handler();
        }
    } catch (const toy::Error &e) {
        std::fprintf(stderr, "toy: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc &) {
        std::fprintf(stderr, "toy: error: out of memory\n");
        return 1;
    } catch (const std::exception &e) {
        // not a toy::Error: a bug, but still one line and a clean exit
        std::fprintf(stderr, "toy: error: internal: %s\n", e.what());
        return 1;
    }
    return 0;
}
