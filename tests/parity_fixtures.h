// The parity fixtures of ../shared/fixtures (and stories260K) with llama.cpp's
// reference logits, the session options each was computed with, and the
// bounds of the fixtures' README: shared by the CPU parity tests and the
// GPU ones.
#pragma once

#include "runtime/session.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

namespace toy::test {

struct Fixture {
    std::string name;   // e.g. llama-256.q8_0.kvq8 (reference prefix)
    std::string dir;    // fixtures or models
};

inline void PrintTo(const Fixture &f, std::ostream *os) { *os << f.dir << "/" << f.name; }

inline std::vector<Fixture> all_fixtures() {
    std::vector<Fixture> out;
    std::error_code ec;  // no ../shared: no fixture cases (the test listing must not abort)
    for (const auto &e : std::filesystem::directory_iterator(shared_path("fixtures"), ec)) {
        if (e.path().extension() == ".json") out.push_back({e.path().stem().string(), "fixtures"});
    }
    std::sort(out.begin(), out.end(), [](auto &a, auto &b) { return a.name < b.name; });
    out.push_back({"stories260K", "models"});
    return out;
}

struct Reference {
    nlohmann::json meta;
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    size_t n_vocab = 0;
    bool strict = false;  // F32 weights, F32 cache, no flash attention
};

inline Reference load_reference(const Fixture &f) {
    Reference r;
    const std::string base = shared_path(f.dir + "/" + f.name);
    r.meta = read_json(base + ".json");
    r.tokens = r.meta["tokens"].get<std::vector<int32_t>>();
    r.logits = read_f32(shared_path(f.dir + "/" + r.meta["logits_file"].get<std::string>()));
    r.n_vocab = r.meta["n_vocab"].get<size_t>();
    const std::string model = r.meta["model"];
    const bool f32_weights = model.find(".f32.") != std::string::npos || f.name == "stories260K";
    r.strict = f32_weights && r.meta["kv_type"] == "f32" && !r.meta["flash_attn"].get<bool>();
    return r;
}

inline ggml_type cache_type(const std::string &s) {
    return s == "f16" ? GGML_TYPE_F16 : s == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_F32;
}

inline SessionOptions options_for(const Reference &r) {
    SessionOptions o;
    o.n_ctx = 256;
    o.n_threads = 2;
    o.type_k = o.type_v = cache_type(r.meta["kv_type"]);
    o.flash_attn = r.meta["flash_attn"].get<bool>() ? FlashAttn::On : FlashAttn::Off;
    return o;
}

// Worst row d_max and least fraction of rows with the same argmax, for the
// strict fixtures (F32 weights, F32 cache, no flash attention) and the others.
struct Bounds {
    double strict_d_max, strict_argmax, d_max, argmax;
};
// The fixtures' README: the same ggml kernels on the CPU.
inline constexpr Bounds kCpuBounds{1e-3, 1.0, 2e-2, 0.95};

// `got` against llama.cpp's logits within `b`; returns the row statistics
// (d_max is also recorded as a test property).
inline RowStats expect_within_tolerance(const Reference &r, const std::vector<float> &got, const std::string &what,
                                        const Bounds &b = kCpuBounds) {
    EXPECT_EQ(got.size(), r.logits.size()) << what;
    if (got.size() != r.logits.size()) return {};
    const RowStats s = compare_rows(got, r.logits, r.n_vocab);
    EXPECT_LE(s.d_max, r.strict ? b.strict_d_max : b.d_max) << what;
    EXPECT_GE(s.argmax_equal, r.strict ? b.strict_argmax : b.argmax) << what;
    ::testing::Test::RecordProperty(what + "_d_max", std::to_string(s.d_max));
    return s;
}

// "llama-256.q8_0.kvq8" -> "llama_256_q8_0_kvq8": a gtest parameter's name.
inline std::string fixture_test_name(const ::testing::TestParamInfo<Fixture> &info) {
    std::string n = info.param.name;
    for (char &ch : n)
        if (!isalnum((unsigned char)ch)) ch = '_';
    return n;
}

}  // namespace toy::test
