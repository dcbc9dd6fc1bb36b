// The compute devices ggml knows in this process: the CPU, and the devices of
// ggml RPC servers added with add_rpc_servers (`--rpc host:port,...`, as
// llama.cpp names it). Listing them is `toy devices` (or --list-devices);
// model/split.h puts blocks on them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace toy {

struct DeviceInfo {
    std::string name;         // ggml's device name: "CPU", "RPC0", "CUDA0", ...
    std::string description;  // the CPU's model, a GPU's name, an RPC server's host:port
    std::string type;         // "CPU", "GPU", "RPC" (a remote device of any kind)
    size_t free = 0, total = 0;  // bytes of memory the device reports
};

// How long toy waits for an RPC server's answer by default (--rpc-timeout):
// long enough for a slow server's batch of a large model, short of a hang.
inline constexpr std::chrono::seconds kRpcTimeoutDefault{120};

// "host:port[,host:port...]": checks that each server accepts a connection
// (3 s at most each) and makes its devices known to ggml. Throws toy::Error
// naming the first server that is malformed or cannot be reached, before
// ggml talks to any of them. A server added before is skipped. From then on
// a server that does not answer within `timeout` (0: wait forever) ends the
// process with one error line (core/remote_wait.h).
void add_rpc_servers(const std::string &list, std::chrono::milliseconds timeout = kRpcTimeoutDefault);

// Every device ggml knows now, in its order.
std::vector<DeviceInfo> devices();

}  // namespace toy
