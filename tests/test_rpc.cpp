// toy rpc-server: ggml's RPC server over the CPU. A client in this process
// (ggml's RPC backend, as toy and llama.cpp's tools use it) runs a graph on it
// and gets the bytes the local CPU backend computes; bad flags and a port
// already taken are one-line errors.
//
// Models split across the CPU and two servers (-ngl, --rpc, --tensor-split,
// --split-mode, --device): the local run's logits, prompt and decode paths;
// a server that dies mid-run and a split that does not fit are one-line
// errors; so is every bad split flag, before loading.
#include "core/lists.h"
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
#include <array>
#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

using toy::test::run_toy;
namespace test = toy::test;

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

// `toy rpc-server` (one thread, and `extra` flags) on a free loopback port in
// a child process, stopped at the end of the scope.
struct Server {
    pid_t pid = -1;
    int port;
    explicit Server(const std::string &extra = "") : port(Port().port) {
        const std::string cmd = "exec " + toy::test::shell_quote(toy::test::toy_bin()) + " rpc-server -t 1 --port " +
                                std::to_string(port) + " " + extra + " >/dev/null 2>&1";
        pid = fork();
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", cmd.c_str(), (char *)nullptr);
            _exit(127);
        }
    }
    std::string endpoint() const { return "127.0.0.1:" + std::to_string(port); }
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
            kill(pid, SIGCONT);  // one a test stopped
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
    Server server;
    ASSERT_TRUE(server.started()) << "toy rpc-server did not start";
    const int64_t n_in = 256, n_out = 48, cols = 5;
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> wf(n_in * n_out), xf(n_in * cols), bf(n_out);
    for (float &v : wf) v = g(rng);
    for (float &v : xf) v = g(rng);
    for (float &v : bf) v = g(rng);

    const std::string endpoint = server.endpoint();
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
    Server server;
    ASSERT_TRUE(server.started()) << "toy rpc-server did not start";
    const std::string endpoint = server.endpoint();
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

// ---- models split across the CPU and RPC servers ----

// A one-line "toy: error:" on stderr and exit code 1.
void expect_one_line_error(const test::CommandResult &r, const std::string &needle) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("toy: error:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(Split, BadSplitFlagsAreOneLineErrorsBeforeLoading) {
    const std::string m = "logits -m " + test::fixture_path("llama-256.q8_0.gguf") + " --tokens 1,2 -o /dev/null ";
    // nothing to offload to: no GPU here, no --rpc
    expect_one_line_error(run_toy(m + "-ngl 2"), "-ngl 2: no GPU or RPC device");
    expect_one_line_error(run_toy(m + "-ngl -3"), "-ngl: expected a number of layers >= 0");
    expect_one_line_error(run_toy(m + "--device RPC0"), "--device RPC0: no such offload device");
    expect_one_line_error(run_toy(m + "-sm row"), "--split-mode row: toy splits models by layer only");
    expect_one_line_error(run_toy(m + "-sm rows"), "--split-mode: expected none, layer or row");
    expect_one_line_error(run_toy(m + "-ts 3,x"), "--tensor-split: expected proportions");
    // values that make no sense are errors even where nothing is offloaded (they were ignored there)
    expect_one_line_error(run_toy(m + "-ts nan,1"), "--tensor-split: expected proportions >= 0, found nan");
    expect_one_line_error(run_toy(m + "-ts 0,0"), "--tensor-split: every proportion is 0");
    expect_one_line_error(run_toy(m + "-mg -1"), "--main-gpu: expected an offload device's index >= 0, found -1");
    // with no device, -ngl's default offloads nothing: the local run
    const test::CommandResult local = run_toy(m);
    EXPECT_EQ(local.code, 0) << local.err;
    EXPECT_EQ(local.err.find("split:"), std::string::npos) << local.err;
    const test::CommandResult list = run_toy("run --list-devices");  // no -m needed to list
    EXPECT_EQ(list.code, 0) << list.err;
    EXPECT_NE(list.out.find("  CPU: "), std::string::npos) << list.out;
#if defined(TOY_HAVE_RPC)
    Server a, b;
    ASSERT_TRUE(a.started() && b.started());
    const std::string rpc = "--rpc " + a.endpoint() + "," + b.endpoint() + " ";
    expect_one_line_error(run_toy(m + rpc + "--device RPC7"), "--device RPC7: no such offload device (available: RPC0, RPC1");
    expect_one_line_error(run_toy(m + rpc + "--device RPC0,RPC0"), "--device: RPC0 is named twice");
    expect_one_line_error(run_toy(m + rpc + "-ts 1,1,1"), "--tensor-split: 3 proportions for 2 offload devices");
    expect_one_line_error(run_toy(m + rpc + "-ts 0,0"), "--tensor-split: every proportion is 0");
    expect_one_line_error(run_toy(m + rpc + "-sm none -mg 2"), "--main-gpu 2: expected 0 to 1");
    expect_one_line_error(run_toy(m + rpc + "--device none -ngl 1"), "-ngl 1: no GPU or RPC device");
    const test::CommandResult both = run_toy("chat " + rpc + "--list-devices");
    EXPECT_EQ(both.code, 0) << both.err;
    EXPECT_NE(both.out.find("  RPC1: " + b.endpoint() + " ("), std::string::npos) << both.out;
    // a server that offers 1 MiB: the fixture's blocks (about 1.1 MiB) do not fit, said before copying
    Server small("--mem 1");
    ASSERT_TRUE(small.started());
    expect_one_line_error(run_toy(m + "--rpc " + small.endpoint()), "MiB, it has 1.0 MiB free");
    const test::CommandResult listed = run_toy("devices --rpc " + small.endpoint());
    EXPECT_NE(listed.out.find("(1 MiB, 1 MiB free)"), std::string::npos) << listed.out;
#endif
}

#if defined(TOY_HAVE_RPC)
// toy logits over a fixture's tokens with these flags (F32 cache, no flash
// attention: the same ggml kernels wherever a block runs).
std::vector<float> fixture_logits(const std::string &fixture, const std::string &flags, std::string *err = nullptr) {
    const nlohmann::json meta = test::read_json(test::fixture_path(fixture + ".json"));
    return test::toy_logits(test::fixture_path(fixture + ".gguf"), meta["tokens"].get<std::vector<int32_t>>(),
                            "-ctk f32 -ctv f32 -fa off -t 2 " + flags, err);
}

TEST(Split, LayersOnTwoServersGiveTheLocalLogits) {
    Server a, b;
    ASSERT_TRUE(a.started() && b.started());
    const std::string rpc = "--rpc " + a.endpoint() + "," + b.endpoint() + " ";
    struct Case {
        std::string fixture, flags, split;  // split: what `toy: split:` must say
    };
    const std::vector<Case> cases = {
        // everything on the servers (-ngl's default with devices), blocks by free memory
        {"llama-256.q8_0", "", "block 0: RPC0; block 1: RPC1; output: RPC1"},
        // the last block only, the head on the CPU; decoding token by token (K and V cached remotely)
        {"llama-256.q8_0", "-ngl 1 --stepwise", "block 0: CPU; block 1: RPC0; output: CPU"},
        // sliding window, softcaps, post-norms; the split by --tensor-split
        {"gemma2.f32", "-ngl 3 -ts 1,2", "block 0: CPU; block 1: RPC0; blocks 2-3: RPC1; output: CPU"},
        // learned positions, layer norms with biases; one named device
        {"gpt2.f32", "-ngl 9 --device RPC1", "blocks 0-1: RPC1; output: RPC1"},
        // a tied output projection copied to the server; split mode none
        {"llama-tied.f32", "-ngl 99 -sm none -mg 1", "blocks 0-1: RPC1; output: RPC1"},
        // mixture of experts (MUL_MAT_ID remotely), q/k norms
        {"qwen3moe.f32", "-ngl 1", "block 0: CPU; block 1: RPC0; output: CPU"},
        // Llama 3 frequency factors (a CPU weight the remote RoPE reads), Q4_K
        {"llama3-rope.f32", "-ngl 99 --stepwise", "RPC1; output: RPC1"},
        {"llama-256.q4_k_m", "-ngl 2", "block 0: RPC0; block 1: RPC1; output: CPU"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.fixture + " " + c.flags);
        const size_t n_vocab = test::read_json(test::fixture_path(c.fixture + ".json"))["n_vocab"].get<size_t>();
        const bool stepwise = c.flags.find("--stepwise") != std::string::npos;
        const std::vector<float> local = fixture_logits(c.fixture, stepwise ? "--stepwise" : "");
        std::string err;
        const std::vector<float> split = fixture_logits(c.fixture, rpc + c.flags, &err);
        EXPECT_NE(err.find(c.split), std::string::npos) << err;
        ASSERT_EQ(split.size(), local.size());
        // The fixtures' bounds (README): F32 weights give the same ggml kernels
        // wherever a block runs; quantized ones meet toy's packed kernels
        // locally and ggml's on the server.
        const bool f32 = c.fixture.find(".f32") != std::string::npos;
        const test::RowStats s = test::compare_rows(split, local, n_vocab);
        EXPECT_LE(s.d_max, f32 ? 1e-3 : 2e-2);
        EXPECT_GE(s.argmax_equal, f32 ? 1.0 : 0.95);
    }
}

// What a long generation split to `server` prints on stderr after the line
// `toy: split: ...`, with its exit code, when `act` is done to the server
// once the first tokens arrived. (A client that hangs is ended by timeout, 124.)
test::CommandResult interrupted_generation(Server &server, const std::function<void()> &act, const std::string &flags = "") {
    test::TempDir dir;
    const std::string err = dir.file("err");
    const std::string cmd = "timeout 120 " + test::shell_quote(toy::test::toy_bin()) + " run -m " +
                            test::fixture_path("llama-256.q8_0.gguf") + " -p hello -n 30000 -c 32768 --ignore-eos -t 1 --rpc " +
                            server.endpoint() + " " + flags + " 2>" + err;
    FILE *out = popen(cmd.c_str(), "r");
    EXPECT_NE(out, nullptr);
    if (!out) return {};
    char buf[4096];
    EXPECT_GT(fread(buf, 1, 64, out), 0u);  // generation under way
    act();
    while (fread(buf, 1, sizeof buf, out) > 0) {
    }
    const int status = pclose(out);
    EXPECT_TRUE(WIFEXITED(status));
    std::ifstream e(err);
    const std::string all((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, "", all.substr(all.find('\n') + 1)};
}

TEST(Split, AServerThatDiesMidRunIsAOneLineError) {
    Server server;
    ASSERT_TRUE(server.started());
    const test::CommandResult r = interrupted_generation(server, [&] {
        kill(server.pid, SIGKILL);
        waitpid(server.pid, nullptr, 0);
        server.pid = -1;
    });
    expect_one_line_error(r, "toy: error: ggml: Remote RPC server crashed");
}

// A server that stops answering but keeps its connections (a suspended
// process; a frozen machine) would leave ggml's client waiting forever.
TEST(Split, AServerThatStopsAnsweringIsAOneLineErrorAfterTheTimeout) {
    Server server;
    ASSERT_TRUE(server.started());
    const auto t0 = std::chrono::steady_clock::now();
    const test::CommandResult r = interrupted_generation(server, [&] { kill(server.pid, SIGSTOP); }, "--rpc-timeout 1.5");
    expect_one_line_error(r, "no answer from RPC server " + server.endpoint() + " for 1.5 s while computing a batch");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
    // stopped before the client starts: it accepts the connection (the kernel
    // does), and never says hello
    const std::string m = " logits -m " + test::fixture_path("llama-256.q8_0.gguf") + " --tokens 1,2 -o /dev/null --rpc " + server.endpoint();
    expect_one_line_error(test::run_command("timeout 60 " + test::shell_quote(toy::test::toy_bin()) + m + " --rpc-timeout 1"),
                          "for 1 s while connecting");
    expect_one_line_error(run_toy(m + " --rpc-timeout -1"), "--rpc-timeout: expected seconds from 0 (wait forever)");
}

// Training with blocks on an RPC server: the frozen base and the adapters of
// its blocks (LoRA), or each block's parameters, gradients and AdamW or SGD
// moments (full fine-tune), live on the server and are updated there by
// ggml's ops. The same run on the CPU (toy's own kernels for the gradient
// products and the update) gives the same loss curve and the same weights,
// within float rounding.
TEST(Split, TrainingOnASplitModelFollowsTheLocalRun) {
    Server server;
    ASSERT_TRUE(server.started());
    test::TempDir dir;
    const std::string text = dir.file("stories.txt"), stories = test::fixture_path("../models/stories260K.gguf");
    {
        std::ofstream out(text);
        for (int i = 0; i < 12; ++i) out << "Once upon a time there was a little girl named Lily. She liked to play outside. ";
    }
    const std::string rpc = " --rpc " + server.endpoint();
    struct Case {
        std::string name, model, flags, ngl, split;  // split: what `toy: split:` must say
        bool all_remote = false;  // the whole training state on the server (the embedding too)
    };
    const std::string tied = test::fixture_path("llama-tied.f32.gguf"), padded = dir.file("vocab300.gguf"),
                      quantized = test::fixture_path("llama-256.q4_k_m.gguf");
    // a vocabulary that training pads to a multiple of 16 (the logits' rows are not n_vocab)
    ASSERT_EQ(run_toy("init --arch gpt2 --n-embd 32 --n-layer 2 --n-head 2 --n-ff 64 --n-vocab 300 --n-ctx 64 --type f32 -o " +
                      padded).code,
              0);
    const std::vector<Case> cases = {
        // -ngl 99: the head and the loss on the server too (ggml's cross-entropy there)
        {"lora", stories, "--lora-rank 2 --lora-targets all", "99", "blocks 0-4: RPC0; output: RPC0", true},
        // gradient checkpointing: the recomputed blocks and the loss on the server too
        {"lora-recompute", stories, "--lora-rank 2 --lora-targets all --grad-checkpointing", "99",
         "blocks 0-4: RPC0; output: RPC0", true},
        // a Q4_K/Q6_K base: its products dequantize the weights where they are
        {"lora-quantized", quantized, "--lora-rank 2 --lora-targets all", "99", "blocks 0-1: RPC0; output: RPC0", true},
        {"lora-sgd", stories, "--lora-rank 2 --lora-targets q,v -opt sgd -lr 0.05", "2",
         "blocks 0-2: CPU; blocks 3-4: RPC0; output: CPU"},
        {"full", stories, "", "2", "blocks 0-2: CPU; blocks 3-4: RPC0; output: CPU"},
        {"full-head", stories, "", "99", "blocks 0-4: RPC0; output: RPC0"},
        // a tied embedding goes with the head: everything on the server
        {"full-tied", tied, "", "99", "blocks 0-1: RPC0; output: RPC0", true},
        // (SGD: AdamW's first steps turn the float noise of near-zero bias
        // gradients into whole steps, 1.4e-4 apart on a bias here)
        {"full-padded-vocab", padded, "-opt sgd -lr 0.05", "99", "blocks 0-1: RPC0; output: RPC0"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.name);
        const std::string base =
            "train -m " + c.model + " -f " + text + " --steps 3 -c 32 -t 2 --val-split 0.2 --eval-every 1 " + c.flags;
        const std::string local = dir.file(c.name + "-local"), split = dir.file(c.name + "-split");
        const test::CommandResult a = run_toy(base + " -q -o " + local + ".gguf --log " + local + ".csv");
        ASSERT_EQ(a.code, 0) << a.err;
        const test::CommandResult b = run_toy(base + rpc + " -ngl " + c.ngl + " -o " + split + ".gguf --log " + split + ".csv");
        ASSERT_EQ(b.code, 0) << b.err;
        EXPECT_NE(b.err.find("toy: split: " + c.split), std::string::npos) << b.err;
        // the parameters' share on the server (an untied embedding stays on the CPU)
        std::smatch share;
        ASSERT_TRUE(std::regex_search(b.err, share, std::regex(R"(\(([0-9.]+) MiB with gradients and moments; ([0-9.]+) MiB of it on RPC0\))")))
            << b.err;
        if (c.all_remote) {
            EXPECT_EQ(share[1], share[2]) << b.err;
        }
        const auto la = test::loss_columns(local + ".csv"), lb = test::loss_columns(split + ".csv");
        ASSERT_EQ(la.size(), 3u);
        ASSERT_EQ(lb.size(), 3u);
        for (size_t i = 0; i < la.size(); ++i)
            for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(lb[i][k], la[i][k], 1e-4 * std::fabs(la[i][k]) + 1e-6) << "step " << i + 1;
        // the written adapters / models
        const test::CommandResult d = run_toy("inspect " + split + ".gguf --diff " + local + ".gguf --json");
        ASSERT_EQ(d.code, 0) << d.err;
        const nlohmann::json j = nlohmann::json::parse(d.out);
        ASSERT_FALSE(j["tensors"].empty());
        for (const auto &t : j["tensors"]) EXPECT_LE(t["rel"].get<double>(), 1e-4) << t["name"];
    }
    // the adapter applied to the split model (its pairs on their blocks' device): the local logits
    const std::string logits = "logits -m " + stories + " --lora " + dir.file("lora-local.gguf") +
                               " --tokens 1,50,60,70,80,90 -ctk f32 -ctv f32 -fa off -o ";
    ASSERT_EQ(run_toy(logits + dir.file("local.f32")).code, 0);
    const test::CommandResult r = run_toy(logits + dir.file("split.f32") + rpc + " -ngl 99");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_LE(test::compare_rows(test::read_f32(dir.file("split.f32")), test::read_f32(dir.file("local.f32")), 512).d_max, 1e-3);
    // a server with room for the frozen blocks but not for a full fine-tune's
    // F32 parameters, gradients and moments: said before training starts
    Server small("--mem 2");
    ASSERT_TRUE(small.started());
    expect_one_line_error(run_toy("train -m " + stories + " -f " + text + " --steps 1 -c 32 -o " + dir.file("c.gguf") + " --rpc " +
                                  small.endpoint() + " -ngl 99"),
                          "the trainable weights, gradients and optimizer moments split to RPC0 need");
}
#endif

}  // namespace
