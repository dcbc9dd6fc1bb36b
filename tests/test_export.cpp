// toy export and toy fuse: merged adapters give the logits the graph gives
// with them applied, types follow llama.cpp's mixes (the same as toy init's),
// and the per-head layout goes out and comes back byte for byte.
#include "gguf/gguf_writer.h"
#include "model/export.h"
#include "runtime/sequence.h"
#include "test_models.h"
#include "test_util.h"
#include "train/trainable.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

using namespace toy;
using toy::test::tiny_model;
namespace fs = std::filesystem;

namespace {

std::vector<int32_t> some_tokens(int64_t n_vocab, int n) {
    std::mt19937_64 rng(3);
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((int32_t)(rng() % (uint64_t)n_vocab));
    return t;
}

// An adapter as another tool would write it: F16 tensors, on the output
// projection and the token embedding, alpha 4 over rank 2.
std::string foreign_adapter(const Model &m, const std::string &path) {
    const Config &c = m.config();
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::str(c.arch));
    w.set("general.type", gguf::Value::str("adapter"));
    w.set("adapter.type", gguf::Value::str("lora"));
    w.set("adapter.lora.alpha", gguf::Value::f32(4.0f));
    std::mt19937_64 rng(5);
    std::normal_distribution<float> d(0.0f, 0.1f);
    std::vector<std::vector<ggml_fp16_t>> data;
    auto add = [&](const std::string &name, int64_t ne0, int64_t ne1) {
        std::vector<float> v((size_t)(ne0 * ne1));
        for (float &x : v) x = d(rng);
        data.emplace_back(v.size());
        ggml_fp32_to_fp16_row(v.data(), data.back().data(), (int64_t)v.size());
        w.add_tensor(name, GGML_TYPE_F16, {ne0, ne1, 1, 1}, 2, data.back().data());
    };
    add("output.weight.lora_a", c.n_embd, 2);
    add("output.weight.lora_b", 2, c.n_vocab);
    add("token_embd.weight.lora_a", 2, c.n_vocab);
    add("token_embd.weight.lora_b", 2, c.n_embd);
    w.write(path);
    return path;
}

std::string trained_adapter(const std::string &arch, const std::string &targets, bool per_head, const std::string &path) {
    auto base = Model::load(tiny_model(arch), train::trainable_load_options());
    train::LoraOptions lo;
    lo.rank = 2;
    lo.targets = train::parse_lora_targets(targets);
    lo.per_head = per_head;
    auto tm = train::TrainableModel::lora(*base, lo);
    std::mt19937_64 rng(8);
    std::normal_distribution<float> d(0.0f, 0.05f);
    for (const train::Param &p : tm->params().params()) {
        std::vector<float> v(ggml_nelements(p.value));
        for (float &x : v) x = d(rng);
        ggml_backend_tensor_set(p.value, v.data(), 0, v.size() * sizeof(float));
    }
    tm->write(path);
    return path;
}

LoadOptions plain() {
    LoadOptions lo;
    lo.repack = false;
    lo.fuse = false;
    return lo;
}

}  // namespace

TEST(Export, MergedAdaptersGiveTheLogitsOfTheAdaptersApplied) {
    for (const char *arch : {"llama", "gpt2"}) {
        SCOPED_TRACE(arch);
        test::TempDir dir;
        auto base = Model::load(tiny_model(arch), plain());
        const std::string targets = std::string(arch) == "gpt2" ? "q,k,v,o,up,down" : "all";
        LoraSet set = LoraSet::load({{trained_adapter(arch, targets, false, dir.file("a.gguf")), 1.0f},
                                     {trained_adapter(arch, "q", std::string(arch) != "gpt2", dir.file("b.gguf")), 0.5f},
                                     {foreign_adapter(*base, dir.file("c.gguf")), 1.0f}},
                                    *base);
        const ExportResult r = export_model(*base, set, dir.file("merged.gguf"), {});
        EXPECT_TRUE(r.untied);  // the tiny models tie output to token_embd; the adapters change each on its own
        auto merged = Model::load(dir.file("merged.gguf"));
        const std::vector<int32_t> tokens = some_tokens(base->config().n_vocab, 10);
        const std::vector<float> applied = eval_sequence(*base, tokens, 2, &set.terms);
        // the F16 adapter's matmuls round their inputs to F16 (as in llama.cpp): within the F32 fixtures' 1e-3
        EXPECT_LE(test::compare_rows(eval_sequence(*merged, tokens, 2), applied, base->config().n_vocab).d_max, 1e-3);
        EXPECT_GT(test::compare_rows(eval_sequence(*base, tokens, 2), applied, base->config().n_vocab).d_max, 1e-2);
    }
}

TEST(Export, TypesFollowTheMixesToyInitUses) {
    for (InitType type : {InitType::Q8_0, InitType::Q4_K_M, InitType::F16}) {
        SCOPED_TRACE(init_type_name(type));
        test::TempDir dir;
        InitOptions o = test::small_f32("llama", 256, 4, 2, 512, 3);
        o.seed = 4;
        init_model(o, dir.file("f32.gguf"));
        o.type = type;
        const InitResult want = init_model(o, dir.file("init.gguf"));
        ExportOptions eo;
        eo.type = type;
        export_model(*Model::load(dir.file("f32.gguf"), plain()), LoraSet{}, dir.file("export.gguf"), eo);
        auto got = gguf::File::open(dir.file("export.gguf"));
        ASSERT_EQ(got->tensors().size(), want.tensors.size());
        for (const auto &t : want.tensors) EXPECT_EQ(got->tensor(t.name).type, t.type) << t.name;
        EXPECT_EQ(got->get_int("general.file_type"), init_file_type(type));
        // quantized from the same values as toy init quantizes its own
        auto a = Model::load(dir.file("export.gguf")), b = Model::load(dir.file("init.gguf"));
        EXPECT_EQ(a->read_weight("blk.1.ffn_down.weight"), b->read_weight("blk.1.ffn_down.weight"));
    }
}

TEST(Export, PerHeadLayoutAndFuseRoundTrip) {
    for (const std::string name : {"llama-tied.f32", "qwen3.f32"}) {
        SCOPED_TRACE(name);
        test::TempDir dir;
        const std::string src = test::fixture_path(name + ".gguf");
        auto model = Model::load(src, plain());
        ExportOptions eo;
        eo.per_head_layout = true;
        export_model(*model, LoraSet{}, dir.file("heads.gguf"), eo);
        auto heads_file = gguf::File::open(dir.file("heads.gguf"));
        EXPECT_TRUE(heads_file->has_tensor("blk.0.attn_q.head_0.weight"));
        EXPECT_FALSE(heads_file->has_tensor("blk.0.attn_q.weight"));
        EXPECT_TRUE(heads_file->get_bool("toy.ggml_native"));
        auto heads = Model::load(dir.file("heads.gguf"));
        EXPECT_TRUE(heads->per_head_checkpoint());
        const auto tokens = test::read_json(test::fixture_path(name + ".json"))["tokens"].get<std::vector<int32_t>>();
        EXPECT_EQ(eval_sequence(*heads, tokens, 2), eval_sequence(*Model::load(src), tokens, 2));

        // toy fuse: back to the standard layout, every tensor byte for byte
        export_model(*Model::load(dir.file("heads.gguf"), plain()), LoraSet{}, dir.file("fused.gguf"), {});
        auto orig = gguf::File::open(src), fused = gguf::File::open(dir.file("fused.gguf"));
        EXPECT_FALSE(fused->has("toy.ggml_native"));
        ASSERT_EQ(fused->tensors().size(), orig->tensors().size());
        for (const auto &t : orig->tensors()) {
            const auto &f = fused->tensor(t.name);
            ASSERT_EQ(f.nbytes, t.nbytes) << t.name;
            EXPECT_EQ(std::memcmp(fused->tensor_data(f), orig->tensor_data(t), t.nbytes), 0) << t.name;
        }
    }
}

TEST(Export, WeightsTheTypeCannotHoldAreErrors) {
    // an adapter merged at a scale that puts weights past what Q8_0's 16-bit
    // scales (or F16, where a row is no multiple of its block) hold: an error
    // naming the tensor, and no file
    test::TempDir dir;
    auto base = Model::load(tiny_model("llama"), plain());
    LoraSet set = LoraSet::load({{foreign_adapter(*base, dir.file("c.gguf")), 1e10f}}, *base);
    ExportOptions o;
    o.type = InitType::Q8_0;
    const std::string out = dir.file("m.gguf");
    const std::string err = test::error_of([&] { export_model(*base, set, out, o); });
    EXPECT_NE(err.find("while producing tensor '"), std::string::npos) << err;
    EXPECT_NE(err.find("can hold (they read back non-finite)"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out));
}

TEST(Export, CommandLine) {
    test::TempDir dir;
    const std::string m = test::shell_quote(tiny_model("llama"));
    const std::string heads = dir.file("h.gguf"), fused = dir.file("f.gguf"), q8 = dir.file("q8.gguf");
    EXPECT_EQ(test::run_toy("export -m " + m + " --per-head-layout -o " + heads).code, 0);
    EXPECT_EQ(test::run_toy("fuse " + heads + " " + fused).code, 0);
    const test::CommandResult r = test::run_toy("export -m " + fused + " --type q8_0 -o " + q8);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("q8_0"), std::string::npos) << r.err;
    // errors: one line each
    for (const std::string &bad : {"export -m " + m + " -o " + m, "export -m " + m + " --type q3 -o " + q8,
                                  "export -m " + test::shell_quote(tiny_model("gpt2")) + " --per-head-layout -o " + q8,
                                  "export -m " + m + " --lora " + m + " -o " + q8}) {
        const test::CommandResult e = test::run_toy(bad);
        EXPECT_EQ(e.code, 1) << bad;
        EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << bad << ": " << e.err;
    }
}
