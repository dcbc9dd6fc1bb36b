// toy quantize: the same tensors llama-quantize writes (type and bytes) for
// every file type, on models where the mix rules matter, without and with an
// importance matrix (reference digests in tests/data/quantize, made by
// scripts/make-quantize-reference.sh); the imatrix file format; the errors.
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "model/init.h"
#include "quant/imatrix_file.h"
#include "quant/quantize.h"
#include "sha256.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <optional>
#include <sstream>

using namespace toy;
using namespace toy::test;
namespace fs = std::filesystem;

namespace {

std::string data_path(const std::string &name) { return std::string(TOY_SOURCE_DIR) + "/tests/data/quantize/" + name; }

// One llama-quantize run as recorded: metadata that matters and per tensor (type, digest).
struct RefRun {
    bool error = false;
    std::map<std::string, std::string> meta;
    std::map<std::string, std::pair<std::string, std::string>> tensors;
};

struct Reference {
    std::string input_sha;
    std::vector<std::string> labels;  // in file order
    std::map<std::string, RefRun> runs;
};

Reference load_reference(const std::string &name) {
    std::ifstream in(data_path(name + ".txt"));
    if (!in) throw std::runtime_error("missing reference " + data_path(name + ".txt"));
    Reference r;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ss(line);
        std::string label, what;
        ss >> label >> what;
        if (label == "input") {
            r.input_sha = what;
            continue;
        }
        if (!r.runs.count(label)) r.labels.push_back(label);
        RefRun &run = r.runs[label];
        if (what == "error") {
            run.error = true;
        } else if (what == "meta") {
            std::string key, value;
            ss >> key;
            std::getline(ss >> std::ws, value);
            run.meta[key] = value;
        } else if (what == "tensor") {
            std::string tname, type, digest;
            ss >> tname >> type >> digest;
            run.tensors[tname] = {type, digest};
        }
    }
    return r;
}

std::string file_sha(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return sha256_hex(bytes.data(), bytes.size());
}

std::string meta_string(const gguf::Value &v) {
    if (v.type == gguf::ValueType::STRING) return v.s;
    if (v.is_integer()) return std::to_string(v.type == gguf::ValueType::INT32 || v.type == gguf::ValueType::INT64 ? v.i : (int64_t)v.u);
    return v.to_string();
}

// The options of a recorded run: "Q4_K_M", "Q4_K_M+imatrix" (with
// `imatrix_path`) or "Q4_K_M@--pure,--output-tensor-type,q8_0" (llama-quantize's
// flags; an --imatrix file named relative to tests/data/quantize).
quant::QuantizeOptions options_of(const std::string &label, const std::string &imatrix_path) {
    quant::QuantizeOptions o;
    o.n_threads = 2;
    o.type = label.substr(0, label.find_first_of("+@"));
    auto use_imatrix = [&](const std::string &path) {
        o.imatrix = quant::read_imatrix(path);
        o.imatrix_file = path;
    };
    if (label.find("+imatrix") != std::string::npos) use_imatrix(imatrix_path);
    const size_t at = label.find('@');
    if (at == std::string::npos) return o;
    std::vector<std::string> args;
    std::istringstream ss(label.substr(at + 1));
    for (std::string a; std::getline(ss, a, ',');) args.push_back(a);
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&]() -> const std::string & {
            if (i + 1 >= args.size()) throw std::runtime_error("flag without a value in " + label);
            return args[++i];
        };
        if (a == "--pure") o.pure = true;
        else if (a == "--leave-output-tensor") o.leave_output = true;
        else if (a == "--allow-requantize") o.allow_requantize = true;
        else if (a == "--output-tensor-type") o.output_type = quant::parse_ggml_type(value(), "--output-tensor-type");
        else if (a == "--token-embedding-type") o.token_embd_type = quant::parse_ggml_type(value(), "--token-embedding-type");
        else if (a == "--imatrix") use_imatrix(data_path(value()));
        else if (a == "--include-weights") o.include_weights.push_back(value());
        else if (a == "--exclude-weights") o.exclude_weights.push_back(value());
        else throw std::runtime_error("unknown flag " + a + " in " + label);
    }
    return o;
}

// Quantizes `input` as `label` says (options_of) and compares with
// llama-quantize's record. Returns whether they agree.
bool same_as_reference(const std::string &input, const std::string &label, const RefRun &ref, const TempDir &dir,
                       const std::string &imatrix_path = "") {
    SCOPED_TRACE(input + " " + label);
    quant::QuantizeOptions o = options_of(label, imatrix_path);
    const std::string out = dir.file("out.gguf");
    fs::remove(out);
    const std::string err = error_of([&] { quant::quantize_model(input, out, o); });
    if (ref.error) {
        EXPECT_NE(err, "") << "llama-quantize refused this, toy did not";
        EXPECT_FALSE(fs::exists(out));
        return !err.empty();
    }
    if (!err.empty()) {
        ADD_FAILURE() << "toy refused: " << err;
        return false;
    }
    auto f = gguf::File::open(out);
    bool ok = true;
    for (const auto &[key, value] : ref.meta) {
        const gguf::Value *v = f->find(key);
        if (!v) {
            ADD_FAILURE() << "missing key " << key;
            ok = false;
        } else if (key != "quantize.imatrix.file" && meta_string(*v) != value) {  // the file's path differs by machine
            ADD_FAILURE() << key << ": toy " << meta_string(*v) << ", llama-quantize " << value;
            ok = false;
        }
    }
    for (const auto &kv : f->metadata()) {
        if (kv.key.starts_with("quantize.imatrix.") && !ref.meta.count(kv.key)) {
            ADD_FAILURE() << "toy wrote " << kv.key << ", llama-quantize did not";
            ok = false;
        }
    }
    EXPECT_EQ(f->tensors().size(), ref.tensors.size());
    for (const auto &t : f->tensors()) {
        const auto it = ref.tensors.find(t.name);
        if (it == ref.tensors.end()) {
            ADD_FAILURE() << "tensor " << t.name << " not in the reference";
            ok = false;
            continue;
        }
        const std::string type = ggml_type_name(t.type);
        const std::string digest = sha256_hex(f->tensor_data(t), t.nbytes).substr(0, 16);
        if (type != it->second.first || digest != it->second.second) {
            ADD_FAILURE() << t.name << ": toy " << type << " " << digest << ", llama-quantize " << it->second.first << " "
                          << it->second.second;
            ok = false;
        }
    }
    return ok;
}

// Whether to run every type on the larger models (TOY_QUANTIZE_ALL=1): the
// IQ types take most of the time (ggml's grid searches), minutes in all on
// two cores. By default they run on the fixtures, whose tensors are small.
bool all_types() {
    const char *v = std::getenv("TOY_QUANTIZE_ALL");
    return v && std::string(v) == "1";
}

// The runs of a reference file with (imatrix given) or without an
// importance matrix, those `wanted` accepts (by type name); `input` must be
// the file the reference was made from.
void check_reference(const std::string &name, const std::string &input, const std::string &imatrix = "",
                     const std::function<bool(const std::string &)> &wanted = {}) {
    const Reference ref = load_reference(name);
    ASSERT_EQ(file_sha(input), ref.input_sha) << input << " is not the input the reference was made from";
    TempDir dir;
    int agree = 0, runs = 0;
    for (const std::string &label : ref.labels) {
        const bool with_imatrix = label.find("+imatrix") != std::string::npos;
        if (with_imatrix != !imatrix.empty()) continue;
        if (wanted && !all_types() && !wanted(label.substr(0, label.find_first_of("+@")))) continue;
        ++runs;
        agree += same_as_reference(input, label, ref.runs.at(label), dir, with_imatrix ? data_path(imatrix) : "");
    }
    EXPECT_EQ(agree, runs);
    std::printf("[ quantize ] %s%s: %d of %d types as llama-quantize\n", name.c_str(), imatrix.empty() ? "" : " with imatrix", agree, runs);
}

// On the larger models by default: all but the slowest IQ types.
bool not_slow(const std::string &type) {
    return !type.starts_with("IQ");
}

// The models scripts/make-quantize-reference.sh makes with toy init (same flags).
std::string init_model_file(const std::string &name) {
    static std::map<std::string, std::string> made;
    static TempDir dir;
    if (made.count(name)) return made[name];
    const std::string path = dir.file(name + ".gguf");
    std::string args;
    if (name == "llama8") {
        args = "--arch llama --n-embd 256 --n-layer 8 --n-head 4 --n-head-kv 1 --n-ff 256 --n-vocab 260 --untied --type f16 --seed 7";
    } else {
        args = "--arch qwen3moe --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 4 --n-ff 256 --n-expert 8 --n-expert-used 2 "
               "--n-ff-exp 256 --n-vocab 320 --type f32 --seed 11";
    }
    const CommandResult r = run_toy("-q init " + args + " -o " + shell_quote(path));
    if (r.code != 0) throw std::runtime_error("toy init failed: " + r.err);
    return made[name] = path;
}

}  // namespace

// ------------------------------------------------------------ byte-identical to llama-quantize

TEST(QuantizeReference, FixturesEveryType) {
    check_reference("llama-untied", fixture_path("llama-untied.f16.gguf"));
    check_reference("mixtral", fixture_path("mixtral.f32.gguf"));
    check_reference("gpt2", fixture_path("gpt2.f32.gguf"));
}

TEST(QuantizeReference, LayeredLlamaEveryType) {
    // IQ3_XS and IQ3_XXS refuse without an imatrix (fast), and IQ3_M shows the GQA and first-layer rules
    check_reference("llama8", init_model_file("llama8"), "", [](const std::string &t) {
        return not_slow(t) || t == "IQ3_XS" || t == "IQ3_XXS" || t == "IQ2_XXS" || t == "IQ3_M";
    });
}

TEST(QuantizeReference, EightExpertMoeEveryType) { check_reference("moe8", init_model_file("moe8"), "", not_slow); }

TEST(QuantizeReference, WithImatrixEveryType) {
    // by default the types whose mix or bytes change with an imatrix, quick ones first
    check_reference("llama8", init_model_file("llama8"), "llama8.imatrix.gguf", [](const std::string &t) {
        return t == "Q4_0" || t == "Q5_0" || t == "Q4_K_M" || t == "Q2_K_S" || t == "Q6_K" || t == "IQ2_XXS";
    });
}

TEST(QuantizeReference, FlagsAsLlamaQuantize) {
    // --pure, --output-tensor-type, --token-embedding-type, --leave-output-tensor,
    // --include/--exclude-weights (an IQ2_XXS without entries for one layer: refused by both)
    check_reference("llama8-flags", init_model_file("llama8"));
    // a quantized input: refused without --allow-requantize, dequantized with it; same type or COPY: copied
    check_reference("q8-requantize", fixture_path("llama-256.q8_0.gguf"));
}

TEST(QuantizeReference, WithLegacyImatrixEveryType) {
    // the IQ1/IQ2/IQ3 grids take seconds to build once per process: by default the types a legacy file changes most
    check_reference("llama-untied", fixture_path("llama-untied.f16.gguf"), "llama-untied.imatrix.dat", [](const std::string &t) {
        return t == "Q4_0" || t == "Q5_0" || t == "Q4_K_M" || t == "Q2_K_S" || t == "IQ4_XS" || t == "IQ2_XXS";
    });
}

// ------------------------------------------------------------ imatrix files

TEST(QuantizeImatrix, WriteReadRoundTrip) {
    TempDir dir;
    quant::Imatrix m;
    m.datasets = {"wiki.txt", "code.txt"};
    m.chunk_count = 12;
    m.chunk_size = 512;
    quant::Imatrix::Entry dense;
    dense.n_per_row = 4;
    dense.in_sum2 = {1, 2, 3, 4};
    dense.counts = {2};
    m.entries["blk.0.attn_q.weight"] = dense;
    quant::Imatrix::Entry experts;
    experts.n_per_row = 3;
    experts.n_mat = 2;
    experts.in_sum2 = {1, 2, 3, 8, 10, 12};
    experts.counts = {1, 0};
    m.entries["blk.0.ffn_down_exps.weight"] = experts;
    const std::string path = dir.file("im.gguf");
    quant::write_imatrix(m, path);

    // llama-imatrix's layout: 1-D tensors for a dense weight, [n, n_mat] and [1, n_mat] for experts
    auto f = gguf::File::open(path);
    EXPECT_EQ(f->get_string("general.type"), "imatrix");
    EXPECT_EQ(f->tensor("blk.0.attn_q.weight.in_sum2").n_dims, 1);
    EXPECT_EQ(f->tensor("blk.0.ffn_down_exps.weight.in_sum2").shape_string(), "[3, 2]");
    EXPECT_EQ(f->tensor("blk.0.ffn_down_exps.weight.counts").shape_string(), "[1, 2]");

    const quant::Imatrix r = quant::read_imatrix(path);
    EXPECT_EQ(r.datasets, m.datasets);
    EXPECT_EQ(r.chunk_count, 12);
    EXPECT_EQ(r.chunk_size, 512);
    EXPECT_FALSE(r.legacy);
    ASSERT_EQ(r.entries.size(), 2u);
    EXPECT_EQ(r.entries.at("blk.0.ffn_down_exps.weight").n_mat, 2);
    EXPECT_EQ(r.entries.at("blk.0.ffn_down_exps.weight").in_sum2, experts.in_sum2);
    // in_sum2 / count per matrix; a matrix no token reached weighs every column 1
    EXPECT_EQ(r.importance("blk.0.attn_q.weight"), (std::vector<float>{0.5f, 1, 1.5f, 2}));
    EXPECT_EQ(r.importance("blk.0.ffn_down_exps.weight"), (std::vector<float>{1, 2, 3, 1, 1, 1}));
    EXPECT_TRUE(r.importance("blk.1.attn_q.weight").empty());
}

TEST(QuantizeImatrix, ReadsLegacyDat) {
    const quant::Imatrix m = quant::read_imatrix(data_path("llama-untied.imatrix.dat"));
    EXPECT_TRUE(m.legacy);
    EXPECT_EQ(m.chunk_count, 3);
    EXPECT_EQ(m.datasets, std::vector<std::string>{"legacy.txt"});
    ASSERT_FALSE(m.entries.empty());
    const auto &[name, e] = *m.entries.begin();
    const std::vector<float> imp = m.importance(name);
    ASSERT_EQ(imp.size(), e.in_sum2.size());
    EXPECT_FLOAT_EQ(imp[0], e.in_sum2[0] / 3);  // stored values are mean squares times the call count
}

TEST(QuantizeImatrix, RejectsCorruptFiles) {
    TempDir dir;
    auto write_bytes = [&](const std::string &name, const std::string &bytes) {
        std::ofstream(dir.file(name), std::ios::binary) << bytes;
        return dir.file(name);
    };
    auto gguf_with = [&](const std::string &name, const std::function<void(gguf::Writer &)> &add) {
        gguf::Writer w;
        w.set("general.type", gguf::Value::str("imatrix"));
        w.set("imatrix.datasets", gguf::Value::str_array({"d"}));
        w.set("imatrix.chunk_count", gguf::Value::u32(1));
        w.set("imatrix.chunk_size", gguf::Value::u32(512));
        add(w);
        w.write(dir.file(name));
        return dir.file(name);
    };
    static const float sums[4] = {1, 2, 3, 4}, nan_sums[4] = {1, NAN, 3, 4}, neg_sums[4] = {1, -2, 3, 4}, count[2] = {5, 5};
    const std::string cases[][2] = {
        {write_bytes("empty.dat", ""), "entry count"},
        {write_bytes("junk.dat", std::string("\x05\x00\x00\x00\x03\x00\x00\x00" "ab", 10)), "entry count"},
        {write_bytes("short.dat", std::string("\x01\x00\x00\x00\x40\x00\x00\x00", 8) + std::string(20, 'a')), "entry 0 name"},
        {gguf_with("no_counts.gguf", [](gguf::Writer &w) { w.add_tensor("a.weight.in_sum2", GGML_TYPE_F32, {4, 1, 1, 1}, 1, sums); }),
         "no 'a.weight.counts'"},
        {gguf_with("nan.gguf", [](gguf::Writer &w) {
             w.add_tensor("a.weight.in_sum2", GGML_TYPE_F32, {4, 1, 1, 1}, 1, nan_sums);
             w.add_tensor("a.weight.counts", GGML_TYPE_F32, {1, 1, 1, 1}, 1, count);
         }), "finite"},
        {gguf_with("negative.gguf", [](gguf::Writer &w) {
             w.add_tensor("a.weight.in_sum2", GGML_TYPE_F32, {4, 1, 1, 1}, 1, neg_sums);
             w.add_tensor("a.weight.counts", GGML_TYPE_F32, {1, 1, 1, 1}, 1, count);
         }), ">= 0"},
        {gguf_with("split.gguf", [](gguf::Writer &w) {
             w.add_tensor("a.weight.in_sum2", GGML_TYPE_F32, {3, 1, 1, 1}, 1, sums);
             w.add_tensor("a.weight.counts", GGML_TYPE_F32, {1, 2, 1, 1}, 2, count);
         }), "do not split"},
        {gguf_with("f16.gguf", [](gguf::Writer &w) {
             w.add_tensor("a.weight.in_sum2", GGML_TYPE_F16, {4, 1, 1, 1}, 1, sums);
             w.add_tensor("a.weight.counts", GGML_TYPE_F32, {1, 1, 1, 1}, 1, count);
         }), "expected type f32"},
        {gguf_with("none.gguf", [](gguf::Writer &) {}), "at least one"},
        {fixture_path("llama-tied.f32.gguf"), "imatrix.datasets"},
    };
    for (const auto &[path, expected] : cases) {
        SCOPED_TRACE(path);
        const std::string err = error_of([&] { quant::read_imatrix(path); });
        EXPECT_NE(err.find(expected), std::string::npos) << err;
        EXPECT_EQ(err.find('\n'), std::string::npos) << "one line";
    }
}

TEST(QuantizeImatrix, ValuesThatWouldRuinTheWeightsAreErrors) {
    // Importance a file can hold and no calibration run gives: a matrix whose
    // every column weighs 0 (ggml quantizes it to zeros), values past the
    // bound (ggml's sums overflow: NaN weights, or an abort in the grid
    // types' quantizers), values within it that still overflow one type's
    // sums. Without an imatrix, source values beyond a type's 16-bit scales,
    // or past what the grid types' quantizers survive.
    TempDir dir;
    const std::string in = init_model_file("llama8");  // rows of 256
    const std::string target = "blk.1.ffn_down.weight";
    auto f = gguf::File::open(in);
    auto imatrix_with = [&](float value) {
        quant::Imatrix m;
        for (const auto &t : f->tensors()) {
            if (t.n_dims != 2 || t.name == "token_embd.weight") continue;
            quant::Imatrix::Entry e;
            e.n_per_row = t.ne[0];
            e.in_sum2.assign((size_t)t.ne[0], t.name == target ? value : 1.0f);
            e.counts = {1};
            m.entries[t.name] = e;
        }
        return m;
    };
    // the model with the target's values (F32) from value(i)
    auto with_target = [&](const std::string &name, const std::function<float(int64_t)> &value) {
        gguf::Writer w(f->alignment());
        w.copy_metadata(*f);
        std::vector<float> values;
        for (const auto &t : f->tensors()) {
            if (t.name != target) {
                w.add_tensor(t.name, t.type, t.ne, t.n_dims, f->tensor_data(t));
                continue;
            }
            values.resize((size_t)t.n_elements());
            for (size_t i = 0; i < values.size(); ++i) values[i] = value((int64_t)i);
            w.add_tensor(t.name, GGML_TYPE_F32, t.ne, t.n_dims, values.data());
        }
        w.write(dir.file(name));
        return dir.file(name);
    };
    const std::string big = with_target("big.gguf", [](int64_t) { return 1e7f; });
    // past what IQ3_S's quantizer survives (it aborts)
    const std::string huge = with_target("huge.gguf", [](int64_t i) { return 1e17f * (float)((i * 37) % 17 - 8) / 8; });
    // within both bounds, and Q2_K's sums overflow at importance 1e20 (even importance: finite)
    const std::string wide = with_target("wide.gguf", [](int64_t i) { return 1e6f * (float)((i * 37) % 17 - 8) / 8; });
    struct Case {
        std::string input, type;
        std::optional<quant::Imatrix> imatrix;
        std::string expected;
    };
    const Case cases[] = {
        {in, "Q4_0", imatrix_with(0.0f), "imatrix entry '" + target + "': every value is below 1e-10 (the largest: 0), which would quantize the weights to zeros or noise"},
        {in, "IQ3_XXS", imatrix_with(1e-30f), "imatrix entry '" + target + "': every value is below 1e-10 (the largest: 1e-30)"},
        {in, "IQ4_NL", imatrix_with(3e38f), "imatrix entry '" + target + "' weighs a column 3e+38, above the 1e+20 toy takes"},
        {wide, "Q2_K", imatrix_with(1e20f), "tensor '" + target + "': its importance (imatrix values up to 1e+20) overflows q2_K's quantizer"},
        {big, "Q8_0", std::nullopt, "tensor '" + target + "': rows 0..63 hold values up to 1e+07, beyond what q8_0 can hold"},
        {huge, "IQ3_S", imatrix_with(1.0f), "tensor '" + target + "': row 0 holds -1e+17; toy quantizes to iq3_s finite values up to 1e+06"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.expected);
        quant::QuantizeOptions o;
        o.n_threads = 2;
        o.type = c.type;
        o.pure = true;
        o.imatrix = c.imatrix;
        if (c.imatrix) o.imatrix_file = "forged.imatrix";
        const std::string out = dir.file("out.gguf");
        const std::string err = error_of([&] { quant::quantize_model(c.input, out, o); });
        EXPECT_NE(err.find(c.expected), std::string::npos) << err;
        EXPECT_EQ(err.find('\n'), std::string::npos) << "one line";
        EXPECT_FALSE(fs::exists(out));
    }
    // from the command line: the one line and nothing else
    const std::string forged = dir.file("forged.imatrix.gguf");
    quant::write_imatrix(imatrix_with(3e38f), forged);
    const CommandResult r = run_toy("quantize --imatrix " + shell_quote(forged) + " " + shell_quote(in) + " " +
                                    shell_quote(dir.file("out.gguf")) + " IQ3_S");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("toy: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("above the 1e+20 toy takes"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
    // the wide values quantize cleanly with even importance
    quant::QuantizeOptions o;
    o.n_threads = 2;
    o.type = "Q2_K";
    o.pure = true;
    o.imatrix = imatrix_with(1.0f);
    EXPECT_EQ(error_of([&] { quant::quantize_model(wide, dir.file("ok.gguf"), o); }), "");
}

TEST(QuantizeImatrix, GridQuantizersSurviveHostileRowsWithinTheBounds) {
    // What toy's bounds promise of ggml (quantize.h): rows of importance up to
    // kMaxImportance and values up to kMaxGridValue, in patterns no model
    // has, quantize without an abort (a crash here fails the suite) for the
    // grid types and the others alike. Out of the bounds, IQ2_XXS aborts.
    constexpr int64_t n = 256;
    std::mt19937 rng(2026);
    std::vector<float> x(n), w(n);
    const float w_special[] = {0.0f, 1e-45f, 1e-38f, 1e-30f, 1e-10f, 1.0f, 1e10f, quant::kMaxImportance};
    const float x_special[] = {0.0f, 1e-45f, 1e-38f, -quant::kMaxGridValue, quant::kMaxGridValue, 65504.0f, 1e-10f, 1.0f};
    for (ggml_type type : {GGML_TYPE_IQ3_S, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S,
                           GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ4_XS}) {
        SCOPED_TRACE(ggml_type_name(type));
        EXPECT_EQ(quant::grid_quantizer(type), type != GGML_TYPE_Q2_K && type != GGML_TYPE_Q4_K && type != GGML_TYPE_IQ4_XS);
        std::vector<uint8_t> q(ggml_row_size(type, n));
        for (int it = 0; it < 50; ++it) {
            const int wm = it % 5, xm = (it / 5) % 5;
            for (int64_t i = 0; i < n; ++i) {
                const float u = (float)(rng() % 1000 + 1) / 1000.0f;
                w[i] = wm == 0 ? w_special[rng() % 8] : wm == 1 ? (rng() % 8 ? 0.0f : u * quant::kMaxImportance)
                     : wm == 2 ? std::ldexp(u, (int)(rng() % 215) - 149) : wm == 3 ? u * quant::kMaxImportance : u;
                const float v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
                x[i] = xm == 0 ? x_special[rng() % 8] : xm == 1 ? (rng() % 16 ? 0.0f : v * 1e5f)
                     : xm == 2 ? std::ldexp(v, (int)(rng() % 170) - 150)
                     : xm == 3 ? std::clamp(v * 3e5f, -quant::kMaxGridValue, quant::kMaxGridValue) : v;
            }
            ggml_quantize_chunk(type, x.data(), q.data(), 0, 1, n, w.data());
        }
    }
}

// ------------------------------------------------------------ mixes shared with toy init / export

TEST(QuantizeMix, InitTypesAreQuantizeTypes) {
    // toy init --type q4_k_m stores each tensor in the type toy quantize Q4_K_M gives its F32 twin
    TempDir dir;
    const std::string f32 = dir.file("f32.gguf"), mixed = dir.file("mixed.gguf"), quantized = dir.file("q.gguf");
    const std::string args = "-q init --arch llama --n-embd 256 --n-layer 8 --n-head 4 --n-head-kv 2 --n-ff 256 --n-vocab 300 --seed 3 ";
    ASSERT_EQ(run_toy(args + "--type f32 -o " + f32).code, 0);
    ASSERT_EQ(run_toy(args + "--type q4_k_m -o " + mixed).code, 0);
    quant::QuantizeOptions o;
    o.type = "Q4_K_M";
    quant::quantize_model(f32, quantized, o);
    auto a = gguf::File::open(mixed), b = gguf::File::open(quantized);
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    int q6 = 0;
    for (const auto &t : a->tensors()) {
        EXPECT_EQ(t.type, b->tensor(t.name).type) << t.name;
        q6 += t.type == GGML_TYPE_Q6_K;
    }
    EXPECT_GT(q6, 4);  // the mix is really there: attn_v / ffn_down of the more-bits layers, the output
    EXPECT_EQ(a->get_int("general.file_type"), b->get_int("general.file_type"));
}

// ------------------------------------------------------------ the command line

TEST(QuantizeCli, WritesSummaryAndTypes) {
    TempDir dir;
    const std::string out = dir.file("q.gguf");
    const CommandResult r = run_toy("quantize --output-tensor-type q8_0 " + shell_quote(fixture_path("llama-untied.f16.gguf")) + " " +
                                    shell_quote(out) + " q4_0 2");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("Q4_0 (general.file_type 2)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("bpw"), std::string::npos) << r.err;
    auto f = gguf::File::open(out);
    EXPECT_EQ(f->tensor("output.weight").type, GGML_TYPE_Q8_0);
    EXPECT_EQ(f->get_int("general.quantization_version"), GGML_QNT_VERSION);
    const CommandResult help = run_toy("quantize --help");
    EXPECT_NE(help.out.find("IQ4_XS"), std::string::npos);
    EXPECT_NE(help.out.find("--allow-requantize"), std::string::npos);
}

TEST(QuantizeCli, BadInputsFailCleanlyAndWriteNothing) {
    TempDir dir;
    const std::string in = shell_quote(fixture_path("llama-untied.f16.gguf"));
    const std::string out = dir.file("out.gguf");
    const std::string q_out = shell_quote(out);
    const std::string bad_imatrix = dir.file("bad.imatrix");
    std::ofstream(bad_imatrix, std::ios::binary) << std::string("\x02\x00\x00\x00\x05\x00\x00\x00" "abc", 11);
    fs::copy_file(fixture_path("llama-256.q8_0.gguf"), dir.file("q8.gguf"));
    const std::string cases[][2] = {
        {"quantize " + in + " " + q_out + " Q4_K_Z", "unknown quantization type 'Q4_K_Z' (expected one of Q1_0, Q2_0, Q4_0"},
        {"quantize " + shell_quote(dir.file("missing.gguf")) + " " + q_out + " Q4_0", "no such input file"},
        {"quantize " + in + " " + q_out + " IQ2_XXS", "needs an importance matrix: pass --imatrix FILE"},
        {"quantize " + in + " " + q_out + " Q2_K_S", "needs an importance matrix"},
        {"quantize --imatrix " + shell_quote(bad_imatrix) + " " + in + " " + q_out + " IQ2_XS", "bad.imatrix"},
        {"quantize " + in + " " + in + " Q4_0", "the output would overwrite the input"},
        {"quantize " + shell_quote(dir.file("q8.gguf")) + " " + q_out + " Q4_0", "--allow-requantize"},
        {"quantize --output-tensor-type q9_9 " + in + " " + q_out + " Q4_0", "--output-tensor-type: unknown ggml type 'q9_9'"},
        {"quantize --include-weights attn --exclude-weights ffn --imatrix " + shell_quote(data_path("llama-untied.imatrix.dat")) + " " +
             in + " " + q_out + " Q4_0", "found both"},
    };
    for (const auto &[args, expected] : cases) {
        SCOPED_TRACE(args);
        const CommandResult r = run_toy(args);
        EXPECT_EQ(r.code, 1);
        EXPECT_NE(r.err.find("toy: error: "), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_FALSE(fs::exists(out));
    }
    // nothing but the input is left in the directory (no temporary files either)
    for (const auto &e : fs::directory_iterator(dir.path)) {
        EXPECT_TRUE(e.path().filename() == "bad.imatrix" || e.path().filename() == "q8.gguf") << e.path();
    }
    // requantizing when asked to
    const CommandResult r = run_toy("quantize --allow-requantize " + shell_quote(dir.file("q8.gguf")) + " " + q_out + " Q4_K_M");
    EXPECT_EQ(r.code, 0) << r.err;
}
