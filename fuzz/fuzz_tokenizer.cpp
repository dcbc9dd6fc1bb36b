// fuzz_tokenizer: hostile text through every tokenizer family toy reads:
// SentencePiece (llama-spm, phi-3, baichuan, stories260K) and byte-level BPE
// with its pre-tokenizers (gpt-2, deepseek-coder, deepseek-llm, falcon, mpt,
// refact, starcoder, gpt-neox), and the special-token parser.
//
// Input: byte 0 picks the vocabulary, byte 1 the mode, the rest is the text
// (or, in id mode, little-endian uint16 token ids, some past the vocabulary).
// Checks, beyond "no crash":
//   - every id tokenize() returns is inside the vocabulary;
//   - without parse_special and add_special no control token comes out (a
//     user who types "<|endoftext|>" gets text, never the control token);
//   - byte-level BPE, valid UTF-8, no special parsing, a vocabulary without
//     space cleaning or whitespace-stripping special tokens: the text comes
//     back byte for byte from detokenize (every byte has a token there);
//   - the streaming Detokenizer gives exactly detokenize()'s bytes when the
//     vocabulary neither drops a first space (SPM) nor cleans spaces.
#include "fuzz_common.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "text/vocab.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace toy;

namespace {

struct Loaded {
    std::string name;
    std::unique_ptr<text::Vocab> vocab;
    bool byte_level = false;      // gpt2-style byte-level BPE
    bool strips_space = false;    // some special token swallows whitespace (lstrip/rstrip)
};

std::vector<Loaded> &vocabs() {
    static std::vector<Loaded> v;
    return v;
}

void load(const std::string &name, const std::string &path) {
    auto f = gguf::File::open(path);
    Loaded l;
    l.name = name;
    l.vocab = std::make_unique<text::Vocab>(text::Vocab::load(*f));
    l.byte_level = l.vocab->type() == text::VocabType::Bpe && l.vocab->model_name() == "gpt2";
    for (int32_t id = 0; id < l.vocab->n_tokens(); ++id) {
        if (l.vocab->token_attr(id) & (text::kAttrLstrip | text::kAttrRstrip)) l.strips_space = true;
    }
    vocabs().push_back(std::move(l));
}

bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const uint8_t c = (uint8_t)s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : c & (0x7f >> n);
        for (size_t k = 1; k < n; ++k) {
            const uint8_t d = (uint8_t)s[i + k];
            if ((d & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3f);
        }
        const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += n;
    }
    return true;
}

[[noreturn]] void finding(const char *what, const Loaded &l) {
    std::fprintf(stderr, "fuzz_tokenizer: %s (vocabulary %s)\n", what, l.name.c_str());
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const char *vocab_files[] = {"llama-spm", "phi-3", "baichuan", "gpt-2", "deepseek-coder", "deepseek-llm",
                                 "falcon", "mpt", "refact", "starcoder", "gpt-neox"};
    for (const char *n : vocab_files) load(n, fuzz::shared_path(std::string("models/vocab/ggml-vocab-") + n + ".gguf"));
    load("stories260K", fuzz::shared_path("models/stories260K.gguf"));
    load("gpt2-fixture", fuzz::shared_path("fixtures/gpt2.f32.gguf"));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Input in(data, size);
    const Loaded &l = vocabs()[in.byte() % vocabs().size()];
    const text::Vocab &v = *l.vocab;
    const uint8_t mode = in.byte();
    const std::string_view text = in.rest();

    if (mode & 4) {  // ids: detokenize whatever comes, ids outside the vocabulary included
        std::vector<int32_t> ids;
        for (size_t i = 0; i + 1 < text.size(); i += 2) {
            const uint32_t raw = (uint8_t)text[i] | (uint32_t)(uint8_t)text[i + 1] << 8;
            ids.push_back(raw >= 0xff00 ? (int32_t)raw - 0x10000 : (int32_t)(raw * 2u % (v.n_tokens() + 8u)));
        }
        const bool special = mode & 8;
        (void)v.detokenize(ids, special);
        text::Detokenizer stream(v, special);
        for (int32_t id : ids) (void)stream.push(id);
        (void)stream.flush();
        for (int32_t id : ids) (void)v.token_to_piece(id, special);
        return 0;
    }

    const bool add_special = mode & 1, parse_special = mode & 2;
    const std::vector<int32_t> ids = v.tokenize(text, add_special, parse_special);
    for (int32_t id : ids) {
        if (id < 0 || id >= v.n_tokens()) finding("tokenize returned an id outside the vocabulary", l);
        if (!add_special && !parse_special && v.is_control(id)) finding("plain text became a control token", l);
    }
    const std::string back = v.detokenize(ids, parse_special);
    if (l.byte_level && !add_special && !parse_special && !v.clean_spaces() && !l.strips_space && valid_utf8(text) &&
        back != text) {
        finding("byte-level BPE did not give the text back", l);
    }
    if (v.type() == text::VocabType::Bpe && !v.clean_spaces()) {
        text::Detokenizer stream(v, parse_special);
        std::string streamed;
        for (int32_t id : ids) streamed += stream.push(id);
        streamed += stream.flush();
        if (streamed != back) finding("the streaming detokenizer disagrees with detokenize()", l);
    }
    return 0;
}
