#include "runtime/devices.h"

#include "core/error.h"
#include "core/lists.h"
#include "core/remote_wait.h"

#include <ggml-backend.h>
#if defined(TOY_HAVE_RPC)
#include <ggml-rpc.h>
#endif

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace toy {
namespace {

// host and port of "host:port" ("[v6]:port" too); throws toy::Error.
std::pair<std::string, std::string> split_endpoint(const std::string &e) {
    const size_t colon = e.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == e.size()) {
        fail("--rpc: expected host:port, found '{}'", e);
    }
    std::string host = e.substr(0, colon), port = e.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    char *end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || p < 1 || p > 65535) fail("--rpc {}: expected a port 1..65535, found '{}'", e, port);
    return {host, port};
}

// Whether a TCP connection to host:port opens within timeout_ms; "" or why not.
std::string try_connect(const std::string &host, const std::string &port, int timeout_ms) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) return gai_strerror(rc);
    std::string why = "no usable address";
    for (addrinfo *a = res; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            rc = poll(&p, 1, timeout_ms);
            if (rc == 1) {
                int err = 0;
                socklen_t n = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n);
                errno = err;
                rc = err == 0 ? 0 : -1;
            } else {
                errno = rc == 0 ? ETIMEDOUT : errno;
                rc = -1;
            }
        }
        if (rc != 0) why = std::strerror(errno);
        close(fd);
        if (rc == 0) {
            freeaddrinfo(res);
            return "";
        }
    }
    freeaddrinfo(res);
    return why;
}

const char *type_name(enum ggml_backend_dev_type t) {
    switch (t) {
    case GGML_BACKEND_DEVICE_TYPE_CPU: return "CPU";
    case GGML_BACKEND_DEVICE_TYPE_GPU: return "GPU";
    case GGML_BACKEND_DEVICE_TYPE_IGPU: return "iGPU";
    default: return "accelerator";
    }
}

}  // namespace

void add_rpc_servers(const std::string &list, std::chrono::milliseconds timeout) {
    std::vector<std::string> endpoints = split_list(list);
    for (const std::string &e : endpoints)
        if (e.empty()) fail("--rpc: expected host:port[,host:port...], found '{}'", list);
    // each server once per process (ggml would list a server added twice twice)
    static auto *added = new std::vector<std::string>;
    std::erase_if(endpoints, [](const std::string &e) { return std::find(added->begin(), added->end(), e) != added->end(); });
    for (const std::string &e : endpoints) {
        const auto [host, port] = split_endpoint(e);
        if (std::string why = try_connect(host, port, 3000); !why.empty()) fail("RPC server {}: {}", e, why);
    }
#if defined(TOY_HAVE_RPC)
    // ggml's RPC client writes to its sockets with plain send(): a server that
    // died would end this process with SIGPIPE, silently. Ignored, the write
    // fails and ggml stops with a message (one line from the CLI, main.cpp).
    if (!endpoints.empty()) std::signal(SIGPIPE, SIG_IGN);
    std::string all;  // the message names every server: which one stalled, ggml does not say
    for (const std::vector<std::string> *v : {added, &endpoints})
        for (const std::string &e : *v) all += (all.empty() ? "" : ",") + e;
    set_remote_wait_limit(timeout, all);
    for (const std::string &e : endpoints) {
        RemoteWait wait("connecting");  // a server that accepts connections but never answers
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(e.c_str());
        if (!reg) fail("RPC server {}: ggml could not add it (a different protocol version?)", e);
        ggml_backend_register(reg);
        // ggml keeps its servers and their devices' buffer types for the whole
        // process but in statics that are destroyed before the leak checker
        // looks: keep them reachable
        static auto *kept = new std::vector<const void *>;
        kept->push_back(reg);
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
            kept->push_back(ggml_backend_dev_buffer_type(ggml_backend_reg_dev_get(reg, i)));
        }
        added->push_back(e);
    }
#else
    fail("this toy was built without ggml's RPC backend (configure with -DTOY_RPC=ON)");
#endif
}

std::vector<DeviceInfo> devices() {
    std::vector<DeviceInfo> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        DeviceInfo info{ggml_backend_dev_name(d), ggml_backend_dev_description(d), type_name(ggml_backend_dev_type(d))};
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(d);
        if (reg && std::strcmp(ggml_backend_reg_name(reg), "RPC") == 0) info.type = "RPC";
        ggml_backend_dev_memory(d, &info.free, &info.total);
        out.push_back(std::move(info));
    }
    return out;
}

}  // namespace toy
