// The pinned ggml fetch: a cached checkout is reused without any download,
// and a tampered tarball stops the build with a clear message.
#include "test_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace {

struct Outcome {
    int code;
    std::string output;  // stdout and stderr
};

Outcome run_fetch(const std::string &cache_dir) {
    const std::string cmd = std::string(TOY_SOURCE_DIR) + "/scripts/fetch-ggml.sh '" + cache_dir + "' 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    Outcome o{};
    std::array<char, 512> buf{};
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.output.append(buf.data(), n);
    const int status = pclose(p);
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return o;
}

TEST(Setup, CachedCheckoutIsReused) {
    // the build's own checkout lives in <cache>/llama.cpp-3.22.1
    const std::filesystem::path src(TOY_LLAMA_SOURCE_DIR);
    Outcome o = run_fetch(src.parent_path().string());
    EXPECT_EQ(o.code, 0) << o.output;
    EXPECT_EQ(o.output, src.string() + "\n");
}

TEST(Setup, TamperedTarballStopsWithAClearMessage) {
    toy::test::TempDir dir;
    std::filesystem::create_directories(dir.path / "npm");
    std::ofstream(dir.path / "npm" / "node-llama-cpp-3.22.1.tgz") << "not the package";
    Outcome o = run_fetch(dir.path.string());
    EXPECT_EQ(o.code, 1);
    EXPECT_NE(o.output.find("does not match the pinned sha512"), std::string::npos) << o.output;
    EXPECT_FALSE(std::filesystem::exists(dir.path / "llama.cpp-3.22.1"));
}

}  // namespace
