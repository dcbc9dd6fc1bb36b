// The whole of a file a user named (a prompt, a chat template, a grammar,
// training data), standard input, and the lines of an interactive session,
// for the readers of text inputs.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace toy {

// The most read from something whose size is not known before reading it: a
// pipe, standard input, a device. `-f /dev/zero` or an endless pipe would
// otherwise grow a string until memory runs out; a regular file is read to
// its end whatever its size.
inline constexpr size_t kMaxStreamBytes = size_t(1) << 30;
// The longest line of an interactive session (toy run -i, toy chat).
inline constexpr size_t kMaxLineBytes = size_t(64) << 20;

// Throws toy::Error naming `what` and the path when the file is missing,
// unreadable, a directory (which opens as a stream of nothing and was taken
// for an empty prompt, template or grammar), or a stream longer than
// kMaxStreamBytes.
std::string read_whole_file(const std::string &path, std::string_view what);

// All of standard input (up to kMaxStreamBytes; `what` names the flag).
std::string read_whole_stdin(std::string_view what);

// The next line of `in` without its end (\n or \r\n); false at the end of
// the input or on an error (errno says which: EINTR when a signal stopped
// the read). Throws toy::Error naming `what` for a line longer than
// kMaxLineBytes.
bool read_line(std::FILE *in, std::string &line, std::string_view what);

}  // namespace toy
