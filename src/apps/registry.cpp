// The command registry (cli.h): each cmd_*.cpp registers itself here; and the
// generated-text printer that main ends the line of before an error.
#include "apps/cli.h"

#include <cstdio>

namespace toy::cli {

std::vector<Registered> &registry() {
    static std::vector<Registered> commands;
    return commands;
}

Command::Command(std::string name, std::string description, Setup setup) {
    registry().push_back({std::move(name), std::move(description), std::move(setup)});
}

namespace {
bool g_mid_line = false;  // the last text printed did not end a line
}

void print_text(std::string_view s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    g_mid_line = s.back() != '\n';
}

void end_text_line() {
    if (!g_mid_line) return;
    std::fputc('\n', stdout);
    std::fflush(stdout);
    g_mid_line = false;
}

}  // namespace toy::cli
