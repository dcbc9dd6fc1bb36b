// Split models: a model in several GGUF files as llama.cpp's gguf-split
// writes them (PREFIX-00001-of-0000N.gguf ..., the metadata in the first,
// split.no / split.count / split.tensors.count in each), loaded from the
// first file as the one model they hold, and the one-line errors of a split
// that does not add up.
#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "model/export.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "runtime/session.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fmt/format.h>

using namespace toy;

namespace {

// The model at `src` split into dir's model-0000i-of-0000N.gguf, as many
// tensors in each as `per_file` says (gguf::write_split); returns the first
// file's path.
std::string write_split(const std::string &src, const test::TempDir &dir, const std::vector<size_t> &per_file,
                        const std::function<void(size_t, gguf::Writer &)> &edit = {}) {
    std::vector<std::string> paths;
    for (size_t i = 0; i < per_file.size(); ++i) {
        paths.push_back(dir.file(fmt::format("model-{:05d}-of-{:05d}.gguf", i + 1, per_file.size())));
    }
    gguf::write_split(*gguf::File::open(src), paths, per_file, edit);
    return paths.front();
}

std::vector<float> logits_of(const Model &m) {
    SessionOptions o;
    o.n_ctx = 64;
    o.type_k = o.type_v = GGML_TYPE_F32;
    Session s(m, o);
    s.eval(std::vector<int32_t>{1, 5, 9, 22, 100, 7, 64}, true);
    return s.logits();
}

std::string load_error(const std::string &path) {
    try {
        (void)Model::load(path);
    } catch (const Error &e) {
        return e.what();
    }
    return "(loaded)";
}

}  // namespace

// The same logits bit for bit as the whole file, whether the tensors are
// mapped in place from each file, copied or packed, and with the first file
// holding no tensors (gguf-split --no-tensor-first-split).
TEST(GgufSplit, ASplitModelRunsAsItsWholeFile) {
    for (const char *name : {"llama-256.q8_0", "llama-256.f32"}) {
        SCOPED_TRACE(name);
        const std::string whole = test::fixture_path(std::string(name) + ".gguf");
        for (int variant = 0; variant < 3; ++variant) {
            LoadOptions o;
            o.repack = variant != 1;    // 1: every matrix mapped in place, from its own file
            o.use_mmap = variant != 2;  // 2: copied
            const std::vector<float> want = logits_of(*Model::load(whole, o));
            for (const std::vector<size_t> &per_file : std::vector<std::vector<size_t>>{{5, 9, 0}, {0, 12, 0}, {1, 0}}) {
                test::TempDir dir;
                auto m = Model::load(write_split(whole, dir, per_file), o);
                SCOPED_TRACE(fmt::format("{} files, variant {}", per_file.size(), variant));
                ASSERT_EQ(m->file().n_files(), per_file.size());
                EXPECT_EQ(m->file().tensors().size(), gguf::File::open(whole)->tensors().size());
                EXPECT_EQ(logits_of(*m), want);
            }
        }
    }
    // and through the command line, which names what it opened
    test::TempDir dir;
    const std::string whole = test::fixture_path("llama-256.q8_0.gguf");
    const std::string first = write_split(whole, dir, {4, 4, 4});
    EXPECT_EQ(test::toy_logits(first, {1, 2, 3}, ""), test::toy_logits(whole, {1, 2, 3}, ""));
    const test::CommandResult r = test::run_toy("inspect " + first);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("split:         3 files"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("model-00003-of-00003.gguf"), std::string::npos) << r.out;
}

// What does not add up is one line naming the file and what was expected.
TEST(GgufSplit, SplitsThatDoNotAddUpAreOneLineErrors) {
    const std::string whole = test::fixture_path("llama-256.q8_0.gguf");
    auto expect_error = [](const std::string &path, const std::string &part) {
        const std::string e = load_error(path);
        EXPECT_NE(e.find(part), std::string::npos) << e;
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    };
    {  // a later file opened, a file missing, the first renamed
        test::TempDir dir;
        const std::string first = write_split(whole, dir, {4, 4, 4});
        expect_error(dir.file("model-00002-of-00003.gguf"), "file 2 of a split model of 3 files: open its first file, " + first);
        std::filesystem::rename(dir.file("model-00003-of-00003.gguf"), dir.file("elsewhere.gguf"));
        expect_error(first, "file 3 of this split model: " + dir.file("model-00003-of-00003.gguf") + ": cannot open");
        std::filesystem::rename(first, dir.file("model.gguf"));
        expect_error(dir.file("model.gguf"), "expected a name ending in '-00001-of-00003.gguf'");
    }
    {  // a file of another split in the place of file 2
        test::TempDir dir;
        const std::string first = write_split(whole, dir, {4, 4, 4}, [](size_t i, gguf::Writer &w) {
            if (i == 1) w.set("split.no", gguf::Value::u32(2));
        });
        expect_error(first, "expected file 2 of 3 of the split model " + first + " (split.no 1, split.count 3), found split.no 2, split.count 3");
    }
    {  // a tensor in two files
        test::TempDir dir;
        auto f = gguf::File::open(whole);
        const gguf::TensorInfo &t = f->tensors()[0];
        const std::string first = write_split(whole, dir, {4, 4, 4}, [&](size_t i, gguf::Writer &w) {
            if (i == 2) w.add_tensor(t.name, t.type, t.ne, t.n_dims, f->tensor_data(t));
        });
        expect_error(first, "tensor '" + t.name + "' is in two files of the split model: " + first + " and " +
                                dir.file("model-00003-of-00003.gguf"));
    }
    {  // a count that is not the tensors', a count out of range
        test::TempDir dir;
        std::string first = write_split(whole, dir, {4, 4, 4}, [](size_t i, gguf::Writer &w) {
            if (i == 0) w.set("split.tensors.count", gguf::Value::i32(99));
        });
        expect_error(first, "key 'split.tensors.count': the split model has 99 tensors, its 3 files hold");
        first = write_split(whole, dir, {4, 4, 4}, [](size_t i, gguf::Writer &w) {
            if (i == 0) w.set("split.count", gguf::Value::u32(0));
        });
        expect_error(first, "key 'split.count': expected 1 to 65535 files, found 0");
    }
}

// A split model's split.* keys describe its files: what toy writes from one
// (quantize, export) is one file without them, which loads as a whole model.
TEST(GgufSplit, WhatIsWrittenFromASplitModelIsOneFile) {
    test::TempDir dir;
    const std::string whole = test::fixture_path("llama-256.f32.gguf");
    try {
        gguf::write_split(*gguf::File::open(whole), {dir.file("a.gguf"), dir.file("b.gguf")}, {6});
        ADD_FAILURE() << "two files with one tensor count were written";
    } catch (const Error &e) {
        EXPECT_STREQ(e.what(), "write_split: expected one tensor count per file, found 2 files and 1 counts");
    }
    const std::string first = write_split(whole, dir, {6, 6, 6});
    quant::QuantizeOptions q;
    q.type = "Q8_0";
    const std::string out = dir.file("q8.gguf");
    quant::quantize_model(first, out, q);
    auto f = gguf::File::open(out);
    EXPECT_FALSE(f->has("split.count"));
    EXPECT_FALSE(f->has("split.no"));
    EXPECT_FALSE(f->has("split.tensors.count"));
    EXPECT_EQ(f->tensors().size(), gguf::File::open(whole)->tensors().size());
    EXPECT_EQ(Model::load(out)->file().n_files(), 1u);

    // export with nothing to merge joins the files: the whole model's tensors, byte for byte
    const std::string joined = dir.file("joined.gguf");
    export_model(*Model::load(first), LoraSet{}, joined, ExportOptions{});
    auto a = gguf::File::open(joined), b = gguf::File::open(whole);
    EXPECT_FALSE(a->has("split.count"));
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (const gguf::TensorInfo &t : b->tensors()) {
        const gguf::TensorInfo &u = a->tensor(t.name);
        ASSERT_EQ(u.nbytes, t.nbytes) << t.name;
        EXPECT_EQ(std::memcmp(a->tensor_data(u), b->tensor_data(t), t.nbytes), 0) << t.name;
    }
}

// --pack-cache describes every file of a split model: a rewritten last file
// is a miss.
TEST(GgufSplit, ThePackCacheKnowsEveryFile) {
    test::TempDir dir;
    const std::string whole = test::fixture_path("llama-256.q8_0.gguf");
    const std::string first = write_split(whole, dir, {4, 4, 4});
    LoadOptions o;
    o.pack_cache_dir = dir.file("packed");
    if (Model::load(first, o)->repacked_bytes() == 0) GTEST_SKIP() << "nothing in toy's packed layout here";
    EXPECT_TRUE(Model::load(first, o)->packed_from_cache());
    const std::string last = dir.file("model-00003-of-00003.gguf");
    std::filesystem::copy_file(last, dir.file("copy.gguf"));
    std::filesystem::remove(last);
    std::filesystem::rename(dir.file("copy.gguf"), last);  // the same bytes, another inode
    auto again = Model::load(first, o);
    EXPECT_FALSE(again->packed_from_cache());
    EXPECT_EQ(logits_of(*again), logits_of(*Model::load(whole)));
}
