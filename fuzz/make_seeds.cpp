// make_seeds OUT_DIR: the seeds no fixture holds as a small file, written
// with toy's own code into OUT_DIR/<target>/:
//   fuzz_gguf:       a tiny random model of every architecture (F32), an F16 llama, the first
//                    file of a tiny llama split in two (fuzz_gguf keeps the second), and
//                    a llama of 256-wide rows in each type toy's CPU kernels pack from
//                    super-blocks (Q4_K, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS,
//                    IQ2_S (pure IQ2_M), IQ1_S, IQ1_M; the
//                    embedding and output Q2_K: under the 128 KB a unit may take), so
//                    mutations reach their packers
//   fuzz_checkpoint: a checkpoint of each tiny trainable model (full, LoRA, per-head LoRA)
//   fuzz_adapter:    the LoRA adapters those models export
// (scripts/fuzz.sh runs it before fuzzing.)
#include "fuzz_common.h"

#include "core/error.h"
#include "model/config.h"
#include "model/init.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "train/checkpoint.h"
#include "train/trainable.h"

#include <cstdio>
#include <filesystem>
#include <string>

using namespace toy;
namespace fs = std::filesystem;

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
        return 2;
    }
    fuzz::quiet_ggml();
    const fs::path out = argv[1];
    for (const char *t : {"fuzz_gguf", "fuzz_checkpoint", "fuzz_adapter"}) fs::create_directories(out / t);
    try {
        for (const std::string &arch : supported_architectures()) {
            try {
                fs::copy_file(fuzz::tiny_model(arch), out / "fuzz_gguf" / ("tiny-" + arch + ".gguf"),
                              fs::copy_options::overwrite_existing);
            } catch (const Error &e) {
                std::fprintf(stderr, "make_seeds: no tiny %s model: %s\n", arch.c_str(), e.what());
            }
        }
        fs::copy_file(fuzz::tiny_model("llama", true), out / "fuzz_gguf" / "tiny-llama.f16.gguf",
                      fs::copy_options::overwrite_existing);
        // the first file of the split model whose second file fuzz_gguf keeps beside its input
        const fs::path second = out / "split-second.gguf";
        fuzz::write_split_pair(fuzz::tiny_model("llama"), (out / "fuzz_gguf" / "split-llama-00001-of-00002.gguf").string(), second.string());
        fs::remove(second);
        // rows of 256 inputs (one super-block), 16 heads of 16, one KV head, the smallest
        // vocabulary the synthetic tokenizer takes: Q, K, V and O packable, files of 69-124 KB
        InitOptions wide = preset_options("custom", "llama");
        wide.type = InitType::F32;
        wide.n_threads = 1;
        wide.n_embd = 256;
        wide.n_layer = 1;
        wide.n_head = 16;
        wide.n_head_kv = 1;
        wide.n_ff = 16;
        wide.n_ctx = 64;
        wide.n_vocab = 260;
        const std::string f32 = (out / "wide-llama.f32.gguf").string();
        init_model(wide, f32);
        const quant::Imatrix ones = quant::uniform_imatrix(f32);  // the IQ1/IQ2 types need one
        for (const char *type : {"Q4_K_S", "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_M", "IQ1_S", "IQ1_M"}) {
            quant::QuantizeOptions q;
            q.type = type;
            q.pure = true;
            q.token_embd_type = q.output_type = GGML_TYPE_Q2_K;
            q.n_threads = 1;
            q.imatrix = ones;
            quant::quantize_model(f32, (out / "fuzz_gguf" / (std::string("wide-llama.") + type + ".gguf")).string(), q);
        }
        fs::remove(f32);

        auto base = Model::load(fuzz::tiny_model("llama"), train::trainable_load_options());
        for (int k = 0; k < fuzz::kTrainableKinds; ++k) {
            auto m = fuzz::tiny_trainable(*base, k);
            train::CheckpointState st;
            st.step = 2;
            st.train_loss = {5.5f, 5.25f};
            st.val_steps = {2};
            st.val_loss = {5.4f};
            st.data_hash = 0x1234;
            st.settings = {{"lr", 0.001}, {"n_ctx", 32}, {"mode", k == 0 ? "full" : "lora"}};
            const std::string name = "kind" + std::to_string(k) + ".gguf";
            train::save_checkpoint((out / "fuzz_checkpoint" / name).string(), m->params(), st);
            if (k > 0) m->write((out / "fuzz_adapter" / name).string());
        }
    } catch (const Error &e) {
        std::fprintf(stderr, "make_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
