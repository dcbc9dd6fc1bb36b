// toy chat: an interactive multi-turn conversation in the terminal.
//
// Every turn renders the whole conversation with the chat template and
// evaluates only the text after what the KV cache already holds, so earlier
// turns are never read again (unless the template rewrites them). Ctrl-C
// stops a reply; at the prompt it quits, as do /exit and end of input. Lines
// starting with / are commands (/help lists them), never sent to the model.
// -p (or -f) is the first message; -st ends after its reply.
#include "apps/cli.h"
#include "apps/constraint_flags.h"
#include "apps/session_options.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/read_file.h"
#include "text/chat_template.h"
#include "text/generation.h"
#include "text/sampler.h"
#include "text/vocab.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <unistd.h>

namespace toy::cli {
namespace {

struct ChatOptions {
    ModelFlags model;
    text::SamplerParams sampling;
    int n_predict = -1;
    std::string chat_template;
    std::string chat_template_file;
    std::string system_prompt;
    PromptFlags first;         // -p / -f: the first user message
    ConstraintFlags constraint;  // every reply follows this grammar
    DraftFlags draft;          // speculative decoding: -md / --lookup-ngram
    bool single_turn = false;  // -st: end after the first reply
    bool verbose = false;
};

constexpr const char *kHelp =
    "commands: /help this list | /reset forget the conversation | /save FILE write it as JSON messages | "
    "/exit or /quit (also Ctrl-D) quit | //text sends /text";

// The conversation as {"messages": [{"role", "content"}, ...]}, written atomically.
void save_conversation(const text::Conversation &chat, const std::string &path) {
    nlohmann::json msgs = nlohmann::json::array();
    for (const text::Message &m : chat.messages()) msgs.push_back({{"role", m.role}, {"content", m.content}});
    write_file_atomic(path, nlohmann::json{{"messages", msgs}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::atomic<bool> g_interrupted{false};  // Ctrl-C during a reply: stop it
std::atomic<bool> g_at_prompt{false};    // Ctrl-C now quits
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT handler needs lock-free flags");

// At the prompt the handler ends the process itself (async-signal-safe calls
// only): a flag could arrive between the check and the blocking read.
extern "C" void on_sigint(int) {
    if (g_at_prompt.load()) {
        (void)!write(STDOUT_FILENO, "\n", 1);
        _exit(130);  // the shell's code for "ended by SIGINT"
    }
    g_interrupted.store(true);
}

// The handler, while chatting. No SA_RESTART: a read interrupted anyway
// returns instead of waiting on.
class SigintGuard {
public:
    SigintGuard() {
        struct sigaction sa {};
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0;
        sigaction(SIGINT, &sa, &old_);
    }
    ~SigintGuard() { sigaction(SIGINT, &old_, nullptr); }
    SigintGuard(const SigintGuard &) = delete;
    SigintGuard &operator=(const SigintGuard &) = delete;

private:
    struct sigaction old_ {};
};

enum class ReadResult { Line, Eof, Interrupted };

ReadResult read_user_line(std::string &line) {
    if (read_line(stdin, line, "standard input")) {
        while (!line.empty() && line.back() == '\r') line.pop_back();
        return ReadResult::Line;
    }
    const bool interrupted = g_interrupted.load() || errno == EINTR;
    clearerr(stdin);
    return interrupted ? ReadResult::Interrupted : ReadResult::Eof;
}

int run_chat(const ChatOptions &o) {
    if (o.n_predict < -1) fail("-n: expected -1 (until end of turn) or a count >= 0, found {}", o.n_predict);

    auto model = o.model.load();
    const text::Vocab vocab = text::Vocab::load(model->file());
    const std::shared_ptr<const text::Grammar> grammar = o.constraint.load(vocab);
    print_notes(vocab);
    std::string note;
    const text::ChatTemplate tmpl =
        text::select_chat_template(model->file(), vocab, o.chat_template, o.chat_template_file, &note);
    if (!note.empty()) std::fprintf(stderr, "toy: %s\n", note.c_str());
    {
        // a template that cannot render a first exchange is an error now, not at every message
        std::vector<text::Message> probe;
        if (!o.system_prompt.empty()) probe.push_back({"system", o.system_prompt});
        probe.push_back({"user", "Hello"});
        tmpl.apply(probe, true);
    }

    Session session(*model, o.model.session_options());
    print_notes(session);
    const std::unique_ptr<Speculator> spec = o.draft.make(session, o.model);
    // the tokens in the cache, in order (speculative passes evaluate and trim them themselves)
    std::vector<int32_t> history;
    text::Sampler sampler(text::with_dry_breakers(o.sampling, vocab));
    text::Conversation chat(tmpl, o.system_prompt);
    // the cache's size, or fewer where a model has only so many learned positions
    int64_t n_ctx = session.n_ctx();
    if (model->config().pos == PosKind::Learned) n_ctx = std::min<int64_t>(n_ctx, model->config().n_ctx_train);
    std::fprintf(stderr, "toy: chat template %s, context %lld tokens; /help lists commands, /exit or Ctrl-D quits\n",
                 tmpl.name().c_str(), (long long)n_ctx);

    o.first.check_one(/*required=*/false);
    std::string first = o.first.given() ? o.first.text() : "";
    if (o.first.given() && first.empty()) fail("the first message (-p / -f) is empty");
    bool replied = false;
    SigintGuard sigint;
    std::string line;
    for (;;) {
        if (o.single_turn && replied) return 0;
        g_interrupted.store(false);
        if (!first.empty()) {
            line = std::move(first);
            first.clear();
            print_text("> " + line + "\n");
        } else {
            g_at_prompt.store(true);
            print_text("> ");
            const ReadResult rr = read_user_line(line);
            g_at_prompt.store(false);
            if (rr == ReadResult::Interrupted) {
                print_text("\n");
                return 130;  // the shell's code for "ended by SIGINT"
            }
            if (rr == ReadResult::Eof) {
                print_text("\n");
                return 0;
            }
            if (line.rfind("//", 0) == 0) {
                line.erase(0, 1);  // a message that starts with /
            } else if (line.rfind('/', 0) == 0) {
                const std::string command = line.substr(0, line.find_last_not_of(" \t") + 1);
                const std::string word = command.substr(0, command.find(' '));
                const std::string arg = word.size() < command.size() ? command.substr(word.size() + 1) : "";
                if (word == "/exit" || word == "/quit") return 0;
                if (word == "/help") {
                    std::fprintf(stderr, "toy: %s\n", kHelp);
                } else if (word == "/reset") {
                    chat.clear();
                    session.reset();
                    history.clear();
                    sampler.reset();
                    std::fprintf(stderr, "toy: history and cache cleared\n");
                } else if (word == "/save") {
                    if (arg.empty()) {
                        std::fprintf(stderr, "toy: error: /save needs a file name\n");
                        continue;
                    }
                    try {
                        save_conversation(chat, arg);
                        std::fprintf(stderr, "toy: saved %zu messages to %s\n", chat.messages().size(), arg.c_str());
                    } catch (const Error &e) {
                        std::fprintf(stderr, "toy: error: %s\n", e.what());
                    }
                } else {
                    std::fprintf(stderr, "toy: unknown command %s (/help lists them; //%s sends it as a message)\n",
                                 word.c_str(), line.c_str() + 1);
                }
                continue;
            }
        }
        if (line.empty()) continue;

        text::Conversation::Turn turn;
        try {
            turn = chat.prepare(line);
        } catch (const Error &e) {  // e.g. a template that insists on alternating roles
            std::fprintf(stderr, "toy: error: %s\n", e.what());
            continue;
        }
        const std::vector<int32_t> prompt = text::tokenize_rendered(vocab, turn.rendered, turn.from);
        const int64_t base = turn.reset ? 0 : session.n_past();
        if (base + (int64_t)prompt.size() > n_ctx) {
            std::fprintf(stderr, "toy: context full: this message needs %zu tokens, %lld of %lld are free; /reset starts over\n",
                         prompt.size(), (long long)(n_ctx - base), (long long)n_ctx);
            continue;
        }
        if (turn.reset) {
            if (o.verbose) std::fprintf(stderr, "[the template changed earlier turns: re-reading the conversation]\n");
            session.reset();
            history.clear();
            sampler.reset();
        }

        const auto t_prompt = Clock::now();
        if (!prompt.empty()) session.eval(prompt);
        history.insert(history.end(), prompt.begin(), prompt.end());
        const double prompt_ms = ms_since(t_prompt);
        for (int32_t t : prompt) sampler.accept(t);
        chat.commit(turn);

        // Every token shown is evaluated, the last one included, so the cache
        // always holds exactly the history's text.
        const int64_t room = n_ctx - session.n_past();
        const int64_t limit = o.n_predict < 0 ? room : std::min<int64_t>(o.n_predict, room);
        text::Generation gen(&vocab, sampler, {limit, false, {}, false, grammar});
        std::string reply;
        const auto t_gen = Clock::now();
        auto show = [&](const text::Step &st, std::span<const float>) {
            reply += st.text;
            print_text(st.text);
        };
        auto evaluate = [&](int32_t token) {
            session.eval(std::span<const int32_t>(&token, 1));
            history.push_back(token);
        };
        text::Step st = gen.next({session.last_logits(), (size_t)session.n_vocab()});
        show(st, {});
        while (!st.done && !g_interrupted.load()) {
            if (spec) {
                // the pending token and a draft in one pass, which decides one or more tokens
                const int64_t left = limit - (int64_t)gen.tokens().size();
                st = spec->step(gen, history, st.token, (int)std::clamp<int64_t>(left - 1, 0, INT_MAX), show);
            } else {
                evaluate(st.token);
                st = gen.next({session.last_logits(), (size_t)session.n_vocab()});
                show(st, {});
            }
        }
        // the last token shown is pending: the cache holds the reply's text, all of it
        if (st.token >= 0) evaluate(st.token);
        const double gen_ms = ms_since(t_gen);
        const int n_gen = (int)gen.tokens().size();
        const bool full = gen.reason() == text::StopReason::Length && limit == room && (o.n_predict < 0 || room < o.n_predict);
        const std::string rest = gen.flush();
        reply += rest;
        print_text(rest + "\n");
        chat.add_reply(reply);
        replied = true;

        if (full) {
            std::fprintf(stderr, "toy: context full (%lld tokens): reply cut short; /reset starts over\n",
                         (long long)n_ctx);
        } else if (g_interrupted.load()) {
            std::fprintf(stderr, "toy: reply stopped\n");
        }
        if (o.verbose) {
            std::fprintf(stderr, "[n_past %lld/%lld] prompt %zu tokens, %.1f t/s | reply %d tokens, %.1f t/s\n",
                         (long long)session.n_past(), (long long)n_ctx, prompt.size(),
                         prompt_ms > 0 ? prompt.size() / (prompt_ms / 1000.0) : 0.0, n_gen,
                         gen_ms > 0 ? n_gen / (gen_ms / 1000.0) : 0.0);
            if (spec) {
                const SpeculativeStats &ss = spec->stats();
                std::fprintf(stderr, "[%s: drafted %lld, accepted %lld (%.1f%%), %lld target passes]\n",
                             spec->drafter().name().c_str(), (long long)ss.drafted, (long long)ss.accepted,
                             100.0 * ss.acceptance(), (long long)ss.passes);
            }
        }
    }
}

Command reg("chat", "Chat with a model in the terminal (multi-turn, keeps the KV cache)", [](CLI::App &app) {
    auto o = std::make_shared<ChatOptions>();
    o->model.add_to(app);
    app.add_option("-n,--n-predict", o->n_predict, "tokens per reply at most (-1: until end of turn or full context)");
    add_sampling_flags(app, o->sampling);
    o->constraint.add_to(app);
    app.add_option("--chat-template", o->chat_template,
                   "built-in template (chatml, gemma, llama2, llama3, mistral, zephyr) or Jinja source; "
                   "default: the model's tokenizer.chat_template, else chatml");
    app.add_option("--chat-template-file", o->chat_template_file, "read the Jinja chat template from a file");
    // llama.cpp also spells it -sys: CLI11 takes that only through main.cpp's alias table
    app.add_option("--system-prompt", o->system_prompt, "system message that opens the conversation");
    o->first.add_to(app, /*with_tokens=*/false);
    o->draft.add_to(app);
    app.add_flag("--single-turn", o->single_turn, "quit after the first reply; also -st");
    app.add_flag("-v,--verbose", o->verbose, "timings and cache use after each reply (stderr)");
    return [o] { return run_chat(*o); };
});

}  // namespace
}  // namespace toy::cli
