// `toy bench`: the JSON it prints has llama-bench's fields and sane values
// (never timing thresholds: speed is measured by bench/compare.sh, not here),
// bad flags fail with one line, and the roofline byte count is what a decode
// step reads.
#include "model/model.h"
#include "runtime/bandwidth.h"

#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <set>
#include <string>

namespace {

const std::string kTied = std::string(TOY_SHARED_DIR) + "/fixtures/llama-tied.f32.gguf";
// heads of 32 values, one block of a quantized cache (llama-tied's 16 are refused there)
const std::string kHeads32 = std::string(TOY_SHARED_DIR) + "/fixtures/llama-256.q8_0.gguf";
const std::string kUntied = std::string(TOY_SHARED_DIR) + "/fixtures/llama-untied.f16.gguf";

using toy::test::run_toy;
using toy::test::shell_quote;

int count_lines(const std::string &s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n + (!s.empty() && s.back() != '\n');
}

TEST(Bench, JsonHasLlamaBenchFields) {
    toy::test::CommandResult r = run_toy("bench -m " + shell_quote(kTied) + " -p 8 -n 4 -r 2 -t 1 --json");
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 2u);
    const auto &pp = j[0], &tg = j[1];
    EXPECT_EQ(pp["n_prompt"], 8);
    EXPECT_EQ(pp["n_gen"], 0);
    EXPECT_EQ(pp["test"], "pp8");
    EXPECT_EQ(tg["n_prompt"], 0);
    EXPECT_EQ(tg["n_gen"], 4);
    EXPECT_EQ(tg["test"], "tg4");
    for (const auto &t : j) {
        for (const char *key : {"n_prompt", "n_gen", "avg_ts", "stddev_ts", "avg_ns", "stddev_ns", "samples_ts",
                                "samples_ns", "model_filename", "model_type", "model_size", "model_n_params",
                                "n_threads", "type_k", "type_v", "flash_attn", "n_batch", "n_ubatch", "load_ms",
                                "load_first_eval_ms", "peak_rss_bytes"}) {
            EXPECT_TRUE(t.contains(key)) << key;
        }
        EXPECT_GT(t["avg_ts"].get<double>(), 0.0);
        EXPECT_GE(t["stddev_ts"].get<double>(), 0.0);
        ASSERT_EQ(t["samples_ts"].size(), 2u);
        ASSERT_EQ(t["samples_ns"].size(), 2u);
        for (const auto &s : t["samples_ts"]) EXPECT_GT(s.get<double>(), 0.0);
        EXPECT_EQ(t["model_filename"], kTied);
        EXPECT_EQ(t["n_threads"], 1);
        EXPECT_EQ(t["type_k"], "f16");
        EXPECT_EQ(t["type_v"], "f16");
        EXPECT_EQ(t["flash_attn"], -1);
        EXPECT_GT(t["model_size"].get<int64_t>(), 0);
        EXPECT_GT(t["model_n_params"].get<int64_t>(), 0);
        EXPECT_GE(t["load_ms"].get<double>(), 0.0);
        EXPECT_GE(t["load_first_eval_ms"].get<double>(), t["load_ms"].get<double>());
        EXPECT_GT(t["peak_rss_bytes"].get<int64_t>(), 0);
        // every bound weight byte is somewhere: mapped in place or in a buffer
        ASSERT_TRUE(t["weights_by_buffer"].is_object());
        int64_t placed = 0;
        for (const auto &[buf, bytes] : t["weights_by_buffer"].items()) placed += bytes.get<int64_t>();
        EXPECT_GE(placed, t["model_size"].get<int64_t>());
    }
}

TEST(Bench, CommaListsZeroSkipsAndCacheFlags) {
    toy::test::CommandResult r = run_toy("bench -m " + shell_quote(kHeads32) +
                          " -p 4,8 -n 0 -r 1 -t 1 -ctk q8_0 -ctv q8_0 -fa on --no-warmup -o json");
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[0]["n_prompt"], 4);
    EXPECT_EQ(j[1]["n_prompt"], 8);
    for (const auto &t : j) {
        EXPECT_EQ(t["n_gen"], 0);
        EXPECT_EQ(t["type_k"], "q8_0");
        EXPECT_EQ(t["type_v"], "q8_0");
        EXPECT_EQ(t["flash_attn"], 1);
        EXPECT_EQ(t["samples_ts"].size(), 1u);
    }
}

TEST(Bench, MarkdownTable) {
    toy::test::CommandResult r = run_toy("bench -m " + shell_quote(kTied) + " -p 8 -n 4 -r 1 -t 1");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("| model"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("t/s"), std::string::npos);
    EXPECT_NE(r.out.find(" pp8 |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" tg4 |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("peak RSS"), std::string::npos);
}

TEST(Bench, BadFlagsFailWithOneLine) {
    const std::string m = "bench -m " + shell_quote(kTied) + " -t 1 ";
    for (const std::string &args : {m + "-p abc", m + "-p 8,-1", m + "-n 4x", m + "-r 0", m + "-ctk q3_k", m + "-fa maybe",
                                   m + "-o xml", std::string("bench -p 8"),
                                   std::string("bench -m /nonexistent/model.gguf -p 8")}) {
        SCOPED_TRACE(args);
        toy::test::CommandResult r = run_toy(args);
        EXPECT_EQ(r.code, 1);
        EXPECT_EQ(count_lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
    // unknown flags: one line naming the flag, exit 1
    EXPECT_EQ(run_toy(m + "--no-such-flag").code, 1);
}

TEST(Bench, RooflineJson) {
    toy::test::CommandResult r = run_toy("bench --roofline --roofline-mib 64 -t 1 --json");
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_EQ(j.size(), 1u);
    EXPECT_GT(j[0]["bandwidth_gbs"].get<double>(), 0.0);
    EXPECT_EQ(j[0]["n_threads"], 1);
    EXPECT_GE(j[0]["buffer_bytes"].get<int64_t>(), 64 << 20);

    r = run_toy("bench -m " + shell_quote(kTied) + " --roofline --roofline-mib 64 -n 4 -r 1 -t 1 --json");
    ASSERT_EQ(r.code, 0) << r.err;
    j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_EQ(j.size(), 1u);  // roofline mode runs pp only when -p is given
    EXPECT_EQ(j[0]["n_gen"], 4);
    EXPECT_GT(j[0]["ceiling_ts"].get<double>(), 0.0);
    EXPECT_GT(j[0]["ceiling_fraction"].get<double>(), 0.0);
    EXPECT_EQ(j[0]["bytes_per_token"].get<int64_t>(),
              j[0]["weight_bytes_per_token"].get<int64_t>() + j[0]["kv_bytes_per_token"].get<int64_t>());
    EXPECT_GT(j[0]["weights_bandwidth_gbs"].get<double>(), 0.0);
    EXPECT_NEAR(j[0]["weights_ceiling_ts"].get<double>() * j[0]["bytes_per_token"].get<double>(),
                j[0]["weights_bandwidth_gbs"].get<double>() * 1e9, 1e-6 * j[0]["weights_bandwidth_gbs"].get<double>() * 1e9);

    // each run between two reads of the weights: those whose reads agree within 10% are counted
    r = run_toy("bench -m " + shell_quote(kTied) + " --roofline --roofline-mib 64 -n 4 -r 3 -t 1 --json");
    ASSERT_EQ(r.code, 0) << r.err;
    j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    if (j[0].contains("paired_steady_runs")) {  // (a busy machine may leave none)
        EXPECT_GE(j[0]["paired_steady_runs"].get<int>(), 1);
        EXPECT_LE(j[0]["paired_steady_runs"].get<int>(), 3);
        EXPECT_GT(j[0]["paired_fraction"].get<double>(), 0.0);
    }
    r = run_toy("bench -m " + shell_quote(kTied) + " --roofline --roofline-mib 64 -n 4 -r 3 -t 1");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("tg4: each run between two reads of the weights ("), std::string::npos) << r.out;
}

// The weights' probe reads what a decode step reads of them, in whole 256-byte
// steps: every weight but an embedding of which a decode gathers one row.
TEST(Bench, WeightProbeReadsTheDecodesWeights) {
    for (const std::string &path : {kTied, kUntied}) {
        SCOPED_TRACE(path);
        auto m = toy::Model::load(path);
        const toy::DecodeBytes d = toy::decode_bytes_per_token(*m, 1, GGML_TYPE_F16, GGML_TYPE_F16);
        size_t skipped = 0, tensors = 0;
        for (const ggml_tensor *t : m->bound_tensors()) {
            ++tensors;
            // the one row of the embedding that d counts (untied, or tied to a converted copy), which the
            // probe leaves out with the rest of it
            if (t == m->weights().tok_embd && m->weights().output != t) skipped = ggml_row_size(t->type, t->ne[0]);
        }
        for (int threads : {1, 2, 3}) {
            const toy::BandwidthResult r = toy::measure_weight_bandwidth(*m, threads, 1);
            EXPECT_EQ(r.n_threads, threads);
            EXPECT_GT(r.gb_per_s, 0.0);
            EXPECT_LE(r.buffer_bytes, d.weights - skipped);
            EXPECT_GT(r.buffer_bytes + 256 * tensors, d.weights - skipped);
        }
    }
}

TEST(Bench, DecodeBytesTiedCountsTheWholeEmbedding) {
    auto m = toy::Model::load(kTied);
    ASSERT_TRUE(m->weights().tied_output);
    const auto &c = m->config();
    toy::DecodeBytes b = toy::decode_bytes_per_token(*m, 10, GGML_TYPE_F16, GGML_TYPE_F16);
    // the output projection reads the (tied) embedding in full: every weight byte counts
    EXPECT_EQ(b.weights, m->weight_bytes());
    EXPECT_EQ(b.kv, (size_t)(c.n_layer * 10 * (c.n_embd_k_gqa() + c.n_embd_v_gqa()) * 2));
    toy::DecodeBytes q = toy::decode_bytes_per_token(*m, 10, GGML_TYPE_Q8_0, GGML_TYPE_F32);
    const size_t k_row = (size_t)c.n_embd_k_gqa() / 32 * 34;
    EXPECT_EQ(q.kv, (size_t)c.n_layer * 10 * (k_row + (size_t)c.n_embd_v_gqa() * 4));
}

TEST(Bench, DecodeBytesUntiedCountsOneEmbeddingRow) {
    auto m = toy::Model::load(kUntied);
    ASSERT_FALSE(m->weights().tied_output);
    const ggml_tensor *e = m->weights().tok_embd;
    toy::DecodeBytes b = toy::decode_bytes_per_token(*m, 1, GGML_TYPE_F16, GGML_TYPE_F16);
    EXPECT_EQ(b.weights, m->weight_bytes() - ggml_nbytes(e) + ggml_row_size(e->type, e->ne[0]));
}

}  // namespace

namespace {

// llama-bench's habits: comma lists for the session flags (every combination
// runs), -pg, -d, and md / csv / json / jsonl with a row per test.
TEST(Bench, ListsPgDepthAndEveryOutputFormat) {
    const std::string m = "bench -m " + shell_quote(kHeads32) + " -r 1 --no-warmup ";
    toy::test::CommandResult r = run_toy(m + "-p 8 -n 4 -pg 8,2 -d 0,16 -t 1,2 -fa 0,1 -ctk f16,q8_0 -o jsonl");
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<nlohmann::json> rows;
    size_t at = 0;
    while (at < r.out.size()) {
        const size_t end = r.out.find('\n', at);
        rows.push_back(nlohmann::json::parse(r.out.substr(at, end - at)));
        at = end + 1;
    }
    // 2 threads x 2 fa x 2 ctk combinations, each with 3 tests at 2 depths
    ASSERT_EQ(rows.size(), 2u * 2 * 2 * 3 * 2);
    std::set<std::string> tests, combos;
    for (const auto &j : rows) {
        tests.insert(j["test"].get<std::string>());
        combos.insert(fmt::format("{}/{}/{}", j["n_threads"].get<int>(), j["flash_attn"].get<int>(), j["type_k"].get<std::string>()));
        EXPECT_EQ(j["n_ctx"].get<int>(), j["n_depth"].get<int>() + j["n_prompt"].get<int>() + j["n_gen"].get<int>());
        EXPECT_GT(j["avg_ts"].get<double>(), 0.0);
    }
    EXPECT_EQ(tests, (std::set<std::string>{"pp8", "tg4", "pp8+tg2", "pp8 @ d16", "tg4 @ d16", "pp8+tg2 @ d16"}));
    EXPECT_EQ(combos.size(), 8u);

    toy::test::CommandResult csv = run_toy(m + "-p 8 -n 0 -ctk f16,q8_0 -o csv");
    ASSERT_EQ(csv.code, 0) << csv.err;
    EXPECT_EQ(count_lines(csv.out), 3) << csv.out;  // header + 2 rows
    EXPECT_EQ(csv.out.rfind("build,backends,model_filename", 0), 0u) << csv.out;
    EXPECT_NE(csv.out.find(",q8_0,"), std::string::npos);

    toy::test::CommandResult md = run_toy(m + "-p 8 -n 0 -ctk f16,q8_0");
    ASSERT_EQ(md.code, 0) << md.err;
    EXPECT_NE(md.out.find("| type_k |"), std::string::npos) << md.out;
    EXPECT_NE(md.out.find("q8_0"), std::string::npos);

    toy::test::CommandResult json = run_toy(m + "-p 8 -n 0 -t 1,2 -o json");
    ASSERT_EQ(json.code, 0) << json.err;
    EXPECT_EQ(nlohmann::json::parse(json.out).size(), 2u);

    for (const char *bad : {"-pg 8", "-pg 8,0", "-t 1,x", "-fa 1,maybe", "-ctk f16,q3_k", "-d -1", "-o xml",
                                   "-t 1, -p 8"}) {
        SCOPED_TRACE(bad);
        toy::test::CommandResult b = run_toy(m + std::string(bad));
        EXPECT_EQ(b.code, 1);
        EXPECT_EQ(count_lines(b.err), 1) << b.err;
        EXPECT_TRUE(b.out.empty()) << b.out;
    }
}

// each row is printed when its test is done, not at the end: the pp row
// arrives while the long tg test still runs (the process is then stopped)
TEST(Bench, RowsAppearAsTestsFinish) {
    const std::string cmd = "exec " + shell_quote(toy::test::toy_bin()) + " bench -m " + shell_quote(kTied) +
                            " -r 1 -p 8 -n 4000 -o jsonl 2>/dev/null";
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl("/bin/sh", "sh", "-c", cmd.c_str(), (char *)nullptr);
        _exit(127);
    }
    close(fds[1]);
    std::string first;
    char c;
    while (read(fds[0], &c, 1) == 1 && c != '\n') first += c;
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    EXPECT_EQ(nlohmann::json::parse(first)["test"], "pp8");
    EXPECT_TRUE(WIFSIGNALED(status)) << "the pp row came only after every test had finished";
}

}  // namespace
