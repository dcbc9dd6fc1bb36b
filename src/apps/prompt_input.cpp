#include "apps/prompt_input.h"

#include "core/error.h"
#include "core/read_file.h"

#include <climits>

namespace toy::cli {
namespace {

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::string process_escapes(const std::string &in) {
    std::string out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '\\' || i + 1 >= in.size()) {
            out.push_back(in[i]);
            continue;
        }
        const char c = in[i + 1];
        switch (c) {
            case 'n': out.push_back('\n'); ++i; continue;
            case 'r': out.push_back('\r'); ++i; continue;
            case 't': out.push_back('\t'); ++i; continue;
            case '\'': case '"': case '\\': out.push_back(c); ++i; continue;
            case 'x':
                if (i + 3 < in.size() && hex_digit(in[i + 2]) >= 0 && hex_digit(in[i + 3]) >= 0) {
                    out.push_back((char)(hex_digit(in[i + 2]) * 16 + hex_digit(in[i + 3])));
                    i += 3;
                    continue;
                }
                break;
            default: break;
        }
        out.push_back('\\');
        out.push_back(c);
        ++i;
    }
    return out;
}

std::string read_input_file(const std::string &path, const std::string &flag) {
    return path == "-" ? read_whole_stdin(flag) : read_whole_file(path, flag);
}

std::vector<int32_t> parse_id_list(const std::string &text, const std::string &flag) {
    std::string s = text;
    // the bracketed list tokenize --ids prints
    const size_t first = s.find_first_not_of(" \t\n\r"), last = s.find_last_not_of(" \t\n\r");
    if (first != std::string::npos && s[first] == '[') {
        if (s[last] != ']') fail("{}: expected a list ending in ']', found '{}'", flag, s.substr(last, 20));
        s = s.substr(first + 1, last - first - 1);
    }
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < s.size()) {
        if (is_separator(s[i])) {
            ++i;
            continue;
        }
        size_t j = i;
        if (s[j] == '-') ++j;
        while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
        if (j == i || (j == i + 1 && s[i] == '-') || (j < s.size() && !is_separator(s[j]))) {
            fail("{}: expected token ids as 1,2,3 or [1, 2, 3], found '{}'", flag, s.substr(i, 20));
        }
        const std::string digits = s.substr(i, j - i);
        if (digits.size() > 11) fail("{}: token id {} is out of range", flag, digits);
        const long long v = std::stoll(digits);
        if (v < INT32_MIN || v > INT32_MAX) fail("{}: token id {} is out of range", flag, v);
        ids.push_back((int32_t)v);
        i = j;
    }
    return ids;
}

void PromptFlags::add_to(CLI::App &app, bool with_tokens) {
    prompt_opt = app.add_option("-p,--prompt", prompt, "prompt text");
    file_opt = app.add_option("-f,--file", file, "read the prompt from a file (-: standard input)");
    if (with_tokens) tokens_opt = app.add_option("--tokens", tokens, "prompt as token ids: 1,2,3 or [1, 2, 3]");
    app.add_flag("--no-escape", no_escape, "take \\n, \\t, \\xHH ... in the prompt literally (default: processed)");
    app.add_flag("-e,--escape")->description("process \\n, \\t, \\xHH ... in the prompt (the default; llama.cpp's -e)");
}

size_t PromptFlags::given() const {
    return prompt_opt->count() + file_opt->count() + (tokens_opt ? tokens_opt->count() : 0) +
           (stdin_opt ? stdin_opt->count() : 0);
}

void PromptFlags::check_one(bool required) const {
    const size_t n = given();
    if (n == 1 || (n == 0 && !required)) return;
    const std::string which = tokens_opt ? "-p TEXT, -f FILE or --tokens IDS" : "-p TEXT or -f FILE";
    if (n == 0) fail("no prompt: give one of {}", which);
    fail("give only one of {} ({} were given)", which, n);
}

std::string PromptFlags::text() const {
    const bool from_stdin = stdin_opt && stdin_opt->count();
    const std::string raw = from_stdin ? read_input_file("-", "--stdin") : file_opt->count() ? read_input_file(file, "-f") : prompt;
    return no_escape ? raw : process_escapes(raw);
}

}  // namespace toy::cli
