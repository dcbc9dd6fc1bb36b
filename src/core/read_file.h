// The whole of a file a user named (a prompt, a chat template, a grammar,
// training data), for the readers of text inputs.
#pragma once

#include <string>
#include <string_view>

namespace toy {

// Throws toy::Error naming `what` and the path when the file is missing,
// unreadable or a directory (which opens as a stream of nothing and was
// taken for an empty prompt, template or grammar).
std::string read_whole_file(const std::string &path, std::string_view what);

}  // namespace toy
