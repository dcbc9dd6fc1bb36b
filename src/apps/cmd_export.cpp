// toy export: merge LoRA adapters into a base and/or store it in another
// type (model/export.h); toy fuse: a per-head checkpoint in the standard
// fused layout, every tensor in its own type.
//
//   toy export -m base.gguf --lora adapter.gguf -o merged.gguf --type q8_0
//   toy export -m model.gguf --per-head-layout -o per-head.gguf
//   toy fuse per-head.gguf fused.gguf
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "model/export.h"

#include <chrono>
#include <memory>

namespace toy::cli {
namespace {

struct ExportFlags {
    std::string model, output, type;
    LoraFlags lora;
    bool per_head_layout = false;
};

// Mapped, neither repacked nor fused: the file's tensors as they are.
LoadOptions export_load_options() {
    LoadOptions lo;
    lo.repack = false;
    lo.fuse = false;
    return lo;
}

int run_export(const ExportFlags &f, const char *verb) {
    if (f.output.empty()) fail("-o: an output file is required");
    if (f.output == f.model) fail("-o: the output would overwrite the model {}", f.model);
    const auto t0 = std::chrono::steady_clock::now();
    auto model = Model::load(f.model, export_load_options());
    const LoraSet loras = f.lora.load(*model);
    ExportOptions o;
    if (!f.type.empty()) o.type = parse_init_type(f.type);
    o.per_head_layout = f.per_head_layout;
    const ExportResult r = export_model(*model, loras, f.output, o);
    std::fprintf(stderr, "toy: %s %s: %lld tensors%s%s, %s, %.1f MiB, %.1f s\n", verb, f.output.c_str(), (long long)r.n_tensors,
                 r.n_merged ? fmt::format(", {} merged from {} adapter{}", r.n_merged, loras.adapters.size(),
                                          loras.adapters.size() == 1 ? "" : "s").c_str()
                            : "",
                 r.untied ? " (output projection written on its own)" : "",
                 f.type.empty() ? "types kept" : f.type.c_str(), r.bytes / 1048576.0,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
}

Command reg_export("export", "Write a plain GGUF: LoRA adapters merged, matrices in another type (llama.cpp's mixes)",
                   [](CLI::App &app) {
                       auto f = std::make_shared<ExportFlags>();
                       app.add_option("-m,--model", f->model, "base GGUF model")->required();
                       f->lora.add_to(app, "merge");
                       app.add_option("-o,--output", f->output, "output GGUF (written atomically)");
                       std::string types;
                       for (const auto &t : init_type_names()) types += (types.empty() ? "" : "|") + t;
                       app.add_option("--type", f->type, types + ": store the matrices in this type (default: as they are)");
                       app.add_flag("--per-head-layout", f->per_head_layout,
                                    "write attn_q/k/v one tensor per head (blk.N.attn_q.head_H.weight), as the original system did");
                       return [f] { return run_export(*f, "wrote"); };
                   });

Command reg_fuse("fuse", "Turn a per-head checkpoint (blk.N.attn_q.head_H.weight) into llama.cpp's fused layout",
                 [](CLI::App &app) {
                     auto f = std::make_shared<ExportFlags>();
                     app.add_option("input", f->model, "per-head GGUF")->required();
                     app.add_option("output", f->output, "standard GGUF (written atomically)")->required();
                     return [f] { return run_export(*f, "fused"); };
                 });

}  // namespace
}  // namespace toy::cli
