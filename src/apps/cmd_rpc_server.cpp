// toy rpc-server [--host 127.0.0.1] [--port 50052] [-t N] [--cache DIR] [--mem MB]
//
// ggml's RPC server over this machine's CPU backend: a client (ggml's RPC backend, as
// llama.cpp's tools built with GGML_RPC use it) allocates buffers
// on it and runs graphs there. The protocol is ggml's own, so toy's server and
// llama.cpp's rpc-server are interchangeable. It has no authentication or
// encryption: anyone who reaches the port can read and write this process's
// buffers, so the default address is the loopback one.
//
// --mem MB: the memory the server reports to clients (they share out blocks
// by it, and check that theirs fit) instead of the machine's free memory.
#include "apps/cli.h"
#include "core/error.h"
#include "core/parallel.h"

#include <ggml-backend.h>
#if defined(TOY_HAVE_RPC)
#include <ggml-rpc.h>
// ggml's device struct (its function table), for a CPU device that reports
// --mem: ggml has no public way to say how much a server offers
#include <ggml-backend-impl.h>
#endif

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

namespace {

struct Options {
    std::string host = "127.0.0.1";
    int port = 50052;
    int threads = 0;  // 0: all hardware threads
    std::string cache;
    int64_t mem_mb = 0;  // 0: the machine's memory
};

#if defined(TOY_HAVE_RPC)
// The CPU device with its memory reported as --mem MB (free and total, as
// llama.cpp's rpc-server --mem did). Everything else is the CPU device's:
// same context, same functions.
// (The server asks the backend for its device, so the backends it starts
// name this one.)
size_t g_mem_bytes = 0;
ggml_backend_device g_limited;
ggml_backend_t (*g_cpu_init)(ggml_backend_dev_t, const char *) = nullptr;

void limited_memory(ggml_backend_dev_t, size_t *free, size_t *total) { *free = *total = g_mem_bytes; }

ggml_backend_t limited_init(ggml_backend_dev_t dev, const char *params) {
    ggml_backend_t b = g_cpu_init(dev, params);
    if (b) b->device = &g_limited;
    return b;
}

ggml_backend_dev_t limited_cpu(ggml_backend_dev_t cpu, int64_t mb) {
    g_mem_bytes = (size_t)mb << 20;
    g_limited = *cpu;
    g_cpu_init = cpu->iface.init_backend;
    g_limited.iface.get_memory = limited_memory;
    g_limited.iface.init_backend = limited_init;
    return &g_limited;
}
#endif

bool is_loopback(const std::string &host) {
    return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Whether host:port can be listened on, tried before ggml's server does (its
// own failure is a line of its own without the reason); throws toy::Error.
void check_listenable(const std::string &host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
        toy::fail("--host {}: {}", host, gai_strerror(rc));
    }
    std::string why;
    bool ok = false;
    for (addrinfo *a = res; a && !ok; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        ok = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
        if (!ok) why = std::strerror(errno);
        close(fd);
    }
    freeaddrinfo(res);
    if (!ok) toy::fail("cannot listen on {}:{}: {}", host, port, why.empty() ? "no usable address" : why);
}

int run_rpc_server(const Options &o) {
#if defined(TOY_HAVE_RPC)
    if (o.host.empty()) toy::fail("--host: expected an address, found nothing");
    if (o.port < 1 || o.port > 65535) toy::fail("--port: expected 1..65535, found {}", o.port);
    if (o.threads < 0) toy::fail("-t: expected a thread count >= 0, found {}", o.threads);
    if (o.mem_mb < 0 || o.mem_mb > (int64_t{1} << 40)) toy::fail("--mem: expected MiB >= 0 (0: the machine's), found {}", o.mem_mb);
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) toy::fail("no CPU backend in this build");
    if (o.mem_mb > 0) cpu = limited_cpu(cpu, o.mem_mb);
    check_listenable(o.host, o.port);
    if (!is_loopback(o.host)) {
        std::fprintf(stderr,
                     "toy: warning: serving on %s, not a loopback address: ggml's RPC protocol has no authentication or "
                     "encryption, so anyone who reaches %s:%d can use this machine's memory and CPU\n",
                     o.host.c_str(), o.host.c_str(), o.port);
    }
    if (!o.cache.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(o.cache, ec);
        if (ec) toy::fail("--cache {}: {}", o.cache, ec.message());
    }
    const int threads = toy::thread_count(o.threads);
    const std::string endpoint = (o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host) + ":" +
                                 std::to_string(o.port);
    std::fflush(stdout);
    // serves clients one after another until the process is stopped; returns only when it cannot start
    ggml_backend_rpc_start_server(endpoint.c_str(), o.cache.empty() ? nullptr : o.cache.c_str(), (size_t)threads, 1, &cpu);
    toy::fail("could not serve on {} (is the port in use, or the address not this machine's?)", endpoint);
#else
    (void)o;
    toy::fail("this toy was built without ggml's RPC backend (configure with -DTOY_RPC=ON)");
#endif
}

toy::cli::Command reg("rpc-server",
                      "Serve this machine's CPU to ggml RPC clients (llama.cpp --rpc); loopback by default",
                      [](CLI::App &app) {
                          auto o = std::make_shared<Options>();
                          app.add_option("--host", o->host, "address to listen on (default 127.0.0.1; the protocol "
                                                            "has no authentication, so only a trusted network)");
                          app.add_option("-p,--port", o->port, "TCP port (default 50052, as llama.cpp's rpc-server)");
                          app.add_option("-t,--threads", o->threads, "CPU threads for the graphs (default: all)");
                          app.add_option("-c,--cache", o->cache,
                                         "directory where large tensors sent by clients are cached by hash, so a "
                                         "reconnecting client need not send them again");
                          app.add_option("-m,--mem", o->mem_mb,
                                         "MiB of memory to offer clients (default 0: the machine's free memory)");
                          return [o] { return run_rpc_server(*o); };
                      });

}  // namespace
