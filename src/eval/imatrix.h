// The importance matrix llama-imatrix computes: for every matrix multiply by
// a model weight, the sum over tokens of each input column's squared
// activation (per expert for MUL_MAT_ID, with the tokens routed to each
// expert counted), over a calibration text cut into windows as perplexity
// cuts it (eval/windows.h; every position's logits are computed, so the last
// layer and the output projection see every token).
//
// The sums are read from the graph's MUL_MAT / MUL_MAT_ID nodes through the
// scheduler's eval callback (SessionOptions::eval_callback), which is why the
// model must be loaded with the file's tensors as they are (no Q|K|V fusion,
// no repacked or packed layouts): the weight operand's name is then the GGUF
// tensor name. As llama-imatrix does, it takes
//   - every MUL_MAT_ID (expert) multiply;
//   - MUL_MAT by a "blk.*" weight (and "output.weight" with process_output)
//     whose input is F32 with at least 16 rows (tokens) in the graph.
// The result is written through quant/imatrix_file.h (llama.cpp's GGUF
// imatrix format).
#pragma once

#include "eval/perplexity.h"
#include "eval/windows.h"
#include "model/model.h"
#include "quant/imatrix_file.h"
#include "text/vocab.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

struct ggml_tensor;

namespace toy::eval {

// The LoadOptions a model needs for imatrix collection (repack and fuse off;
// the rest as given).
LoadOptions imatrix_load_options(LoadOptions o);

// Sums of squared inputs per weight, fed by the scheduler's eval callback.
class ImatrixCollector {
public:
    explicit ImatrixCollector(bool process_output) : process_output_(process_output) {}

    // ggml_backend_sched_eval_callback; user_data is the collector.
    static bool callback(ggml_tensor *t, bool ask, void *collector);
    // What went wrong inside the callback (a non-finite sum, a shape that
    // changed), "" if nothing; the callback stops the graph then.
    const std::string &error() const { return error_; }
    // The sums so far as an imatrix (datasets and chunk fields left to the caller).
    quant::Imatrix matrix() const;

private:
    bool wanted(const ggml_tensor *t) const;
    void collect(const ggml_tensor *t);

    struct Stats {
        std::vector<float> values;    // n_mat x n_per_row
        std::vector<int64_t> counts;  // n_mat
    };
    bool process_output_;
    std::map<std::string, Stats> stats_;
    std::string error_;
    std::vector<char> scratch_;
};

struct ImatrixOptions : WindowOptions {
    bool process_output = false;   // include output.weight
    bool compute_ppl = true;       // the text's perplexity on the way (llama-imatrix prints it)
    int64_t output_frequency = 10; // save every this many chunks (0: only at the end)
    std::string output = "imatrix.gguf";
    std::string dataset;           // recorded in the file (imatrix.datasets)
};

struct ImatrixResult {
    quant::Imatrix matrix;
    int64_t n_tokens = 0;
    WindowPlan plan;
    std::optional<Estimate> ppl;
};

// Computes the matrix of `model` (loaded with imatrix_load_options) on
// `text`, saving it to opts.output every opts.output_frequency chunks and at
// the end. on_chunk hears every window (ppl 0 without compute_ppl).
ImatrixResult compute_imatrix(const Model &model, const text::Vocab &vocab, const std::string &text,
                              const std::string &source, const ImatrixOptions &opts, SessionOptions session,
                              const std::function<void(const ChunkReport &)> &on_chunk = {});

}  // namespace toy::eval
