// The command registry (cli.h): each cmd_*.cpp registers itself here.
#include "apps/cli.h"

namespace toy::cli {

std::vector<Registered> &registry() {
    static std::vector<Registered> commands;
    return commands;
}

Command::Command(std::string name, std::string description, Setup setup) {
    registry().push_back({std::move(name), std::move(description), std::move(setup)});
}

}  // namespace toy::cli
