// Parity cases no shared fixture covers, against llama.cpp's logits in
// tests/data: RoPE scaling and sliding-window variants (the fixture's tensors
// with extra metadata), Llama-3 factors computed from metadata, and
// Q8_0-quantized mixture-of-experts models.
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "runtime/session.h"
#include "test_util.h"

#include <gtest/gtest.h>

using namespace toy;

namespace {

struct Variant {
    std::string reference;  // tests/data/NAME.{json,logits.f32}
    std::string fixture;    // ../shared/fixtures/NAME.gguf
    std::vector<std::pair<std::string, gguf::Value>> keys;
    std::vector<std::string> drop;
};

std::string build_variant(const test::TempDir &dir, const Variant &v) {
    auto f = gguf::File::open(test::fixture_path(v.fixture + ".gguf"));
    gguf::Writer w;
    w.copy_metadata(*f);
    for (const auto &[k, val] : v.keys) w.set(k, val);
    for (const auto &t : f->tensors()) {
        if (std::find(v.drop.begin(), v.drop.end(), t.name) == v.drop.end())
            w.add_tensor(t.name, t.type, t.ne, t.n_dims, f->tensor_data(t));
    }
    const std::string out = dir.file(v.reference + ".gguf");
    w.write(out);
    return out;
}

void expect_matches(const std::string &model_path, const std::string &ref_json, const std::string &ref_logits,
                    const LoadOptions &load = {}) {
    auto meta = test::read_json(ref_json);
    auto tokens = meta["tokens"].get<std::vector<int32_t>>();
    auto ref = test::read_f32(ref_logits);
    auto model = Model::load(model_path, load);
    SessionOptions o;
    o.n_ctx = 256;
    o.type_k = o.type_v = GGML_TYPE_F32;
    o.flash_attn = FlashAttn::Off;
    for (bool stepwise : {false, true}) {
        Session s(*model, o);
        std::vector<float> got;
        if (stepwise) {
            for (int32_t t : tokens) {
                s.eval(std::span<const int32_t>(&t, 1));
                got.insert(got.end(), s.logits().begin(), s.logits().end());
            }
        } else {
            s.eval(tokens, true);
            got = s.logits();
        }
        auto st = test::compare_rows(got, ref, meta["n_vocab"].get<size_t>());
        EXPECT_LE(st.d_max, 1e-3) << (stepwise ? "stepwise" : "batched");
        EXPECT_EQ(st.argmax_equal, 1.0) << (stepwise ? "stepwise" : "batched");
    }
}

class RopeVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(RopeVariant, MatchesLlamaCpp) {
    test::TempDir dir;
    const Variant &v = GetParam();
    const std::string data = std::string(TOY_SOURCE_DIR) + "/tests/data/" + v.reference;
    expect_matches(build_variant(dir, v), data + ".json", data + ".logits.f32");
}

std::vector<Variant> variants() {
    using gguf::Value;
    return {
        {"qwen2-yarn.f32", "qwen2.f32",
         {{"qwen2.rope.scaling.type", Value::str("yarn")},
          {"qwen2.rope.scaling.factor", Value::f32(4.0f)},
          {"qwen2.rope.scaling.original_context_length", Value::u32(64)}},
         {}},
        {"llama-linear.f32", "llama-tied.f32",
         {{"llama.rope.scaling.type", Value::str("linear")}, {"llama.rope.scaling.factor", Value::f32(2.0f)}},
         {}},
        {"gemma2-window3.f32", "gemma2.f32", {{"gemma2.attention.sliding_window", Value::u32(3)}}, {}},
    };
}

INSTANTIATE_TEST_SUITE_P(Data, RopeVariant, ::testing::ValuesIn(variants()), [](const auto &info) {
    std::string n = info.param.reference;
    for (char &c : n)
        if (!isalnum((unsigned char)c)) c = '_';
    return n;
});

TEST(RopeVariant, Llama3FactorsFromMetadataEqualTheTensor) {
    // llama3-rope's rope_freqs.weight holds the factors for factor 8, low 1,
    // high 4, original context 64: without the tensor, the metadata must
    // reproduce them and the reference logits.
    test::TempDir dir;
    using gguf::Value;
    Variant v{"llama3-computed",
              "llama3-rope.f32",
              {{"llama.rope.scaling.type", Value::str("llama3")},
               {"llama.rope.scaling.factor", Value::f32(8.0f)},
               {"llama.rope.scaling.low_freq_factor", Value::f32(1.0f)},
               {"llama.rope.scaling.high_freq_factor", Value::f32(4.0f)},
               {"llama.rope.scaling.original_context_length", Value::u32(64)}},
              {"rope_freqs.weight"}};
    const std::string path = build_variant(dir, v);
    auto with_tensor = Model::load(test::fixture_path("llama3-rope.f32.gguf"));
    auto computed = Model::load(path);
    EXPECT_EQ(computed->weights().rope_freqs, nullptr);
    auto expected = with_tensor->read_weight("rope_freqs.weight");
    const auto &got = computed->config().rope.freq_factors;
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * expected[i]) << i;
    expect_matches(path, test::fixture_path("llama3-rope.f32.json"), test::fixture_path("llama3-rope.f32.logits.f32"));
}

TEST(QuantizedMoe, MatchesLlamaCpp) {
    // mixtral / qwen3moe / olmoe fixtures quantized by llama-quantize to Q8_0:
    // experts through ggml_mul_mat_id on quantized stacks, repacked or mapped
    for (const std::string name : {"mixtral.q8_0", "qwen3moe.q8_0", "olmoe.q8_0"}) {
        SCOPED_TRACE(name);
        const std::string data = std::string(TOY_SOURCE_DIR) + "/tests/data/" + name;
        expect_matches(data + ".gguf", data + ".json", data + ".logits.f32");
        LoadOptions mapped;
        mapped.repack = false;
        expect_matches(data + ".gguf", data + ".json", data + ".logits.f32", mapped);
    }
}

}  // namespace
