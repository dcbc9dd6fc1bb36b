// What every converter (Hugging Face, llama2.c) produces: GGUF metadata and
// a list of tensors whose float values are computed on demand, one at a time,
// while the file is written, and the storage-type rules of llama.cpp's
// converters, so a converted file has the types theirs would have.
#pragma once

#include "gguf/gguf_reader.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace toy::convert {

// --outtype: auto picks F16, or BF16 when the checkpoint's first matrix is
// BF16 (and F16 when it is F16), as llama.cpp's converter does.
enum class OutType { Auto, F32, F16, BF16, Q8_0 };
std::optional<OutType> find_out_type(const std::string &name);  // "f16" (any case); nullopt when not one
OutType parse_out_type(const std::string &name);                // the same; throws toy::Error listing the choices
const char *out_type_name(OutType t);

struct OutTensor {
    std::string name;
    std::vector<int64_t> ne;                   // ggml order: ne[0] is the contiguous dimension
    std::function<std::vector<float>()> values;  // n_elements floats, row-major in ne order
};

struct Converted {
    std::vector<gguf::KeyValue> metadata;      // in file order
    std::vector<OutTensor> tensors;            // in file order
    std::string first_matrix_dtype;            // the checkpoint's dtype of its first matrix ("BF16", ...), for Auto
    std::vector<std::string> notes;            // decisions worth telling the user

    void set(const std::string &key, gguf::Value v);  // replaces an existing key
    const gguf::Value *find(const std::string &key) const;
};

// The type a tensor is stored in: F32 for vectors, norms, biases, MoE routers
// and learned positions (llama.cpp keeps them F32 in every file type); `t`
// for the other matrices, F16 where a Q8_0 row is not a multiple of 32.
ggml_type stored_type(const OutTensor &t, ggml_type matrix_type);
ggml_type matrix_type(OutType t, const std::string &first_matrix_dtype);

struct WriteResult {
    ggml_type matrix_type = GGML_TYPE_F16;
    int64_t n_tensors = 0;
    int64_t n_params = 0;
    uint64_t bytes = 0;
};

// Writes the model (atomically) with general.file_type set for the type.
WriteResult write_converted(const Converted &m, OutType type, const std::string &path, int n_threads);

}  // namespace toy::convert
