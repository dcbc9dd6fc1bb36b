// FNV-1a, 64 bits: a fast, stable (same on every platform and build) hash of
// bytes, for identities stored in files (checkpoints' data hashes, pack cache
// keys) and seeds derived from names. Not for anything an adversary chooses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace toy {

constexpr uint64_t kFnv1aStart = 0xCBF29CE484222325ull;

// Continues the hash h over n bytes at p (start with kFnv1aStart). (A name
// of its own: an overload would take fnv1a("text", h) as p and n.)
inline uint64_t fnv1a_bytes(const void *p, size_t n, uint64_t h = kFnv1aStart) {
    const auto *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aStart) { return fnv1a_bytes(s.data(), s.size(), h); }

}  // namespace toy
