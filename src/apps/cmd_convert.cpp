// toy convert: a Hugging Face checkpoint directory or a llama2.c checkpoint
// to GGUF (src/convert/).
//
//   toy convert ./TinyStories-656K -o tinystories.gguf
//   toy convert ./Qwen2.5-0.5B --outtype q8_0 -o qwen.gguf
//   toy convert ./Qwen2.5-0.5B --outtype q4_k_m -o qwen-q4_k_m.gguf   (through toy quantize)
//   toy convert stories260K.bin --tokenizer tok512.bin -o stories.gguf
#include "apps/cli.h"
#include "convert/hf_model.h"
#include "convert/llama2c.h"
#include "core/error.h"
#include "core/parallel.h"
#include "quant/quantize.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

namespace toy::cli {
namespace {
namespace fs = std::filesystem;

std::string quant_names() {
    std::string names;
    for (const auto &q : quant::quant_type_names()) names += (names.empty() ? "" : ", ") + std::string(q.name);
    return names;
}

struct ConvertFlags {
    std::string input, output, outtype = "auto", tokenizer;
    int n_threads = 0;
};

int run_convert(const ConvertFlags &f) {
    const auto t0 = std::chrono::steady_clock::now();
    // --outtype names one of the converter's own types, or any file type
    // `toy quantize` makes (the checkpoint then goes through an F32 GGUF first)
    const std::optional<convert::OutType> own = convert::find_out_type(f.outtype);
    const bool quantize = !own;
    std::optional<quant::QuantizeOptions> qo;
    if (quantize) {
        try {
            qo.emplace();
            qo->type = quant::parse_quant_type(f.outtype).name;
            qo->n_threads = f.n_threads;
        } catch (const Error &) {
            fail("--outtype: unknown type '{}' (expected auto, f32, f16, bf16, q8_0 or a type of toy quantize: {})", f.outtype,
                 quant_names());
        }
    }
    const convert::OutType type = own.value_or(convert::OutType::F32);
    (void)thread_count(f.n_threads);  // -t out of range: an error before anything is read or written
    if (!fs::exists(f.input)) fail("{}: no such file or directory", f.input);
    convert::Converted m;
    const bool llama2c = !fs::is_directory(f.input);
    if (llama2c) {
        std::string tok = f.tokenizer;
        if (tok.empty()) {
            tok = (fs::path(f.input).parent_path() / "tokenizer.bin").string();
            if (!fs::exists(tok)) fail("{}: a llama2.c checkpoint needs its tokenizer: --tokenizer tokenizer.bin", f.input);
        }
        convert::convert_llama2c(f.input, tok, m);
    } else {
        if (!f.tokenizer.empty()) fail("--tokenizer: only for llama2.c checkpoints; a Hugging Face directory brings its own");
        convert::convert_hf(f.input, m);
    }
    std::string out = f.output;
    if (out.empty()) {
        const fs::path in = fs::path(f.input);
        const std::string stem = llama2c ? in.stem().string() : (in.filename().empty() ? in.parent_path() : in).filename().string();
        out = stem + "-" + (quantize ? qo->type : ggml_type_name(convert::matrix_type(type, m.first_matrix_dtype))) + ".gguf";
    }
    if (fs::exists(out) && fs::equivalent(out, f.input)) fail("-o: the output would overwrite the input {}", f.input);
    for (const auto &n : m.notes) std::fprintf(stderr, "toy: note: %s\n", n.c_str());
    const double t_convert = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const char *source = llama2c ? "llama2.c checkpoint" : "Hugging Face checkpoint";
    if (!quantize) {
        const convert::WriteResult r = convert::write_converted(m, type, out, f.n_threads);
        std::fprintf(stderr, "toy: wrote %s: %s, %lld tensors, %.2f M parameters, matrices %s, %.1f MiB, %.1f s\n", out.c_str(),
                     source, (long long)r.n_tensors, r.n_params / 1e6, ggml_type_name(r.matrix_type), r.bytes / 1048576.0,
                     t_convert);
        return 0;
    }
    // F32 first (the checkpoint's values exactly: F16 and BF16 widen without
    // loss), next to the output, removed whatever happens; named as an
    // AtomicFile temporary of the output, so one a killed process leaves
    // behind is removed by the next write of that output
    const std::string staged = fmt::format("{}.tmp.{}.f32stg", out, getpid());
    struct Remove {
        std::string path;
        ~Remove() { std::error_code ec; fs::remove(path, ec); }
    } remove{staged};
    convert::write_converted(m, convert::OutType::F32, staged, f.n_threads);
    const quant::QuantizeResult q = quant::quantize_model(staged, out, *qo);
    std::fprintf(stderr, "toy: wrote %s: %s, %lld tensors, %s, %.1f MiB, %.1f s\n", out.c_str(), source, (long long)q.n_tensors,
                 q.type.c_str(), q.file_bytes / 1048576.0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
}

Command reg("convert", "Convert a Hugging Face checkpoint (safetensors) or a llama2.c model.bin to GGUF", [](CLI::App &app) {
    auto f = std::make_shared<ConvertFlags>();
    std::string archs;
    for (const auto &a : convert::hf_architectures()) archs += (archs.empty() ? "" : ", ") + a;
    app.add_option("input", f->input,
                   "a Hugging Face model directory (config.json, *.safetensors, tokenizer.json or tokenizer.model; " + archs +
                       ") or a llama2.c checkpoint (model.bin)")
        ->required();
    app.add_option("-o,--outfile", f->output, "output GGUF, written atomically (default: <input name>-<type>.gguf here)");
    app.add_option("--outtype", f->outtype,
                   "auto|f32|f16|bf16|q8_0: type of the matrices (auto: bf16 for a bf16 checkpoint, else f16; "
                   "norms, biases and routers stay f32), or any type of toy quantize (q4_k_m, ...: converted to f32, "
                   "then quantized with llama.cpp's mix)");
    app.add_option("--tokenizer", f->tokenizer, "llama2.c only: its tokenizer.bin (default: tokenizer.bin next to the model)");
    app.add_option("-t,--threads", f->n_threads, "threads for the type conversion (0: all)");
    return [f] { return run_convert(*f); };
});

}  // namespace
}  // namespace toy::cli
