// Text as a double-quoted string on one line: quotes, backslashes and control
// characters escaped C-style (\" \\ \n \r \t \xHH); other bytes as they are.
// GGUF values print so, and GBNF literals read the same escapes.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace toy {

inline std::string quote_escaped(std::string_view s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
                else out += (char)c;
        }
    }
    return out + '"';
}

}  // namespace toy
