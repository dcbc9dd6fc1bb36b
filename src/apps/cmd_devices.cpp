// toy devices [--rpc host:port,...]: the compute devices ggml knows here (the
// CPU, with the kernel set toy uses on it) and those of the RPC servers given,
// with their memory, as llama.cpp's --list-devices shows them.
#include "apps/cli.h"
#include "apps/session_options.h"
#include "runtime/devices.h"

#include <cstdio>
#include <memory>

namespace {

struct Options {
    std::string rpc;
};

int run_devices(const Options &o) {
    if (!o.rpc.empty()) toy::add_rpc_servers(o.rpc);
    toy::cli::print_devices();
    return 0;
}

toy::cli::Command reg("devices", "List the compute devices: this CPU, and ggml RPC servers given with --rpc",
                      [](CLI::App &app) {
                          auto o = std::make_shared<Options>();
                          app.add_option("--rpc", o->rpc, "RPC servers host:port[,host:port...] (toy rpc-server, "
                                                          "llama.cpp's rpc-server)");
                          return [o] { return run_devices(*o); };
                      });

}  // namespace
