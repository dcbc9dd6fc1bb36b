// The toy executable end to end: generation matches llama.cpp's greedy text,
// bad input gives one clear line and exit code 1.
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
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
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --json --n-probs -1"), "--n-probs");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --context-shift --keep -5"), "--keep: expected -1");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi -r ''"), "-r: expected a text to stop at");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --temp nan"), "--temp: expected a finite number, found 'nan'");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --top-p inf"), "--top-p: expected a finite number, found 'inf'");
}

TEST(Cli, AModelThatGivesNaNLogitsIsAnErrorNotNoise) {
    // a NaN in the output projection (a corrupt file, a training run that
    // diverged): sampling around it printed text as if nothing were wrong
    toy::test::TempDir dir;
    const std::string path = dir.file("nan.gguf");
    {
        auto f = toy::gguf::File::open(toy::test::fixture_path("llama-untied.f16.gguf"));
        toy::gguf::Writer w(f->alignment());
        w.copy_metadata(*f);
        std::vector<ggml_fp16_t> q;
        for (const auto &t : f->tensors()) {
            if (t.name != "output.weight") {
                w.add_tensor(t.name, t.type, t.ne, t.n_dims, f->tensor_data(t));
                continue;
            }
            ASSERT_EQ(t.type, GGML_TYPE_F16);
            const auto *src = static_cast<const ggml_fp16_t *>(f->tensor_data(t));
            q.assign(src, src + t.n_elements());
            q[0] = ggml_fp32_to_fp16(std::nanf(""));
            w.add_tensor(t.name, t.type, t.ne, t.n_dims, q.data());
        }
        w.write(path);
    }
    for (const char *args : {" -p hi -n 4", " -p hi -n 4 --temp 0.8 --seed 1", " -p hi -n 4 --json"}) {
        expect_one_line_error(run_toy("run -m " + path + args), "the model's logits are not finite");
    }
    // --check-tensors finds it at load; the fixture itself passes
    expect_one_line_error(run_toy("run --check-tensors -m " + path + " -p hi -n 4"),
                          "tensor 'output.weight' (f16) holds a non-finite value in row 0 (--check-tensors)");
    const std::string fixture = toy::test::fixture_path("llama-untied.f16.gguf");
    const Result ok = run_toy("run --check-tensors -m " + fixture + " -p hi -n 4");
    EXPECT_EQ(ok.code, 0) << ok.err;
    // a NaN in an adapter: the same two ways
    const std::string adapter = dir.file("nan-lora.gguf");
    {
        toy::gguf::Writer w;
        w.set("general.architecture", toy::gguf::Value::str("llama"));
        w.set("general.type", toy::gguf::Value::str("adapter"));
        w.set("adapter.type", toy::gguf::Value::str("lora"));
        w.set("adapter.lora.alpha", toy::gguf::Value::f32(2.0f));
        std::vector<float> a(128 * 2, 0.01f), b(2 * 512, 0.01f);
        b[4] = std::nanf("");  // rank 2: token 2's row
        w.add_tensor("output.weight.lora_a", GGML_TYPE_F32, {128, 2, 1, 1}, 2, a.data());
        w.add_tensor("output.weight.lora_b", GGML_TYPE_F32, {2, 512, 1, 1}, 2, b.data());
        w.write(adapter);
    }
    expect_one_line_error(run_toy("run -m " + fixture + " --lora " + adapter + " -p hi -n 4"), "the model's logits are not finite (token 2: nan)");
    expect_one_line_error(run_toy("run --check-tensors -m " + fixture + " --lora " + adapter + " -p hi -n 4"),
                          "nan-lora.gguf: tensor 'output.weight.lora_b' (f32) holds a non-finite value in row 2 (--check-tensors)");
}

// CLI11 (2.1) converted a numeric flag's value loosely: an empty value was 0
// (--temp '' sampled greedily), a negative value of an unsigned flag wrapped
// (--seed -2 was 2^64 - 2), a number past 64 bits saturated, 010 was octal 8
// and 1e39 an infinite float. Every numeric flag of every command is read as
// written now, or refused with one line.
TEST(Cli, NumericFlagValuesAreReadAsWritten) {
    const std::string run = "run -m " + kStories + " -p 'Once upon a time' --json ";
    expect_one_line_error(run_toy(run + "--temp ''"), "--temp: expected a number, found an empty value");
    expect_one_line_error(run_toy(run + "-t ''"), "--threads: expected a number, found an empty value");
    expect_one_line_error(run_toy(run + "--temp 1e39"), "--temp: expected a finite number, found '1e39'");
    expect_one_line_error(run_toy(run + "-b 99999999999999999999"), "--batch-size: '99999999999999999999' is out of range");
    expect_one_line_error(run_toy(run + "-n 0x10"), "--n-predict: expected a whole number, found '0x10'");
    expect_one_line_error(run_toy(run + "--seed 18446744073709551616"), "--seed: '18446744073709551616' is out of range");
    expect_one_line_error(run_toy(run + "--seed -2"), "--seed: expected -1 (a random seed) or a seed >= 0, found '-2'");
    expect_one_line_error(run_toy("train -m " + kStories + " -f x --seed -1 -o x"), "--seed: expected a whole number >= 0, found '-1'");
    expect_one_line_error(run_toy("bench -m " + kStories + " -p 8 -n 0 --roofline-mib ''"), "--roofline-mib: expected a number");
    // a flag of two values: the scale of every FILE SCALE pair (NaN made every logit NaN), not the file
    const std::string adapter = std::string(TOY_SOURCE_DIR) + "/tests/data/lora-llama/llama-q8_0.a.gguf";
    expect_one_line_error(run_toy(run + "--lora-scaled " + adapter + " nan"), "--lora-scaled: expected a finite number, found 'nan'");
    expect_one_line_error(run_toy(run + "--lora-scaled " + adapter + " 0.5 --lora-scaled " + adapter + " ''"),
                          "--lora-scaled: expected a number, found an empty value");
    // 010 is ten, +8 is eight; -1 is a random seed, as in llama.cpp
    EXPECT_EQ(nlohmann::json::parse(run_toy(run + "-n 010").out)["tokens"].size(), 10u);
    EXPECT_EQ(nlohmann::json::parse(run_toy(run + "-n +8").out)["tokens"].size(), 8u);
    const auto seed = [&](const std::string &flags) { return nlohmann::json::parse(run_toy(run + "-n 1 " + flags).out)["seed"]; };
    EXPECT_NE(seed("--seed -1"), seed("--seed -1"));
    EXPECT_EQ(seed("--seed 007"), 7u);
}

// A flag of one value given again takes the last value, as in llama.cpp's
// tools (CLI11 refused it: "At Most 1 required but received 2"); a flag of
// several values keeps each.
TEST(Cli, AFlagGivenAgainTakesItsLastValue) {
    const std::string run = "run -m " + kStories + " -p 'Once upon a time' --json ";
    const auto greedy = nlohmann::json::parse(run_toy(run + "-n 6 --temp 0").out)["tokens"];
    const auto again = nlohmann::json::parse(run_toy(run + "-m " + kStories + " -n 3 -n 6 --temp 0.9 --temp 0").out)["tokens"];
    EXPECT_EQ(again, greedy);
    expect_one_line_error(run_toy(run + "-n 4 -n -7"), "-n: expected -1 (until end of text) or a count >= 0, found -7");
    // both stop strings count: the text stops at the first of either
    const auto text = [&](const std::string &flags) {
        return nlohmann::json::parse(run_toy(run + "-n 40 --temp 0 " + flags).out)["text"].get<std::string>();
    };
    EXPECT_EQ(text("-r girl -r xyz"), text("-r girl"));
    EXPECT_EQ(text("-r xyz -r girl"), text("-r girl"));
}

// More threads than ggml's CPU pool holds (512) crashed `toy run` (SIGSEGV
// at -t 100000); every command that takes a thread count says so instead,
// before it reads or writes anything.
// The environment variables toy reads: a value it does not know is a named
// warning and the default, never silently the default.
TEST(Cli, UnknownEnvironmentValuesAreNamedWarnings) {
    const std::string run = toy::test::shell_quote(toy::test::toy_bin()) + " run -m " + toy::test::fixture_path("llama-256.q8_0.gguf") +
                            " --tokens 1,2 -n 2 --temp 0";
    for (const auto &[env, warning] : std::vector<std::pair<std::string, std::string>>{
             {"TOY_GGML_LOG=loud", "toy: warning: TOY_GGML_LOG=loud: expected info, debug or warn; using warn"},
             {"TOY_FLASH_ATTN_KERNEL=fast", "toy: warning: TOY_FLASH_ATTN_KERNEL=fast: expected ggml"},
             {"TOY_PACKED_KERNELS=sse9", "toy: warning: TOY_PACKED_KERNELS=sse9: expected amx, avx512, avx2 or off"},
             {"TOY_PREFETCH=near", "toy: warning: TOY_PREFETCH=near: expected L1,L2 (bytes ahead"},
             {"TOY_PREFETCH=0,4096", "toy: warning: TOY_PREFETCH=0,4096: expected L1,L2 (bytes ahead"},
             {"TOY_PREFETCH=1024,4096x", "toy: warning: TOY_PREFETCH=1024,4096x: expected L1,L2 (bytes ahead"},
         }) {
        SCOPED_TRACE(env);
        const auto r = toy::test::run_command(env + " " + run);
        EXPECT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
    }
    const auto quiet = toy::test::run_command("TOY_GGML_LOG=warn TOY_FLASH_ATTN_KERNEL=ggml TOY_PREFETCH=512,0 " + run);
    EXPECT_EQ(quiet.err.find("warning"), std::string::npos) << quiet.err;
}

TEST(Cli, ThreadCountsPastGgmlsPoolAreOneLineErrors) {
    const toy::test::TempDir dir;
    const std::string out = dir.file("out.gguf");
    const std::vector<std::string> commands = {
        "run -m " + kStories + " -p hi -n 2 -t 100000",
        "bench -m " + kStories + " -p 8 -n 0 -r 1 -t 513",
        "train -m " + kStories + " -f " + kStories + " --steps 1 -t 100000 -o " + out,
        "eval -m " + kStories + " -f " + kStories + " -t 9999",
        "rpc-server -t 600",
        "init --arch llama --preset smollm2-135m -t 100000 -o " + out,
        "convert " + toy::test::shared_path("models/TinyStories-656K") + " -o " + out + " -t 9999",
    };
    for (const std::string &cmd : commands) {
        SCOPED_TRACE(cmd);
        expect_one_line_error(run_toy(cmd), "expected at most 512 threads");
    }
    expect_one_line_error(run_toy("quantize " + kStories + " " + out + " q8_0 100000"), "NTHREADS");
    EXPECT_FALSE(std::filesystem::exists(out));
    const Result ok = run_toy("run -m " + kStories + " -p hi -n 1 -t 512");
    EXPECT_EQ(ok.code, 0) << ok.err;
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi -n 1 -t -2"), "-t -2: expected a number of threads (0: all cores)");
    const Result all = run_toy("run -m " + kStories + " -p hi -n 1 -t -1");  // llama.cpp's "all cores"
    EXPECT_EQ(all.code, 0) << all.err;
}

// toy serve's numbers (and --pooling) are checked before it binds its port and starts its
// HTTP threads (one per sequence and queued request): --parallel 100000 and
// --max-queue 100000000 ended in std::system_error from thread creation, a
// port past 65535 was bound modulo 65536.
TEST(Cli, ServeFlagsOutOfRangeAreOneLineErrors) {
    // each flag and the start of its message (the message repeats the value)
    for (const std::string flags : {"--port 99999", "--port -1", "--max-queue 100000000", "--max-queue -1", "--max-body 0", "-b 0"}) {
        SCOPED_TRACE(flags);
        expect_one_line_error(run_toy("serve -m " + kStories + " " + flags), flags + ":");
    }
    for (const std::string n : {"100000", "0"}) expect_one_line_error(run_toy("serve -m " + kStories + " --parallel " + n), "-np " + n + ":");
    // the accepted values named are serve's own: no "none" among them
    for (const std::string p : {"none", "max"}) {
        expect_one_line_error(run_toy("serve -m " + kStories + " --pooling " + p), "--pooling " + p + ": expected mean, cls or last");
    }
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

// llama.cpp habits (issue 13): single-dash long flags, flag values as
// llama.cpp spells them, escapes, id lists, unknown commands, empty prompts,
// standard input, and a note when the context ends generation.
TEST(Cli, SingleDashLongFlagsAreLongFlagsOrNamedErrors) {
    // known as toy's own long flags or aliases: work as the long form does
    Result a = run_toy("run -m " + kStories + " -p Once -n 4 --temp 0 -no-cnv -ctk f16 -fa 1");
    ASSERT_EQ(a.code, 0) << a.err;
    Result b = run_toy("run -m " + kStories + " -p Once -n 4 --temp 0 -no-bos");
    ASSERT_EQ(b.code, 0) << b.err;
    // -ngl is --n-gpu-layers: with no GPU and no --rpc, nothing to offload to
    expect_one_line_error(run_toy("run -m " + kStories + " -p Once -ngl 99"), "-ngl 99: no GPU or RPC device");
    Result none = run_toy("run -m " + kStories + " -p Once -n 4 --temp 0 -ngl 0 -sm none -dev none");
    ASSERT_EQ(none.code, 0) << none.err;
    // unknown: one line naming the flag, exit 1, never help and 0
    expect_one_line_error(run_toy("run -m " + kStories + " -p Once -nkvo"), "'-nkvo'");
    expect_one_line_error(run_toy("run -hf org/x"), "'-hf'");
    expect_one_line_error(run_toy("bench -m " + kStories + " -mmp 0"), "'-mmp'");
    // a value that looks like a flag is still the value
    Result v = run_toy("tokenize -m " + kStories + " -p -hello --ids");
    ASSERT_EQ(v.code, 0) << v.err;
    Result w = run_toy("tokenize -m " + kStories + " --prompt=-hello --ids");
    EXPECT_EQ(v.out, w.out);
    Result x = run_toy("tokenize -m " + kStories + " -p hello --ids");
    EXPECT_NE(v.out, x.out);
}

TEST(Cli, FlashAttentionAndCacheTypesAsLlamaCppSpellsThem) {
    const std::string base = "run -m " + kStories + " -p Once -n 6 --temp 0 -c 64 ";
    Result ref = run_toy(base + "-fa off");
    ASSERT_EQ(ref.code, 0) << ref.err;
    for (const char *fa : {"1", "true", "on"}) {
        Result r = run_toy(base + "-fa " + fa);
        EXPECT_EQ(r.code, 0) << fa << r.err;
    }
    for (const char *fa : {"0", "false"}) EXPECT_EQ(run_toy(base + "-fa " + fa).out, ref.out) << fa;
    Result bf16 = run_toy(base + "-ctk bf16 -ctv bf16");
    EXPECT_EQ(bf16.code, 0) << bf16.err;
    EXPECT_NE(bf16.out.find("Once"), std::string::npos);
    // a quantized cache stores each head's row in blocks of 32: stories260K's heads have 8 values
    // (as llama.cpp, refused), llama-256's 32
    expect_one_line_error(run_toy(base + "-ctk q8_0"), "K heads of 8 values are not a multiple of its block size 32");
    expect_one_line_error(run_toy(base + "-ctv q4_0"), "V heads of 8 values are not a multiple of its block size 32");
    const std::string quant = "run -m " + toy::test::fixture_path("llama-256.q8_0.gguf") + " -p 'Once upon' -n 6 --temp 0 -c 64 ";
    for (const char *t : {"q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}) {
        Result r = run_toy(quant + "-ctk " + t + " -ctv " + t);
        EXPECT_EQ(r.code, 0) << t << ": " << r.err;
        EXPECT_NE(r.out.find("Once"), std::string::npos) << t;
    }
    expect_one_line_error(run_toy(base + "-ctk q3_k"), "q5_1");  // the error lists what is accepted
}

// toy's attention kernel reads every cache type itself, K and V of one type
// or two; ggml's kernel (TOY_FLASH_ATTN_KERNEL=ggml) computes the same
// attention over the same values. On F32 weights (no activation rounding to
// amplify a last-bit difference) the logits agree to summation order where
// both kernels sum in F32 (~1e-7), and within 3e-3 where ggml does not quite
// (an F16 V summed in F16, a Q4_1/Q5_1 K's products through Q8_1's F16
// sums, BF16 products by VDPBF16PS); a value decoded wrongly moves them as
// far as the cache's own rounding does (d_r 0.04-0.09 against F32 K and V
// for the 4- and 5-bit types). Prompts (the tile kernel) and one token at a
// time (decoding).
TEST(Cli, EveryCacheTypeOnToysKernelGivesGgmlsAnswers) {
    const toy::test::TempDir dir;
    const auto ref = toy::test::read_json(toy::test::fixture_path("llama-256.f32.json"));
    const std::string ids = toy::test::join_ids(ref["tokens"].get<std::vector<int>>());
    const std::string args = "logits -m " + toy::test::fixture_path("llama-256.f32.gguf") + " --tokens " + ids + " -fa on ";
    for (const auto &[k, v] : std::vector<std::pair<std::string, std::string>>{
             {"q4_0", "q4_1"}, {"q5_0", "q5_1"}, {"iq4_nl", "iq4_nl"}, {"bf16", "q5_0"}, {"q8_0", "iq4_nl"}, {"q4_0", "bf16"},
             {"q5_0", "q4_0"}, {"q4_1", "q4_1"}, {"q5_1", "q5_1"}, {"q8_0", "f16"}, {"f16", "q8_0"}}) {
        for (const std::string mode : {"", " --stepwise"}) {
            SCOPED_TRACE("-ctk " + k + " -ctv " + v + mode);
            const std::string types = "-ctk " + k + " -ctv " + v + mode;
            const Result toys = run_toy(args + types + " -o " + dir.file("toy.f32"));
            const Result ggmls = toy::test::run_command("TOY_FLASH_ATTN_KERNEL=ggml " + toy::test::shell_quote(toy::test::toy_bin()) +
                                                        " " + args + types + " -o " + dir.file("ggml.f32"));
            ASSERT_EQ(toys.code, 0) << toys.err;
            ASSERT_EQ(ggmls.code, 0) << ggmls.err;
            const auto s = toy::test::compare_rows(toy::test::read_f32(dir.file("toy.f32")), toy::test::read_f32(dir.file("ggml.f32")), 512);
            EXPECT_LE(s.d_max, 5e-3);
            EXPECT_GE(s.argmax_equal, 0.95);
        }
    }
}

TEST(Cli, EscapesAreOneRuleForEveryCommand) {
    // the prompt's tokens as run sees them equal tokenize's, both with the newline processed
    Result json = run_toy("run -m " + kStories + " -p 'a\\nb' -n 1 --temp 0 --json");
    ASSERT_EQ(json.code, 0) << json.err;
    Result tok = run_toy("tokenize -m " + kStories + " -p 'a\\nb' --ids");
    Result nl = run_toy("tokenize -m " + kStories + " -p \"$(printf 'a\\nb')\" --ids");
    Result literal = run_toy("tokenize -m " + kStories + " -p 'a\\nb' --ids --no-escape");
    ASSERT_EQ(tok.code, 0) << tok.err;
    EXPECT_EQ(tok.out, nl.out);
    EXPECT_NE(tok.out, literal.out);
    auto prompt = nlohmann::json::parse(json.out)["prompt_tokens"];
    EXPECT_EQ(prompt.dump(-1), nlohmann::json::parse(tok.out).dump(-1));
    Result run_literal = run_toy("run -m " + kStories + " -p 'a\\nb' -n 1 --temp 0 --json --no-escape");
    EXPECT_EQ(nlohmann::json::parse(run_literal.out)["prompt_tokens"].dump(-1),
              nlohmann::json::parse(literal.out).dump(-1));
}

TEST(Cli, TokenIdsRoundTripInEveryPrintedForm) {
    Result tok = run_toy("tokenize -m " + kStories + " -p 'Once upon a time' --ids");  // [1, 2, 3]
    ASSERT_EQ(tok.code, 0) << tok.err;
    std::string list = tok.out.substr(0, tok.out.find('\n'));
    Result from_brackets = run_toy("detokenize -m " + kStories + " --ids '" + list + "'");
    ASSERT_EQ(from_brackets.code, 0) << from_brackets.err;
    EXPECT_NE(from_brackets.out.find("Once upon a time"), std::string::npos) << from_brackets.out;
    // run --tokens prints "261 378 ..." and takes that back
    Result gen = run_toy("run -m " + kStories + " --tokens '" + list + "' -n 4 --temp 0");
    ASSERT_EQ(gen.code, 0) << gen.err;
    const std::string spaced = gen.out.substr(0, gen.out.find('\n'));
    Result again = run_toy("detokenize -m " + kStories + " --ids '" + spaced + "'");
    EXPECT_EQ(again.code, 0) << again.err;
    Result r2 = run_toy("run -m " + kStories + " --tokens '1 " + spaced + "' -n 1 --temp 0");
    EXPECT_EQ(r2.code, 0) << r2.err;
    expect_one_line_error(run_toy("detokenize -m " + kStories + " --ids '[1, 2'"), "]");
}

TEST(Cli, UnknownCommandsEmptyPromptsAndStandardInput) {
    expect_one_line_error(run_toy("server -m " + kStories), "did you mean 'serve'");
    expect_one_line_error(run_toy("quantise a b q8_0"), "did you mean 'quantize'");
    expect_one_line_error(run_toy("tokenise -m " + kStories + " -p hi"), "did you mean 'tokenize'");
    // an empty -p is given (llama.cpp then starts from BOS alone); with --no-bos nothing is left
    Result empty = run_toy("run -m " + kStories + " -p '' -n 4 --temp 0 --json");
    ASSERT_EQ(empty.code, 0) << empty.err;
    EXPECT_EQ(nlohmann::json::parse(empty.out)["prompt_tokens"].size(), 1u);
    expect_one_line_error(run_toy("run -m " + kStories + " -p '' --no-bos"), "empty");
    expect_one_line_error(run_toy("run -m " + kStories + " -p a -f b"), "only one");
    expect_one_line_error(run_toy("run -m " + kStories), "no prompt");
    Result in = toy::test::run_command("printf 'Once upon a time' | " + toy::test::shell_quote(toy::test::toy_bin()) + " run -m " + kStories +
                            " -f - -n 4 --temp 0 --json");
    ASSERT_EQ(in.code, 0) << in.err;
    Result p = run_toy("run -m " + kStories + " -p 'Once upon a time' -n 4 --temp 0 --json");
    EXPECT_EQ(nlohmann::json::parse(in.out)["tokens"], nlohmann::json::parse(p.out)["tokens"]);
}

// An input without end (a device, an endless pipe, a stream without line
// ends) grew a string until memory ran out.
TEST(Cli, InputsWithoutEndStopAtABound) {
    for (const std::string &cmd : {"tokenize -m " + kStories + " -f /dev/zero", "tokenize -m " + kStories + " --stdin < /dev/zero",
                                  "run -m " + kStories + " -n 1 -f - < /dev/zero"}) {
        SCOPED_TRACE(cmd);
        expect_one_line_error(run_toy(cmd), "gives more than 1 GiB (a stream without end?)");
    }
    const std::string long_line = "toy: error: standard input: a line of more than 64 MiB";
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi -n 1 -i < /dev/zero"), long_line);
    // (chat has said which template it uses before it reads)
    const Result chat = run_toy("chat -m " + kStories + " --chat-template chatml -n 1 < /dev/zero");
    EXPECT_EQ(chat.code, 1);
    EXPECT_TRUE(chat.err.ends_with("\n") && chat.err.rfind(long_line) == chat.err.rfind("\n", chat.err.size() - 2) + 1) << chat.err;
    // \r\n ends a line as \n does, and a last line without its end is a line
    Result in = toy::test::run_command("printf 'and a dog\\r\\nand a cat' | " + toy::test::shell_quote(toy::test::toy_bin()) +
                                       " run -m " + kStories + " -p 'Once upon a time' -n 2 --temp 0 -i --json");
    ASSERT_EQ(in.code, 0) << in.err;
    const auto j = nlohmann::json::parse(in.out);
    EXPECT_EQ(j["tokens"].size(), 6u);  // 2 before each line, 2 after the last
    const std::string text = j["text"];
    EXPECT_NE(text.find("and a dog\n"), std::string::npos) << text;
    EXPECT_NE(text.find("and a cat\n"), std::string::npos) << text;
}

TEST(Cli, RunSaysWhenTheContextEndsGeneration) {
    // default -n is -1 (llama.cpp's): until the end of text or a full context
    Result r = run_toy("run -m " + kStories + " -p 'Once upon a time' -c 32 --temp 0 --ignore-eos --json");
    ASSERT_EQ(r.code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    // every cell used, plus the token sampled from the last cell's logits (shown, never evaluated)
    EXPECT_EQ(j["prompt_tokens"].size() + j["tokens"].size(), 33u);
    EXPECT_EQ(j["stop"], "context");
    Result text = run_toy("run -m " + kStories + " -p 'Once upon a time' -c 32 -n 500 --temp 0 --ignore-eos");
    EXPECT_NE(text.err.find("context is full (32 tokens)"), std::string::npos) << text.err;
    Result shorter = run_toy("run -m " + kStories + " -p 'Once upon a time' -c 32 -n 5 --temp 0 --ignore-eos --json");
    EXPECT_EQ(nlohmann::json::parse(shorter.out)["stop"], "length");
}

TEST(Cli, HelpShowsDefaults) {
    Result r = run_toy("run --help");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("INT=-1"), std::string::npos) << r.out;  // -n
    EXPECT_NE(r.out.find("FLOAT=0.8"), std::string::npos) << r.out;  // --temp
}

TEST(Cli, SamplerFlagsAsLlamaCpp) {
    const std::string base = "run -m " + kStories + " -p Once -n 6 -s 3 --json ";
    for (const char *flags : {"--typical 0.5", "--top-nsigma 1.5", "--xtc-probability 0.5 --xtc-threshold 0.1",
                              "--mirostat 1", "--mirostat 2 --mirostat-lr 0.2 --mirostat-ent 4",
                              "--samplers 'top_k;temperature'", "--sampling-seq kt", "--min-keep 3 --top-p 0.1",
                              "--dry-multiplier 0.8 --dry-base 1.75 --dry-allowed-length 2 --dry-penalty-last-n 64",
                              "--dry-multiplier 0.8 --dry-sequence-breaker none", "--sampling-seq edkt --dry-multiplier 1"}) {
        Result r = run_toy(base + flags);
        EXPECT_EQ(r.code, 0) << flags << ": " << r.err;
        EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 6u) << flags;
    }
    // -l TOKEN+BIAS: a large bias makes greedy decoding repeat the token; -inf bans it
    Result greedy = run_toy("run -m " + kStories + " -p Once -n 3 --temp 0 --json");
    const int first = nlohmann::json::parse(greedy.out)["tokens"][0];
    Result forced = run_toy("run -m " + kStories + " -p Once -n 3 --temp 0 --json -l 300+100");
    EXPECT_EQ(nlohmann::json::parse(forced.out)["tokens"], nlohmann::json::parse("[300, 300, 300]"));
    Result banned = run_toy("run -m " + kStories + " -p Once -n 3 --temp 0 --json --logit-bias " + std::to_string(first) + "-inf");
    EXPECT_NE(nlohmann::json::parse(banned.out)["tokens"][0], first);
    expect_one_line_error(run_toy(base + "-l 300*2"), "TOKEN+BIAS");
    // fuzz finding: an id past 64 bits escaped as std::out_of_range
    expect_one_line_error(run_toy(base + "-l " + std::string(40, '6') + "+1"), "token id " + std::string(40, '6') + " is out of range");
    expect_one_line_error(run_toy(base + "--samplers 'top_k;wat'"), "'wat'");
    expect_one_line_error(run_toy(base + "--mirostat 3"), "--mirostat: expected a whole number from 0 to 2");
    // a penalty of 0 divided the repeated tokens' logits by 0 (text::check_params has each range)
    expect_one_line_error(run_toy(base + "--repeat-penalty 0"), "--repeat-penalty: expected a number > 0 (1: off), found 0");
}

TEST(Cli, ReversePromptsNProbsContextShiftAndInteractive) {
    // -r stops at the text, which is shown
    Result r = run_toy("run -m " + kStories + " -p 'Once upon a time' -n 40 --temp 0 -r Lily --json");
    ASSERT_EQ(r.code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["stop"], "reverse_prompt");
    const std::string text = j["text"];
    EXPECT_EQ(text.substr(text.size() - 4), "Lily") << text;
    // --n-probs: each token's log-probability and its alternatives, the chosen one among them at temperature 0
    Result p = run_toy("run -m " + kStories + " -p Once -n 3 --temp 0 --json --n-probs 3");
    auto probs = nlohmann::json::parse(p.out)["probs"];
    ASSERT_EQ(probs.size(), 3u);
    for (const auto &t : probs) {
        ASSERT_EQ(t["top"].size(), 3u);
        EXPECT_EQ(t["top"][0]["id"], t["id"]);
        EXPECT_LE(t["logprob"].get<double>(), 0.0);
        EXPECT_GE(t["top"][0]["logprob"].get<double>(), t["top"][1]["logprob"].get<double>());
    }
    // --context-shift goes past a full context; --keep -1 keeps the prompt
    Result s = run_toy("run -m " + kStories + " -p 'Once upon a time' -c 64 -n 200 --temp 0 --ignore-eos --context-shift --keep -1 --json");
    ASSERT_EQ(s.code, 0) << s.err;
    auto sj = nlohmann::json::parse(s.out);
    EXPECT_EQ(sj["tokens"].size(), 200u);
    EXPECT_EQ(sj["stop"], "length");
    EXPECT_GE(sj["context_shifts"].get<int>(), 3);
    // -i: each line read continues the text; the run ends at the end of input
    Result in = toy::test::run_command("printf 'and a dog\\n' | " + toy::test::shell_quote(toy::test::toy_bin()) + " run -m " + kStories +
                                       " -p 'Once upon a time' -n 4 --temp 0 -i --json");
    ASSERT_EQ(in.code, 0) << in.err;
    auto ij = nlohmann::json::parse(in.out);
    EXPECT_EQ(ij["tokens"].size(), 8u);  // 4 before the line, 4 after it
    EXPECT_NE(ij["text"].get<std::string>().find("and a dog\n"), std::string::npos) << ij["text"];
    Result first = toy::test::run_command("printf 'Once upon a time\\n' | " + toy::test::shell_quote(toy::test::toy_bin()) + " run -m " +
                                          kStories + " -p '' -n 4 --temp 0 --interactive-first --json");
    ASSERT_EQ(first.code, 0) << first.err;
    EXPECT_EQ(nlohmann::json::parse(first.out)["tokens"].size(), 4u);
    // --interactive-first needs no -p (it had said "no prompt"), also where the model adds no BOS (gpt2: an empty prompt)
    for (const std::string &model : {kStories, toy::test::fixture_path("gpt2.f32.gguf")}) {
        Result bare = toy::test::run_command("printf 'Once upon a time\\n' | " + toy::test::shell_quote(toy::test::toy_bin()) +
                                             " run -m " + model + " -n 4 --temp 0 --interactive-first --json");
        ASSERT_EQ(bare.code, 0) << bare.err;
        const auto bj = nlohmann::json::parse(bare.out);
        EXPECT_EQ(bj["tokens"].size(), 4u);
        EXPECT_EQ(bj["text"].get<std::string>().rfind("Once upon a time\n", 0), 0u) << bj["text"];
    }
    expect_one_line_error(run_toy("run -m " + kStories + " -n 4"), "no prompt");
    expect_one_line_error(run_toy("run -m " + kStories + " --tokens 1,2 -i"), "interactive");
}

TEST(Cli, DryCutsRepetitionInGreedyText) {
    auto repeats = [](const std::string &flags) {
        Result r = run_toy("run -m " + kStories + " -p 'Once upon a time' -n 300 --temp 0 --ignore-eos --json " + flags);
        EXPECT_EQ(r.code, 0) << r.err;
        const std::vector<int> t = nlohmann::json::parse(r.out)["tokens"];
        std::set<std::vector<int>> seen;
        int n = 0;
        for (size_t i = 0; i + 4 <= t.size(); ++i) n += !seen.insert(std::vector<int>(t.begin() + (long)i, t.begin() + (long)i + 4)).second;
        return n;
    };
    const int plain = repeats(""), dry = repeats("--dry-multiplier 2");
    EXPECT_GT(plain, 20);  // the tiny model loops at temperature 0
    EXPECT_LT(dry, plain / 4);
}

TEST(Cli, GrammarAndJsonSchemaFlagsConstrainRunAndChat) {
    const std::string echo = " Once upon a time";
    auto generated = [&](const Result &r) {
        EXPECT_EQ(r.code, 0) << r.err;
        EXPECT_EQ(r.out.rfind(echo, 0), 0u) << r.out;
        std::string g = r.out.substr(std::min(echo.size(), r.out.size()));
        if (!g.empty() && g.back() == '\n') g.pop_back();
        return g;
    };
    for (int seed = 1; seed <= 4; ++seed) {
        const std::string g = generated(run_toy("run -m " + kStories + " -p 'Once upon a time' -n 20 --temp 1 -s " +
                                                std::to_string(seed) + " --grammar 'root ::= \"yes\" | \"no\"'"));
        EXPECT_TRUE(g == "yes" || g == "no") << g;
    }
    const std::string schema = R"({"type":"object","properties":{"hero":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":1,"maximum":99}},"required":["hero","age"]})";
    toy::test::TempDir dir;
    const std::string schema_file = dir.file("schema.json"), grammar_file = dir.file("list.gbnf");
    std::ofstream(schema_file) << schema;
    std::ofstream(grammar_file) << "root ::= (\"- \" [a-z]{1,6} \"\\n\"){2}\n";
    for (const std::string &flag : {"-j '" + schema + "'", "--json-schema-file " + schema_file, "-jf " + schema_file}) {
        const std::string g = generated(run_toy("run -m " + kStories + " -p 'Once upon a time' -n 200 --temp 1 -s 7 " + flag));
        const auto value = nlohmann::ordered_json::parse(g, nullptr, false);
        ASSERT_FALSE(value.is_discarded()) << flag << ": " << g;
        EXPECT_TRUE(value["hero"].is_string() && value["age"].is_number_integer()) << g;
        EXPECT_EQ(value.size(), 2u) << g;
    }
    const std::string list = generated(run_toy("run -m " + kStories + " -p 'Once upon a time' -n 50 --grammar-file " + grammar_file));
    EXPECT_TRUE(std::regex_match(list, std::regex("(- [a-z]{1,6}\n){2}"))) << list;
    // chat: the reply follows the schema
    Result chat = run_toy("chat -m " + kStories + " --chat-template chatml -p 'Who is the hero?' -st -n 200 -s 3 -j '" + schema + "'");
    ASSERT_EQ(chat.code, 0) << chat.err;
    EXPECT_NE(chat.out.find("\"hero\""), std::string::npos) << chat.out;
    // what cannot be used is one line naming the flag
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --grammar 'root ::= foo'"),
                          "--grammar: grammar: rule 'foo' is used but never defined");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi -j '{\"type\": '"), "--json-schema: the schema is not JSON");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi -j '{\"not\": {}}'"), "--json-schema: json schema: unsupported keyword 'not'");
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --grammar-file /nonexistent.gbnf"), "--grammar-file: cannot read '/nonexistent.gbnf'");
    // a directory read as a file was an empty prompt, template or grammar, silently
    for (const std::string &cmd : {"run -m " + kStories + " -f /tmp", "run -m " + kStories + " -p hi --grammar-file /tmp",
                                  "chat -m " + kStories + " --chat-template-file /tmp < /dev/null"}) {
        SCOPED_TRACE(cmd);
        expect_one_line_error(run_toy(cmd), "'/tmp' is a directory, not a file");
    }
    expect_one_line_error(run_toy("run -m " + kStories + " -p hi --grammar 'root ::= \"a\"' -j '{}'"), "give only one of --grammar");
    // a grammar too ambiguous to follow stops generation with its one line, after the text's own
    const Result ambiguous = run_toy("run -m " + kStories + " -p Once -n 100 -s 2 --grammar 'root ::= [^\\n] root? [^\\n]? root? [^\\n]?'");
    expect_one_line_error(ambiguous, "can be read in more than 4096 ways");
    EXPECT_TRUE(ambiguous.out.find("Once") != std::string::npos && ambiguous.out.ends_with("\n")) << ambiguous.out;
}

// A context no memory holds (5.7 PiB, past any address space): one line
// naming its size. The cells' bookkeeping threw std::bad_alloc first ("out
// of memory"), and ggml's allocator printed three lines of its own at exit.
TEST(Cli, AContextTooLargeForMemoryIsOneLineNamingItsSize) {
    Result r = run_toy("run -m " + kStories + " -p hi -n 1 -c 9999999999999");
#ifdef __SANITIZE_ADDRESS__
    // (make test-asan: ASan says on a line of its own that it could not allocate; that line is not toy's)
    r.err = std::regex_replace(r.err, std::regex("==[0-9]+==WARNING: AddressSanitizer failed to allocate[^\n]*\n"), "");
#endif
    expect_one_line_error(r, "could not allocate the KV cache (9999999999999 cells, 5960464.5 GiB) on the CPU: lower -c");
}
