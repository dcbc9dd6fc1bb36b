// fuzz_convert: `toy convert`'s readers (src/convert/) on a Hugging Face
// checkpoint directory one of whose files the input replaces. The first
// byte picks the file: 0 model.safetensors, 1 tokenizer.json (the
// SentencePiece model removed, so it is read), 2 tokenizer.model, 3
// config.json; the rest is its contents. The base is the tiny llama of
// tests/data/convert/hf/llama. Whatever converts must produce every tensor
// at its planned size, and its tokenizer metadata must load as a vocabulary
// or fail with a toy::Error.
// Seeds: the base's own files (scripts/fuzz.sh), TinyStories-656K's tokenizer.json.
#include "fuzz_common.h"

#include "convert/hf_model.h"
#include "convert/output.h"
#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "text/vocab.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace toy;
namespace fs = std::filesystem;

namespace {

const char *kFiles[] = {"model.safetensors", "tokenizer.json", "tokenizer.model", "config.json"};
fs::path g_base, g_dir;

void reset_dir() {
    fs::remove_all(g_dir);
    fs::create_directories(g_dir);
    for (const auto &e : fs::directory_iterator(g_base)) fs::copy_file(e.path(), g_dir / e.path().filename());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    fuzz::quiet_ggml();
    g_base = fs::path(TOY_SOURCE_DIR) / "tests/data/convert/hf/llama";
    g_dir = fs::path(fuzz::scratch_dir()) / "checkpoint";
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Input in(data, size);
    const int which = in.byte() % 4;
    reset_dir();
    if (which == 1) fs::remove(g_dir / "tokenizer.model");
    const std::string_view body = in.rest();
    std::ofstream(g_dir / kFiles[which], std::ios::binary).write(body.data(), (std::streamsize)body.size());
    try {
        convert::Converted m;
        convert::convert_hf(g_dir.string(), m);
        for (const auto &t : m.tensors) {
            int64_t n = 1;
            for (int64_t d : t.ne) n *= d;
            if ((int64_t)t.values().size() != n) std::abort();  // a tensor not of its planned size is a bug
        }
        gguf::Writer w;
        for (const auto &kv : m.metadata) w.set(kv.key, kv.value);
        const std::string vocab_file = (fs::path(fuzz::scratch_dir()) / "vocab.gguf").string();
        w.write(vocab_file);
        (void)text::Vocab::load(*gguf::File::open(vocab_file));
    } catch (const Error &) {
    }
    return 0;
}
