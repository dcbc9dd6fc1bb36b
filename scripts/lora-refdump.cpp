// lora-refdump: llama.cpp's logits for a model with LoRA adapters, for
// scripts/check-lora-llama.sh. Built against the reference build of the
// pinned bundle (../shared/tools/build-llama-reference.sh); written for toy.
//
//   lora-refdump MODEL OUT.f32 TOKENS [ADAPTER SCALE]...
//
// TOKENS: comma-separated ids, evaluated as one batch; OUT.f32 receives
// T x n_vocab float32 logits, row-major.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    if (argc < 4 || (argc - 4) % 2 != 0) {
        std::fprintf(stderr, "usage: lora-refdump MODEL OUT.f32 TOKENS [ADAPTER SCALE]...\n");
        return 2;
    }
    std::vector<llama_token> tokens;
    std::stringstream ss(argv[3]);
    for (std::string id; std::getline(ss, id, ',');) tokens.push_back(std::atoi(id.c_str()));
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return std::fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return std::fprintf(stderr, "cannot create a context\n"), 1;
    std::vector<llama_adapter_lora *> adapters;
    std::vector<float> scales;
    for (int i = 4; i < argc; i += 2) {
        llama_adapter_lora *a = llama_adapter_lora_init(model, argv[i]);
        if (!a) return std::fprintf(stderr, "cannot load adapter %s\n", argv[i]), 1;
        adapters.push_back(a);
        scales.push_back((float)std::atof(argv[i + 1]));
    }
    if (!adapters.empty() && llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), scales.data()) != 0) {
        return std::fprintf(stderr, "cannot apply the adapters\n"), 1;
    }
    const int T = (int)tokens.size();
    llama_batch b = llama_batch_init(T, 0, 1);
    for (int i = 0; i < T; ++i) {
        b.token[i] = tokens[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = T;
    if (llama_decode(ctx, b) != 0) return std::fprintf(stderr, "decode failed\n"), 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *out = std::fopen(argv[2], "wb");
    if (!out) return std::fprintf(stderr, "cannot write %s\n", argv[2]), 1;
    for (int i = 0; i < T; ++i) std::fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, out);
    std::fclose(out);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
