#pragma once

#include <cstddef>

namespace toy {

// madvise(advice) for the whole `block`-sized, `block`-aligned pieces inside
// [p, p+n); nothing when there are none. `block` is a power of two: the page
// size, or 2 MiB for huge pages.
void advise_whole_blocks(const void *p, size_t n, size_t block, int advice);

// Seconds to fault in `n` bytes of a fresh anonymous mapping (2 MiB-aligned),
// advised into transparent huge pages or kept to 4 KiB pages; negative when
// the mapping fails. What the first touch of a copied weight will cost.
double fault_in_seconds(size_t n, bool huge);

// The process's peak resident set so far (VmHWM), in bytes.
size_t peak_rss_bytes();

// Memory the kernel says it could give without swapping (MemAvailable), in
// bytes; 0 when it does not say.
size_t available_memory_bytes();

}  // namespace toy
