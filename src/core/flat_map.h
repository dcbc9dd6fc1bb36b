// U64Map: a map from 64-bit keys to int32 values, open addressing with
// linear probing in one flat array. For hot lookups of dense integer keys
// (the grammar's parse-stack nodes and transitions), where std::unordered_map
// spends its time following a bucket's chain through scattered nodes.
// The key ~0 (all bits set) is reserved; entries are never removed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace toy {

class U64Map {
public:
    static constexpr uint64_t kReserved = ~0ull;

    // The value stored at key, or nullptr.
    const int32_t *find(uint64_t key) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = home(key);; i = (i + 1) & mask()) {
            if (slots_[i].key == key) return &slots_[i].value;
            if (slots_[i].key == kReserved) return nullptr;
        }
    }

    // Inserts (key, value) unless key is present; returns the stored value
    // and whether it was inserted.
    std::pair<int32_t, bool> try_emplace(uint64_t key, int32_t value) {
        if ((size_ + 1) * 2 > slots_.size()) grow();
        for (size_t i = home(key);; i = (i + 1) & mask()) {
            Slot &s = slots_[i];
            if (s.key == key) return {s.value, false};
            if (s.key == kReserved) {
                s = {key, value};
                ++size_;
                return {value, true};
            }
        }
    }

    size_t size() const { return size_; }

private:
    struct Slot {
        uint64_t key = kReserved;
        int32_t value = 0;
    };
    std::vector<Slot> slots_;
    size_t size_ = 0;

    size_t mask() const { return slots_.size() - 1; }
    // murmur3's 64-bit finalizer: every key bit reaches the low (index) bits
    size_t home(uint64_t k) const {
        k ^= k >> 33;
        k *= 0xFF51AFD7ED558CCDull;
        k ^= k >> 33;
        return (size_t)k & mask();
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
        size_ = 0;
        for (const Slot &s : old)
            if (s.key != kReserved) try_emplace(s.key, s.value);
    }
};

}  // namespace toy
