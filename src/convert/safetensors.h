// Hugging Face safetensors checkpoints: one `model.safetensors`, or shards
// listed by `model.safetensors.index.json`. Each file is memory-mapped; a
// tensor's bytes stay in its mapping until a converter reads them, so
// converting a model needs about one tensor of memory beyond the mappings.
//
// The format: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}}), then the data, offsets relative to its start.
// Everything is validated before use: offsets inside the file, sizes equal
// to dtype x shape, no overlaps, names unique across shards.
#pragma once

#include "convert/mapped_file.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace toy::convert {

struct StTensor {
    std::string name;
    std::string dtype;            // "F32", "F16", "BF16", "F64", "I64", ...
    std::vector<int64_t> shape;   // row-major, outermost first (PyTorch order)
    const uint8_t *data = nullptr;
    uint64_t nbytes = 0;
    std::string file;             // the shard it lives in (for messages)
    int64_t n_elements() const;
    std::string shape_string() const;  // "[2048, 128]"
};

class Safetensors {
public:
    // A checkpoint directory: model.safetensors.index.json and its shards,
    // else model.safetensors, else every *.safetensors file in it.
    static std::unique_ptr<Safetensors> open_dir(const std::string &dir);
    // One file.
    static std::unique_ptr<Safetensors> open_file(const std::string &path);
    ~Safetensors();
    Safetensors(const Safetensors &) = delete;
    Safetensors &operator=(const Safetensors &) = delete;

    const std::vector<StTensor> &tensors() const { return tensors_; }
    const StTensor *find(const std::string &name) const;
    const StTensor &get(const std::string &name) const;  // throws naming the tensor and the checkpoint
    const std::string &where() const { return where_; }  // the directory or file, for messages

    // The tensor's values as float32 (F32, F16, BF16, F64 and integer types).
    // Its pages then leave the resident set (they are read from the file
    // again if touched): converting keeps about one tensor in memory.
    static std::vector<float> read_f32(const StTensor &t);

private:
    Safetensors() = default;
    void add_file(const std::string &path, const std::vector<std::string> *expected_names);

    std::string where_;
    std::vector<std::unique_ptr<MappedFile>> maps_;
    std::vector<StTensor> tensors_;
    std::map<std::string, size_t> index_;
};

}  // namespace toy::convert
