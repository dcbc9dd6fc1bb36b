#include "text/chat_template.h"

#include "core/error.h"
#include "core/read_file.h"

// The Jinja engine of the pinned llama.cpp bundle (toy_jinja, see CMakeLists.txt).
#include "jinja/caps.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"
#include "text/jinja_guard.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <new>

#include <pthread.h>

namespace toy::text {
namespace {

// Built-in templates for models that carry none. They keep every earlier turn
// unchanged when a turn is added (system text at the very start, assistant
// content verbatim), so a chat never has to re-read its history.
struct Builtin {
    const char *name;
    const char *source;
};
constexpr Builtin kBuiltins[] = {
    {"chatml",
     "{%- for message in messages -%}"
     "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"},
    // Gemma has no system role: the system text opens the first user turn.
    {"gemma",
     "{{- bos_token -}}"
     "{%- set ns = namespace(system='') -%}"
     "{%- for message in messages -%}"
     "{%- if message['role'] == 'system' -%}{%- set ns.system = message['content'] + '\\n\\n' -%}"
     "{%- else -%}"
     "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' -}}"
     "{{- ns.system + message['content'] + '<end_of_turn>\\n' -}}{%- set ns.system = '' -%}"
     "{%- endif -%}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"},
    {"llama2",
     "{%- set ns = namespace(system='') -%}"
     "{%- for message in messages -%}"
     "{%- if message['role'] == 'system' -%}{%- set ns.system = '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' -%}"
     "{%- elif message['role'] == 'user' -%}"
     "{{- bos_token + '[INST] ' + ns.system + message['content'] + ' [/INST]' -}}{%- set ns.system = '' -%}"
     "{%- else -%}{{- message['content'] + eos_token -}}{%- endif -%}"
     "{%- endfor -%}"},
    {"llama3",
     "{{- bos_token -}}"
     "{%- for message in messages -%}"
     "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' -}}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"},
    // Mistral Instruct v0.x: [INST] turns, the system text opens the first one.
    {"mistral",
     "{{- bos_token -}}"
     "{%- set ns = namespace(system='') -%}"
     "{%- for message in messages -%}"
     "{%- if message['role'] == 'system' -%}{%- set ns.system = message['content'] + '\\n\\n' -%}"
     "{%- elif message['role'] == 'user' -%}"
     "{{- '[INST] ' + ns.system + message['content'] + ' [/INST]' -}}{%- set ns.system = '' -%}"
     "{%- else -%}{{- message['content'] + eos_token -}}{%- endif -%}"
     "{%- endfor -%}"},
    {"zephyr",
     "{%- for message in messages -%}"
     "{{- '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' -}}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"},
};

// The engine's messages span lines: a header, the template source around the
// failing spot, and for runtime errors "Error: <cause>" last. One line of it:
// the cause, then where.
std::string one_line(std::string_view what) {
    std::vector<std::string_view> lines;
    for (size_t pos = 0; pos <= what.size();) {
        size_t end = what.find('\n', pos);
        if (end == std::string_view::npos) end = what.size();
        std::string_view line = what.substr(pos, end - pos);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
        if (!line.empty()) lines.push_back(line);
        pos = end + 1;
    }
    if (lines.empty()) return "unknown error";
    std::string_view cause = lines.front(), where;
    for (auto line : lines) {
        if (line.starts_with("Error: ")) cause = line.substr(7);
        if (line.starts_with("While executing ")) where = line.substr(16);
    }
    if (where.ends_with(" in source:")) where.remove_suffix(11);
    std::string out(cause);
    if (!where.empty() && cause != lines.front()) out += " (while executing " + std::string(where) + ")";
    return out;
}

// The lists, dicts and functions one run of the template made (jinja's
// value.h registers them, CMakeLists.txt): emptied when the run ends, so a
// cycle among them ({% set _ = l.append(l) %}) is freed, not leaked at every
// rendering.
struct ReleaseValues {
    ReleaseValues() { jinja::toy_forget_holders(); }
    ~ReleaseValues() {
        try {
            jinja::toy_release_holders();
        } catch (...) {  // (out of memory for the list: leave them)
            jinja::toy_forget_holders();
        }
    }
    ReleaseValues(const ReleaseValues &) = delete;
    ReleaseValues &operator=(const ReleaseValues &) = delete;
};

// The stack a template runs on: reserved, and only committed as it is used.
// Within its step bound a template can nest a list hundreds of thousands of
// levels deep (`{% set ns.l = [ns.l] %}` in a loop), and the interpreter
// frees such a value recursively: 400 thousand levels overflowed a thread's
// 8 MiB. Each level takes a step, so at most 2 million levels, a few hundred
// bytes of frames each.
constexpr size_t kTemplateStack = size_t(1) << 30;

// Runs fn (parsing and probing a template, or rendering it) on a thread with
// that stack, and rethrows what it throws. Where no such thread can start,
// on this one.
void on_template_stack(const std::function<void()> &fn) {
    struct Job {
        const std::function<void()> *fn;
        std::exception_ptr error;
    } job{&fn, nullptr};
    pthread_attr_t attr;
    pthread_t thread;
    if (pthread_attr_init(&attr) != 0) return fn();
    const bool started = pthread_attr_setstacksize(&attr, kTemplateStack) == 0 &&
                         pthread_create(
                             &thread, &attr,
                             [](void *p) -> void * {
                                 auto *j = static_cast<Job *>(p);
                                 try {
                                     (*j->fn)();
                                 } catch (...) {
                                     j->error = std::current_exception();
                                 }
                                 return nullptr;
                             },
                             &job) == 0;
    pthread_attr_destroy(&attr);
    if (!started) return fn();
    pthread_join(thread, nullptr);
    if (job.error) std::rethrow_exception(job.error);
}

}  // namespace

struct ChatTemplate::Impl {
    jinja::program prog;
};

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token, std::string name)
    : impl_(std::make_unique<Impl>()),
      source_(std::move(source)),
      bos_(std::move(bos_token)),
      eos_(std::move(eos_token)),
      name_(std::move(name)) {
    on_template_stack([this] { parse_and_probe(); });
}

void ChatTemplate::parse_and_probe() {
    try {
        jinja::lexer lexer;
        impl_->prog = jinja::parse_from_tokens(lexer.tokenize(source_));
    } catch (const std::bad_alloc &) {
        throw;
    } catch (const std::exception &e) {
        fail("{}: not a valid Jinja template: {}", name_, one_line(e.what()));
    }
    // The engine learns what a template does with messages by running it on
    // probes (a failing probe only clears a capability).
    try {
        jinja_guard::reset();  // (the probes run the template: the same bounds as a rendering)
        const ReleaseValues release;
        const jinja::caps caps = jinja::caps_get(impl_->prog);
        system_role_ = caps.supports_system_role;
        typed_content_ = caps.supports_typed_content && !caps.supports_string_content;
    } catch (const std::bad_alloc &) {
        throw;
    } catch (const std::exception &) {
        // keep the defaults: string content, system role
    }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate &&) noexcept = default;
ChatTemplate &ChatTemplate::operator=(ChatTemplate &&) noexcept = default;

Rendered ChatTemplate::render(const std::vector<Message> &msgs, bool add_generation_prompt) const {
    // A template without a system role gets the system text in front of the
    // first user message (the usual workaround, also llama.cpp's).
    std::vector<Message> merged;
    const std::vector<Message> *use = &msgs;
    if (!system_role_ && !msgs.empty() && msgs[0].role == "system") {
        merged.assign(msgs.begin() + 1, msgs.end());
        auto user = std::find_if(merged.begin(), merged.end(), [](const Message &m) { return m.role == "user"; });
        if (user != merged.end()) {
            user->content = msgs[0].content + "\n\n" + user->content;
        } else {
            merged.insert(merged.begin(), Message{"user", msgs[0].content});
        }
        use = &merged;
    }

    Rendered out;
    on_template_stack([&] { out = render_here(*use, add_generation_prompt); });
    return out;
}

Rendered ChatTemplate::render_here(const std::vector<Message> &msgs, bool add_generation_prompt) const {
    try {
        jinja_guard::reset();
        const ReleaseValues release;
        jinja::context ctx(source_);
        auto messages = jinja::mk_val<jinja::value_array>();
        for (const Message &m : msgs) {
            auto content = jinja::mk_val<jinja::value_string>(m.content);
            content->mark_input();
            auto msg = jinja::mk_val<jinja::value_object>();
            msg->insert("role", jinja::mk_val<jinja::value_string>(m.role));
            if (typed_content_) {
                auto part = jinja::mk_val<jinja::value_object>();
                part->insert("type", jinja::mk_val<jinja::value_string>(std::string("text")));
                part->insert("text", content);
                auto parts = jinja::mk_val<jinja::value_array>();
                parts->push_back(part);
                msg->insert("content", parts);
            } else {
                msg->insert("content", content);
            }
            messages->push_back(msg);
        }
        ctx.set_val("messages", messages);
        ctx.set_val("bos_token", jinja::mk_val<jinja::value_string>(bos_));
        ctx.set_val("eos_token", jinja::mk_val<jinja::value_string>(eos_));
        ctx.set_val("add_generation_prompt", jinja::mk_val<jinja::value_bool>(add_generation_prompt));

        jinja::runtime runtime(ctx);
        const jinja::value results = runtime.execute(impl_->prog);
        const auto parts = jinja::runtime::gather_string_parts(results);

        Rendered out;
        for (const auto &part : parts->val_str.parts) {
            if (part.is_input && !part.val.empty()) {
                out.content.push_back({out.text.size(), out.text.size() + part.val.size()});
            }
            out.text += part.val;
        }
        out.steps = jinja_guard::kMaxSteps - jinja_guard::budget.steps_left;
        return out;
    } catch (const std::bad_alloc &) {
        throw;
    } catch (const std::exception &e) {
        fail("{}: rendering failed: {}", name_, one_line(e.what()));
    }
}

std::string ChatTemplate::apply(const std::vector<Message> &msgs, bool add_generation_prompt) const {
    return render(msgs, add_generation_prompt).text;
}

const char *ChatTemplate::builtin_source(std::string_view name) {
    for (const Builtin &b : kBuiltins) {
        if (name == b.name) return b.source;
    }
    return nullptr;
}

std::vector<std::string> ChatTemplate::builtin_names() {
    std::vector<std::string> names;
    for (const Builtin &b : kBuiltins) names.emplace_back(b.name);
    return names;
}

ChatTemplate select_chat_template(const gguf::File &file, const Vocab &vocab, const std::string &name,
                                  const std::string &path, std::string *note) {
    if (!name.empty() && !path.empty()) fail("give --chat-template or --chat-template-file, not both");
    const std::string bos = vocab.bos() != Vocab::kNoToken ? vocab.token_text(vocab.bos()) : "";
    const std::string eos = vocab.eos() != Vocab::kNoToken ? vocab.token_text(vocab.eos()) : "";
    if (!path.empty()) {
        return ChatTemplate(read_whole_file(path, "--chat-template-file"), bos, eos, "chat template file '" + path + "'");
    }
    if (!name.empty()) {
        if (const char *src = ChatTemplate::builtin_source(name)) return ChatTemplate(src, bos, eos, name);
        // like llama.cpp, the flag also takes Jinja source
        if (name.find("{{") != std::string::npos || name.find("{%") != std::string::npos) {
            return ChatTemplate(name, bos, eos, "the --chat-template source");
        }
        std::string names;
        for (const auto &n : ChatTemplate::builtin_names()) names += (names.empty() ? "" : ", ") + n;
        fail("--chat-template: expected one of {} (or Jinja source), found '{}'", names, name);
    }
    if (auto src = file.opt_string("tokenizer.chat_template"); src && !src->empty()) {
        return ChatTemplate(*src, bos, eos, "tokenizer.chat_template of '" + file.path() + "'");
    }
    if (note) *note = "the model has no chat template (tokenizer.chat_template): using chatml (see --chat-template)";
    return ChatTemplate(ChatTemplate::builtin_source("chatml"), bos, eos, "chatml");
}

std::vector<int32_t> tokenize_rendered(const Vocab &vocab, const Rendered &r, size_t from) {
    from = std::min(from, r.text.size());
    const std::string_view text(r.text);

    // Content that would turn into a control token when parsed as special:
    // those ranges (only those) are cut out and tokenized as plain text.
    std::vector<Rendered::Span> plain;
    for (Rendered::Span s : r.content) {
        s.begin = std::max(s.begin, from);
        s.end = std::min(s.end, r.text.size());
        if (s.begin >= s.end) continue;
        const std::string_view piece = text.substr(s.begin, s.end - s.begin);
        if (vocab.tokenize(piece, false, true) != vocab.tokenize(piece, false, false)) plain.push_back(s);
    }

    std::vector<int32_t> out;
    auto append = [&](size_t begin, size_t end, bool parse_special) {
        if (begin >= end) return;
        auto ids = vocab.tokenize(text.substr(begin, end - begin), false, parse_special);
        out.insert(out.end(), ids.begin(), ids.end());
    };
    size_t pos = from;
    for (const auto &s : plain) {
        append(pos, s.begin, true);
        append(s.begin, s.end, false);
        pos = s.end;
    }
    append(pos, r.text.size(), true);

    if (from == 0 && vocab.add_bos() && vocab.bos() != Vocab::kNoToken && (out.empty() || out[0] != vocab.bos())) {
        out.insert(out.begin(), vocab.bos());
    }
    return out;
}

Conversation::Conversation(const ChatTemplate &tmpl, std::string system_prompt) : tmpl_(tmpl) {
    if (!system_prompt.empty()) {
        msgs_.push_back({"system", std::move(system_prompt)});
        n_system_ = 1;
    }
}

Conversation::Turn Conversation::prepare(std::string user_content) const {
    Turn t;
    t.user = {"user", std::move(user_content)};
    std::vector<Message> msgs = msgs_;
    msgs.push_back(t.user);
    t.rendered = tmpl_.render(msgs, /*add_generation_prompt=*/true);
    if (t.rendered.text.compare(0, cached_.size(), cached_) == 0) {
        t.from = cached_.size();
    } else {
        // The template rewrote an earlier turn (e.g. it trims replies, moves
        // the system text to the last user message, or drops reasoning).
        t.from = 0;
        t.reset = true;
    }
    return t;
}

void Conversation::commit(const Turn &turn) {
    msgs_.push_back(turn.user);
    cached_ = turn.rendered.text;
}

void Conversation::add_reply(const std::string &text) {
    msgs_.push_back({"assistant", text});
    cached_ += text;
}

void Conversation::clear() {
    msgs_.resize(n_system_);
    cached_.clear();
}

}  // namespace toy::text
