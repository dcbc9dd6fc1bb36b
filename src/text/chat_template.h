// Chat templates: a conversation (role, content messages) rendered into the
// prompt text a chat model was trained on.
//
// Models carry their template as Jinja source in `tokenizer.chat_template`;
// it is rendered by the Jinja engine of the pinned llama.cpp bundle
// (common/jinja, built as the toy_jinja library). Message content is marked
// as user input while rendering, so the result knows which bytes came from
// messages: those are tokenized without special-token parsing, and a user who
// types "<|im_end|>" gets the text, never the control token.
//
// Multi-turn chat keeps the KV cache: Conversation remembers the text already
// evaluated and, for each new user message, renders the whole history again
// and hands out only the part after that text (or, when a template rewrites
// earlier turns, the whole text after a reset).
#pragma once

#include "gguf/gguf_reader.h"
#include "text/vocab.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace toy::text {

struct Message {
    std::string role;     // "system", "user", "assistant"
    std::string content;
};

// A rendered conversation: the text and the byte ranges of it that came from
// message content (the rest is template text).
struct Rendered {
    struct Span {
        size_t begin = 0, end = 0;
    };
    std::string text;
    std::vector<Span> content;
    int64_t steps = 0;  // the interpreter's steps (of text/jinja_guard.h's kMaxSteps)
};

class ChatTemplate {
public:
    // Parses Jinja source; throws toy::Error naming `name` on a syntax error.
    // bos/eos are the texts of the model's BOS/EOS tokens (template variables
    // bos_token and eos_token).
    ChatTemplate(std::string source, std::string bos_token = "", std::string eos_token = "",
                 std::string name = "chat template");
    ~ChatTemplate();
    ChatTemplate(ChatTemplate &&) noexcept;
    ChatTemplate &operator=(ChatTemplate &&) noexcept;

    // The prompt for `msgs`; with add_generation_prompt it ends where the
    // assistant's reply begins. Throws toy::Error (one line) when the template
    // fails, e.g. raise_exception('Conversation roles must alternate ...').
    std::string apply(const std::vector<Message> &msgs, bool add_generation_prompt) const;
    Rendered render(const std::vector<Message> &msgs, bool add_generation_prompt) const;

    const std::string &name() const { return name_; }
    const std::string &source() const { return source_; }
    // False when the template rejects or drops a system message; render()
    // then puts the system text at the start of the first user message.
    bool supports_system_role() const { return system_role_; }

    // Built-in templates for models without one: chatml, gemma, llama2,
    // llama3, mistral, zephyr. Source text, or nullptr for an unknown name.
    static const char *builtin_source(std::string_view name);
    static std::vector<std::string> builtin_names();

private:
    // (each runs on a thread with a deep stack: chat_template.cpp)
    void parse_and_probe();
    Rendered render_here(const std::vector<Message> &msgs, bool add_generation_prompt) const;

    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string source_, bos_, eos_, name_;
    bool system_role_ = true;
    bool typed_content_ = false;  // content must be a list of {type: text, text: ...}
};

// Which template a model chats with: a Jinja file (--chat-template-file), a
// built-in name or inline Jinja source (--chat-template), else the model's
// tokenizer.chat_template, else chatml. `note` (if given) receives a line for
// the user when the fallback is taken. Throws toy::Error for an unknown name,
// an unreadable file or both options at once.
ChatTemplate select_chat_template(const gguf::File &file, const Vocab &vocab, const std::string &name,
                                  const std::string &path, std::string *note = nullptr);

// Tokens of r.text[from:]. Template text is tokenized with special-token
// parsing, so "<|im_start|>" there is one control token; message content
// that spells a control token is tokenized as plain text. Where no content
// does, the whole range is tokenized at once, exactly as llama.cpp tokenizes
// a rendered prompt. From 0, BOS is put first when the vocabulary asks for it
// and the template did not write it.
std::vector<int32_t> tokenize_rendered(const Vocab &vocab, const Rendered &r, size_t from = 0);

// A chat's history and the text whose tokens are already in the KV cache.
// Model-free: the caller evaluates what prepare() hands out. `tmpl` must
// outlive the conversation.
class Conversation {
public:
    explicit Conversation(const ChatTemplate &tmpl, std::string system_prompt = "");

    struct Turn {
        Message user;
        Rendered rendered;   // history + user message + generation prompt
        size_t from = 0;     // rendered.text[from:] is what has to be evaluated
        bool reset = false;  // the cached text is no prefix of the new one: clear the cache first
    };
    // Renders the history plus a new user message. Changes nothing.
    Turn prepare(std::string user_content) const;
    // The turn's text is now in the cache: the history gains its user message.
    void commit(const Turn &turn);
    // The assistant's generated text (as detokenized) is now in the cache too.
    void add_reply(const std::string &text);
    // Forgets everything but the system prompt; nothing is cached any more.
    void clear();

    const std::vector<Message> &messages() const { return msgs_; }
    const std::string &cached_text() const { return cached_; }

private:
    const ChatTemplate &tmpl_;
    std::vector<Message> msgs_;
    size_t n_system_ = 0;
    std::string cached_;
};

}  // namespace toy::text
