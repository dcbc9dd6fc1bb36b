// toy::Error: every failure a user or a file can cause is one of these, with a
// message that names the thing (file, key, tensor, flag), what was expected
// and what was found. The CLI prints the message on one line and exits 1.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace toy {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args &&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace toy
