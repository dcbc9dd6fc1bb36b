#pragma once

#include <cstddef>

namespace toy {

// madvise(advice) for the whole `block`-sized, `block`-aligned pieces inside
// [p, p+n); nothing when there are none. `block` is a power of two: the page
// size, or 2 MiB for huge pages.
void advise_whole_blocks(const void *p, size_t n, size_t block, int advice);

// The process's peak resident set so far (VmHWM), in bytes.
size_t peak_rss_bytes();

}  // namespace toy
