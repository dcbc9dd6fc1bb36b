// toy run: prompt in, generated text (or token ids) out.
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "text/sampler.h"
#include "text/vocab.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

namespace toy::cli {
namespace {

struct RunOptions {
    ModelFlags model;
    std::string prompt;
    std::string prompt_file;
    std::string tokens;
    int n_predict = 128;
    text::SamplerParams sampling;
    bool json = false;
    bool special = false;
    bool ignore_eos = false;
    bool no_bos = false;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::string read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("-f: cannot read '{}'", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

int run_generate(const RunOptions &o) {
    const int sources = !o.prompt.empty() + !o.prompt_file.empty() + !o.tokens.empty();
    if (sources != 1) fail("give exactly one of -p TEXT, -f FILE or --tokens IDS");
    if (o.n_predict < -1) fail("-n: expected -1 (until end of text) or a count >= 0, found {}", o.n_predict);

    const auto t_load = Clock::now();
    auto model = o.model.load();
    const double load_ms = ms_since(t_load);

    // prompt -> ids
    const bool as_ids = !o.tokens.empty();
    std::unique_ptr<text::Vocab> vocab;
    std::vector<int32_t> prompt;
    if (as_ids) {
        prompt = parse_id_list(o.tokens, "--tokens");
    } else {
        vocab = std::make_unique<text::Vocab>(text::Vocab::load(model->file()));
        const std::string text = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);
        prompt = vocab->tokenize(text, /*add_special=*/!o.no_bos, o.special);
    }
    if (prompt.empty()) fail("the prompt is empty: nothing to continue from");

    Session session(*model, o.model.session_options());
    print_notes(session);
    const int64_t room = session.n_ctx() - (int64_t)prompt.size();
    if (room < 0) fail("the prompt has {} tokens but the context holds {} (raise -c)", prompt.size(), session.n_ctx());
    const int64_t n_gen = o.n_predict < 0 ? room : std::min<int64_t>(o.n_predict, room);

    text::Sampler sampler(o.sampling);
    for (int32_t t : prompt) sampler.accept(t);
    std::unique_ptr<text::Detokenizer> stream;
    std::string all_text;
    auto emit = [&](int32_t id) {
        if (!vocab) return;
        std::string piece = stream->push(id);
        all_text += piece;
        if (!o.json) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        }
    };
    if (vocab) {
        stream = std::make_unique<text::Detokenizer>(*vocab, o.special);
        for (int32_t t : prompt) emit(t);  // echo the prompt, as llama.cpp's completion tool does
    }

    const auto t_prompt = Clock::now();
    session.eval(prompt);
    const double prompt_ms = ms_since(t_prompt);

    std::vector<int32_t> generated;
    const auto t_gen = Clock::now();
    for (int64_t i = 0; i < n_gen; ++i) {
        const int32_t next = sampler.sample({session.last_logits(), (size_t)session.n_vocab()});
        sampler.accept(next);
        if (vocab && !o.ignore_eos && vocab->is_eog(next)) break;
        generated.push_back(next);
        if (as_ids && !o.json) {
            std::printf(i ? " %d" : "%d", next);
            std::fflush(stdout);
        }
        emit(next);
        if (i + 1 < n_gen) session.eval(std::span<const int32_t>(&next, 1));
    }
    const double gen_ms = ms_since(t_gen);
    if (stream) {
        std::string rest = stream->flush();
        all_text += rest;
        if (!o.json) std::fwrite(rest.data(), 1, rest.size(), stdout);
    }
    const double pp_tps = prompt.size() / (prompt_ms / 1000.0);
    const double tg_tps = generated.empty() ? 0.0 : generated.size() / (gen_ms / 1000.0);
    if (o.json) {
        nlohmann::json j;
        if (vocab) j["text"] = all_text;
        j["prompt_tokens"] = prompt;
        j["tokens"] = generated;
        j["seed"] = sampler.seed();
        j["timings"] = {{"load_ms", load_ms},           {"prompt_n", prompt.size()},
                        {"prompt_ms", prompt_ms},       {"prompt_per_second", pp_tps},
                        {"predicted_n", generated.size()}, {"predicted_ms", gen_ms},
                        {"predicted_per_second", tg_tps}};
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("\n");
        std::fprintf(stderr, "toy: load %.0f ms | prompt %zu tokens, %.1f t/s | generation %zu tokens, %.1f t/s\n",
                     load_ms, prompt.size(), pp_tps, generated.size(), tg_tps);
    }
    return 0;
}

}  // namespace

void add_sampling_flags(CLI::App &app, text::SamplerParams &s) {
    app.add_option("--temp", s.temp, "temperature (0: greedy)");
    app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0: off)");
    app.add_option("--top-p", s.top_p, "nucleus: smallest set with this much probability (1: off)");
    app.add_option("--min-p", s.min_p, "drop tokens below this fraction of the top probability (0: off)");
    app.add_option("--repeat-penalty", s.repeat_penalty, "penalty for repeating recent tokens (1: off)");
    app.add_option("--repeat-last-n", s.penalty_last_n, "recent tokens the penalties see (0: off, -1: all)");
    app.add_option("--presence-penalty", s.presence_penalty, "subtracted once from recent tokens' logits");
    app.add_option("--frequency-penalty", s.frequency_penalty, "subtracted per occurrence in recent tokens");
    app.add_option("-s,--seed", s.seed, "random seed (default: random)");
}

namespace {
Command reg("run", "Generate text (or token ids) from a prompt", [](CLI::App &app) {
    auto o = std::make_shared<RunOptions>();
    o->model.add_to(app);
    app.add_option("-p,--prompt", o->prompt, "prompt text");
    app.add_option("-f,--file", o->prompt_file, "read the prompt from a file");
    app.add_option("--tokens", o->tokens, "prompt as token ids (prints generated ids)");
    app.add_option("-n,--n-predict", o->n_predict, "tokens to generate (-1: until end of text or full context)");
    add_sampling_flags(app, o->sampling);
    app.add_flag("--json", o->json, "print one JSON object: text, token ids, timings");
    app.add_flag("--special", o->special, "parse and print special tokens (e.g. <|im_start|>)");
    app.add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-text tokens");
    app.add_flag("--no-bos", o->no_bos, "do not add the BOS token the model asks for");
    return [o] { return run_generate(*o); };
});
}  // namespace

}  // namespace toy::cli
