// toy quantize: rewrite a GGUF model in one of llama.cpp's file types
// (quant/quantize.h), with llama-quantize's flags and tensor types.
//
//   toy quantize model-f16.gguf model-q4_k_m.gguf Q4_K_M
//   toy quantize --imatrix imatrix.gguf model-f16.gguf model-iq3.gguf IQ3_XXS 8
//   toy quantize --pure --output-tensor-type q8_0 model.gguf out.gguf Q4_0
#include "apps/cli.h"
#include "core/error.h"
#include "core/parallel.h"
#include "quant/quantize.h"

#include <chrono>
#include <cstdio>
#include <memory>

namespace toy::cli {
namespace {

struct QuantizeFlags {
    std::string input, output, type, output_type, token_embd_type, imatrix;
    int n_threads = 0;
    quant::QuantizeOptions o;
};

std::string mib(uint64_t n) { return fmt::format("{:.2f} MiB", n / 1048576.0); }

int run_quantize(QuantizeFlags &f) {
    quant::QuantizeOptions &o = f.o;
    o.type = f.type;
    o.n_threads = f.n_threads;
    if (f.n_threads < 0 || f.n_threads > kMaxThreads) {
        fail("NTHREADS: expected a count from 0 (all cores) to {}, found {}", kMaxThreads, f.n_threads);
    }
    if (!f.output_type.empty()) o.output_type = quant::parse_ggml_type(f.output_type, "--output-tensor-type");
    if (!f.token_embd_type.empty()) o.token_embd_type = quant::parse_ggml_type(f.token_embd_type, "--token-embedding-type");
    quant::parse_quant_type(f.type);  // a bad type is reported before the imatrix is read
    if (!f.imatrix.empty()) {
        o.imatrix = quant::read_imatrix(f.imatrix);
        o.imatrix_file = f.imatrix;
    } else if (!o.include_weights.empty() || !o.exclude_weights.empty()) {
        fail("--include-weights/--exclude-weights: they select imatrix entries, but no --imatrix was given");
    }
    const auto t0 = std::chrono::steady_clock::now();
    const quant::QuantizeResult r = quant::quantize_model(f.input, f.output, o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::string types;
    for (const auto &[name, n] : r.types) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", name, n);
    for (const auto &n : r.notes) std::fprintf(stderr, "toy: note: %s\n", n.c_str());
    const double bpw_in = r.n_elements ? r.bytes_in * 8.0 / r.n_elements : 0, bpw_out = r.n_elements ? r.bytes_out * 8.0 / r.n_elements : 0;
    std::fprintf(stderr,
                 "toy: wrote %s: %s (general.file_type %d), %lld tensors [%s], %lld converted%s; "
                 "tensor data %s (%.2f bpw) -> %s (%.2f bpw), file %s, %.2f s\n",
                 f.output.c_str(), r.type.c_str(), r.file_type, (long long)r.n_tensors, types.c_str(), (long long)r.n_converted,
                 o.imatrix ? fmt::format(", {} with imatrix data ({} entries used)", r.n_imatrix, r.n_imatrix_entries).c_str() : "",
                 mib(r.bytes_in).c_str(), bpw_in, mib(r.bytes_out).c_str(), bpw_out, mib(r.file_bytes).c_str(), secs);
    return 0;
}

std::string type_list() {
    std::string s;
    for (const auto &q : quant::quant_type_names()) {
        s += fmt::format("\n    {:<10} {:>2}  {}", q.name, q.copy ? std::string() : std::to_string((int)q.ftype), q.about);
    }
    return s;
}

Command reg("quantize", "Rewrite a GGUF model in a llama.cpp quantization type (Q4_K_M, IQ4_XS, ...), as llama-quantize does",
            [](CLI::App &app) {
                auto f = std::make_shared<QuantizeFlags>();
                app.add_option("input", f->input, "GGUF model (F32/F16/BF16; quantized ones need --allow-requantize)")->required();
                app.add_option("output", f->output, "GGUF to write (atomically; never the input)")->required();
                app.add_option("type", f->type, "file type, by name or number (list below)")->required();
                app.add_option("nthreads", f->n_threads, "threads (0: all cores)");
                app.add_flag("--pure", f->o.pure, "no mix: every matrix in the type's base type (fallbacks for odd row lengths still apply)");
                app.add_flag("--allow-requantize", f->o.allow_requantize,
                             "allow quantized input tensors (dequantized first; loses more quality than quantizing from F16/F32)");
                app.add_flag("--leave-output-tensor", f->o.leave_output, "keep output.weight as it is");
                app.add_option("--output-tensor-type", f->output_type, "ggml type for output.weight (e.g. q8_0, f16)");
                app.add_option("--token-embedding-type", f->token_embd_type, "ggml type for token_embd.weight");
                app.add_option("--imatrix", f->imatrix,
                               "importance matrix (llama.cpp's GGUF or legacy .dat, from toy imatrix or llama-imatrix); "
                               "IQ1/IQ2/IQ3_XXS and Q2_K_S need one");
                app.add_option("--include-weights", f->o.include_weights,
                               "use the imatrix only for tensors whose name contains this (repeatable)")
                    ->expected(1)
                    ->allow_extra_args(false)
                    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
                app.add_option("--exclude-weights", f->o.exclude_weights,
                               "do not use the imatrix for tensors whose name contains this (repeatable)")
                    ->expected(1)
                    ->allow_extra_args(false)
                    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
                app.footer("Types (llama.cpp's names; tensors whose rows do not fit a type's block fall back to a smaller block or F16):" +
                           type_list());
                return [f] { return run_quantize(*f); };
            });

}  // namespace
}  // namespace toy::cli
