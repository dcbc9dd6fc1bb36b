// toy tokenize -m MODEL (-p TEXT | -f FILE | --stdin) [--ids] [--no-bos] [--special] [--show-count]
// toy detokenize -m MODEL --ids 1,2,3 [--special]
//
// Output mirrors llama.cpp's llama-tokenize: one line per token
// `    id -> 'piece'` (pieces of control tokens shown), or with --ids the id
// list as `[1, 2, 3]`. Like llama-tokenize, backslash escapes (\n, \t, \xHH,
// ...) in the prompt or file are processed unless --no-escape is given.
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "text/vocab.h"

#include <cstdio>
#include <memory>

namespace {

struct TokenizeOptions {
    std::string model;
    toy::cli::PromptFlags input;
    bool ids_only = false;
    bool no_bos = false;
    bool parse_special = false;
    bool show_count = false;
};

toy::text::Vocab open_vocab(const std::string &path) {
    auto file = toy::gguf::File::open_model(path);
    toy::text::Vocab v = toy::text::Vocab::load(*file);
    toy::cli::print_notes(v);
    return v;
}

int run_tokenize(const TokenizeOptions &o) {
    o.input.check_one();
    const toy::text::Vocab vocab = open_vocab(o.model);
    // a file's bytes verbatim (a trailing newline is a token too), escapes processed unless --no-escape
    const std::string text = o.input.text();

    const bool add_special = vocab.add_bos() && !o.no_bos;
    const auto ids = vocab.tokenize(text, add_special, o.parse_special);
    if (o.ids_only) {
        std::string line = "[";
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
        std::printf("%s]\n", line.c_str());
    } else {
        for (int32_t id : ids) {
            const std::string piece = vocab.token_to_piece(id, true);
            std::printf("%6d -> '", id);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::printf("'\n");
        }
    }
    if (o.show_count) std::printf("Total number of tokens: %zu\n", ids.size());
    return 0;
}

struct DetokenizeOptions {
    std::string model;
    std::string ids;
    bool special = false;
};

int run_detokenize(const DetokenizeOptions &o) {
    const auto ids = toy::cli::parse_id_list(o.ids, "--ids");
    const toy::text::Vocab vocab = open_vocab(o.model);
    for (int32_t id : ids) {
        if (id < 0 || id >= vocab.n_tokens()) {
            toy::fail("--ids: expected token ids in [0, {}), found {}", vocab.n_tokens(), id);
        }
    }
    const std::string text = vocab.detokenize(ids, o.special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    return 0;
}

toy::cli::Command reg_tokenize("tokenize", "Print the tokens of a text (like llama-tokenize)", [](CLI::App &app) {
    auto o = std::make_shared<TokenizeOptions>();
    app.add_option("-m,--model", o->model, "GGUF model (only its tokenizer is read)")->required();
    o->input.add_to(app, /*with_tokens=*/false);
    o->input.stdin_opt = app.add_flag("--stdin")->description("tokenize standard input (as -f -)");
    app.add_flag("--ids", o->ids_only, "print only the ids, as [1, 2, 3]");
    app.add_flag("--no-bos", o->no_bos, "do not add the BOS/EOS tokens the model asks for");
    app.add_flag("--special", o->parse_special, "text spelling a control token (e.g. <s>) becomes that token");
    app.add_flag("--show-count", o->show_count, "print the number of tokens at the end");
    return [o] { return run_tokenize(*o); };
});

toy::cli::Command reg_detokenize("detokenize", "Print the text of token ids", [](CLI::App &app) {
    auto o = std::make_shared<DetokenizeOptions>();
    app.add_option("-m,--model", o->model, "GGUF model (only its tokenizer is read)")->required();
    app.add_option("--ids", o->ids, "token ids: 1,2,3, 1 2 3 or [1, 2, 3]")->required();
    app.add_flag("--special", o->special, "print control tokens (e.g. <s>) as their text");
    return [o] { return run_detokenize(*o); };
});

}  // namespace
