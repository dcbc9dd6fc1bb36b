// toy perplexity against llama-perplexity's numbers on the same model, text
// and context (tests/data/perplexity/reference.json, made by
// scripts/make-perplexity-reference.sh): the issue asks for equality within
// 0.1 %. KL divergence: a model against itself gives 0 and full agreement; a
// Q8_0 copy gives llama-perplexity's value. The base file has
// llama-perplexity's layout, and bad inputs are one-line errors. Flash
// attention is off here as in the reference runs: ggml's CPU flash attention
// rounds differently by CPU and batch layout (the script says how).
#include "eval/perplexity.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <regex>

using namespace toy;
using toy::test::fixture_path;
using toy::test::run_toy;
using toy::test::shared_path;
using toy::test::shell_quote;
using toy::test::TempDir;

namespace {

std::string data_path(const std::string &name) { return std::string(TOY_SOURCE_DIR) + "/tests/data/perplexity/" + name; }
const nlohmann::json &reference() {
    static const nlohmann::json j = toy::test::read_json(data_path("reference.json"));
    return j;
}
std::string stories_model() { return shared_path("models/stories260K.gguf"); }
std::string stories_text() { return data_path("stories.txt"); }

struct PplOutput {
    std::vector<double> chunks;
    double ppl = 0, err = 0;
};

// "[1]3.2691,[2]..." and "Final estimate: PPL = X +/- Y" from toy perplexity's stdout
PplOutput parse_ppl(const std::string &out) {
    PplOutput p;
    const std::regex chunk(R"(\[(\d+)\]([0-9.]+),)");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), chunk); it != std::sregex_iterator(); ++it) {
        p.chunks.push_back(std::stod((*it)[2]));
    }
    std::smatch m;
    const std::regex final_line(R"(Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+))");
    if (std::regex_search(out, m, final_line)) p.ppl = std::stod(m[1]), p.err = std::stod(m[2]);
    return p;
}

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

// Every running value and the final PPL within 0.1 % of llama-perplexity's;
// its error estimate within 1 % (a difference of two close sums).
void expect_matches_reference(const std::string &model, const nlohmann::json &ref, const std::string &extra) {
    const auto r = run_toy(fmt::format("perplexity -m {} -f {} -c {} -t 2 -fa off {}", shell_quote(model),
                                       shell_quote(stories_text()), ref["ctx"].get<int>(), extra));
    ASSERT_EQ(r.code, 0) << r.err;
    const PplOutput got = parse_ppl(r.out);
    const auto want = ref["chunks"].get<std::vector<double>>();
    ASSERT_EQ(got.chunks.size(), want.size()) << r.out;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(rel(got.chunks[i], want[i]), 1e-3) << "chunk " << i + 1;
    EXPECT_LT(rel(got.ppl, ref["ppl"].get<double>()), 1e-3) << got.ppl << " vs " << ref["ppl"];
    EXPECT_LT(rel(got.err, ref["ppl_err"].get<double>()), 1e-2) << got.err << " vs " << ref["ppl_err"];
}

eval::KlStats kl_of(const std::string &model, const std::string &base, const LoadOptions &lo = {}) {
    auto m = Model::load(model, lo);
    const auto vocab = text::Vocab::load(m->file());
    eval::PerplexityOptions o;
    o.kl_base = base;
    o.kl_divergence = true;
    o.n_ctx_given = false;
    SessionOptions so;
    so.n_threads = 2;
    so.flash_attn = FlashAttn::Off;
    const eval::PerplexityResult r = eval::perplexity(*m, vocab, "", base, o, so);
    return *r.kl;
}

std::string write_base(const std::string &model, const std::string &path, int64_t n_ctx = 128, int64_t chunks = -1) {
    auto m = Model::load(model);
    const auto vocab = text::Vocab::load(m->file());
    eval::PerplexityOptions o;
    o.n_ctx = n_ctx;
    o.n_chunks = chunks;
    o.kl_base = path;
    SessionOptions so;
    so.n_threads = 2;
    so.flash_attn = FlashAttn::Off;
    std::ifstream in(stories_text());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    eval::perplexity(*m, vocab, text, stories_text(), o, so);
    return path;
}

}  // namespace

TEST(Perplexity, MatchesLlamaPerplexityOnStories260K) {
    expect_matches_reference(stories_model(), reference()["stories260K"], "");
}

// gpt2: byte-level BPE without BOS (windows keep their first token), -c 64
TEST(Perplexity, MatchesLlamaPerplexityOnGpt2FixtureWithoutBos) {
    expect_matches_reference(fixture_path("gpt2.f32.gguf"), reference()["gpt2"], "--chunks 16");
}

TEST(Perplexity, MatchesLlamaPerplexityOnLlama256Fixture) {
    expect_matches_reference(fixture_path("llama-256.f32.gguf"), reference()["llama256"], "--chunks 8");
}

// One window per graph or several sequences per graph: the same numbers.
TEST(Perplexity, WindowsPerGraphDoNotChangeTheResult) {
    auto m = Model::load(stories_model());
    const auto vocab = text::Vocab::load(m->file());
    std::ifstream in(stories_text());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SessionOptions so;
    so.n_threads = 2;
    so.flash_attn = FlashAttn::Off;
    eval::PerplexityOptions one;
    one.n_ctx = 128;
    one.n_batch = 128;
    eval::PerplexityOptions many = one;
    many.n_batch = 2048;
    const auto a = eval::perplexity(*m, vocab, text, "text", one, so);
    const auto b = eval::perplexity(*m, vocab, text, "text", many, so);
    EXPECT_EQ(a.plan.n_seq, 1);
    EXPECT_EQ(b.plan.n_seq, 2);
    ASSERT_EQ(a.chunk_ppl.size(), b.chunk_ppl.size());
    for (size_t i = 0; i < a.chunk_ppl.size(); ++i) EXPECT_NEAR(a.chunk_ppl[i], b.chunk_ppl[i], 1e-5 * a.chunk_ppl[i]);
}

TEST(Perplexity, KlDivergenceOfAModelFromItselfIsZero) {
    TempDir dir;
    const std::string base = write_base(stories_model(), dir.file("base.kld"));
    const eval::KlStats k = kl_of(stories_model(), base);
    EXPECT_EQ(k.count, 23 * 63);
    // the base log-probabilities are stored in steps of at most 16/65535 nats
    EXPECT_LT(std::abs(k.kld.value), 1e-6);
    EXPECT_LT(k.kld_q.max, 1e-4);
    EXPECT_EQ(k.same_top.value, 1.0);
    EXPECT_LT(std::abs(k.ln_ppl_ratio.value), 1e-5);
    EXPECT_NEAR(k.ppl.value, reference()["stories260K"]["ppl"].get<double>(), 1e-3 * k.ppl.value);
}

// The smallest window toy perplexity accepts writes a base file it reads back
// (the reader wanted 4 tokens and refused toy's own file of 3).
TEST(Perplexity, BaseFileOfTheSmallestWindowReadsBack) {
    TempDir dir;
    const std::string base = write_base(stories_model(), dir.file("base3.kld"), 3, 5);
    const eval::KlStats k = kl_of(stories_model(), base);
    EXPECT_EQ(k.count, 5);  // one scored position per window
    // Each stored log-probability is off by at most half a step (8/65535
    // nats) and the stored probabilities sum to one, so no position's KL
    // passes that. The mean of five is about 1e-6 either way (1.1e-6 on a
    // Zen 4, less on the Intel VM: the logits' last bits differ with the
    // kernel set), too few to average down as the 1449 positions above do.
    EXPECT_LT(std::abs(k.kld.value), 8.0 / 65535);
    EXPECT_LT(k.kld_q.max, 8.0 / 65535);  // every position, not only their mean
    EXPECT_EQ(k.same_top.value, 1.0);      // the rows read back are the positions' own
}

// A Q8_0 copy made by toy export, against the F32 model: llama-perplexity's
// statistics on the same pair (its base file, written by toy, is byte for
// byte llama-perplexity's: scripts/make-perplexity-reference.sh checks).
// - With ggml's own Q8_0 kernels (no repacking) toy computes llama.cpp's
//   logits up to float summation order (~1e-6). On the Zen 3 that made the
//   reference every statistic agreed to 0.5 % (KL), 0.1 % (PPL) and 0.2
//   points (top-token agreement, 3 tokens); but which of ggml's Q8_0 paths
//   runs, and so the float order, depends on the CPU and on llama.cpp's
//   repacking: on an AVX-512 Xeon llama-perplexity itself gave KL 7.28e-4
//   (7.23e-4 on Zen 3) and toy with ggml's kernels 7.45e-4, PPL 1.1e-3
//   apart, for the reason below. So both are held to the same bounds.
// - With toy's default packed Q8_0 kernel the integer block sums are exact
//   and only the float sums run in another order (the median token's
//   log-probability moves by 8e-7). But every matmul input is quantized to
//   8 bits, and a float difference that moves a value across a rounding
//   boundary moves that quant by one step; through the KV cache the change
//   reaches every later token of the window. On this text (Zen 3, AVX2 set)
//   38 % of the scored tokens move by more than 1e-4 and a few by up to 0.19,
//   so the statistics differ from ggml's by noise of their own: standard
//   errors of the per-token differences 4.9e-4 (ln(PPL / PPL base)),
//   1.1e-5 (mean KL, 1.5 % of it) and 0.2 points (agreement). ggml's own
//   one-token batches (-ub 1) move them the same way (1.1e-4, 0.6 %, 0.2
//   points). The bounds are four of those standard errors, the same on every
//   kernel set and CPU: 2e-3, 6 %, 0.8 points, and PPL within what that
//   ln(PPL / PPL base) allows (0.2 %). A wrong scale or layout moves KL by
//   orders of magnitude.
TEST(Perplexity, KlDivergenceOfQ8CopyMatchesLlamaPerplexity) {
    TempDir dir;
    const std::string q8 = dir.file("q8_0.gguf");
    const auto e = run_toy(fmt::format("export -m {} --type q8_0 -o {}", shell_quote(stories_model()), shell_quote(q8)));
    ASSERT_EQ(e.code, 0) << e.err;
    const std::string base = write_base(stories_model(), dir.file("base.kld"));
    const nlohmann::json &ref = reference()["kl_q8_0"];
    const double kld = ref["kld"][0].get<double>();
    auto check = [&](const eval::KlStats &k) {
        const double ln_ratio_tol = 2e-3;
        EXPECT_GT(k.kld.value, 0.0);
        EXPECT_LT(std::abs(k.kld.value - kld), 0.06 * kld) << k.kld.value << " vs " << kld;
        EXPECT_NEAR(100 * k.same_top.value, ref["same_top_percent"][0].get<double>(), 0.8);
        EXPECT_LT(rel(k.ppl_base.value, ref["ppl_base"][0].get<double>()), 1e-4);
        EXPECT_LT(rel(k.ppl.value, ref["ppl"][0].get<double>()), ln_ratio_tol);
        EXPECT_NEAR(k.ln_ppl_ratio.value, ref["ln_ppl_ratio"][0].get<double>(), ln_ratio_tol);
        EXPECT_NEAR(100 * k.p_diff_rms.value, ref["p_diff_rms_percent"][0].get<double>(), 0.05);
    };
    LoadOptions ggml_kernels;
    ggml_kernels.repack = false;
    check(kl_of(q8, base, ggml_kernels));
    check(kl_of(q8, base));
    // the CLI prints the statistics
    const auto r = run_toy(fmt::format("perplexity -m {} --kl-divergence-base {} --kl-divergence -t 2", shell_quote(q8),
                                       shell_quote(base)));
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char *line : {"Mean PPL(Q)", "Mean ln(PPL(Q)/PPL(base))", "Mean    KLD:", "99.0%   KLD:", "RMS Δp", "Same top p:"}) {
        EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
    }
}

// The file llama-perplexity writes and reads: header, tokens, then rows of
// 2 + 2 floats' worth of uint16 and n_vocab values padded to even.
TEST(Perplexity, BaseFileHasLlamaPerplexityLayout) {
    TempDir dir;
    const std::string base = write_base(stories_model(), dir.file("base.kld"), 128, 3);
    std::ifstream in(base, std::ios::binary);
    std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GE(b.size(), 20u);
    EXPECT_EQ(std::string(b.data(), 8), "_logits_");
    int32_t h[3];
    std::memcpy(h, b.data() + 8, sizeof h);
    EXPECT_EQ(h[0], 128);
    EXPECT_EQ(h[1], 512);
    EXPECT_EQ(h[2], 3);
    const size_t nv = 2 * ((512 + 1) / 2) + 4, rows = 128 - 1 - 64;
    EXPECT_EQ(b.size(), 20 + 4 * 3 * 128 + 2 * 3 * rows * nv);
    // the tokens are the text's, BOS first, not replaced per window
    auto m = Model::load(stories_model());
    const auto vocab = text::Vocab::load(m->file());
    std::ifstream t(stories_text());
    const std::string text((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
    const auto ids = vocab.tokenize(text, true);
    std::vector<int32_t> stored(3 * 128);
    std::memcpy(stored.data(), b.data() + 20, stored.size() * 4);
    EXPECT_EQ(stored, std::vector<int32_t>(ids.begin(), ids.begin() + 3 * 128));
    EXPECT_EQ(stored[0], vocab.bos());
    // each row decodes to log-probabilities that sum (as probabilities) to ~1
    const uint16_t *row = reinterpret_cast<const uint16_t *>(b.data() + 20 + 4 * 3 * 128);
    float scale, min_lp;
    std::memcpy(&scale, row, 4);
    std::memcpy(&min_lp, row + 2, 4);
    double sum = 0;
    for (int i = 0; i < 512; ++i) sum += std::exp(scale * row[4 + i] + min_lp);
    EXPECT_NEAR(sum, 1.0, 1e-2);
    EXPECT_GT(scale, 0.0f);
}

TEST(Perplexity, BadInputsAreOneLineErrors) {
    TempDir dir;
    const std::string model = shell_quote(stories_model());
    auto expect_error = [](const test::CommandResult &r, const std::string &needle) {
        EXPECT_EQ(r.code, 1) << r.out;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    };
    {
        std::ofstream(dir.file("short.txt")) << "Once upon a time there was a cat.";
        const auto r = run_toy(fmt::format("perplexity -m {} -f {} -c 128", model, shell_quote(dir.file("short.txt"))));
        expect_error(r, "tokens, but a context of 128 needs at least 2 x 128 = 256 tokens");
    }
    {
        // an empty text is its BOS alone: "1 token", not "1 tokens"
        std::ofstream(dir.file("empty.txt")) << "";
        const auto r = run_toy(fmt::format("perplexity -m {} -f {} -c 128", model, shell_quote(dir.file("empty.txt"))));
        expect_error(r, "empty.txt: 1 token, but a context of 128");
    }
    expect_error(run_toy(fmt::format("perplexity -m {} -c 128", model)), "-f: a text file");
    expect_error(run_toy(fmt::format("perplexity -m {} --kl-divergence", model)), "--kl-divergence-base");
    expect_error(run_toy(fmt::format("perplexity -m {} -f {} -c 1", model, shell_quote(stories_text()))), "-c: a window");
    // two tokens leave nothing to score (the second half starts at the last token): was "PPL = -nan"
    expect_error(run_toy(fmt::format("perplexity -m {} -f {} -c 2", model, shell_quote(stories_text()))),
                 "-c: a window needs at least 3 tokens (the second half of each is scored), found 2");
    expect_error(run_toy(fmt::format("imatrix -m {} -f {} -c 2 -o {}", model, shell_quote(stories_text()),
                                     shell_quote(dir.file("im.gguf")))),
                 "-c: a window needs at least 3 tokens");
    {
        std::ofstream(dir.file("junk.kld")) << "not a logits file at all";
        expect_error(run_toy(fmt::format("perplexity -m {} --kl-divergence-base {} --kl-divergence", model,
                                         shell_quote(dir.file("junk.kld")))),
                     "not a file of base log-probabilities");
    }
    const std::string base = write_base(stories_model(), dir.file("base.kld"), 128, 2);
    // another vocabulary
    expect_error(run_toy(fmt::format("perplexity -m {} --kl-divergence-base {} --kl-divergence",
                                     shell_quote(fixture_path("gpt2.f32.gguf")), shell_quote(base))),
                 "written for a vocabulary of 512 tokens, the model has 384");
    // another context
    expect_error(run_toy(fmt::format("perplexity -m {} -c 64 --kl-divergence-base {} --kl-divergence", model,
                                     shell_quote(base))),
                 "was written with -c 128");
    // another text
    {
        std::string other;
        for (int i = 0; i < 200; ++i) other += "The dog ran to the big red ball and the cat sat down. ";
        std::ofstream(dir.file("other.txt")) << other;
        expect_error(run_toy(fmt::format("perplexity -m {} -f {} --kl-divergence-base {} --kl-divergence", model,
                                         shell_quote(dir.file("other.txt")), shell_quote(base))),
                     "the base file");
    }
    // counts forged so that their product in 64 bits would wrap around to the file's size
    {
        std::ifstream in(base, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const int32_t huge[3] = {INT32_MAX, 512, INT32_MAX};
        bytes.replace(8, sizeof huge, reinterpret_cast<const char *>(huge), sizeof huge);
        std::ofstream(dir.file("forged.kld"), std::ios::binary) << bytes;
        expect_error(run_toy(fmt::format("perplexity -m {} --kl-divergence-base {} --kl-divergence", model,
                                         shell_quote(dir.file("forged.kld")))),
                     "2147483647 chunks make more than 2^64 bytes");
    }
    // truncated
    {
        std::ifstream in(base, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(dir.file("cut.kld"), std::ios::binary) << bytes.substr(0, bytes.size() - 100);
        expect_error(run_toy(fmt::format("perplexity -m {} --kl-divergence-base {} --kl-divergence", model,
                                         shell_quote(dir.file("cut.kld")))),
                     "(truncated?)");
    }
}
