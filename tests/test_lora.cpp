// LoRA adapters at inference: the files training writes (standard, per-head,
// fused Q|K|V) give the trainer's own logits when loaded from disk, scales
// add up, and a file that does not fit the model is a one-line error.
#include "gguf/gguf_writer.h"
#include "model/lora_adapter.h"
#include "runtime/sequence.h"
#include "serve/scheduler.h"
#include "test_models.h"
#include "test_util.h"
#include "train/trainable.h"

#include <ggml.h>
#include <gtest/gtest.h>

#include <random>

using namespace toy;
using toy::test::scratch_dir;
using toy::test::tiny_model;

namespace {

std::vector<int32_t> some_tokens(int64_t n_vocab, int n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((int32_t)(rng() % (uint64_t)n_vocab));
    return t;
}

// A LoRA on `arch` whose B matrices are random (as after training), written to disk.
struct TrainedLora {
    std::unique_ptr<Model> base;  // as training loads it
    std::unique_ptr<train::TrainableModel> tm;
    std::string path;
};

TrainedLora trained_lora(const std::string &arch, const std::string &targets, bool per_head, const std::string &name) {
    TrainedLora t;
    t.base = Model::load(tiny_model(arch), train::trainable_load_options());
    train::LoraOptions lo;
    lo.rank = 3;
    lo.alpha = 5.0f;
    lo.targets = train::parse_lora_targets(targets);
    lo.per_head = per_head;
    t.tm = train::TrainableModel::lora(*t.base, lo);
    std::mt19937_64 rng(9);
    std::normal_distribution<float> d(0.0f, 0.05f);
    for (const train::Param &p : t.tm->params().params()) {
        if (!p.name.ends_with("lora_b")) continue;
        std::vector<float> v(ggml_nelements(p.value));
        for (float &x : v) x = d(rng);
        ggml_backend_tensor_set(p.value, v.data(), 0, v.size() * sizeof(float));
    }
    t.path = (scratch_dir() / (name + ".lora.gguf")).string();
    t.tm->write(t.path);
    return t;
}

}  // namespace

TEST(Lora, WrittenAdaptersGiveTheTrainersLogits) {
    struct Case {
        const char *arch, *targets;
        bool per_head;
    };
    for (const Case &k : {Case{"llama", "all", false}, Case{"llama", "q,v,down", true}, Case{"qwen2", "all", false},
                          Case{"gpt2", "q,k,v,o,up,down", false}, Case{"gemma2", "q,k,gate", true}}) {
        SCOPED_TRACE(std::string(k.arch) + " " + k.targets + (k.per_head ? " per head" : ""));
        TrainedLora t = trained_lora(k.arch, k.targets, k.per_head, std::string(k.arch) + (k.per_head ? "-ph" : ""));
        const int64_t V = t.base->config().n_vocab;
        const std::vector<int32_t> tokens = some_tokens(V, 12, 4);
        const std::vector<float> trained = eval_sequence(*t.base, tokens, 2, t.tm->adapters());
        // the inference load: Q|K|V fused, matrices repacked where the CPU has layouts for them
        auto model = Model::load(tiny_model(k.arch));
        LoraSet set = LoraSet::load({{t.path, 1.0f}}, *model);
        const std::vector<float> loaded = eval_sequence(*model, tokens, 2, &set.terms);
        EXPECT_LE(test::compare_rows(loaded, trained, V).d_max, 1e-4);
        // and the adapter changes the model
        EXPECT_GT(test::compare_rows(eval_sequence(*model, tokens, 2), trained, V).d_max, 1e-3);
    }
}

TEST(Lora, ScalesAddUp) {
    TrainedLora t = trained_lora("llama", "q,o,up", false, "scales");
    auto model = Model::load(tiny_model("llama"));
    const std::vector<int32_t> tokens = some_tokens(model->config().n_vocab, 10, 5);
    LoraSet one = LoraSet::load({{t.path, 1.0f}}, *model);
    LoraSet halves = LoraSet::load({{t.path, 0.5f}, {t.path, 0.5f}}, *model);
    LoraSet none = LoraSet::load({{t.path, 0.0f}}, *model);
    const int64_t V = model->config().n_vocab;
    EXPECT_LE(test::compare_rows(eval_sequence(*model, tokens, 2, &halves.terms), eval_sequence(*model, tokens, 2, &one.terms), V)
                  .d_max,
              1e-5);
    EXPECT_EQ(eval_sequence(*model, tokens, 2, &none.terms), eval_sequence(*model, tokens, 2));
}

// llama.cpp's converter (convert_lora_to_gguf.py --outtype f16|bf16|q8_0)
// writes the same tensors in other types; q8_0 only where a row is a whole
// number of blocks, F16 elsewhere. Those files load and give the F32
// adapter's logits within the fixtures' F16 tolerance.
TEST(Lora, AdaptersInTheConvertersTypesLoad) {
    TrainedLora t = trained_lora("llama", "all", false, "types");
    auto model = Model::load(tiny_model("llama"));
    const int64_t V = model->config().n_vocab;
    const std::vector<int32_t> tokens = some_tokens(V, 10, 6);
    LoraSet f32 = LoraSet::load({{t.path, 1.0f}}, *model);
    const std::vector<float> want = eval_sequence(*model, tokens, 2, &f32.terms);
    auto src = gguf::File::open(t.path);
    for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0}) {
        SCOPED_TRACE(ggml_type_name(type));
        gguf::Writer w;
        w.copy_metadata(*src);
        std::vector<std::vector<uint8_t>> bytes;
        for (const gguf::TensorInfo &ti : src->tensors()) {
            ggml_type tt = type;
            if (ti.ne[0] % ggml_blck_size(tt) != 0) tt = GGML_TYPE_F16;
            const std::vector<float> v = gguf::to_f32(src->tensor_data(ti), ti.type, ti.n_elements());
            bytes.emplace_back(ggml_row_size(tt, ti.ne[0]) * (size_t)(ti.n_elements() / ti.ne[0]));
            ggml_quantize_chunk(tt, v.data(), bytes.back().data(), 0, ti.n_elements() / ti.ne[0], ti.ne[0], nullptr);
            w.add_tensor(ti.name, tt, ti.ne, ti.n_dims, bytes.back().data());
        }
        const std::string path = (scratch_dir() / (std::string("types-") + ggml_type_name(type) + ".gguf")).string();
        w.write(path);
        LoraSet set = LoraSet::load({{path, 1.0f}}, *model);
        const test::RowStats d = test::compare_rows(eval_sequence(*model, tokens, 2, &set.terms), want, V);
        EXPECT_LE(d.d_max, 2e-2);
        EXPECT_GT(d.d_max, 0.0);  // the adapter's own values were used, not a converted copy of the F32 file
    }
}

TEST(Lora, AdapterThatDoesNotFitIsOneLineError) {
    auto model = Model::load(tiny_model("llama"));
    const std::string base = tiny_model("llama");
    auto write = [&](const std::string &name, const std::string &arch, const std::string &type,
                     std::vector<std::pair<std::string, std::array<int64_t, 4>>> tensors) {
        gguf::Writer w;
        w.set("general.architecture", gguf::Value::str(arch));
        w.set("general.type", gguf::Value::str(type));
        w.set("adapter.type", gguf::Value::str("lora"));
        std::vector<std::vector<float>> data;
        for (auto &[n, ne] : tensors) {
            data.emplace_back((size_t)(ne[0] * ne[1]), 0.01f);
            w.add_tensor(n, GGML_TYPE_F32, ne, 2, data.back().data());
        }
        const std::string path = (scratch_dir() / name).string();
        w.write(path);
        return path;
    };
    const int64_t d = model->config().n_embd;
    const std::array<int64_t, 4> a{d, 2, 1, 1}, b{2, d, 1, 1};
    struct Bad {
        std::string path, expect;
    };
    for (const Bad &bad : {
             Bad{write("arch.gguf", "qwen2", "adapter", {{"blk.0.attn_q.weight.lora_a", a}, {"blk.0.attn_q.weight.lora_b", b}}),
                 "architecture 'qwen2'"},
             Bad{write("type.gguf", "llama", "model", {}), "general.type is 'model'"},
             Bad{write("missing.gguf", "llama", "adapter", {{"blk.7.attn_q.weight.lora_a", a}, {"blk.7.attn_q.weight.lora_b", b}}),
                 "does not have"},
             Bad{write("shape.gguf", "llama", "adapter",
                       {{"blk.0.attn_q.weight.lora_a", {d + 1, 2, 1, 1}}, {"blk.0.attn_q.weight.lora_b", b}}),
                 "do not fit"},
             Bad{write("half.gguf", "llama", "adapter", {{"blk.0.attn_q.weight.lora_a", a}}), "no lora_b"},
             Bad{write("norm.gguf", "llama", "adapter",
                       {{"blk.0.attn_norm.weight.lora_a", {d, 2, 1, 1}}, {"blk.0.attn_norm.weight.lora_b", {2, 1, 1, 1}}}),
                 ""},
             Bad{base, "general.type"},
         }) {
        SCOPED_TRACE(bad.path);
        const std::string e = test::error_of([&] { LoraSet::load({{bad.path, 1.0f}}, *model); });
        EXPECT_FALSE(e.empty());
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
        if (!bad.expect.empty()) {
            EXPECT_NE(e.find(bad.expect), std::string::npos) << e;
        }
    }
}

TEST(Lora, CommandsTakeLoraAndLoraScaled) {
    TrainedLora t = trained_lora("llama", "all", false, "cli");
    const std::string m = test::shell_quote(tiny_model("llama")), a = test::shell_quote(t.path);
    const std::string out0 = (scratch_dir() / "cli0.f32").string(), out1 = (scratch_dir() / "cli1.f32").string(),
                      out2 = (scratch_dir() / "cli2.f32").string();
    const std::string tokens = " --tokens 1,5,9,13,17 -t 2 -o ";
    ASSERT_EQ(test::run_toy("logits -m " + m + tokens + out0).code, 0);
    ASSERT_EQ(test::run_toy("logits -m " + m + " --lora " + a + tokens + out1).code, 0);
    ASSERT_EQ(test::run_toy("logits -m " + m + " --lora-scaled " + a + " 1.0" + tokens + out2).code, 0);
    EXPECT_NE(test::read_f32(out0), test::read_f32(out1));
    EXPECT_EQ(test::read_f32(out1), test::read_f32(out2));
    // generation and the benchmark take the same flags
    EXPECT_EQ(test::run_toy("run -m " + m + " --lora " + a + " --tokens 1,5 -n 4 --temp 0 -t 2").code, 0);
    EXPECT_EQ(test::run_toy("bench -m " + m + " --lora-scaled " + a + " 0.5 -p 8 -n 4 -r 1 -t 2").code, 0);
    EXPECT_EQ(test::run_command("printf 'hi\\n' | " + test::shell_quote(toy::test::toy_bin()) + " chat -m " + m + " --lora " + a +
                                " -n 4 --temp 0 -t 2")
                  .code,
              0);
    // a bad adapter: one line, exit 1
    const test::CommandResult bad = test::run_toy("run -m " + m + " --lora " + m + " -p hi -n 2");
    EXPECT_EQ(bad.code, 1);
    EXPECT_NE(bad.err.find("not a LoRA adapter"), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

// tests/data/lora-llama (scripts/make-lora-test-data.sh): adapters toy trained
// on parity fixtures (per-head Q/V plus a second adapter at scale 0.5, GPT-2's
// fused Q|K|V, Qwen2's biased projections, a Q8_0 base) and the logits
// llama.cpp of the pinned bundle computes with them. toy applying the same
// files gives those logits within the fixtures' tolerances (1e-3 of each row's
// range on F32 bases, 2e-2 on quantized ones).
TEST(Lora, LlamaCppLoadsToysAdaptersWithTheSameLogits) {
    const std::string dir = std::string(TOY_SOURCE_DIR) + "/tests/data/lora-llama/";
    for (const char *name : {"llama-per-head", "gpt2-fused-qkv", "qwen2-bias", "llama-q8_0"}) {
        SCOPED_TRACE(name);
        const nlohmann::json c = test::read_json(dir + name + ".json");
        const std::string fx = c["fixture"];
        const nlohmann::json fixture = test::read_json(test::fixture_path(fx + ".json"));
        auto model = Model::load(test::fixture_path(fx + ".gguf"));
        std::vector<std::pair<std::string, float>> files;
        for (const auto &a : c["adapters"]) files.emplace_back(dir + a[0].get<std::string>(), a[1].get<float>());
        LoraSet set = LoraSet::load(files, *model);
        const std::vector<int32_t> tokens = fixture["tokens"].get<std::vector<int32_t>>();
        const int64_t V = model->config().n_vocab;
        const std::vector<float> want = test::read_f32(dir + name + ".logits.f32");
        const std::vector<float> got = eval_sequence(*model, tokens, 2, &set.terms);
        const double tol = fx.find(".f32") != std::string::npos ? 1e-3 : 2e-2;
        ASSERT_EQ(got.size(), want.size());
        EXPECT_LE(test::compare_rows(got, want, V).d_max, tol);
        // the adapters change llama.cpp's logits well beyond that tolerance
        EXPECT_GT(test::compare_rows(test::read_f32(test::fixture_path(fx + ".logits.f32")), want, V).d_max, 5 * tol);
    }
}

// toy serve takes --lora as the other commands do: its scheduler decodes with
// the adapters (greedy tokens equal a Session's with the same adapters).
TEST(Lora, TheServerDecodesWithTheAdapters) {
    TrainedLora t = trained_lora("llama", "all", false, "serve");
    auto model = Model::load(tiny_model("llama"));
    const text::Vocab vocab = text::Vocab::load(model->file());
    const LoraSet lora = LoraSet::load({{t.path, 4.0f}}, *model);
    const std::vector<int32_t> prompt = {1, 5, 9, 13};
    auto greedy = [&](const graph::Adapters *adapters) {
        SessionOptions so;
        so.n_ctx = 128;
        so.n_threads = 2;
        so.adapters = adapters;
        Session s(*model, so);
        s.eval(prompt);
        std::vector<int32_t> out;
        for (int i = 0; i < 8; ++i) {
            const float *lg = s.last_logits();
            const int32_t best = (int32_t)(std::max_element(lg, lg + s.n_vocab()) - lg);
            out.push_back(best);
            s.eval(std::span<const int32_t>(&best, 1));
        }
        return out;
    };
    const std::vector<int32_t> with = greedy(&lora.terms), without = greedy(nullptr);
    ASSERT_NE(with, without) << "the adapter should change the greedy tokens";
    SessionOptions so;
    so.n_ctx = 128;
    so.n_threads = 2;
    so.adapters = &lora.terms;
    serve::Scheduler sched(*model, vocab, so, serve::SchedulerOptions{.n_slots = 2, .max_queue = 4});
    serve::Request r;
    r.prompt = prompt;
    r.sampling.temp = 0.0f;
    r.limits.max_tokens = 8;
    r.limits.ignore_eos = true;
    r.n_logprobs = 0;
    auto stream = sched.submit(r);
    ASSERT_TRUE(stream);
    serve::Event ev;
    std::vector<int32_t> got;
    while (stream->next(ev)) {
        for (const auto &lp : ev.logprobs) got.push_back(lp.id);
    }
    EXPECT_EQ(got, with);
}
