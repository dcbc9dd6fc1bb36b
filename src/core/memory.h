#pragma once

#include <cstddef>
#include <vector>

namespace toy {

// madvise(advice) for the whole `block`-sized, `block`-aligned pieces inside
// [p, p+n); nothing when there are none. `block` is a power of two: the page
// size, or 2 MiB for huge pages.
void advise_whole_blocks(const void *p, size_t n, size_t block, int advice);

// Whether this is a VM whose virtio memory balloon reports free pages to the
// host (VIRTIO_BALLOON_F_REPORTING): freed blocks of 2 MiB and more go back,
// so fresh huge pages, made of exactly those, cost the host 512 page faults
// each on first touch.
bool free_pages_go_to_host();

// Seconds to fault in `n` bytes of a fresh anonymous mapping (2 MiB-aligned)
// for each entry of `huge`, in order: advised into transparent huge pages, or
// kept to 4 KiB pages; negative where the mapping fails. What the first touch
// of a copied weight will cost. Every mapping stays until all are timed, so
// none is made of pages another one just gave back (which a VM's host still
// backs: a 2 MiB page timed right after another was unmapped took 0.2 ms,
// one from memory handed back to the host 6 ms).
std::vector<double> fault_in_seconds(size_t n, const std::vector<bool> &huge);

// The process's peak resident set so far (VmHWM), in bytes.
size_t peak_rss_bytes();

// Memory the kernel says it could give without swapping (MemAvailable), in
// bytes; 0 when it does not say.
size_t available_memory_bytes();

}  // namespace toy
