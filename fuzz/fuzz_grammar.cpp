// fuzz_grammar: GBNF grammars (text/grammar.h) as `toy run --grammar` and the
// server's "grammar" field take them, and the state machine that constrains
// sampling. Input: byte 0 options, then the grammar, '\0', then a text.
// Checks, beyond "no crash, no hang":
//   - Grammar::parse gives a grammar or a toy::Error;
//   - for valid UTF-8 text: Grammar::matches(text) agrees with a fresh
//     GrammarState that accept_text()s the text and is then complete();
//   - a walk of up to 24 tokens (picked by the text's bytes among the ones
//     allowed_tokens marks) over a small vocabulary: allows() agrees with the
//     mask, accepting an allowed token never throws, accepting one that is
//     not allowed (and has text) throws toy::Error.
// A grammar that reads the text in too many ways is refused (toy::Error
// naming the bound) by whichever call meets the bound; that ends the input.
// Vocabularies: the gpt2 fixture (byte-level BPE, 384 tokens) or
// stories260K (SPM, 512 tokens); the grammar may name their tokens.
#include "fuzz_common.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "text/grammar.h"
#include "text/vocab.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace toy;

namespace {
std::unique_ptr<text::Vocab> g_vocabs[2];

[[noreturn]] void finding(const char *what) {
    std::fprintf(stderr, "fuzz_grammar: %s\n", what);
    std::abort();
}

bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const uint8_t c = (uint8_t)s[i];
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : c & (0x7f >> n);
        for (size_t k = 1; k < n; ++k) {
            if (((uint8_t)s[i + k] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | ((uint8_t)s[i + k] & 0x3f);
        }
        const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += n;
    }
    return true;
}

bool too_ambiguous(const Error &e) { return std::string_view(e.what()).find("can be read in more than") != std::string_view::npos; }

void walk(const std::shared_ptr<const text::Grammar> &g, const text::Vocab &v, std::string_view picks) {
    text::GrammarState st(g);
    std::vector<uint8_t> mask;
    for (size_t step = 0; step < 24 && step < picks.size(); ++step) {
        mask.assign(v.n_tokens(), 0);
        st.allowed_tokens(v, mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < v.n_tokens(); ++id) {
            if (mask[id] && !v.is_eog(id)) allowed.push_back(id);
        }
        const uint8_t pick = (uint8_t)picks[step];
        // one token the mask refuses (if the pick lands on one): accept must refuse it too
        const int32_t other = (int32_t)(pick * 7u % v.n_tokens());
        if (st.allows(v, other) != (mask[other] != 0)) finding("allows() disagrees with allowed_tokens()");
        if (!mask[other] && !v.is_eog(other) && !v.piece_view(other).empty()) {
            text::GrammarState copy = st;
            try {
                copy.accept(v, other);
                finding("accept() took a token allowed_tokens() refused");
            } catch (const Error &) {
            }
        }
        if (allowed.empty()) break;
        const int32_t id = allowed[pick % allowed.size()];
        try {
            st.accept(v, id);
        } catch (const Error &e) {
            if (too_ambiguous(e)) throw;
            finding("accept() refused a token allowed_tokens() marked");
        }
        (void)st.finished();
    }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    auto a = gguf::File::open(fuzz::shared_path("fixtures/gpt2.f32.gguf"));
    g_vocabs[0] = std::make_unique<text::Vocab>(text::Vocab::load(*a));
    auto b = gguf::File::open(fuzz::shared_path("models/stories260K.gguf"));
    g_vocabs[1] = std::make_unique<text::Vocab>(text::Vocab::load(*b));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz::Input in(data, size);
    const uint8_t opts = in.byte();
    const std::string_view gbnf = in.until('\0');
    const std::string_view text = in.rest();
    const text::Vocab &v = *g_vocabs[opts & 1];
    std::shared_ptr<const text::Grammar> g;
    try {
        g = text::Grammar::parse(gbnf, "root", opts & 2 ? &v : nullptr);
    } catch (const Error &) {
        return 0;
    }
    try {
        const bool matches = g->matches(text);
        text::GrammarState st(g);
        const bool accepted = st.accept_text(text) && st.complete();
        if (valid_utf8(text) && matches != accepted) finding("matches() and GrammarState::accept_text() disagree");
        if (opts & 4) walk(g, v, text);
    } catch (const Error &e) {
        if (!too_ambiguous(e)) throw;
    }
    return 0;
}
