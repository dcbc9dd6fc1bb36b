// GGUF reading: the file is memory-mapped once; metadata is parsed into
// owned values, tensor data stays in the mapping (zero-copy).
//
// Validation goes beyond ggml's parser: every count is bounded by what the
// file can hold before anything is allocated, every tensor must lie inside
// the data section with the byte size its type and shape imply, offsets must
// respect the alignment, names are unique. Each failure throws toy::Error
// naming the file, the key or tensor, what was expected and what was found.
#pragma once

#include "core/error.h"

#include <ggml.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace toy::gguf {

// The on-disk value type ids of GGUF.
enum class ValueType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
    BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char *type_name(ValueType t);
size_t scalar_size(ValueType t);  // 0 for STRING and ARRAY

// One metadata value. Scalars live in the fields below; arrays keep their
// element type, their strings (string arrays) or their raw little-endian
// bytes (numeric arrays). Nested arrays are rejected by the reader.
struct Value {
    ValueType type = ValueType::UINT8;
    ValueType elem_type = ValueType::UINT8;  // arrays only
    uint64_t u = 0;        // unsigned integers and BOOL (0/1)
    int64_t i = 0;         // signed integers
    double f = 0;          // FLOAT32 / FLOAT64
    std::string s;         // STRING
    std::vector<std::string> strings;  // ARRAY of STRING
    std::vector<uint8_t> raw;          // ARRAY of numbers: raw element bytes
    uint64_t n = 0;                    // ARRAY element count

    static Value u32(uint32_t v);
    static Value i32(int32_t v);
    static Value u64(uint64_t v);
    static Value f32(float v);
    static Value boolean(bool v);
    static Value str(std::string v);
    static Value str_array(std::vector<std::string> v);
    static Value f32_array(const std::vector<float> &v);
    static Value i32_array(const std::vector<int32_t> &v);
    static Value u32_array(const std::vector<uint32_t> &v);

    bool is_integer() const;
    bool is_float() const;
    // Numeric array element k converted to double (elements must be numeric).
    double number_at(uint64_t k) const;
    std::string to_string(size_t max_elems = 8) const;  // for `toy inspect`
    bool operator==(const Value &o) const;
};

struct KeyValue {
    std::string key;
    Value value;
};

struct TensorInfo {
    std::string name;
    ggml_type type = GGML_TYPE_F32;
    int n_dims = 0;
    std::array<int64_t, 4> ne{1, 1, 1, 1};  // ggml order: ne[0] is the contiguous dimension
    uint64_t offset = 0;                    // relative to the data section (of its file)
    uint64_t nbytes = 0;
    uint32_t file = 0;                      // the file of a split model that holds it (0: the first)
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    std::string shape_string() const;       // "[576, 49152]"
};

// The keys llama.cpp's gguf-split writes into each file of a split model:
// which file it is (from 0), how many there are, and the tensors of all.
inline constexpr const char *kSplitNo = "split.no", *kSplitCount = "split.count", *kSplitTensorsCount = "split.tensors.count";

// n values of type `type` at src, converted (dequantized) to float32.
// Throws toy::Error for a type ggml cannot convert.
std::vector<float> to_f32(const void *src, ggml_type type, int64_t n);

class File {
public:
    // Maps and validates the file. Throws toy::Error.
    static std::unique_ptr<File> open(const std::string &path);
    // A model: open()'s file, or when its metadata says it is the first of a
    // split model (llama.cpp's gguf-split: split.count files named
    // PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf, the metadata
    // in the first, each with split.no), every one of its files, checked as
    // llama.cpp checks them: one File with the first file's metadata and all
    // their tensors (TensorInfo::file says whose).
    static std::unique_ptr<File> open_model(const std::string &path);
    ~File();
    File(const File &) = delete;
    File &operator=(const File &) = delete;

    const std::string &path() const { return path_; }
    // The files of a split model (n_files() > 1; file(0) is this one), each
    // with its own tensors; a model in one file is its own file(0).
    size_t n_files() const { return 1 + parts_.size(); }
    const File &file(size_t i) const { return i == 0 ? *this : *parts_.at(i - 1); }
    // The index of the file whose mapping holds p (a tensor's bytes).
    size_t file_holding(const void *p) const;
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
    uint64_t file_size() const { return size_; }
    const uint8_t *mapping() const { return base_; }
    // Tells the kernel the pages wholly inside [p, p+n) of the mapping are not
    // needed now (after their bytes were copied elsewhere): they leave the
    // resident set and are read from the file again if touched.
    void release(const void *p, size_t n) const;
    // Marks [p, p+n) as bytes that will be read once, copied elsewhere and
    // then released: they and the rest of the 2 MiB blocks they touch are
    // mapped in 4 KiB pages. Call it before touching them. A file read with
    // read() (copied, downloaded, checksummed) sits in the page cache in
    // 2 MiB folios, which the kernel otherwise maps whole on the first touch
    // of any byte, so that release() returns nothing of them while a
    // neighbour (a norm left mapped) is in use.
    void will_copy(const void *p, size_t n) const;

    // ---- metadata ----
    const std::vector<KeyValue> &metadata() const { return kv_; }
    const Value *find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Typed getters. Integer getters accept any integer type whose value fits;
    // float getters accept FLOAT32/FLOAT64 and integers. A missing key or a
    // value of another type throws an Error naming the key, expected, found.
    std::string get_string(std::string_view key) const;
    int64_t get_int(std::string_view key) const;
    uint32_t get_u32(std::string_view key) const;
    double get_float(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    std::optional<std::string> opt_string(std::string_view key) const;
    std::optional<int64_t> opt_int(std::string_view key) const;
    std::optional<double> opt_float(std::string_view key) const;
    std::optional<bool> opt_bool(std::string_view key) const;
    const std::vector<std::string> &get_string_array(std::string_view key) const;
    std::vector<float> get_float_array(std::string_view key) const;
    std::vector<int64_t> get_int_array(std::string_view key) const;

    // ---- tensors ----
    const std::vector<TensorInfo> &tensors() const { return tensors_; }
    const TensorInfo *find_tensor(std::string_view name) const;
    bool has_tensor(std::string_view name) const { return find_tensor(name) != nullptr; }
    const TensorInfo &tensor(std::string_view name) const;  // throws if absent
    const void *tensor_data(const TensorInfo &t) const {
        const File &in = file(t.file);
        return in.base_ + in.data_offset_ + t.offset;
    }

private:
    File() = default;
    void parse();
    void open_parts();  // open_model: the other files of a split model
    const Value &require(std::string_view key) const;

    std::string path_;
    int fd_ = -1;
    const uint8_t *base_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<KeyValue> kv_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<TensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
    std::vector<std::unique_ptr<File>> parts_;  // a split model's files after the first
};

// Bytes of a tensor of this type and shape, or an Error when the type id is
// unknown or ne[0] is not a multiple of its block size.
uint64_t tensor_nbytes(ggml_type type, const std::array<int64_t, 4> &ne, const std::string &what);

}  // namespace toy::gguf
