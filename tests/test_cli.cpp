// The toy executable end to end: generation matches llama.cpp's greedy text,
// bad input gives one clear line and exit code 1.
#include "test_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

using Result = toy::test::CommandResult;
using toy::test::run_toy;

const std::string kStories = toy::test::shared_path("models/stories260K.gguf");

TEST(Cli, RunGreedyMatchesLlamaCpp) {
    // ../shared/models/README.md: llama.cpp's greedy text for this prompt
    const std::string expected =
        " Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
        "saw a big, red ball. She wanted to play with it,";
    Result r = run_toy("run -m " + kStories + " -p 'Once upon a time' -n 48 --temp 0");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, expected + "\n");
    EXPECT_NE(r.err.find("generation 48 tokens"), std::string::npos) << r.err;
}

TEST(Cli, RunTeacherForcedGreedyTokens) {
    // stories260K.json: greedy ids after its 32 teacher-forced tokens
    auto ref = toy::test::read_json(toy::test::shared_path("models/stories260K.json"));
    const std::string ids = toy::test::join_ids(ref["tokens"].get<std::vector<int>>());
    const std::string expected = toy::test::join_ids(ref["greedy"].get<std::vector<int>>(), " ");
    Result r = run_toy("run -m " + kStories + " --tokens " + ids + " -n 48 --temp 0 -c 256");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, expected + "\n");
}

TEST(Cli, RunJson) {
    Result r = run_toy("run -m " + kStories + " -p 'Once upon a time' -n 8 --temp 0 --json");
    ASSERT_EQ(r.code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].size(), 8u);
    EXPECT_TRUE(j["text"].get<std::string>().starts_with(" Once upon a time"));
    EXPECT_GT(j["timings"]["predicted_per_second"].get<double>(), 0.0);
}

TEST(Cli, SeededSamplingIsReproducible) {
    const std::string args = "run -m " + kStories + " -p 'Once upon a time' -n 24 --temp 1.0 -s 7";
    Result a = run_toy(args), b = run_toy(args);
    Result c = run_toy("run -m " + kStories + " -p 'Once upon a time' -n 24 --temp 1.0 -s 8");
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
}

void expect_one_line_error(const Result &r, const std::string &fragment) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("toy: error: ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos) << r.err;
}

TEST(Cli, BadInputIsOneLineError) {
    expect_one_line_error(run_toy("run -m /nonexistent.gguf -p hi"), "/nonexistent.gguf");
    expect_one_line_error(run_toy("run -m " + kStories + " --tokens 1,2,99999 -n 2"), "99999");
    expect_one_line_error(run_toy("run -m " + kStories + " -p 'Once upon a time' -c 3"), "context");
    expect_one_line_error(run_toy("logits -m " + kStories + " --tokens 1,x -o /dev/null"), "--tokens");
    expect_one_line_error(run_toy("logits -m " + kStories + " --tokens 1 -ctk q4_9 -o /dev/null"), "q4_9");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi -fa maybe"), "maybe");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --hugepages sometimes"), "sometimes");
}

TEST(Cli, UnknownFlagIsRejected) {
    Result r = run_toy("run -m " + kStories + " -p hi --no-such-flag");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("no-such-flag"), std::string::npos) << r.err;
}

TEST(Cli, LogitsMatchesReferenceFile) {
    toy::test::TempDir dir;
    auto ref = toy::test::read_json(toy::test::fixture_path("qwen2.f32.json"));
    const std::string ids = toy::test::join_ids(ref["tokens"].get<std::vector<int>>());
    for (std::string mode : {"", " --stepwise"}) {
        Result r = run_toy("logits -m " + toy::test::fixture_path("qwen2.f32.gguf") + " --tokens " + ids +
                           " -ctk f32 -ctv f32 -fa off -c 256 -o " + dir.file("out.f32") + mode);
        ASSERT_EQ(r.code, 0) << r.err;
        auto s = toy::test::compare_rows(toy::test::read_f32(dir.file("out.f32")),
                                         toy::test::read_f32(toy::test::fixture_path("qwen2.f32.logits.f32")), 512);
        EXPECT_LE(s.d_max, 1e-3) << mode;
    }
}

TEST(Cli, TraceNamesMatchLlamaCpp) {
    toy::test::TempDir dir;
    Result r = run_toy("logits -m " + toy::test::fixture_path("mixtral.f32.gguf") + " --tokens 1,5,9 --trace -o " +
                       dir.file("out.f32"));
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char *name : {"inp_embd", "attn_norm-0", "Qcur-0", "Kcur-0", "Vcur-0", "kqv_out-1", "ffn_inp-1",
                             "ffn_out-1", "l_out-1", "result_norm", "result_output", "ffn_moe_topk-0"}) {
        std::string padded = " ";
        padded.append(name).append(" ");
        EXPECT_NE(r.err.find(padded), std::string::npos) << name << "\n" << r.err;
    }
    EXPECT_NE(r.err.find("experts:"), std::string::npos);
    EXPECT_NE(r.err.find("nan=0"), std::string::npos);
}

TEST(Cli, DumpWeight) {
    toy::test::TempDir dir;
    Result r = run_toy("logits -m " + toy::test::fixture_path("llama-256.q8_0.gguf") +
                       " --dump-weight blk.0.attn_q.weight -o " + dir.file("w.f32"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(toy::test::read_f32(dir.file("w.f32")).size(), 256u * 256u);
}

}  // namespace

namespace {

TEST(Cli, RunGeneratesFromEveryArchitecture) {
    for (const char *name : {"llama-tied.f32", "qwen2.f32", "qwen3.f32", "gemma2.f32", "mixtral.f32", "qwen3moe.f32",
                             "olmoe.f32", "gpt2.f32", "granite.f32", "llama-256.q4_k_m"}) {
        Result r = run_toy(std::string("run -m ") + toy::test::fixture_path(std::string(name) + ".gguf") +
                           " -p 'Hello there' -n 8 --temp 0 --ignore-eos --json");
        ASSERT_EQ(r.code, 0) << name << ": " << r.err;
        auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["tokens"].size(), 8u) << name;
        EXPECT_GT(j["prompt_tokens"].size(), 1u) << name;
    }
}

}  // namespace
