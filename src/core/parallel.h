// A small work-sharing loop for the file writers (quantize, convert, init):
// indices handed out one at a time to up to n_threads threads, the caller's
// included; the first exception a body throws stops the rest and is rethrown.
#pragma once

#include <cstdint>
#include <functional>

namespace toy {

// Runs body(i) for i in [0, n) on up to n_threads threads (the caller's included).
void parallel_for(int64_t n, int n_threads, const std::function<void(int64_t)> &body);

}  // namespace toy
