#include "text/pre_tokenizer.h"

#include "core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>

namespace toy::text {

namespace {

// ---- regex building blocks (the patterns come from each model's
// tokenizer.json, as adapted by llama.cpp's conversion; \d is written [0-9]
// because UCP would widen \d to every decimal digit) ----

// English contractions, case-insensitive without (?i), as in the originals.
const std::string kContractions = R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))";

const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

const std::string kLlama3 = kContractions +
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::string kQwen2 = kContractions +
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::string kQwen35 = kContractions +
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::string kJais2 = kContractions +
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S))"
    R"(|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";

// Latin/Greek/Cyrillic/... letters of the DeepSeek LLM tokenizer.
const std::string kDeepseekLetters =
    R"([A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}])";

// CJK ideographs, Hangul and the blocks between them, as one run. The
// reference matched these ranges after turning every non-ASCII space into
// U+000B, so the spaces inside the ranges (U+3000 ...) do not count.
const std::string kCjkHangul = R"((?:(?!\s)[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}])+)";
// CJK ideographs, Hiragana, Katakana.
const std::string kCjkKana = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";

// ASCII punctuation that glues to a following ASCII word (DeepSeek V3 family).
const std::string kAsciiPunctWord = R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)";

// Case-aware words: a run of non-lowercase letters then lowercase letters,
// or the reverse; `letter` is the class that counts as a letter.
std::string cased_words(const std::string &letter, const std::string &suffix) {
    const std::string upper = "((?=" + letter + ")([^a-z]))";
    const std::string lower = "((?=" + letter + ")([^A-Z]))";
    return R"([^\r\n\p{L}\p{N}]?)" + upper + "*" + lower + "+" + suffix +
           R"(|[^\r\n\p{L}\p{N}]?)" + upper + "+" + lower + "*" + suffix;
}

const std::string kFinnishWords = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
const std::string kNewlineRuns = R"([^\n]+|[\n]+)";

struct Family {
    BpeStyle style;
    std::vector<std::string> names;
};

std::vector<Family> make_families() {
    std::vector<Family> f;
    const auto add = [&](BpeStyle s, std::vector<std::string> names) {
        f.push_back({std::move(s), std::move(names)});
    };
    const auto style = [](std::string name, std::vector<std::string> regexes) {
        BpeStyle s;
        s.name = std::move(name);
        s.regexes = std::move(regexes);
        return s;
    };
    const auto no_clean = [](BpeStyle s) { s.clean_spaces = false; return s; };

    add(style("default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}), {"default"});
    {
        BpeStyle s = style("llama3", {kLlama3});
        s.ignore_merges = true;
        s.add_bos = true;
        add(s, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                "jina-v5-nano"});
    }
    {
        BpeStyle s = style("minicpm5", {R"(\p{N}{1,3})", kContractions +
            R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"});
        s.ignore_merges = true;
        add(s, {"minicpm5"});
    }
    add(style("jais-2", {kJais2}), {"jais-2"});
    add(style("dbrx", {kLlama3}), {"dbrx", "smaug-bpe"});
    add(no_clean(style("deepseek-llm", {"[\r\n]", R"(\s?)" + kDeepseekLetters + "+",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3001}-\x{3002}]+)",  // not U+3000: see kCjkHangul
        R"(\s+$)", kCjkHangul, R"(\p{N}+)"})), {"deepseek-llm"});
    add(no_clean(style("deepseek-v3", {R"(\p{N}{1,3})", kCjkKana, kAsciiPunctWord +
        R"(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"})),
        {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"});
    add(no_clean(style("spark2_5", {R"(\p{N}{1,3})", kCjkKana, kAsciiPunctWord +
        R"(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)", R"(\p{N})"})),
        {"spark2_5"});
    add(no_clean(style("deepseek-coder", {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"})),
        {"deepseek-coder"});
    add(style("falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}), {"falcon"});
    add(style("starcoder", {R"(\p{N})", kGpt2}),
        {"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"});
    add(no_clean(style("starcoder", {R"(\p{N})", kGpt2})), {"command-r", "smollm"});
    add(style("gpt-2", {kGpt2}), {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
        "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "mpt",
        "olmo", "jais"});
    add(no_clean(style("gpt-2", {kGpt2})), {"trillion", "granite-docling"});
    add(style("qwen2", {kQwen2}), {"stablelm2", "megrez"});
    add(no_clean(style("qwen2", {kQwen2})),
        {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"});
    add(no_clean(style("qwen35", {kQwen35})), {"qwen35"});
    add(no_clean(style("poro", {kFinnishWords})), {"poro-chat"});
    add(style("bloom", {kFinnishWords}), {"bloom", "gpt3-finnish"});
    {
        BpeStyle s = style("chatglm4", {kLlama3});
        s.no_default_bos = true;
        add(s, {"glm4", "chatglm-bpe"});
    }
    add(no_clean(style("viking", {kFinnishWords, R"(\p{N})"})), {"viking"});
    {
        BpeStyle s = no_clean(style("tekken", {cased_words(R"([\p{L}])", "") +
            R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}));
        s.ignore_merges = true;
        s.add_bos = true;
        add(s, {"tekken"});
    }
    {
        BpeStyle s = no_clean(style("chameleon", {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            "([\\t\\n]|    |  )", R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2}));
        s.add_bos = true;
        add(s, {"chameleon"});
    }
    add(no_clean(style("gpt-4o", {cased_words(R"([\p{L}])", kContractions + "?") +
        R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"})),
        {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"});
    {
        BpeStyle s = no_clean(style("granite-embed-multi-97m", {cased_words(R"([\p{L}\p{M}])", kContractions + "?") +
            R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}));
        s.ignore_merges = true;
        add(s, {"granite-embed-multi-97m"});
    }
    add(no_clean(style("superbpe", {R"(\p{N}+)", "(?=([0-9]{3})+(?![0-9]))"})), {"superbpe"});
    add(no_clean(style("bailingmoe", {R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
        R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"})), {"bailingmoe", "bailingmoe2", "llada-moe"});
    add(no_clean(style("seed-coder", {kContractions +
        R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"})), {"seed-coder"});
    add(no_clean(style("ufakzeka", {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"})),
        {"ufakzeka"});
    add(no_clean(style("laguna", {kNewlineRuns, kQwen2})), {"laguna"});
    add(style("exaone-moe", {kContractions +
        R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"}),
        {"exaone-moe"});
    {
        // SPM-style BPE: spaces become U+2581, merges run on raw UTF-8 over
        // whole lines; only newline runs are cut apart.
        BpeStyle s = style("gemma4", {kNewlineRuns});
        s.byte_encode = false;
        s.escape_whitespace = true;
        add(s, {"gemma4", "granite-embed-multi-311m"});
        s.name = "sarvam-moe";
        s.clean_spaces = false;
        add(s, {"sarvam-moe"});
    }
    return f;
}

const std::map<std::string, BpeStyle, std::less<>> &styles() {
    static const std::map<std::string, BpeStyle, std::less<>> table = [] {
        std::map<std::string, BpeStyle, std::less<>> t;
        for (auto &fam : make_families()) {
            for (auto &n : fam.names) t.emplace(n, fam.style);
        }
        return t;
    }();
    return table;
}

}  // namespace

const BpeStyle *find_bpe_style(std::string_view pre) {
    if (pre.empty()) pre = "default";
    auto it = styles().find(pre);
    return it == styles().end() ? nullptr : &it->second;
}

std::vector<std::string> known_bpe_pre_names() {
    std::vector<std::string> names;
    for (auto &[k, v] : styles()) names.push_back(k);
    return names;
}

// ---- PCRE2 wrapper ----

namespace {

// The whitespace set of the reference tokenizers (Unicode White_Space).
// PCRE2's UCP \s also matches U+180E, which they treat as a format character.
constexpr const char *kSpaceSet = R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S into explicit classes over kSpaceSet.
std::string explicit_spaces(const std::string &p) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char e = p[++i];
            if (e == 's') {
                out += in_class ? std::string(kSpaceSet) : "[" + std::string(kSpaceSet) + "]";
            } else if (e == 'S' && !in_class) {
                out += "[^" + std::string(kSpaceSet) + "]";
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ']' first in the class
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

}  // namespace

struct PreTokenizer::Regex {
    std::string pattern;
    pcre2_code *code = nullptr;
    ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string> &regexes) {
    for (const auto &p : regexes) {
        auto r = std::make_unique<Regex>();
        r->pattern = p;
        const std::string compiled = explicit_spaces(p);
        int err = 0;
        PCRE2_SIZE err_off = 0;
        r->code = pcre2_compile((PCRE2_SPTR)compiled.data(), compiled.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY,
                                &err, &err_off, nullptr);
        if (!r->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail("pre-tokenizer regex '{}': expected a valid PCRE2 pattern, found error at offset {}: {}", p,
                 (size_t)err_off, (const char *)msg);
        }
        pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
        regexes_.push_back(std::move(r));
    }
}

PreTokenizer::~PreTokenizer() = default;

namespace {

struct MatchData {
    pcre2_match_data *md;
    explicit MatchData(const pcre2_code *code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        if (!md) throw std::bad_alloc();
    }
    ~MatchData() { pcre2_match_data_free(md); }
};

int run_match(const pcre2_code *code, std::string_view s, size_t start, uint32_t opts, pcre2_match_data *md) {
    int rc = pcre2_match(code, (PCRE2_SPTR)s.data(), s.size(), start, opts | PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // The JIT's small default stack ran out on a long piece: the
        // interpreter keeps its backtracking state on the heap.
        rc = pcre2_match(code, (PCRE2_SPTR)s.data(), s.size(), start, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         md, nullptr);
    }
    return rc;
}

}  // namespace

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    if (text.empty()) return pieces;
    pieces.push_back(text);
    for (const auto &re : regexes_) {
        MatchData data(re->code);
        std::vector<std::string_view> out;
        out.reserve(pieces.size() * 2);
        for (std::string_view piece : pieces) {
            const auto emit = [&](size_t b, size_t e) {
                if (e > b) out.push_back(piece.substr(b, e - b));
            };
            size_t pos = 0, last_end = 0;
            uint32_t opts = 0;
            while (pos <= piece.size()) {
                const int rc = run_match(re->code, piece, pos, opts, data.md);
                if (rc == PCRE2_ERROR_NOMATCH) {
                    if (opts == 0) break;
                    // No non-empty match where the last empty one was: move on one character.
                    opts = 0;
                    if (pos >= piece.size()) break;
                    ++pos;
                    while (pos < piece.size() && ((uint8_t)piece[pos] & 0xC0) == 0x80) ++pos;
                    continue;
                }
                if (rc < 0) {
                    PCRE2_UCHAR msg[256];
                    pcre2_get_error_message(rc, msg, sizeof msg);
                    fail("pre-tokenizer regex '{}': matching a piece of {} bytes failed: {}", re->pattern,
                         piece.size(), (const char *)msg);
                }
                const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(data.md);
                const size_t b = ov[0], e = ov[1];
                emit(last_end, b);
                emit(b, e);
                last_end = e;
                pos = e;
                opts = (e == b) ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
            }
            emit(last_end, piece.size());
        }
        pieces = std::move(out);
    }
    return pieces;
}

}  // namespace toy::text
