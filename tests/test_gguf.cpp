// GGUF reader/writer: hostile and malformed files are rejected with a
// toy::Error naming the problem (built byte by byte below), and every shared
// GGUF file survives read -> write -> read unchanged.
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

#include <gguf.h>
#include "test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace fs = std::filesystem;
using toy::gguf::File;
using toy::gguf::Value;
using toy::gguf::ValueType;
using toy::gguf::Writer;

namespace {

// ------------------------------------------------------------ byte builder

struct Bytes {
    std::vector<uint8_t> b;
    Bytes &raw(const void *p, size_t n) {
        size_t at = b.size();
        b.resize(at + n);
        if (n) std::memcpy(b.data() + at, p, n);
        return *this;
    }
    Bytes &u8(uint8_t v) { return raw(&v, 1); }
    Bytes &u32(uint32_t v) { return raw(&v, 4); }
    Bytes &u64(uint64_t v) { return raw(&v, 8); }
    Bytes &i64(int64_t v) { return raw(&v, 8); }
    Bytes &f32(float v) { return raw(&v, 4); }
    Bytes &str(const std::string &s) { return u64(s.size()).raw(s.data(), s.size()); }
    Bytes &header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
    }
    Bytes &kv_u32(const std::string &k, uint32_t v) { return str(k).u32(4).u32(v); }
    Bytes &kv_str(const std::string &k, const std::string &v) { return str(k).u32(8).str(v); }
    Bytes &tensor(const std::string &name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
        str(name).u32((uint32_t)ne.size());
        for (int64_t x : ne) i64(x);
        return u32(type).u64(offset);
    }
    Bytes &pad(size_t a = 32) {
        while (b.size() % a) b.push_back(0);
        return *this;
    }
    Bytes &zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
};

class TempDir {
public:
    TempDir() {
        path_ = fs::temp_directory_path() /
                fmt::format("toy_test_gguf_{}_{}", getpid(), counter_++);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string &name) const { return (path_ / name).string(); }
    const fs::path &path() const { return path_; }

private:
    static inline int counter_ = 0;
    fs::path path_;
};

void write_bytes(const std::string &path, const std::vector<uint8_t> &b) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(b.data()), (std::streamsize)b.size());
}

// Opens the bytes as a file; returns the error message ("" when it opened).
std::string open_error(const std::vector<uint8_t> &b) {
    TempDir dir;
    std::string path = dir.file("t.gguf");
    write_bytes(path, b);
    try {
        File::open(path);
    } catch (const toy::Error &e) {
        return e.what();
    }
    return "";
}

#define EXPECT_REJECTED(bytes, substring)                                           \
    do {                                                                            \
        std::string msg_ = open_error((bytes).b);                                   \
        EXPECT_NE(msg_, "") << "file was accepted";                                 \
        EXPECT_NE(msg_.find(substring), std::string::npos) << "message: " << msg_;  \
        EXPECT_NE(msg_.find("t.gguf: "), std::string::npos) << "message: " << msg_; \
    } while (0)

// A small valid file: two keys, an F32 [4, 2] tensor and a Q8_0 [32] tensor.
Bytes valid_file() {
    Bytes f;
    f.header(2, 2).kv_str("general.architecture", "llama").kv_u32("llama.block_count", 2);
    f.tensor("a", {4, 2}, GGML_TYPE_F32, 0).tensor("b", {32}, GGML_TYPE_Q8_0, 32);
    f.pad();
    for (int k = 0; k < 8; ++k) f.f32((float)k);
    f.zeros(34);
    return f;
}

// ---------------------------------------------------------------- reading

TEST(GgufReader, ReadsValidFile) {
    TempDir dir;
    std::string path = dir.file("ok.gguf");
    write_bytes(path, valid_file().b);
    auto f = File::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    ASSERT_EQ(f->metadata().size(), 2u);
    EXPECT_EQ(f->metadata()[0].key, "general.architecture");
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("llama.block_count"), 2);
    EXPECT_EQ(f->get_u32("llama.block_count"), 2u);
    EXPECT_DOUBLE_EQ(f->get_float("llama.block_count"), 2.0);
    EXPECT_FALSE(f->opt_int("llama.context_length").has_value());
    ASSERT_EQ(f->tensors().size(), 2u);
    const auto &a = f->tensor("a");
    EXPECT_EQ(a.type, GGML_TYPE_F32);
    EXPECT_EQ(a.n_dims, 2);
    EXPECT_EQ(a.shape_string(), "[4, 2]");
    EXPECT_EQ(a.nbytes, 32u);
    EXPECT_EQ(f->data_offset() % 32, 0u);
    EXPECT_EQ(static_cast<const float *>(f->tensor_data(a))[5], 5.0f);
    EXPECT_EQ(f->tensor("b").nbytes, 34u);
    EXPECT_EQ(f->find_tensor("c"), nullptr);
    EXPECT_THROW(f->tensor("c"), toy::Error);
}

TEST(GgufReader, AcceptsVersion2) {
    Bytes f = valid_file();
    f.b[4] = 2;
    EXPECT_EQ(open_error(f.b), "");
}

TEST(GgufReader, RejectsEveryTruncation) {
    Bytes f = valid_file();
    for (size_t cut = 0; cut < f.b.size(); ++cut) {
        std::vector<uint8_t> part(f.b.begin(), f.b.begin() + (long)cut);
        EXPECT_NE(open_error(part), "") << "a file cut at byte " << cut << " was accepted";
    }
}

TEST(GgufReader, TruncationMessagesNameThePart) {
    auto cut = [](const Bytes &f, size_t n) { return std::vector<uint8_t>(f.b.begin(), f.b.begin() + (long)n); };
    Bytes f = valid_file();
    EXPECT_NE(open_error(cut(f, 20)).find("it has 20 bytes"), std::string::npos);  // in the header
    Bytes kv;
    kv.header(0, 1).kv_str("general.architecture", std::string(100, 'x'));
    std::string in_key = open_error(cut(kv, 24 + 8 + 5));
    EXPECT_NE(in_key.find("key 0 has length 20 bytes, but only 5 bytes remain in the file (at byte 32)"), std::string::npos) << in_key;
    std::string in_value = open_error(cut(kv, 24 + 8 + 20 + 4 + 8 + 50));
    EXPECT_NE(in_value.find("the value of key 'general.architecture' has length 100"), std::string::npos) << in_value;
    // valid_file: header 24 + KVs 78 + tensor infos 41 + 33, padded to 192, then 66 bytes of data.
    ASSERT_EQ(f.b.size(), 258u);
    std::string in_infos = open_error(cut(f, 172));
    EXPECT_NE(in_infos.find("file is truncated: tensor 'b'"), std::string::npos) << in_infos;
    std::string in_data = open_error(cut(f, 250));
    EXPECT_NE(in_data.find("tensor 'b' lies past the end of the file (ends at byte 258, file has 250)"),
              std::string::npos) << in_data;
}

TEST(GgufReader, CorruptedBytesGiveErrorsNotCrashes) {
    // Deterministic byte flips over the header, infos and data of a small file: each
    // corrupted file either opens or throws toy::Error; nothing else escapes.
    Bytes f = valid_file();
    std::mt19937 rng(42);
    TempDir dir;
    std::string path = dir.file("c.gguf");
    int rejected = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        std::vector<uint8_t> b = f.b;
        int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            size_t at = rng() % 192;  // header + infos + padding
            b[at] = (rng() % 3 == 0) ? 0xff : (uint8_t)rng();
        }
        write_bytes(path, b);
        try {
            auto file = File::open(path);
            for (const auto &t : file->tensors()) {
                EXPECT_LE(file->data_offset() + t.offset + t.nbytes, file->file_size());
            }
        } catch (const toy::Error &) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 1000);
}

TEST(GgufReader, RejectsBadMagic) {
    Bytes f = valid_file();
    f.b[0] = 'X';
    EXPECT_REJECTED(f, "not a GGUF file");
    EXPECT_REJECTED(Bytes().raw("hello world, this is not gguf at all", 36), "expected magic 'GGUF'");
    EXPECT_REJECTED(Bytes(), "0 bytes");
}

TEST(GgufReader, RejectsUnsupportedVersion) {
    Bytes v1 = valid_file();
    v1.b[4] = 1;
    EXPECT_REJECTED(v1, "unsupported GGUF version 1");
    Bytes v4 = valid_file();
    v4.b[4] = 4;
    EXPECT_REJECTED(v4, "unsupported GGUF version 4");
    Bytes be = valid_file();
    be.b[4] = 0;
    be.b[7] = 3;
    EXPECT_REJECTED(be, "big-endian");
}

TEST(GgufReader, RejectsTensorPastEnd) {
    Bytes f;
    f.header(1, 0).tensor("blk.0.attn_q.weight", {4, 4}, GGML_TYPE_F32, 0).pad().zeros(60);
    EXPECT_REJECTED(f, "tensor 'blk.0.attn_q.weight' lies past the end of the file (ends at byte");
    Bytes g;
    g.header(1, 0).tensor("x", {4}, GGML_TYPE_F32, 0xffffffffffffffe0ull).pad().zeros(16);
    EXPECT_REJECTED(g, "tensor 'x' lies past the end of the file");
}

TEST(GgufReader, RejectsAbsurdCountsWithoutAllocating) {
    Bytes t;
    t.header(1ull << 60, 0).zeros(64);
    EXPECT_REJECTED(t, "claims 1152921504606846976 tensors");
    Bytes k;
    k.header(0, 1ull << 60).zeros(64);
    EXPECT_REJECTED(k, "claims 1152921504606846976 key-value pairs");
    Bytes key_len;
    key_len.header(0, 1).u64(1ull << 62).zeros(64);
    EXPECT_REJECTED(key_len, "has length 4611686018427387904 bytes");
    Bytes val_len;
    val_len.header(0, 1).str("general.name").u32(8).u64(1ull << 62).zeros(64);
    EXPECT_REJECTED(val_len, "the value of key 'general.name' has length");
    Bytes arr;
    arr.header(0, 1).str("x").u32(9).u32(4).u64(1ull << 60).zeros(64);
    EXPECT_REJECTED(arr, "key 'x': array claims 1152921504606846976 elements");
    Bytes arr_overflow;
    arr_overflow.header(0, 1).str("x").u32(9).u32(10).u64(1ull << 61).zeros(64);  // 2^61 * 8 wraps to 0
    EXPECT_REJECTED(arr_overflow, "array claims");
    Bytes sarr;
    sarr.header(0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(1ull << 60).zeros(64);
    EXPECT_REJECTED(sarr, "array claims 1152921504606846976 strings");
    Bytes name_len;
    name_len.header(1, 0).u64(1ull << 62).zeros(64);
    EXPECT_REJECTED(name_len, "the name of tensor 0 has length");
}

TEST(GgufReader, RejectsBadValueTypes) {
    Bytes f;
    f.header(0, 1).str("x").u32(13).u32(0);
    EXPECT_REJECTED(f, "key 'x': value type id 13 is not a GGUF type");
    Bytes a;
    a.header(0, 1).str("x").u32(9).u32(99).u64(0);
    EXPECT_REJECTED(a, "key 'x': array element type id 99");
    Bytes nested;
    nested.header(0, 1).str("x").u32(9).u32(9).u64(1).u32(4).u64(0);
    EXPECT_REJECTED(nested, "key 'x': nested arrays are not supported");
}

TEST(GgufReader, RejectsBadTensorTypes) {
    for (uint32_t type : {4u, 5u, 31u, 36u, (uint32_t)GGML_TYPE_COUNT, 1000u, 0xffffffffu}) {
        Bytes f;
        f.header(1, 0).tensor("w", {32}, type, 0).pad().zeros(1024);
        EXPECT_REJECTED(f, fmt::format("tensor 'w' has type id {}, which is not a ggml tensor type", type));
    }
}

TEST(GgufReader, RejectsDuplicates) {
    Bytes t;
    t.header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad().zeros(64);
    EXPECT_REJECTED(t, "duplicate tensor name 'w'");
    Bytes k;
    k.header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
    EXPECT_REJECTED(k, "duplicate key 'a.b'");
}

TEST(GgufReader, RejectsMisalignedOffset) {
    Bytes f;
    f.header(1, 0).tensor("w", {4}, GGML_TYPE_F32, 4).pad().zeros(64);
    EXPECT_REJECTED(f, "tensor 'w' has offset 4, expected a multiple of the alignment 32");
    // With general.alignment = 8, offset 8 is fine; 4 is not.
    Bytes g;
    g.header(1, 1).kv_u32("general.alignment", 8).tensor("w", {4}, GGML_TYPE_F32, 8).pad(8).zeros(32);
    EXPECT_EQ(open_error(g.b), "");
    Bytes h;
    h.header(1, 1).kv_u32("general.alignment", 8).tensor("w", {4}, GGML_TYPE_F32, 4).pad(8).zeros(32);
    EXPECT_REJECTED(h, "expected a multiple of the alignment 8");
}

// general.alignment 1 (found by fuzz_gguf): a tensor's values must still lie
// where they can be read in place, at a multiple of the largest power of two
// (at most 8) that divides a value's or block's bytes.
TEST(GgufReader, RejectsValuesAlignmentCannotRead) {
    struct Case {
        ggml_type type;
        int64_t ne;
        uint64_t shift;  // bytes past an 8-byte boundary where the values start
        uint64_t need;   // 0: accepted
    };
    const Case cases[] = {
        {GGML_TYPE_F16, 4, 1, 2},  {GGML_TYPE_F16, 4, 2, 0},  {GGML_TYPE_BF16, 4, 3, 2}, {GGML_TYPE_F32, 4, 2, 4},
        {GGML_TYPE_F32, 4, 4, 0},  {GGML_TYPE_F64, 2, 4, 8},  {GGML_TYPE_I8, 4, 1, 0},   {GGML_TYPE_Q8_0, 32, 1, 2},
        {GGML_TYPE_Q8_0, 32, 2, 0}, {GGML_TYPE_Q8_K, 256, 2, 4}, {GGML_TYPE_Q4_K, 256, 4, 8},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(fmt::format("{} at 8k + {}", ggml_type_name(c.type), c.shift));
        auto build = [&](uint64_t offset) {
            Bytes f;
            f.header(1, 1).kv_u32("general.alignment", 1).tensor("w", {c.ne}, c.type, offset);
            return f;
        };
        const uint64_t data = build(0).b.size();  // with alignment 1 the data follows the tensor infos
        const uint64_t offset = (8 - data % 8 + c.shift) % 8;
        Bytes f = build(offset);
        f.zeros(offset + 512);
        if (c.need == 0) {
            EXPECT_EQ(open_error(f.b), "");
        } else {
            EXPECT_REJECTED(f, fmt::format("tensor 'w' ({}) starts at byte {} of the file, expected a multiple of {} to "
                                           "read its values in place (general.alignment is 1)",
                                           ggml_type_name(c.type), data + offset, c.need));
        }
    }
}

TEST(GgufReader, RejectsBadAlignmentKey) {
    Bytes f;
    f.header(0, 1).kv_u32("general.alignment", 24);
    EXPECT_REJECTED(f, "key 'general.alignment': expected a power of two, found 24");
    Bytes g;
    g.header(0, 1).kv_str("general.alignment", "32");
    EXPECT_REJECTED(g, "key 'general.alignment': expected uint32, found string");
}

TEST(GgufReader, RejectsBadShapes) {
    Bytes blocks;  // Q8_0 stores blocks of 32: ne[0] = 16 has no byte size
    blocks.header(1, 0).tensor("q", {16, 2}, GGML_TYPE_Q8_0, 0).pad().zeros(128);
    EXPECT_REJECTED(blocks, "ne[0] = 16 is not a multiple of 32");
    Bytes dims0;
    dims0.header(1, 0).tensor("w", {}, GGML_TYPE_F32, 0).pad().zeros(64);
    EXPECT_REJECTED(dims0, "tensor 'w' has 0 dimensions, expected 1..4");
    Bytes dims5;
    dims5.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, GGML_TYPE_F32, 0).pad().zeros(64);
    EXPECT_REJECTED(dims5, "tensor 'w' has 5 dimensions");
    Bytes neg;
    neg.header(1, 0).tensor("w", {4, -1}, GGML_TYPE_F32, 0).pad().zeros(64);
    EXPECT_REJECTED(neg, "dimension 1 has size -1");
    Bytes zero;
    zero.header(1, 0).tensor("w", {0}, GGML_TYPE_F32, 0).pad().zeros(64);
    EXPECT_REJECTED(zero, "dimension 0 has size 0");
    Bytes overflow;
    overflow.header(1, 0).tensor("w", {1ll << 40, 1ll << 40}, GGML_TYPE_F32, 0).pad().zeros(64);
    EXPECT_REJECTED(overflow, "overflows 64 bits");
    Bytes bytes_overflow;  // 2^62 elements fit int64, 2^64 bytes do not
    bytes_overflow.header(1, 0).tensor("w", {1ll << 31, 1ll << 31}, GGML_TYPE_F32, 0).pad().zeros(64);
    EXPECT_REJECTED(bytes_overflow, "overflows 64 bits");
    Bytes long_name;
    long_name.header(1, 0).tensor(std::string(64, 'n'), {4}, GGML_TYPE_F32, 0).pad().zeros(64);
    EXPECT_REJECTED(long_name, "expected fewer than 64");
}

TEST(GgufReader, RejectsNonRegularAndMissingFiles) {
    TempDir dir;
    EXPECT_THROW(File::open(dir.path().string()), toy::Error);
    try {
        File::open(dir.file("missing.gguf"));
        FAIL() << "opened a missing file";
    } catch (const toy::Error &e) {
        EXPECT_NE(std::string(e.what()).find("missing.gguf: cannot open"), std::string::npos) << e.what();
    }
}

TEST(GgufReader, TypedGettersNameKeyExpectedFound) {
    TempDir dir;
    std::string path = dir.file("model.gguf");
    Bytes f;
    f.header(0, 4).kv_str("llama.block_count", "two").kv_u32("n", 7);
    f.str("neg").u32(5).u32((uint32_t)-3);
    f.str("arr").u32(9).u32(5).u64(3).u32(1).u32((uint32_t)-2).u32(3);
    write_bytes(path, f.b);
    auto file = File::open(path);
    auto message = [&](auto &&fn) -> std::string {
        try {
            fn();
        } catch (const toy::Error &e) {
            return e.what();
        }
        return "";
    };
    std::string want_int = path + ": key 'llama.block_count': expected an integer, found string";
    EXPECT_EQ(message([&] { file->get_int("llama.block_count"); }), want_int);
    EXPECT_EQ(message([&] { file->get_int("llama.context_length"); }), path + ": missing key 'llama.context_length'");
    EXPECT_EQ(message([&] { file->get_string("n"); }), path + ": key 'n': expected a string, found uint32");
    EXPECT_EQ(message([&] { file->get_bool("n"); }), path + ": key 'n': expected a bool, found uint32");
    EXPECT_NE(message([&] { file->get_u32("neg"); }).find("expected an integer in 0..4294967295, found -3"),
              std::string::npos);
    EXPECT_EQ(message([&] { file->opt_int("llama.block_count"); }), want_int);
    EXPECT_EQ(file->get_int("neg"), -3);
    EXPECT_DOUBLE_EQ(file->get_float("neg"), -3.0);
    EXPECT_EQ(file->get_int_array("arr"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(file->get_float_array("arr"), (std::vector<float>{1, -2, 3}));
    EXPECT_EQ(message([&] { file->get_string_array("arr"); }),
              path + ": key 'arr': expected an array of strings, found array of int32");
}

TEST(GgufValue, HelpersRoundTrip) {
    EXPECT_EQ(Value::u32(7).to_string(), "7");
    EXPECT_EQ(Value::i32(-7).to_string(), "-7");
    EXPECT_EQ(Value::f32(0.5f).to_string(), "0.5");
    EXPECT_EQ(Value::boolean(true).to_string(), "true");
    EXPECT_EQ(Value::str("a\"b\n").to_string(), "\"a\\\"b\\n\"");
    EXPECT_EQ(Value::str_array({"x", "y"}).to_string(), "[\"x\", \"y\"]");
    EXPECT_EQ(Value::i32_array({1, 2, 3, 4}).to_string(2), "[1, 2, ... (4 int32 total)]");
    Value f = Value::f32_array({1.5f, -2.0f});
    EXPECT_EQ(f.n, 2u);
    EXPECT_DOUBLE_EQ(f.number_at(1), -2.0);
    EXPECT_THROW(f.number_at(2), toy::Error);
    EXPECT_THROW(Value::str_array({"x"}).number_at(0), toy::Error);
    EXPECT_DOUBLE_EQ(Value::u32_array({4000000000u}).number_at(0), 4000000000.0);
    EXPECT_TRUE(Value::u32(3) == Value::u32(3));
    EXPECT_FALSE(Value::u32(3) == Value::u64(3));
    EXPECT_FALSE(Value::str("a") == Value::str("b"));
    EXPECT_TRUE(Value::f32_array({1, 2}) == Value::f32_array({1, 2}));
    EXPECT_FALSE(Value::f32_array({1, 2}) == Value::f32_array({1, 3}));
    EXPECT_TRUE(Value::u32(1).is_integer());
    EXPECT_TRUE(Value::f32(1).is_float());
    EXPECT_FALSE(Value::str("1").is_integer());
}

// ---------------------------------------------------------------- writing

using toy::test::shared_gguf_files;

void expect_same(const File &a, const File &b) {
    ASSERT_EQ(a.metadata().size(), b.metadata().size());
    for (size_t k = 0; k < a.metadata().size(); ++k) {
        EXPECT_EQ(a.metadata()[k].key, b.metadata()[k].key);
        EXPECT_TRUE(a.metadata()[k].value == b.metadata()[k].value) << a.metadata()[k].key;
    }
    EXPECT_EQ(a.alignment(), b.alignment());
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (size_t k = 0; k < a.tensors().size(); ++k) {
        const auto &ta = a.tensors()[k];
        const auto &tb = b.tensors()[k];
        EXPECT_EQ(ta.name, tb.name);
        EXPECT_EQ(ta.type, tb.type);
        EXPECT_EQ(ta.n_dims, tb.n_dims);
        EXPECT_EQ(ta.ne, tb.ne);
        ASSERT_EQ(ta.nbytes, tb.nbytes);
        EXPECT_EQ(std::memcmp(a.tensor_data(ta), b.tensor_data(tb), ta.nbytes), 0) << ta.name;
    }
}

TEST(GgufWriter, RoundTripsEverySharedFile) {
    auto files = shared_gguf_files();
    ASSERT_GE(files.size(), 3u) << "no GGUF files under " << TOY_SHARED_DIR;
    TempDir dir;
    for (const auto &path : files) {
        SCOPED_TRACE(path);
        auto src = File::open(path);
        Writer w(src->alignment());
        w.copy_metadata(*src);
        for (const auto &t : src->tensors()) w.add_tensor(t.name, t.type, t.ne, t.n_dims, src->tensor_data(t));
        std::string out = dir.file("copy.gguf");
        w.write(out);
        auto copy = File::open(out);
        expect_same(*src, *copy);
        // ggml's own parser accepts what we wrote.
        gguf_init_params params{true, nullptr};
        gguf_context *ctx = gguf_init_from_file(out.c_str(), params);
        ASSERT_NE(ctx, nullptr);
        EXPECT_EQ(gguf_get_n_tensors(ctx), (int64_t)src->tensors().size());
        EXPECT_EQ(gguf_get_n_kv(ctx), (int64_t)src->metadata().size());
        gguf_free(ctx);
    }
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(GgufWriter, WritesValuesTensorsAndAlignment) {
    TempDir dir;
    std::string path = dir.file("w.gguf");
    Writer w(64);
    w.set("general.architecture", Value::str("test"));
    w.set("test.n", Value::u32(1));
    w.set("test.n", Value::u32(2));  // replaces, keeps position
    w.set("test.f", Value::f32_array({0.25f, 0.5f}));
    std::vector<float> a(6);
    for (size_t k = 0; k < a.size(); ++k) a[k] = (float)k;
    w.add_tensor("a", GGML_TYPE_F32, {3, 2, 1, 1}, 2, a.data());
    w.add_tensor("b", GGML_TYPE_Q8_0, {64, 1, 1, 1}, 1, [](uint8_t *out, uint64_t n) { std::memset(out, 7, n); });
    EXPECT_EQ(w.n_tensors(), 2u);
    EXPECT_THROW(w.add_tensor("a", GGML_TYPE_F32, {1, 1, 1, 1}, 1, a.data()), toy::Error);
    EXPECT_THROW(w.add_tensor("c", GGML_TYPE_Q8_0, {16, 1, 1, 1}, 1, a.data()), toy::Error);
    EXPECT_THROW(w.add_tensor("c", (ggml_type)4, {32, 1, 1, 1}, 1, a.data()), toy::Error);
    EXPECT_THROW(w.add_tensor("c", GGML_TYPE_F32, {4, 2, 1, 1}, 1, a.data()), toy::Error);
    EXPECT_THROW(w.add_tensor(std::string(64, 'c'), GGML_TYPE_F32, {4, 1, 1, 1}, 1, a.data()), toy::Error);
    w.write(path);

    auto f = File::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 64u);
    ASSERT_EQ(f->metadata().size(), 4u);
    EXPECT_EQ(f->metadata()[1].key, "test.n");
    EXPECT_EQ(f->get_u32("test.n"), 2u);
    EXPECT_EQ(f->metadata()[3].key, "general.alignment");
    EXPECT_EQ(f->get_float_array("test.f"), (std::vector<float>{0.25f, 0.5f}));
    EXPECT_EQ(f->data_offset() % 64, 0u);
    for (const auto &t : f->tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
    EXPECT_EQ(std::memcmp(f->tensor_data(f->tensor("a")), a.data(), 24), 0);
    const auto &b = f->tensor("b");
    EXPECT_EQ(b.nbytes, 68u);
    EXPECT_EQ(static_cast<const uint8_t *>(f->tensor_data(b))[67], 7);

    // The default alignment is not written.
    Writer d;
    d.set("x", Value::boolean(true));
    d.write(path);  // replaces the existing file
    auto g = File::open(path);
    EXPECT_FALSE(g->has("general.alignment"));
    EXPECT_TRUE(g->get_bool("x"));
    EXPECT_THROW(d.set("general.alignment", Value::u32(3)), toy::Error);
}

TEST(GgufWriter, FailedWriteLeavesNothingBehind) {
    TempDir dir;
    std::vector<float> a(8, 1.0f);
    auto make = [&] {
        Writer w;
        w.set("general.architecture", Value::str("test"));
        w.add_tensor("ok", GGML_TYPE_F32, {8, 1, 1, 1}, 1, a.data());
        w.add_tensor("bad", GGML_TYPE_F32, {1024, 1, 1, 1}, 1,
                     [](uint8_t *, uint64_t) { throw toy::Error("source tensor unavailable"); });
        return w;
    };
    std::string path = dir.file("out.gguf");
    try {
        make().write(path);
        FAIL() << "write succeeded";
    } catch (const toy::Error &e) {
        std::string m = e.what();
        EXPECT_NE(m.find("out.gguf"), std::string::npos) << m;
        EXPECT_NE(m.find("'bad'"), std::string::npos) << m;
        EXPECT_NE(m.find("source tensor unavailable"), std::string::npos) << m;
    }
    EXPECT_TRUE(fs::is_empty(dir.path()));

    // An existing target is left untouched.
    std::vector<uint8_t> before = {'k', 'e', 'e', 'p'};
    write_bytes(path, before);
    EXPECT_THROW(make().write(path), toy::Error);
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(after, before);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

    // Non-toy exceptions are reported as toy::Error too.
    Writer w;
    w.add_tensor("x", GGML_TYPE_F32, {4, 1, 1, 1}, 1, [](uint8_t *, uint64_t) { throw std::runtime_error("boom"); });
    EXPECT_THROW(w.write(path), toy::Error);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

    // An unwritable directory is an error, not a crash.
    Writer v;
    EXPECT_THROW(v.write(dir.file("no/such/dir/x.gguf")), toy::Error);
}

}  // namespace

// SIGTERM / SIGINT during a write remove the temporary file and keep the old
// target; a temporary left by SIGKILL is removed by the next write there.
TEST(GgufWriter, SignalsLeaveNoTemporaryBehind) {
    TempDir dir;
    const std::string target = dir.file("m.gguf");
    ASSERT_EQ(toy::test::run_toy("init --arch llama -o " + target + " -q").code, 0);
    const auto before = fs::file_size(target);
    auto temporaries = [&] {
        int n = 0;
        for (const auto &e : fs::directory_iterator(dir.path())) n += e.path().filename().string().find(".tmp.") != std::string::npos;
        return n;
    };
    auto interrupted_init = [&](int sig) {
        const pid_t pid = fork();
        if (pid == 0) {
            const std::string cmd = "exec " + toy::test::shell_quote(toy::test::toy_bin()) + " init --preset qwen2.5-0.5b --type q8_0 -q -o " +
                                    toy::test::shell_quote(target) + " 2>/dev/null";
            execl("/bin/sh", "sh", "-c", cmd.c_str(), (char *)nullptr);
            _exit(127);
        }
        // wait until the temporary file exists (the write has begun), then signal
        for (int i = 0; i < 400 && temporaries() == 0; ++i) usleep(25 * 1000);
        EXPECT_EQ(temporaries(), 1);
        kill(pid, sig);
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    };
    for (int sig : {SIGTERM, SIGINT}) {
        SCOPED_TRACE(sig);
        interrupted_init(sig);
        EXPECT_EQ(temporaries(), 0);
        EXPECT_EQ(fs::file_size(target), before);  // the old file, intact
    }
    interrupted_init(SIGKILL);
    EXPECT_EQ(temporaries(), 1);  // nothing can run on SIGKILL
    EXPECT_EQ(fs::file_size(target), before);
    ASSERT_EQ(toy::test::run_toy("init --arch llama --seed 7 -o " + target + " -q").code, 0);
    EXPECT_EQ(temporaries(), 0);  // the next write to the target removed the stale one
}
