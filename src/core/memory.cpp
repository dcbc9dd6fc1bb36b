#include "core/memory.h"

#include <sys/mman.h>

#include <cstdint>

namespace toy {

void advise_whole_blocks(const void *p, size_t n, size_t block, int advice) {
    const auto start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = (start + block - 1) / block * block;
    const uintptr_t hi = (start + n) / block * block;
    if (hi > lo) madvise(reinterpret_cast<void *>(lo), hi - lo, advice);
}

}  // namespace toy
