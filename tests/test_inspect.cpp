// `toy inspect`: runs the built binary on every shared GGUF file, in text and
// JSON form, and on files that are not GGUF.
#include "gguf/gguf_reader.h"

#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

using toy::test::shell_quote;

// toy inspect's stdout, with stderr appended when `merge_stderr`.
struct RunResult {
    int exit_code;
    std::string output;
};
RunResult run_toy(const std::string &args, bool merge_stderr) {
    auto r = toy::test::run_toy(args);
    return {r.code, merge_stderr ? r.out + r.err : r.out};
}

using toy::test::shared_gguf_files;

TEST(Inspect, TextNamesArchitectureForEverySharedFile) {
    auto files = shared_gguf_files();
    ASSERT_GE(files.size(), 3u);
    for (const auto &path : files) {
        SCOPED_TRACE(path);
        auto f = toy::gguf::File::open(path);
        std::string arch = f->get_string("general.architecture");
        RunResult r = run_toy("inspect " + shell_quote(path), true);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find("architecture:  " + arch), std::string::npos) << r.output.substr(0, 2000);
        EXPECT_NE(r.output.find(fmt::format("tensors ({})", f->tensors().size())), std::string::npos);
        EXPECT_NE(r.output.find("tokenizer:"), std::string::npos);
        // Large arrays are summarized, never dumped.
        EXPECT_LT(r.output.size(), 2000 + 200 * f->tensors().size() + 200 * f->metadata().size());
    }
}

TEST(Inspect, JsonParsesForEverySharedFile) {
    for (const auto &path : shared_gguf_files()) {
        SCOPED_TRACE(path);
        auto f = toy::gguf::File::open(path);
        RunResult r = run_toy("inspect --json " + shell_quote(path), false);
        ASSERT_EQ(r.exit_code, 0);
        nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << r.output.substr(0, 2000);
        EXPECT_EQ(j["architecture"], f->get_string("general.architecture"));
        EXPECT_EQ(j["n_tensors"], f->tensors().size());
        EXPECT_EQ(j["tensors"].size(), f->tensors().size());
        EXPECT_EQ(j["version"], f->version());
        uint64_t params = 0;
        for (const auto &t : f->tensors()) params += (uint64_t)t.n_elements();
        EXPECT_EQ(j["total_params"], params);
        if (f->has("tokenizer.ggml.tokens")) {
            EXPECT_EQ(j["tokenizer"]["tokens"], f->get_string_array("tokenizer.ggml.tokens").size());
        }
        // Every array longer than 16 is a {type, count} summary.
        std::function<void(const nlohmann::json &)> check = [&](const nlohmann::json &v) {
            if (v.is_array()) {
                EXPECT_LE(v.size(), 16u);
            }
            if (v.is_object() || v.is_array()) {
                for (const auto &e : v) check(e);
            }
        };
        for (const char *section : {"hyperparameters", "tokenizer", "general", "other"}) check(j[section]);
    }
}

TEST(Inspect, JsonSummarizesLongArrays) {
    fs::path path = fs::path(TOY_SHARED_DIR) / "models/stories260K.gguf";
    if (!fs::exists(path)) GTEST_SKIP() << "missing " << path;
    RunResult r = run_toy("inspect --json " + shell_quote(path.string()), false);
    ASSERT_EQ(r.exit_code, 0);
    auto j = nlohmann::json::parse(r.output);
    EXPECT_TRUE(j["tokenizer"].contains("tokens"));
    EXPECT_FALSE(j["types"].empty());
}

TEST(Inspect, NonGgufFileIsOneLineError) {
    fs::path dir = fs::temp_directory_path() / fmt::format("toy_test_inspect_{}", getpid());
    fs::create_directories(dir);
    fs::path bad = dir / "notes.txt";
    std::ofstream(bad) << "this is a text file, definitely not a GGUF model\n";
    for (const std::string &target : {bad.string(), (dir / "missing.gguf").string()}) {
        RunResult r = run_toy("inspect " + shell_quote(target), true);
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(r.output.rfind("toy: error: ", 0), 0u) << r.output;
        EXPECT_NE(r.output.find(target), std::string::npos) << r.output;
        ASSERT_FALSE(r.output.empty());
        EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
    }
    fs::remove_all(dir);
}

}  // namespace

TEST(Inspect, SummaryByLayerAndTensorsOnRequest) {
    const std::string m = toy::test::shared_path("models/stories260K.gguf");
    const auto summary = toy::test::run_toy("inspect " + m);
    ASSERT_EQ(summary.code, 0) << summary.err;
    EXPECT_NE(summary.out.find("by layer"), std::string::npos) << summary.out;
    EXPECT_NE(summary.out.find("  blk.0 "), std::string::npos) << summary.out;
    EXPECT_NE(summary.out.find("totals by type"), std::string::npos);
    EXPECT_EQ(summary.out.find("blk.0.attn_q.weight"), std::string::npos);
    const auto all = toy::test::run_toy("inspect " + m + " --tensors");
    ASSERT_EQ(all.code, 0) << all.err;
    EXPECT_NE(all.out.find("blk.0.attn_q.weight"), std::string::npos);
    EXPECT_EQ(all.out.find("by layer"), std::string::npos);
}
