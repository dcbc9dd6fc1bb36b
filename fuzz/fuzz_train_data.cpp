// fuzz_train_data: training data files as `toy train` reads them
// (train/data.h load_dataset): plain text (documents split at
// "<|endoftext|>" or another separator) and chat JSONL ({"messages": [...]}
// per line, rendered with a chat template, assistant tokens as targets).
// Checks that any file gives a dataset or a toy::Error, and that a dataset's
// windows are well formed: n_ctx + 1 tokens inside the vocabulary, n_ctx
// mask entries, n_targets = the mask's ones; split_tail and epoch_order
// keep every window.
//
// Input: byte 0: bit 0 chat JSONL (else text), bit 1 the BPE vocabulary
// (gpt2 fixture; else SPM, stories260K), bit 2 another separator, bits 3-4
// the template (chatml, llama3, zephyr, gemma); byte 1: n_ctx (1..64); the
// rest is the file.
#include "fuzz_common.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "text/chat_template.h"
#include "text/vocab.h"
#include "train/data.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace toy;

namespace {
std::unique_ptr<text::Vocab> g_spm, g_bpe;
std::vector<std::unique_ptr<text::ChatTemplate>> g_templates;

std::unique_ptr<text::Vocab> load_vocab(const std::string &rel) {
    auto f = gguf::File::open(fuzz::shared_path(rel));
    return std::make_unique<text::Vocab>(text::Vocab::load(*f));
}

[[noreturn]] void finding(const char *what) {
    std::fprintf(stderr, "fuzz_train_data: %s\n", what);
    std::abort();
}

void check(const train::Dataset &d, const text::Vocab &v, int64_t n_ctx) {
    for (const auto &w : d.windows) {
        if ((int64_t)w.tokens.size() != n_ctx + 1 || (int64_t)w.mask.size() != n_ctx) finding("window of the wrong size");
        for (int32_t id : w.tokens) {
            if (id < 0 || id >= v.n_tokens()) finding("token outside the vocabulary");
        }
        if (std::count(w.mask.begin(), w.mask.end(), 1) != w.n_targets) finding("n_targets disagrees with the mask");
    }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    g_spm = load_vocab("models/stories260K.gguf");
    g_bpe = load_vocab("fixtures/gpt2.f32.gguf");
    for (const char *name : {"chatml", "llama3", "zephyr", "gemma"}) {
        g_templates.push_back(std::make_unique<text::ChatTemplate>(text::ChatTemplate::builtin_source(name), "<s>", "</s>", name));
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz::ScratchFile text_file("data.txt"), chat_file("data.jsonl");
    fuzz::Input in(data, size);
    const uint8_t opts = in.byte();
    const int64_t n_ctx = 1 + in.byte() % 64;
    const std::string_view body = in.rest();
    const bool chat = opts & 1;
    const text::Vocab &v = opts & 2 ? *g_bpe : *g_spm;
    const text::ChatTemplate *tmpl = chat ? g_templates[(opts >> 3) % g_templates.size()].get() : nullptr;
    const std::string sep = opts & 4 ? "\n\n" : "<|endoftext|>";
    const std::string &path = (chat ? chat_file : text_file).write(body);
    try {
        train::Dataset d = train::load_dataset(path, v, tmpl, n_ctx, sep);
        check(d, v, n_ctx);
        const size_t n = d.windows.size();
        if (n >= 2) {
            train::Dataset tail = d.split_tail(0.25);
            if (tail.windows.empty() || d.windows.size() + tail.windows.size() != n) finding("split_tail lost windows");
        }
        const auto order = train::epoch_order((int64_t)d.windows.size(), opts, 1);
        std::vector<uint8_t> seen(order.size());
        for (int64_t k : order) {
            if (k < 0 || k >= (int64_t)seen.size() || seen[k]++) finding("epoch_order is not a permutation");
        }
    } catch (const Error &) {
    }
    return 0;
}
