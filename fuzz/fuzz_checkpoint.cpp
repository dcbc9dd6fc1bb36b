// fuzz_checkpoint: training checkpoints (train/checkpoint.h) as `toy train
// --resume` reads them. The input is a GGUF file; it is loaded into the
// parameters of each kind of tiny trainable model (full fine-tune, LoRA,
// per-head LoRA of a 1-layer llama made at start-up) and its settings read.
// Any bytes must give a state or a toy::Error; a loaded state's loss history
// must agree with its step (one train loss per step, a validation loss per
// validation step).
// Seeds: one checkpoint of each kind (make_seeds).
#include "fuzz_common.h"

#include "core/error.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/trainable.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

using namespace toy;

namespace {
std::unique_ptr<Model> g_base;
std::vector<std::unique_ptr<train::TrainableModel>> g_models;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    fuzz::quiet_ggml();
    g_base = Model::load(fuzz::tiny_model("llama"), train::trainable_load_options());
    for (int k = 0; k < fuzz::kTrainableKinds; ++k) g_models.push_back(fuzz::tiny_trainable(*g_base, k));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz::ScratchFile file("checkpoint-1.gguf");
    const std::string &path = file.write(data, size);
    try {
        (void)train::checkpoint_settings(path).dump();
    } catch (const Error &) {
    }
    for (auto &m : g_models) {
        try {
            const train::CheckpointState st = train::load_checkpoint(path, m->params());
            if (st.step < 0 || (int64_t)st.train_loss.size() != st.step || st.val_steps.size() != st.val_loss.size()) {
                std::fprintf(stderr, "fuzz_checkpoint: step %lld with %zu train losses, %zu/%zu validation steps/losses\n",
                             (long long)st.step, st.train_loss.size(), st.val_steps.size(), st.val_loss.size());
                std::abort();
            }
        } catch (const Error &) {
        }
    }
    return 0;
}
