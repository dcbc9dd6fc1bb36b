// Importance matrices ("imatrix"): per weight matrix, the sum over a
// calibration text's tokens of each input column's squared activation.
// Quantizers weight each column's rounding error by it (`toy quantize
// --imatrix`). The file format is llama.cpp's, so files move freely between
// `toy imatrix`, `llama-imatrix` and `llama-quantize`:
//
//   GGUF, general.type = "imatrix", keys imatrix.datasets (string array),
//   imatrix.chunk_count and imatrix.chunk_size (uint32); per weight W two F32
//   tensors: "W.in_sum2" [n_per_row, n_mat] and "W.counts" [1, n_mat]
//   (n_mat: the experts of a MUL_MAT_ID weight, else 1).
//
// The older binary ".dat" layout that llama-quantize still reads is read too
// (Imatrix::legacy): int32 entry count; per entry int32 name length, name,
// int32 call count, int32 value count, float values (already divided by the
// token count and multiplied by the call count); then optionally int32 chunk
// count, int32 length and the dataset name.
//
// Both readers treat the file as untrusted: every size is checked against the
// bytes present, every value must be finite, sums of squares and counts not
// negative, names non-empty; failures name the file, the tensor or entry,
// what was expected and what was found.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace toy::quant {

struct Imatrix {
    struct Entry {
        int64_t n_per_row = 0, n_mat = 1;   // n_mat: experts of a MUL_MAT_ID weight, else 1
        std::vector<float> in_sum2;         // n_mat x n_per_row: sum over tokens of activation^2, per input column
        std::vector<float> counts;          // n_mat: tokens accumulated per matrix
    };
    std::map<std::string, Entry> entries;   // by weight tensor name, e.g. "blk.0.ffn_down.weight"
    std::vector<std::string> datasets;
    int64_t chunk_count = 0, chunk_size = 0;
    // Read from a legacy .dat file: in_sum2 holds mean squares times the call
    // count, counts holds {call count} (n_mat = 1, n_per_row = every value).
    bool legacy = false;

    // The per-column importance llama-quantize uses for `name` (in_sum2 / count, per matrix), or empty when absent.
    // Counts are rounded to whole tokens first; a matrix no token reached gets 1 everywhere
    // (legacy files: the stored values divided by the call count, as they are when it is 0).
    std::vector<float> importance(const std::string &name) const;
};

Imatrix read_imatrix(const std::string &path);               // throws toy::Error (one line: file, what expected, what found)
void write_imatrix(const Imatrix &m, const std::string &path); // atomic (use gguf::Writer)

// Checks one entry's shape and values; throws toy::Error naming `what`.
void validate_imatrix_entry(const std::string &what, const Imatrix::Entry &e);

}  // namespace toy::quant
