// The pinned ggml fetch: a cached checkout is reused without any download,
// and a tampered tarball stops the build with a clear message.
#include "test_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace {

toy::test::CommandResult run_fetch(const std::string &cache_dir) {
    return toy::test::run_command(std::string(TOY_SOURCE_DIR) + "/scripts/fetch-ggml.sh " + toy::test::shell_quote(cache_dir));
}

TEST(Setup, CachedCheckoutIsReused) {
    // the build's own checkout lives in <cache>/llama.cpp-3.22.1
    const std::filesystem::path src(TOY_LLAMA_SOURCE_DIR);
    auto o = run_fetch(src.parent_path().string());
    EXPECT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(o.out, src.string() + "\n");
}

TEST(Setup, TamperedTarballStopsWithAClearMessage) {
    toy::test::TempDir dir;
    std::filesystem::create_directories(dir.path / "npm");
    std::ofstream(dir.path / "npm" / "node-llama-cpp-3.22.1.tgz") << "not the package";
    auto o = run_fetch(dir.path.string());
    EXPECT_EQ(o.code, 1);
    EXPECT_NE(o.err.find("does not match the pinned sha512"), std::string::npos) << o.err;
    EXPECT_FALSE(std::filesystem::exists(dir.path / "llama.cpp-3.22.1"));
}

}  // namespace
