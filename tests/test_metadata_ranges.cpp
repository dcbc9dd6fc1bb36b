// Metadata that parses but makes no sense: each bad value, forged into a
// fixture with the GGUF writer, is one `toy: error:` line naming its key
// (never an abort inside ggml, never a silent run), and special-token ids out
// of range are a named warning (llama.cpp's fallback, said out loud).
#include "gguf/gguf_writer.h"
#include "model/config.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace toy;

namespace {

// `src` rewritten with the key-values `patch` sets.
void forge(const std::string &src, const std::string &dst, const std::vector<std::pair<std::string, gguf::Value>> &patch) {
    auto f = gguf::File::open(src);
    gguf::Writer w;
    w.copy_metadata(*f);
    for (const auto &[k, v] : patch) w.set(k, v);
    for (const auto &t : f->tensors()) w.add_tensor(t.name, t.type, t.ne, t.n_dims, f->tensor_data(t));
    w.write(dst);
}

struct Bad {
    std::string fixture;
    std::string key;
    gguf::Value value;
    std::string expect;  // in the error
};

}  // namespace

TEST(MetadataRanges, EveryBadValueIsOneLineNamingItsKey) {
    const std::string llama = "llama-tied.f32", gemma = "gemma2.f32", granite = "granite.f32", moe = "mixtral.f32";
    const float nan = std::nanf("");
    const std::vector<Bad> bad = {
        {llama, "llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(-1.0f), "layer_norm_rms_epsilon"},
        {llama, "llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(0.0f), "layer_norm_rms_epsilon"},
        {llama, "llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(nan), "layer_norm_rms_epsilon"},
        {llama, "llama.rope.freq_base", gguf::Value::f32(-10000.0f), "rope.freq_base"},
        {llama, "llama.rope.freq_base", gguf::Value::f32(INFINITY), "rope.freq_base"},
        {llama, "llama.rope.dimension_count", gguf::Value::u32(7), "rope.dimension_count"},
        {llama, "llama.context_length", gguf::Value::u32(0), "context_length"},
        {llama, "llama.attention.scale", gguf::Value::f32(-0.5f), "attention.scale"},
        {llama, "llama.attention.sliding_window", gguf::Value::i32(-4), "sliding_window"},
        {llama, "llama.rope.scaling.attn_factor", gguf::Value::f32(0.0f), "attn_factor"},
        {gemma, "gemma2.attn_logit_softcapping", gguf::Value::f32(-50.0f), "attn_logit_softcapping"},
        {gemma, "gemma2.final_logit_softcapping", gguf::Value::f32(nan), "final_logit_softcapping"},
        {granite, "granite.logit_scale", gguf::Value::f32(0.0f), "logit_scale"},
        {granite, "granite.residual_scale", gguf::Value::f32(-1.0f), "residual_scale"},
        {granite, "granite.embedding_scale", gguf::Value::f32(nan), "embedding_scale"},
        {moe, "llama.expert_used_count", gguf::Value::u32(99), "expert_used_count"},
        // fuzz finding: two billion blocks were sized (gigabytes) before any tensor was looked for
        {llama, "llama.block_count", gguf::Value::u32(2000000000), "block_count"},
        {llama, "tokenizer.ggml.tokens", gguf::Value::str_array({"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}),
         "tokenizer.ggml.tokens"},
        {llama, "llama.feed_forward_length", gguf::Value::u64(1ull << 40), "feed_forward_length"},
        {llama, "llama.attention.key_length", gguf::Value::u32(100000), "key_length"},
        {llama, "llama.attention.value_length", gguf::Value::u32(100000), "value_length"},
        {llama, "llama.rope.scaling.original_context_length", gguf::Value::i32(-1), "original_context_length"},
        {llama, "llama.rope.scaling.yarn_beta_fast", gguf::Value::f32(INFINITY), "yarn_beta_fast"},
        {llama, "llama.rope.scaling.yarn_beta_slow", gguf::Value::f32(nan), "yarn_beta_slow"},
        {llama, "llama.context_length", gguf::Value::u64(1ull << 40), "context_length"},
        // past int's range: a cast wrapped these to 8 and 4096 and ran
        {llama, "llama.rope.dimension_count", gguf::Value::u64((1ull << 32) + 8), "rope.dimension_count"},
        {llama, "llama.rope.scaling.original_context_length", gguf::Value::u64((1ull << 32) + 4096),
         "original_context_length"},
        {gemma, "gemma2.attention.sliding_window_pattern", gguf::Value::i32(-2), "sliding_window_pattern"},
        {gemma, "gemma2.attention.sliding_window_pattern", gguf::Value::u64((1ull << 32) + 2), "sliding_window_pattern"},
        {moe, "llama.expert_count", gguf::Value::u32(70000), "expert_count"},
        {"qwen3moe.f32", "qwen3moe.expert_feed_forward_length", gguf::Value::u32(0), "expert_feed_forward_length"},
    };
    // a NaN among the SPM scores that order merges: the vocabulary refuses it
    {
        test::TempDir dir;
        const std::string path = dir.file("nan-score.gguf");
        const std::string src = test::shared_path("models/stories260K.gguf");
        std::vector<float> scores = gguf::File::open(src)->get_float_array("tokenizer.ggml.scores");
        scores[300] = nan;
        forge(src, path, {{"tokenizer.ggml.scores", gguf::Value::f32_array(scores)}});
        const auto r = test::run_toy("run -m " + path + " -p Once -n 2");
        EXPECT_EQ(r.code, 1) << r.err;
        EXPECT_NE(r.err.find("tokenizer.ggml.scores: token 300 has score NaN"), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
    for (const Bad &b : bad) {
        SCOPED_TRACE(b.fixture + " " + b.key);
        test::TempDir dir;
        const std::string path = dir.file("bad.gguf");
        forge(test::fixture_path(b.fixture + ".gguf"), path, {{b.key, b.value}});
        // the library: a toy::Error naming the key
        const std::string e = test::error_of([&] { Config::from_gguf(*gguf::File::open(path)); });
        EXPECT_NE(e.find(b.expect), std::string::npos) << e;
        // the command line: one line, exit 1
        const auto r = test::run_toy("run -m " + path + " --tokens 1,2 -n 2");
        EXPECT_EQ(r.code, 1) << r.err;
        EXPECT_EQ(r.err.rfind("toy: error: ", 0), 0u) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find(b.expect), std::string::npos) << r.err;
    }
    // a scaling factor of 0 or below
    test::TempDir dir;
    const std::string path = dir.file("scale.gguf");
    forge(test::fixture_path(llama + ".gguf"), path,
          {{"llama.rope.scaling.type", gguf::Value::str("yarn")}, {"llama.rope.scaling.factor", gguf::Value::f32(-2.0f)}});
    EXPECT_NE(test::error_of([&] { Config::from_gguf(*gguf::File::open(path)); }).find("rope.scaling.factor"), std::string::npos);
    forge(test::fixture_path(llama + ".gguf"), path,
          {{"llama.rope.scaling.type", gguf::Value::str("llama3")}, {"llama.rope.scaling.factor", gguf::Value::f32(8.0f)},
           {"llama.rope.scaling.low_freq_factor", gguf::Value::f32(4.0f)},
           {"llama.rope.scaling.high_freq_factor", gguf::Value::f32(4.0f)}});
    EXPECT_NE(test::error_of([&] { Config::from_gguf(*gguf::File::open(path)); }).find("high_freq_factor"), std::string::npos);
    forge(test::fixture_path(llama + ".gguf"), path,
          {{"llama.rope.scaling.type", gguf::Value::str("yarn")}, {"llama.rope.scaling.factor", gguf::Value::f32(4.0f)},
           {"llama.rope.scaling.yarn_ext_factor", gguf::Value::f32(-1.0f)}});
    EXPECT_NE(test::error_of([&] { Config::from_gguf(*gguf::File::open(path)); }).find("yarn_ext_factor"), std::string::npos);
}

TEST(MetadataRanges, SpecialTokenIdsOutOfRangeAreANamedWarning) {
    test::TempDir dir;
    const std::string path = dir.file("bos.gguf");
    forge(test::shared_path("models/stories260K.gguf"), path, {{"tokenizer.ggml.bos_token_id", gguf::Value::u32(1000000)}});
    const auto r = test::run_toy("run -m " + path + " -p Once -n 2 --temp 0");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("toy: warning: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tokenizer.ggml.bos_token_id' = 1000000 is not a token id"), std::string::npos) << r.err;
    // "none" spelled as -1 / 0xFFFFFFFF says nothing
    const auto ok = test::run_toy("run -m " + test::shared_path("models/stories260K.gguf") + " -p Once -n 2 --temp 0");
    EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;
}

// A chat template in the model file that recurses without end: toy chat and
// toy serve run it when they load the model (to learn what it supports) and
// died of a stack overflow (SIGSEGV). Now one error line.
TEST(MetadataRanges, ARunawayChatTemplateIsOneLineNotACrash) {
    test::TempDir dir;
    const std::string path = dir.file("rec.gguf");
    forge(test::shared_path("models/stories260K.gguf"), path,
          {{"tokenizer.chat_template", gguf::Value::str("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")}});
    const auto r = test::run_toy("chat -m " + path + " < /dev/null");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("toy: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the template nests calls more than 500 deep"), std::string::npos) << r.err;
}

