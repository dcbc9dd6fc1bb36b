// StringSet: many strings searched for at once in a stream of bytes
// (Aho-Corasick). A state is how much of the strings the bytes read so far
// end in; reading a byte is amortized constant time whatever the number and
// length of the strings, and building the set is linear in their bytes.
// Requests bring these strings (stop strings, DRY's sequence breakers): a
// megabyte of them must not cost a search per string per token.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace toy::text {

class StringSet {
public:
    using State = uint32_t;
    static constexpr State kStart = 0;  // nothing of any string read

    // Empty strings are left out (they would match everywhere).
    explicit StringSet(const std::vector<std::string> &strings);

    State next(State s, unsigned char c) const {
        for (; s != kStart; s = fail_[s]) {
            if (auto it = edges_.find(key(s, c)); it != edges_.end()) return it->second;
        }
        return root_[c];
    }
    // Bytes of the longest tail of what was read that begins one of the strings.
    size_t depth(State s) const { return nodes_[s].depth; }
    // Calls f(index, length) for each string that ends where s was reached,
    // longest first (the index of the first of equal strings).
    template <class F>
    void for_each_ended(State s, F f) const {
        for (State at = nodes_[s].index >= 0 ? s : nodes_[s].shorter; at != kStart; at = nodes_[at].shorter)
            f(nodes_[at].index, (size_t)nodes_[at].depth);
    }
    // Whether the text holds one of the strings.
    bool found_in(std::string_view text) const;

private:
    static uint64_t key(State s, unsigned char c) { return (uint64_t)s << 8 | c; }

    struct Node {
        uint32_t depth = 0;
        State parent = kStart;
        unsigned char byte = 0;  // the byte that led here from the parent
        int32_t index = -1;      // the string that ends here
        State shorter = kStart;  // the nearest state on the fallback chain where a string ends
    };
    std::vector<Node> nodes_;
    std::vector<State> fail_;                  // the longest proper tail of a state's text that is a state too
    std::array<State, 256> root_{};            // the start's children (kStart: none): most bytes are read there
    std::unordered_map<uint64_t, State> edges_;  // (state, byte) -> child, below the start
};

}  // namespace toy::text
