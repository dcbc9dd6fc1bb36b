// Every command the README shows in its ```sh blocks runs and succeeds, with
// its placeholders (MODEL.gguf, corpus.txt, adapter.gguf, ...) made real in a
// scratch directory: README commands cannot drift from the code. `make run`
// and `make test` are the suite's own two commands and are not re-run here;
// `toy serve` is started, asked /health, and answers the README's curl.
#include "test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using toy::test::run_command;
using toy::test::shell_quote;

namespace {

// A port no one listens on now (the kernel's choice for port 0), so parallel
// test runs and other servers on the machine do not collide.
int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 18080;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) close(fd);
    return port;
}

// The README's sh commands: continuation lines joined, comments dropped.
std::vector<std::string> readme_commands() {
    std::ifstream in(fs::path(TOY_SOURCE_DIR) / "README.md");
    std::vector<std::string> out;
    std::string line, cmd;
    bool in_sh = false;
    while (std::getline(in, line)) {
        if (line.rfind("```", 0) == 0) {
            in_sh = !in_sh && line == "```sh";
            continue;
        }
        if (!in_sh) continue;
        if (cmd.empty() && (line.empty() || line[0] == '#')) continue;
        const bool more = !line.empty() && line.back() == '\\';
        cmd += more ? line.substr(0, line.size() - 1) : line;
        if (more) continue;
        out.push_back(cmd);
        cmd.clear();
    }
    return out;
}

// The command with its comment cut, optional [parts] taken, and the first of
// a|b|c alternatives.
std::string concrete(std::string cmd) {
    const size_t hash = cmd.find("  #");
    if (hash != std::string::npos) cmd = cmd.substr(0, hash);
    cmd = std::regex_replace(cmd, std::regex(R"(\[(--[^\]]*)\])"), "$1");  // [--flag ...], not JSON arrays
    cmd = std::regex_replace(cmd, std::regex(R"((--type|--hugepages) ([a-z0-9_]+)(\|[a-z0-9_]+)+)"), "$1 $2");
    while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
    return cmd;
}

void write(const fs::path &p, const std::string &text) { std::ofstream(p) << text; }

}  // namespace

TEST(Readme, EveryCommandRuns) {
    const std::vector<std::string> cmds = readme_commands();
    ASSERT_GT(cmds.size(), 20u);
    toy::test::TempDir dir;
    const fs::path d = dir.path;
    const std::string toy = shell_quote(toy::test::toy_bin());
    fs::copy_file(fs::path(TOY_SOURCE_DIR) / "models/toy-stories.gguf", d / "MODEL.gguf");
    for (const char *name : {"BASE.gguf", "DONOR.gguf"}) fs::copy_file(d / "MODEL.gguf", d / name);
    std::string story;
    for (int i = 0; i < 60; ++i) {
        story += "Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog. "
                 "One day the dog found a big red ball and they played until the sun went down.\n";
    }
    write(d / "corpus.txt", story);
    write(d / "held-out.txt", story.substr(0, 2000));
    write(d / "prompt.txt", "Once upon a time");
    std::string chat;
    for (int i = 0; i < 40; ++i) {
        chat += R"({"messages": [{"role": "user", "content": "Tell me about Lily."}, {"role": "assistant", "content": "Lily is a little girl who likes to play."}]})"
                "\n";
    }
    write(d / "chat.jsonl", chat);
    // the adapters the README applies before its training section makes them
    const std::string cd = "cd " + shell_quote(d.string()) + " && ";
    auto r = run_command(cd + toy + " train -m MODEL.gguf -f corpus.txt --lora-rank 4 --steps 2 -c 64 -b 128 -o adapter.gguf");
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char *name : {"a.gguf", "b.gguf", "A.gguf", "B.gguf"}) fs::copy_file(d / "adapter.gguf", d / name);

    int ran = 0;
    for (const std::string &raw : cmds) {
        std::string cmd = concrete(raw);
        if (cmd.rfind("make ", 0) == 0) continue;  // the two commands: this suite is `make test`
        SCOPED_TRACE(cmd);
        cmd = std::regex_replace(cmd, std::regex(R"(\.\./shared/)"), std::string(TOY_SHARED_DIR) + "/");
        cmd = std::regex_replace(cmd, std::regex(R"(^build/toy)"), toy);
        if (cmd.find(" serve ") != std::string::npos) {
            // started in the background on a free port; the README's curl (the next command) talks to it
            const int port = free_port();
            cmd = std::regex_replace(cmd, std::regex("--port 8080"), "--port " + std::to_string(port));
            const pid_t pid = fork();
            ASSERT_GE(pid, 0);
            if (pid == 0) {
                if (chdir(d.c_str()) != 0) _exit(127);
                execl("/bin/sh", "sh", "-c", ("exec " + cmd + " 2>/dev/null").c_str(), (char *)nullptr);
                _exit(127);
            }
            bool up = false;
            for (int i = 0; i < 200 && !up; ++i) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                up = run_command("curl -sf localhost:" + std::to_string(port) + "/health").code == 0;
            }
            EXPECT_TRUE(up) << "the server did not come up";
            for (const std::string &next : cmds) {
                if (next.rfind("curl ", 0) != 0) continue;
                auto c = run_command(std::regex_replace(concrete(next), std::regex("localhost:8080"),
                                                        "localhost:" + std::to_string(port)) + " -s");
                EXPECT_EQ(c.code, 0) << c.err;
                EXPECT_NE(c.out.find("data: [DONE]"), std::string::npos) << c.out;
            }
            kill(pid, SIGTERM);
            waitpid(pid, nullptr, 0);
            ++ran;
            continue;
        }
        if (cmd.rfind("curl ", 0) == 0) continue;  // with the server above
        r = run_command(cd + cmd + (cmd.find(" < ") == std::string::npos ? " < /dev/null" : ""));
        EXPECT_EQ(r.code, 0) << r.err.substr(0, 2000);
        ++ran;
    }
    EXPECT_GE(ran, 25);
}
