// toy rpc-server: ggml's RPC server over the CPU. A client in this process
// (ggml's RPC backend, as toy and llama.cpp's tools use it) runs a graph on it
// and gets the bytes the local CPU backend computes; bad flags and a port
// already taken are one-line errors.
#include "test_util.h"

#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>
#if defined(TOY_HAVE_RPC)
#include <ggml-rpc.h>
#endif
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using toy::test::run_toy;

// A loopback socket bound to a free port (kept open while `hold` is true).
struct Port {
    int fd = -1, port = 0;
    Port() {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
        socklen_t n = sizeof a;
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &n);
        port = ntohs(a.sin_port);
    }
    void release() {
        if (fd >= 0) close(fd);
        fd = -1;
    }
    ~Port() { release(); }
};

bool accepts(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    const bool ok = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
    close(fd);
    return ok;
}

// `toy rpc-server` in a child process, stopped at the end of the scope.
struct Server {
    pid_t pid = -1;
    int port;
    explicit Server(int port_) : port(port_) {
        const std::string cmd = "exec " + toy::test::shell_quote(TOY_BIN) + " rpc-server -t 1 --port " +
                                std::to_string(port) + " >/dev/null 2>&1";
        pid = fork();
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", cmd.c_str(), (char *)nullptr);
            _exit(127);
        }
    }
    // Whether it accepts connections within 20 s.
    bool started() const {
        const auto t0 = std::chrono::steady_clock::now();
        while (pid > 0 && !accepts(port)) {
            if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return pid > 0;
    }
    ~Server() {
        if (pid > 0) {
            kill(pid, SIGTERM);
            waitpid(pid, nullptr, 0);
        }
    }
};

#if defined(TOY_HAVE_RPC)
// W x + b, gelu, on a backend: a Q8_0 matrix (the input quantized on the way,
// as in inference) and float ops; returns the result's bytes.
std::vector<float> run_graph(ggml_backend_t backend, const std::vector<float> &wf, const std::vector<float> &xf,
                             const std::vector<float> &bf, int64_t n_in, int64_t n_out, int64_t cols) {
    ggml_init_params ip{16 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *w = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, n_in, n_out);
    ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_in, cols);
    ggml_tensor *b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_out);
    ggml_tensor *y = ggml_gelu(ctx, ggml_add(ctx, ggml_mul_mat(ctx, w, x), b));
    ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    std::vector<uint8_t> wq(ggml_nbytes(w));
    ggml_quantize_chunk(GGML_TYPE_Q8_0, wf.data(), wq.data(), 0, n_out, n_in, nullptr);
    ggml_backend_tensor_set(w, wq.data(), 0, wq.size());
    ggml_backend_tensor_set(x, xf.data(), 0, ggml_nbytes(x));
    ggml_backend_tensor_set(b, bf.data(), 0, ggml_nbytes(b));
    EXPECT_EQ(ggml_backend_graph_compute(backend, gf), GGML_STATUS_SUCCESS);
    std::vector<float> out(ggml_nelements(y));
    ggml_backend_tensor_get(y, out.data(), 0, ggml_nbytes(y));
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return out;
}

TEST(Rpc, ServerComputesWhatTheLocalCpuComputes) {
    Port p;
    p.release();
    Server server(p.port);
    ASSERT_TRUE(server.started()) << "toy rpc-server did not start";
    const int64_t n_in = 256, n_out = 48, cols = 5;
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> wf(n_in * n_out), xf(n_in * cols), bf(n_out);
    for (float &v : wf) v = g(rng);
    for (float &v : xf) v = g(rng);
    for (float &v : bf) v = g(rng);

    const std::string endpoint = "127.0.0.1:" + std::to_string(p.port);
    ggml_backend_t rpc = ggml_backend_rpc_init(endpoint.c_str(), 0);
    ASSERT_NE(rpc, nullptr);
    // ggml caches each server's registration and buffer type for the process
    // in statics destroyed before LeakSanitizer looks: keep them reachable
    static auto *kept = new std::vector<const void *>;
    kept->push_back(ggml_backend_rpc_add_server(endpoint.c_str()));
    kept->push_back(ggml_backend_rpc_buffer_type(endpoint.c_str(), 0));
    EXPECT_TRUE(ggml_backend_is_rpc(rpc));
    size_t free = 0, total = 0;
    ggml_backend_rpc_get_device_memory(endpoint.c_str(), 0, &free, &total);
    EXPECT_GT(total, 0u);  // the server's machine memory, as its CPU device reports it
    const std::vector<float> remote = run_graph(rpc, wf, xf, bf, n_in, n_out, cols);
    ggml_backend_free(rpc);

    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 1);
    const std::vector<float> local = run_graph(cpu, wf, xf, bf, n_in, n_out, cols);
    ggml_backend_free(cpu);
    // the same ggml on the same CPU kind, one thread each: the same bytes
    ASSERT_EQ(remote.size(), local.size());
    for (size_t i = 0; i < local.size(); ++i) ASSERT_EQ(remote[i], local[i]) << "element " << i;
}
#endif

TEST(Rpc, DevicesListsTheCpuAndTheServersGiven) {
    const toy::test::CommandResult cpu = run_toy("devices");
    ASSERT_EQ(cpu.code, 0) << cpu.err;
    EXPECT_NE(cpu.out.find("  CPU: "), std::string::npos) << cpu.out;
    EXPECT_NE(cpu.out.find("[toy kernels: "), std::string::npos) << cpu.out;
#if defined(TOY_HAVE_RPC)
    Port p;
    p.release();
    Server server(p.port);
    ASSERT_TRUE(server.started()) << "toy rpc-server did not start";
    const std::string endpoint = "127.0.0.1:" + std::to_string(p.port);
    const toy::test::CommandResult both = run_toy("devices --rpc " + endpoint);
    ASSERT_EQ(both.code, 0) << both.err;
    EXPECT_NE(both.out.find("  RPC0: " + endpoint + " ("), std::string::npos) << both.out;
#endif
    // a server nobody listens on, and malformed lists: one line each, before ggml talks to any server
    Port closed;
    closed.release();
    for (const std::string &bad : {"127.0.0.1:" + std::to_string(closed.port), std::string("127.0.0.1"),
                                  std::string("127.0.0.1:0"), std::string("127.0.0.1:1,")}) {
        SCOPED_TRACE(bad);
        const toy::test::CommandResult r = run_toy("devices --rpc " + bad);
        EXPECT_EQ(r.code, 1);
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
}

TEST(Rpc, BadFlagsAndATakenPortAreOneLineErrors) {
    for (const char *bad : {"--port 0", "--port 70000", "-t -2", "--host 192.0.2.1" /* not this machine's */}) {
        SCOPED_TRACE(bad);
        const toy::test::CommandResult r = run_toy(std::string("rpc-server ") + bad);
        EXPECT_EQ(r.code, 1);
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find("toy: error:"), std::string::npos) << r.err;
    }
#if defined(TOY_HAVE_RPC)
    Port taken;  // bound and kept: nobody else may listen on it
    listen(taken.fd, 1);
    const toy::test::CommandResult r = run_toy("rpc-server --port " + std::to_string(taken.port));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("cannot listen on 127.0.0.1:" + std::to_string(taken.port)), std::string::npos) << r.err;
#endif
}

}  // namespace
