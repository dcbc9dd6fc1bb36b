// fuzz_chat_template: hostile message roles and contents through real chat
// templates: toy's built-ins (chatml, gemma, llama2, llama3, mistral,
// zephyr), phi-3's from its GGUF's tokenizer.chat_template, and several from
// the pinned llama.cpp bundle (models/templates/*.jinja), all run by the
// Jinja engine toy links. Rendering either gives text or throws toy::Error
// (a template's raise_exception included); the content spans lie inside the
// text in order, and tokenize_rendered gives ids inside the vocabulary.
//
// The template itself is hostile too (it comes with the model file): one
// value of byte 0 takes the template's source from the input, which is
// parsed, probed and run under text/jinja_guard.h's bounds, and must give
// text or a toy::Error, never a crash or a hang.
//
// Input: byte 0 picks the template (or the input's own), byte 1 the options;
// then, for the input's own, its source up to '\0'; the rest is the
// messages, separated by '\0'. A message's first byte picks its role
// (system, user, assistant, tool, or the text up to '\x1f' as the role).
#include "fuzz_common.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "text/chat_template.h"
#include "text/vocab.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace toy;

namespace {

struct Template {
    std::unique_ptr<text::ChatTemplate> tmpl;
    const text::Vocab *vocab;
};
std::vector<Template> g_templates;
std::unique_ptr<text::Vocab> g_phi3, g_spm;

void add(const std::string &source, const text::Vocab *vocab, const std::string &name) {
    try {
        const std::string bos = vocab->token_text(vocab->bos()), eos = vocab->token_text(vocab->eos());
        g_templates.push_back({std::make_unique<text::ChatTemplate>(source, bos, eos, name), vocab});
    } catch (const Error &e) {
        std::fprintf(stderr, "fuzz_chat_template: skipping %s: %s\n", name.c_str(), e.what());
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    auto phi3 = gguf::File::open(fuzz::shared_path("models/vocab/ggml-vocab-phi-3.gguf"));
    g_phi3 = std::make_unique<text::Vocab>(text::Vocab::load(*phi3));
    auto spm = gguf::File::open(fuzz::shared_path("models/vocab/ggml-vocab-llama-spm.gguf"));
    g_spm = std::make_unique<text::Vocab>(text::Vocab::load(*spm));
    for (const std::string &name : text::ChatTemplate::builtin_names()) {
        add(text::ChatTemplate::builtin_source(name), g_spm.get(), name);
    }
    add(phi3->get_string("tokenizer.chat_template"), g_phi3.get(), "phi-3 (gguf)");
    const char *bundle[] = {"Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct",
                            "google-gemma-2-2b-it", "mistralai-Mistral-Nemo-Instruct-2407",
                            "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "microsoft-Phi-3.5-mini-instruct",
                            "HuggingFaceTB-SmolLM3-3B", "ibm-granite-granite-3.3-2B-Instruct"};
    for (const char *b : bundle) {
        add(fuzz::read_file(fuzz::llama_path(std::string("models/templates/") + b + ".jinja")), g_spm.get(), b);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Input in(data, size);
    const size_t pick = in.byte() % (g_templates.size() + 1);
    const uint8_t opts = in.byte();
    std::unique_ptr<text::ChatTemplate> own;
    if (pick == g_templates.size()) {
        try {
            own = std::make_unique<text::ChatTemplate>(std::string(in.until('\0')), "<s>", "</s>", "fuzzed");
        } catch (const Error &) {
            return 0;
        }
    }
    const text::Vocab &vocab = own ? *g_spm : *g_templates[pick].vocab;
    const text::ChatTemplate &tmpl = own ? *own : *g_templates[pick].tmpl;
    std::vector<text::Message> msgs;
    while (!in.empty() && msgs.size() < 64) {
        std::string_view m = in.until('\0');
        fuzz::Input mi((const uint8_t *)m.data(), m.size());
        const char *roles[] = {"system", "user", "assistant", "tool"};
        const uint8_t r = mi.byte() % 5;
        std::string role = r < 4 ? roles[r] : std::string(mi.until('\x1f'));
        msgs.push_back({std::move(role), std::string(mi.rest())});
    }
    text::Rendered r;
    try {
        r = tmpl.render(msgs, opts & 1);
    } catch (const Error &) {
        return 0;
    }
    size_t last = 0;
    for (const auto &s : r.content) {
        if (s.begin < last || s.end < s.begin || s.end > r.text.size()) {
            std::fprintf(stderr, "fuzz_chat_template: content span [%zu, %zu) out of order or outside %zu bytes (%s)\n",
                         s.begin, s.end, r.text.size(), tmpl.name().c_str());
            std::abort();
        }
        last = s.end;
    }
    if (opts & 2) {
        for (int32_t id : text::tokenize_rendered(vocab, r)) {
            if (id < 0 || id >= vocab.n_tokens()) std::abort();
        }
    }
    return 0;
}
