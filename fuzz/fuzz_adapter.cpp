// fuzz_adapter: LoRA adapter files (model/lora_adapter.h) as `toy run
// --lora` reads them, against a tiny 1-layer llama made at start-up, bound
// twice: as inference binds it (Q|K|V fused) and as training does (not fused).
// Any bytes must give an adapter or a toy::Error; an adapter's terms can be
// collected for the graph. The input's size picks the user's scale.
// Seeds: adapters toy's trainer writes (make_seeds).
#include "fuzz_common.h"

#include "core/error.h"
#include "graph/adapters.h"
#include "model/lora_adapter.h"
#include "model/model.h"
#include "train/trainable.h"

#include <memory>
#include <vector>

using namespace toy;

namespace {
std::vector<std::unique_ptr<Model>> g_bases;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    fuzz::quiet_ggml();
    LoadOptions inference;
    inference.huge_pages = HugePages::Off;
    g_bases.push_back(Model::load(fuzz::tiny_model("llama"), inference));
    g_bases.push_back(Model::load(fuzz::tiny_model("llama"), train::trainable_load_options()));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz::ScratchFile file("adapter.gguf");
    const std::string &path = file.write(data, size);
    const float scales[] = {1.0f, 0.5f, -2.0f, 0.0f};
    for (const auto &base : g_bases) {
        try {
            auto a = LoraAdapter::load(path, *base, scales[size % 4]);
            graph::Adapters terms;
            a->add_to(terms);
            (void)a->bytes();
        } catch (const Error &) {
        }
    }
    return 0;
}
