// Flag values that are lists ("1,2,4", "host:port,host:port", "3/1").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace toy {

// The items of `text` between any of the separator characters, in order and
// empty ones included ("a,,b" -> "a", "", "b"; "" -> one empty item), so
// that each flag can say in its own words what an empty item should be.
inline std::vector<std::string> split_list(std::string_view text, std::string_view seps = ",") {
    std::vector<std::string> out;
    for (size_t start = 0;;) {
        const size_t end = text.find_first_of(seps, start);
        out.emplace_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
        if (end == std::string_view::npos) return out;
        start = end + 1;
    }
}

}  // namespace toy
