// Batch: the tokens one decode call evaluates, each with its position, the
// sequence it belongs to and whether its logits are wanted. Sequences are
// independent: a token attends only to cache cells of its own sequence.
#pragma once

#include <cstdint>
#include <vector>

namespace toy {

struct Batch {
    std::vector<int32_t> tokens;
    std::vector<int32_t> pos;
    std::vector<int32_t> seq;      // 0 .. KvCache::kMaxSeqs - 1
    std::vector<uint8_t> output;   // 1: keep this token's logits

    void add(int32_t token, int32_t position, int32_t sequence, bool logits) {
        tokens.push_back(token);
        pos.push_back(position);
        seq.push_back(sequence);
        output.push_back(logits ? 1 : 0);
    }
    int64_t size() const { return (int64_t)tokens.size(); }
    int64_t n_outputs() const {
        int64_t n = 0;
        for (uint8_t o : output) n += o;
        return n;
    }
};

}  // namespace toy
