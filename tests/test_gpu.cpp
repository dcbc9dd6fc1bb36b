// The parity fixtures on a GPU: a toy built with a GPU backend (ggml's CUDA
// backend, `make build-cuda`) on a machine where it finds one. The tests run
// the toy executable (toy::test::toy_bin(): this build's, or $TOY_TEST_BIN,
// so that a CPU build of the tests can drive a CUDA build of toy), with every
// block and the output head on the first GPU (-ngl 99) and the token
// embedding on the CPU, as in llama.cpp: llama.cpp's (CPU) logits within
// bounds for a GPU (kGpuBounds, below), the prompt in one batch, in ubatches
// of 5 and token by token, and with only the last block on the GPU; the
// greedy continuations of the F32 fixtures; training with its
// blocks on the GPU follows the CPU run. Without a GPU every test here is
// skipped and says why.
#include "parity_fixtures.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace toy::test;

namespace {

// The first GPU that `toy devices` lists ("  CUDA0: NVIDIA H200 (...) [GPU]"),
// or "".
const std::string &gpu() {
    static const std::string name = [] {
        const CommandResult r = run_toy("devices");
        std::istringstream in(r.out);
        for (std::string line; std::getline(in, line);) {
            if (line.find(" [GPU]") == std::string::npos) continue;
            const size_t a = line.find_first_not_of(' '), b = line.find(':');
            if (a != std::string::npos && b != std::string::npos && b > a) return line.substr(a, b - a);
        }
        return std::string();
    }();
    return name;
}

#define SKIP_WITHOUT_GPU()                                                                                       \
    if (gpu().empty())                                                                                           \
    GTEST_SKIP() << "no GPU: toy built without a GPU backend (make build-cuda), or its backend finds no device"

// `toy logits` over the fixture's tokens on the GPU, with the cache types and
// flash attention the reference was computed with, and `flags` (default: every
// block and the head on the GPU).
std::vector<float> gpu_logits(const Fixture &f, const Reference &r, const std::string &flags,
                              const std::string &ngl = "99") {
    const std::string kv = r.meta["kv_type"];
    std::string err;
    const std::vector<float> logits =
        toy_logits(shared_path(f.dir + "/" + r.meta["model"].get<std::string>()), r.tokens,
                   "-c 256 -t 2 -ctk " + kv + " -ctv " + kv + " -fa " + (r.meta["flash_attn"].get<bool>() ? "on" : "off") +
                       " -ngl " + ngl + " --device " + gpu() + " " + flags,
                   &err);
    // the blocks asked for (the last one, or all and the head) on the GPU
    EXPECT_NE(err.find(ngl == "1" ? ": " + gpu() + "; output: CPU" : ": " + gpu() + "; output: " + gpu()), std::string::npos)
        << err;
    return logits;
}

// The bounds against llama.cpp's CPU logits. ggml's CUDA kernels round
// differently from its CPU ones: activations quantized to Q8_1 (the CPU takes
// Q8_0 or Q8_K), F32 products of small batches on tensor cores, other
// summation orders. llama.cpp on the GPU misses the CPU bounds the same way:
// on an H200 (sm_90, CUDA 13.0) its own logits for these fixtures were up to
// 1.7e-3 (F32) and 3.2e-2 (quantized) from its CPU ones, with the argmax of
// 97.9% and 91.7% of the rows agreeing, and toy's GPU logits were
// bit-identical to llama.cpp's GPU logits on 16 of the 20 fixtures (within
// 3.6e-4 on three more; bench/gpu-check.sh, BENCHMARKS.md; measured before
// toy fused gate and up on offload devices, with which the tests pass too). The bounds below
// hold what toy's three paths measured there (-ub 5 the widest: 3.9e-3 on
// F32, argmax 89.6% on the Q8_0 cache token by token), with some margin.
constexpr Bounds kGpuBounds{5e-3, 0.95, 4e-2, 0.875};

class GpuParity : public ::testing::TestWithParam<Fixture> {};

TEST_P(GpuParity, BatchedUbatchedAndStepwiseLogits) {
    SKIP_WITHOUT_GPU();
    const Reference r = load_reference(GetParam());
    for (const std::string flags : {"", "-ub 5", "--stepwise"}) {
        const std::string what = flags.empty() ? "batched" : flags;
        const RowStats s = expect_within_tolerance(r, gpu_logits(GetParam(), r, flags), what, kGpuBounds);
        // for the record (BENCHMARKS.md's GPU section quotes these lines)
        std::cout << "gpu-parity " << GetParam().name << " " << what << ": d_max " << s.d_max << ", argmax equal "
                  << s.argmax_equal << "\n";
    }
}

// The last block on the GPU, the others and the head on the CPU: the prompt's
// activations cross to the GPU and back, and ggml's scheduler may run the
// CPU's matrix products of the 48-token batch on the GPU (op offload).
TEST_P(GpuParity, PartlyOffloadedLogits) {
    SKIP_WITHOUT_GPU();
    const Reference r = load_reference(GetParam());
    const RowStats s = expect_within_tolerance(r, gpu_logits(GetParam(), r, "", "1"), "-ngl 1", kGpuBounds);
    std::cout << "gpu-parity " << GetParam().name << " -ngl 1: d_max " << s.d_max << ", argmax equal " << s.argmax_equal << "\n";
}

TEST_P(GpuParity, GreedyContinuation) {
    SKIP_WITHOUT_GPU();
    const Reference r = load_reference(GetParam());
    if (!r.strict) GTEST_SKIP() << "greedy equality is not required for quantized weights/caches or flash attention";
    const size_t n_prompt = r.meta["greedy_prompt_len"].get<size_t>();
    const auto expected = r.meta["greedy"].get<std::vector<int32_t>>();
    const std::vector<int32_t> prompt(r.tokens.begin(), r.tokens.begin() + (long)n_prompt);
    const CommandResult c = run_toy("run -m " + shared_path(GetParam().dir + "/" + r.meta["model"].get<std::string>()) +
                                    " --tokens " + join_ids(prompt) + " -n " + std::to_string(expected.size()) +
                                    " --temp 0 --ignore-eos --json -c 256 -t 2 -ctk f32 -ctv f32 -fa off -ngl 99 --device " + gpu());
    ASSERT_EQ(c.code, 0) << c.err;
    EXPECT_EQ(nlohmann::json::parse(c.out)["tokens"].get<std::vector<int32_t>>(), expected);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuParity, ::testing::ValuesIn(all_fixtures()), fixture_test_name);

// toy train with its blocks and head on the GPU (-ngl 99): the frozen base
// and the adapters (LoRA), or each block's F32 parameters with their
// gradients and AdamW moments (full fine-tune), live on the GPU and are
// updated there by ggml's CUDA ops; the loss is ggml's cross-entropy there
// (toy's own loss kernels are the CPU's). The loss, held-out loss and
// gradient norm of every step follow the CPU run; for F32 and F16 models the
// bound is float order (cuBLAS and ggml's CUDA kernels sum in other orders
// than the CPU's kernels), for quantized ones the forward pass's own
// difference (below).
TEST(GpuTraining, FollowsTheCpuRun) {
    SKIP_WITHOUT_GPU();
    TempDir dir;
    const std::string text = dir.file("stories.txt"), stories = shared_path("models/stories260K.gguf");
    {
        std::ofstream out(text);
        for (int i = 0; i < 12; ++i) out << "Once upon a time there was a little girl named Lily. She liked to play outside. ";
    }
    struct Case {
        std::string what, model, flags, blocks;
        double bound;  // relative, on each step's loss, held-out loss and gradient norm
    };
    const std::vector<Case> cases = {
        {"lora", stories, "--lora-rank 4 --lora-targets all", "blocks 0-4", 1e-3},
        {"full fine-tune", stories, "", "blocks 0-4", 1e-3},
        // A frozen F16 or quantized base: ggml's CUDA out_prod takes F32
        // only, so the input gradients' products dequantize the weights on
        // the GPU first. F16 follows the CPU as F32 does (2.2e-4 measured on
        // an H200). Quantized bases differ more in the forward pass alone:
        // CUDA quantizes the activations to Q8_1 where the CPU takes Q8_0 or
        // Q8_K, and these random models' logits are large (loss 22-28):
        // step 1's loss (nothing trained yet) was 7.7e-4 (Q8_0) and 2.1e-3
        // (Q4_K_M) apart, the worst of the 4 steps 4.4e-3 and 1.4e-2.
        {"lora on f16", fixture_path("llama-untied.f16.gguf"), "--lora-rank 4 --lora-targets all", "blocks 0-1", 1e-3},
        {"lora on q8_0", fixture_path("llama-256.q8_0.gguf"), "--lora-rank 4 --lora-targets all", "blocks 0-1", 1e-2},
        {"lora on q4_k_m", fixture_path("llama-256.q4_k_m.gguf"), "--lora-rank 4 --lora-targets all", "blocks 0-1", 3e-2},
    };
    for (const Case &c : cases) {
        const std::string &what = c.what;
        SCOPED_TRACE(what);
        const std::string base =
            "train -m " + c.model + " -f " + text + " --steps 4 -c 32 -t 2 --val-split 0.2 --eval-every 1 " + c.flags;
        const std::string cpu = dir.file("cpu"), dev = dir.file("gpu");
        const CommandResult a = run_toy(base + " -q -o " + cpu + ".gguf --log " + cpu + ".csv");
        ASSERT_EQ(a.code, 0) << a.err;
        const CommandResult b = run_toy(base + " -ngl 99 --device " + gpu() + " -o " + dev + ".gguf --log " + dev + ".csv");
        ASSERT_EQ(b.code, 0) << b.err;
        EXPECT_NE(b.err.find("toy: split: " + c.blocks + ": " + gpu() + "; output: " + gpu()), std::string::npos) << b.err;
        const auto la = loss_columns(cpu + ".csv"), lb = loss_columns(dev + ".csv");
        ASSERT_EQ(la.size(), 4u);
        ASSERT_EQ(lb.size(), 4u);
        double worst = 0;
        for (size_t i = 0; i < la.size(); ++i)
            for (size_t k = 0; k < 3; ++k) {
                worst = std::max(worst, std::fabs(lb[i][k] - la[i][k]) / std::fabs(la[i][k]));
                EXPECT_NEAR(lb[i][k], la[i][k], c.bound * std::fabs(la[i][k])) << "step " << i + 1 << " column " << k;
            }
        std::cout << "gpu-training " << what << ": worst relative difference of loss, val_loss, grad_norm " << worst
                  << " (step 1's loss: " << std::fabs(lb[0][0] - la[0][0]) / std::fabs(la[0][0]) << ")\n";
    }
}

}  // namespace
