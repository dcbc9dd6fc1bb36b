// toy quantize: a GGUF model rewritten in a llama.cpp file type (Q4_K_M,
// IQ4_XS, ...), tensor for tensor the bytes llama-quantize writes for the
// same input, type and importance matrix (the types come from quant/mix.h,
// the bytes from ggml_quantize_chunk).
//
// Streaming: one tensor at a time is converted to F32, quantized by
// n_threads threads and written (gguf::Writer: atomic, nothing at the output
// path on error). Every check that can fail (types, imatrix, requantizing)
// runs before the first byte is written.
#pragma once

#include "quant/imatrix_file.h"
#include "quant/mix.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace toy::quant {

struct QuantizeOptions {
    std::string type = "Q8_0";                  // a name of quant_type_names() or a file type number
    bool pure = false;                          // --pure
    bool allow_requantize = false;              // --allow-requantize: quantized inputs are dequantized first
    bool leave_output = false;                  // --leave-output-tensor
    ggml_type output_type = GGML_TYPE_COUNT;    // --output-tensor-type
    ggml_type token_embd_type = GGML_TYPE_COUNT;
    std::optional<Imatrix> imatrix;             // --imatrix
    std::string imatrix_file;                   // its path, for the output's quantize.imatrix.file
    std::vector<std::string> include_weights;   // use the imatrix only for entries whose name contains one of these
    std::vector<std::string> exclude_weights;   // ... or not for these
    int n_threads = 0;                          // 0: all hardware threads
};

struct QuantizeResult {
    std::string type;                // the file type's name
    int file_type = 0;               // general.file_type written
    int64_t n_tensors = 0;
    int64_t n_converted = 0;         // tensors whose type changed
    int64_t n_fallback = 0;          // tensors stored in another type because of their row length
    int64_t n_imatrix = 0;           // tensors quantized with importance data
    int64_t n_imatrix_entries = 0;   // entries left after --include/--exclude-weights
    uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
    int64_t n_elements = 0;
    uint64_t file_bytes = 0;
    std::map<std::string, int> types;      // tensors per output type
    std::vector<std::string> notes;        // decisions worth telling the user (fallbacks, imatrix gaps)
};

// Throws toy::Error; on error nothing is left at `out`.
QuantizeResult quantize_model(const std::string &in, const std::string &out, const QuantizeOptions &o);

// An importance matrix that weighs every input of every matrix (2-D tensor)
// of the model file at `path` alike: what the types that cannot do without
// one (IQ2_XXS, IQ2_XS, IQ1_S) take where no activations were measured
// (tests, fuzz seeds), not a substitute for `toy imatrix`.
Imatrix uniform_imatrix(const std::string &path);

// n_rows rows of n_per_row floats at src in `type` at dst, as ggml quantizes
// them; a type that needs an importance matrix weighs every input alike
// (for tests, benchmarks and layout fingerprints, not a model's quality).
void quantize_rows(ggml_type type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row);

// The ranges toy quantizes within. ggml's quantizers weigh each value by
// importance x value^2 in float sums; past float's range those overflow, and
// the grid types' quantizers (grid_quantizer) then abort (GGML_ASSERT, "point
// not on grid") rather than return. Measured on their 256-value rows: the
// first aborts came with values near 1e15 at even importance, and with
// importance near 1e26 at values near 1e8 (IQ2_XXS); within these bounds none
// of 24000 hostile rows per type aborted (zeros, denormals, sparse and
// wide-ranging patterns of both; a test keeps a sample of them). A
// calibration run's importance, a mean squared activation, stays far below
// its bound, and model weights below theirs. At the other end a matrix's
// importance must not be all tiny: the sums underflow (at 1e-24 and below
// the grid types' rows came out as noise, at 0 every type's as zeros), where
// calibration runs give each matrix a largest value of 0.1-20.
inline constexpr float kMinImportance = 1e-10f;  // a matrix's largest value
inline constexpr float kMaxImportance = 1e20f;  // every type
inline constexpr float kMaxGridValue = 1e6f;    // the grid types' values
bool grid_quantizer(ggml_type type);             // IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S

// Whether n values stored as `type` at q (quantized, F16, BF16 or F32) read
// back finite: ggml's 16-bit scales (and F16 itself) turn values past their
// range into infinities, and non-finite sources stay non-finite.
bool reads_back_finite(ggml_type type, const void *q, int64_t n);

// The error for rows [r0, r0 + n_rows) of src (n_per_row floats each) whose
// copy in `type` did not read back finite: the first non-finite value, or the
// largest value, which the type cannot hold.
[[noreturn]] void fail_not_held(ggml_type type, const float *src, int64_t r0, int64_t n_rows, int64_t n_per_row);

}  // namespace toy::quant
