// toy run: prompt in, generated text (or token ids) out.
#include "apps/cli.h"
#include "apps/constraint_flags.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "core/read_file.h"
#include "text/generation.h"
#include "text/sampler.h"
#include "text/vocab.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace toy::cli {
namespace {

struct RunOptions {
    ModelFlags model;
    DraftFlags draft;
    PromptFlags input;
    ConstraintFlags constraint;
    int n_predict = -1;
    text::SamplerParams sampling;
    bool json = false;
    bool special = false;
    bool ignore_eos = false;
    bool no_bos = false;
    int n_probs = 0;                        // top alternatives per generated token (--json)
    std::vector<std::string> reverse;       // -r: stop (or, with -i, hand over) when this text appears
    bool context_shift = false;             // a full context drops half of what follows --keep
    int n_keep = 0;                         // tokens kept at the start on a shift (-1: the whole prompt)
    bool interactive = false, interactive_first = false;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The session's cache as the tokens it holds. When they would not fit, a
// context shift (--context-shift) keeps the first n_keep tokens and the newer
// half of the rest and evaluates those again; without it eval() says no.
class ShiftingContext {
public:
    ShiftingContext(Session &s, bool shift, size_t n_keep) : s_(s), shift_(shift), n_keep_(n_keep) {}

    bool eval(std::span<const int32_t> toks) {
        if (!make_room(toks.size())) return false;
        s_.eval(toks);
        history_.insert(history_.end(), toks.begin(), toks.end());
        return true;
    }
    // Shifts (if allowed) so that n more tokens fit; false when they cannot.
    bool make_room(size_t n) {
        const size_t n_ctx = (size_t)s_.n_ctx();
        if (history_.size() + n > n_ctx) {
            if (!shift_) return false;
            const size_t drop = (history_.size() - n_keep_) / 2;
            std::vector<int32_t> kept(history_.begin(), history_.begin() + (long)n_keep_);
            kept.insert(kept.end(), history_.begin() + (long)(n_keep_ + drop), history_.end());
            if (kept.size() + n > n_ctx) fail("--keep {}: the context is still full after a shift", n_keep_);
            s_.reset();
            s_.eval(kept);
            history_ = std::move(kept);
            ++shifts_;
        }
        return true;
    }
    int shifts() const { return shifts_; }
    // The tokens in the cache, in order (speculative decoding evaluates and trims them itself).
    std::vector<int32_t> &tokens() { return history_; }

private:
    Session &s_;
    bool shift_;
    size_t n_keep_;
    std::vector<int32_t> history_;
    int shifts_ = 0;
};

int run_generate(const RunOptions &o) {
    o.input.check_one(/*required=*/!o.interactive_first);  // --interactive-first may start from the user's line
    if (o.n_predict < -1) fail("-n: expected -1 (until end of text) or a count >= 0, found {}", o.n_predict);
    if (o.n_probs < 0) fail("--n-probs: expected a count >= 0 (0: none), found {}", o.n_probs);
    if (o.n_keep < -1) fail("--keep: expected -1 (the whole prompt) or a count >= 0, found {}", o.n_keep);
    for (const std::string &r : o.reverse) {
        if (r.empty()) fail("-r: expected a text to stop at, found an empty one");
    }

    const auto t_load = Clock::now();
    auto model = o.model.load(o.n_predict);  // a short run may keep 4 KiB pages (LoadOptions::decode_tokens)
    double load_ms = ms_since(t_load);

    // prompt -> ids
    const bool as_ids = o.input.as_ids();
    std::unique_ptr<text::Vocab> vocab;  // for text, and for a grammar (which constrains text)
    std::shared_ptr<const text::Grammar> grammar;
    if (!as_ids || o.constraint.given()) {
        vocab = std::make_unique<text::Vocab>(text::Vocab::load(model->file()));
        print_notes(*vocab);
        grammar = o.constraint.load(*vocab);
    }
    const std::vector<int32_t> prompt =
        as_ids ? o.input.ids() : vocab->tokenize(o.input.text(), /*add_special=*/!o.no_bos, o.special);
    if (prompt.empty() && !o.interactive_first) fail("the prompt is empty: nothing to continue from");

    Session session(*model, o.model.session_options());
    print_notes(session);
    const auto t_draft = Clock::now();
    const std::unique_ptr<Speculator> spec = o.draft.make(session, o.model, o.n_predict);
    load_ms += ms_since(t_draft);  // a draft model's load counts as loading
    const int64_t n_ctx = session.n_ctx();
    if ((int64_t)prompt.size() > n_ctx) fail("the prompt has {} tokens but the context holds {} (raise -c)", prompt.size(), n_ctx);
    if ((o.interactive || o.interactive_first) && as_ids) fail("-i: interactive mode needs text, not --tokens");

    text::Sampler sampler(vocab ? text::with_dry_breakers(o.sampling, *vocab) : o.sampling);
    for (int32_t t : prompt) sampler.accept(t);
    std::string all_text;
    auto show = [&](const std::string &piece) {
        all_text += piece;
        if (!o.json) print_text(piece);
    };
    if (!as_ids) {
        // echo the prompt, as llama.cpp's completion tool does
        text::Detokenizer echo(*vocab, o.special);
        for (int32_t t : prompt) show(echo.push(t));
        show(echo.flush());
    }

    const size_t n_keep = o.n_keep < 0 ? prompt.size() : std::min<size_t>((size_t)o.n_keep, prompt.size());
    ShiftingContext context(session, o.context_shift, n_keep);
    auto eval = [&](std::span<const int32_t> toks) { return context.eval(toks); };

    const auto t_prompt = Clock::now();
    if (!prompt.empty()) eval(prompt);
    const double prompt_ms = ms_since(t_prompt);

    // The user's line (Enter included), for -i; false at the end of input.
    auto read_user = [&](std::vector<int32_t> &toks) {
        std::string line;
        if (!read_line(stdin, line, "standard input")) return false;
        line += '\n';
        all_text += line;
        toks = vocab->tokenize(o.input.no_escape ? line : process_escapes(line), /*add_special=*/false, o.special);
        return true;
    };

    std::vector<int32_t> generated;
    std::vector<text::TokenLogprob> probs;
    bool context_full = false;
    text::StopReason last_reason = text::StopReason::None;
    double gen_ms = 0;
    bool waiting = o.interactive_first;
    // After a speculative pass the session's last row may be a rejected
    // guess's: the logits of the position decided last are kept here for a
    // next turn that evaluates nothing first (-i, end of text, an empty line).
    std::vector<float> held;
    for (;;) {
        if (waiting) {
            std::vector<int32_t> user;
            if (!read_user(user)) break;
            if (user.empty() && context.tokens().empty()) continue;  // nothing to generate from yet
            for (int32_t t : user) sampler.accept(t);
            if (!user.empty() && !eval(user)) {
                context_full = true;
                break;
            }
            if (!user.empty()) held.clear();
        }
        text::GenerationLimits limits{o.n_predict, o.ignore_eos, o.reverse, /*show_stop=*/true, grammar};
        text::Generation gen(vocab.get(), sampler, limits, o.special);
        const auto t_gen = Clock::now();
        int32_t unevaluated = -1;
        auto on_step = [&](const text::Step &st, std::span<const float> logits) {
            if (st.token >= 0 && o.n_probs > 0) probs.push_back(text::logprob_of(logits, st.token, o.n_probs));
            if (st.token >= 0 && as_ids && !o.json) {
                std::printf(generated.size() + gen.tokens().size() > 1 ? " %d" : "%d", st.token);
                std::fflush(stdout);
            }
            if (!as_ids) show(st.text);
            if (spec && st.done && logits.data() != held.data()) held.assign(logits.begin(), logits.end());
        };
        auto last_logits = [&] { return std::span<const float>(session.last_logits(), (size_t)session.n_vocab()); };
        const std::span<const float> first = held.empty() ? last_logits() : std::span<const float>(held);
        text::Step st = gen.next(first);
        on_step(st, first);
        while (!st.done) {
            if (spec) {
                // the target evaluates st.token and a draft in one pass and decides one or more tokens
                if (!context.make_room(1)) {
                    context_full = true;
                    break;
                }
                // no guesses beyond -n: the pass decides at most (draft + 1) tokens
                const int64_t left = o.n_predict < 0 ? INT_MAX : o.n_predict - (int64_t)gen.tokens().size();
                st = spec->step(gen, context.tokens(), st.token, (int)std::clamp<int64_t>(left - 1, 0, INT_MAX), on_step);
                continue;
            }
            if (!eval(std::span<const int32_t>(&st.token, 1))) {
                context_full = true;
                break;
            }
            st = gen.next(last_logits());
            on_step(st, last_logits());
        }
        if (st.done) unevaluated = st.token;
        gen_ms += ms_since(t_gen);
        const std::string tail = gen.flush();
        if (!as_ids) show(tail);
        generated.insert(generated.end(), gen.tokens().begin(), gen.tokens().end());
        last_reason = gen.reason();
        if (!(o.interactive || o.interactive_first) || context_full) break;
        // the user goes on from here: the last token shown must be in the cache
        if (unevaluated >= 0 && !eval(std::span<const int32_t>(&unevaluated, 1))) {
            context_full = true;
            break;
        }
        if (unevaluated >= 0) held.clear();
        waiting = true;
    }
    const double pp_tps = prompt.empty() ? 0.0 : prompt.size() / (prompt_ms / 1000.0);
    const double tg_tps = generated.empty() ? 0.0 : generated.size() / (gen_ms / 1000.0);
    if (o.json) {
        nlohmann::json j;
        if (!as_ids) j["text"] = all_text;
        j["prompt_tokens"] = prompt;
        j["tokens"] = generated;
        j["seed"] = sampler.seed();
        if (spec) {
            const SpeculativeStats &ss = spec->stats();
            j["speculative"] = {{"drafter", spec->drafter().name()}, {"drafted", ss.drafted},
                                {"accepted", ss.accepted},          {"acceptance", ss.acceptance()},
                                {"target_passes", ss.passes}};
        }
        j["stop"] = context_full                                      ? "context"
                    : last_reason == text::StopReason::Length           ? "length"
                    : last_reason == text::StopReason::StopString       ? "reverse_prompt"
                    : last_reason == text::StopReason::EndOfGeneration ? "eos"
                                                                        : "input";
        if (context.shifts() > 0) j["context_shifts"] = context.shifts();
        if (o.n_probs > 0) {
            auto piece = [&](int32_t id) { return vocab ? vocab->token_to_piece(id, o.special) : std::string(); };
            nlohmann::json pj = nlohmann::json::array();
            for (const text::TokenLogprob &lp : probs) {
                nlohmann::json top = nlohmann::json::array();
                for (auto [id, l] : lp.top) top.push_back({{"id", id}, {"piece", piece(id)}, {"logprob", l}});
                pj.push_back({{"id", lp.id}, {"piece", piece(lp.id)}, {"logprob", lp.logprob}, {"top", top}});
            }
            j["probs"] = pj;
        }
        j["timings"] = {{"load_ms", load_ms},           {"prompt_n", prompt.size()},
                        {"prompt_ms", prompt_ms},       {"prompt_per_second", pp_tps},
                        {"predicted_n", generated.size()}, {"predicted_ms", gen_ms},
                        {"predicted_per_second", tg_tps}};
        // generated bytes need not be valid UTF-8 (a character cut by -n): replace, never throw
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::printf("\n");
        std::fflush(stdout);  // the text ends before the timing line starts
        if (context_full) {
            std::fprintf(stderr,
                         "toy: the context is full (%lld tokens): generation stopped after %zu tokens (raise -c, or "
                         "--context-shift)\n",
                         (long long)n_ctx, generated.size());
        }
        if (context.shifts() > 0) {
            std::fprintf(stderr, "toy: the context was shifted %d times (--keep %zu)\n", context.shifts(), n_keep);
        }
        std::fprintf(stderr, "toy: load %.0f ms | prompt %zu tokens, %.1f t/s | generation %zu tokens, %.1f t/s\n",
                     load_ms, prompt.size(), pp_tps, generated.size(), tg_tps);
        if (spec) {
            const SpeculativeStats &ss = spec->stats();
            std::fprintf(stderr,
                         "toy: %s: drafted %lld, accepted %lld (%.1f%%) | %lld target passes, %.2f tokens each | "
                         "%.1f t/s\n",
                         spec->drafter().name().c_str(), (long long)ss.drafted, (long long)ss.accepted,
                         100.0 * ss.acceptance(), (long long)ss.passes,
                         ss.passes ? (double)ss.decided / (double)ss.passes : 0.0, tg_tps);
        }
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
    app.add_option("--typical", s.typical_p, "locally typical sampling: keep this much probability (1: off)");
    app.add_option("--top-nsigma", s.top_n_sigma, "keep logits within n standard deviations of the largest (-1: off)");
    app.add_option("--xtc-probability", s.xtc_probability, "chance of removing the most likely tokens (XTC; 0: off)");
    app.add_option("--xtc-threshold", s.xtc_threshold, "XTC removes the tokens at least this likely but the last (> 0.5: off)");
    app.add_option("--min-keep", s.min_keep, "top-p, typical, min-p and XTC keep at least this many tokens (0: 1)");
    app.add_option("--dry-multiplier", s.dry_multiplier, "DRY repetition penalty strength (0: off)");
    app.add_option("--dry-base", s.dry_base, "DRY: the penalty grows by this factor per repeated token (below 1: off)");
    app.add_option("--dry-allowed-length", s.dry_allowed_length, "DRY: repeats up to this long are free");
    app.add_option("--dry-penalty-last-n", s.dry_penalty_last_n, "DRY: tokens scanned for repeats (-1: all, 0: off)");
    app.add_option_function<std::vector<std::string>>(
        "--dry-sequence-breaker",
        [&s](const std::vector<std::string> &v) {
            s.dry_sequence_breakers.clear();
            for (const std::string &b : v)
                if (b != "none") s.dry_sequence_breakers.push_back(b);
        },
        "DRY: text a repeat does not run across (repeatable; replaces \\n : \" *; none: no breakers)");
    app.add_option("--mirostat", s.mirostat, "mirostat sampling instead of the stages: 0 off, 1 v1, 2 v2");
    app.add_option("--mirostat-lr", s.mirostat_eta, "mirostat learning rate (eta)");
    app.add_option("--mirostat-ent", s.mirostat_tau, "mirostat target entropy (tau)");
    app.add_option_function<std::string>(
           "--samplers", [&s](const std::string &v) { s.order = text::parse_stages(v, "--samplers"); },
           "the sampling stages in order, ';'-separated")
        ->default_str(text::stage_names(s.order));
    app.add_option_function<std::string>(
        "--sampling-seq", [&s](const std::string &v) { s.order = text::parse_stages(v, "--sampling-seq"); },
        "the same as letters (e penalties, s top-n-sigma, k top-k, y typical, p top-p, m min-p, x xtc, t temperature)");
    app.add_option_function<std::vector<std::string>>(
        "-l,--logit-bias",
        [&s](const std::vector<std::string> &items) {
            for (const std::string &v : items) s.logit_bias.push_back(parse_logit_bias(v));
        },
        "add BIAS to a token's logit: TOKEN+BIAS or TOKEN-BIAS (e.g. 15043+1, 2-inf bans token 2; repeatable)");
    // (-1 is llama.cpp's spelling of its default, a random seed)
    app.add_option("-s,--seed", s.seed, "random seed (-1: a random one)")
        ->type_name("INT")
        ->default_str("-1")
        ->transform(CLI::Validator(
            [](std::string &v) {
                if (v == "-1") v = "4294967295";
                return v[0] == '-' ? "expected -1 (a random seed) or a seed >= 0, found '" + v + "'" : std::string();
            },
            ""));
    // each value's range (text::check_params), once every flag is read
    app.parse_complete_callback([&s] {
        try {
            text::check_params(s, text::ParamNames::flags);
        } catch (const Error &e) {
            throw CLI::ValidationError(e.what());
        }
    });
}

std::pair<int32_t, float> parse_logit_bias(const std::string &v) {
    size_t i = 0;
    while (i < v.size() && std::isdigit((unsigned char)v[i])) ++i;
    if (i == 0 || i + 1 >= v.size() || (v[i] != '+' && v[i] != '-')) {
        fail("--logit-bias: expected TOKEN+BIAS or TOKEN-BIAS (e.g. 15043+1), found '{}'", v);
    }
    const std::string num = v.substr(i + 1);
    size_t used = 0;
    float bias = 0;
    try {
        bias = std::stof(num, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used != num.size()) fail("--logit-bias: expected a number after '{}' in '{}'", v[i], v);
    int64_t id = 0;
    if (std::from_chars(v.data(), v.data() + i, id).ec != std::errc() || id > INT32_MAX) {
        fail("--logit-bias: token id {} is out of range", v.substr(0, i));
    }
    return {(int32_t)id, v[i] == '-' ? -bias : bias};
}

namespace {
Command reg("run", "Generate text (or token ids) from a prompt", [](CLI::App &app) {
    auto o = std::make_shared<RunOptions>();
    o->model.add_to(app);
    o->draft.add_to(app);
    o->input.add_to(app, /*with_tokens=*/true);
    app.add_option("-n,--n-predict", o->n_predict, "tokens to generate (-1: until end of text or full context)")
        ->capture_default_str();
    add_sampling_flags(app, o->sampling);
    o->constraint.add_to(app);
    app.add_flag("--json", o->json, "print one JSON object: text, token ids, timings");
    app.add_flag("--special", o->special, "parse and print special tokens (e.g. <|im_start|>)");
    app.add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-text tokens");
    app.add_flag("--no-bos", o->no_bos, "do not add the BOS token the model asks for");
    app.add_option("--n-probs", o->n_probs, "with --json: each generated token's log-probability and this many alternatives");
    app.add_option("-r,--reverse-prompt", o->reverse,
                   "stop when this text appears (shown; with -i, your turn); repeatable");
    app.add_flag("--context-shift", o->context_shift,
                 "when the context is full, drop the older half of what follows --keep and go on");
    app.add_option("--keep", o->n_keep, "prompt tokens kept at the start on a context shift (-1: all)");
    app.add_flag("-i,--interactive", o->interactive, "after each generation, read a line and go on from it");
    app.add_flag("--interactive-first", o->interactive_first, "read a line before generating (implies -i; -p is then optional)");
    app.add_flag("--no-conversation")->description("toy run never converses (toy chat does); accepted for llama.cpp's -no-cnv");
    return [o] { return run_generate(*o); };
});
}  // namespace

}  // namespace toy::cli
