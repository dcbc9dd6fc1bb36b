// A small work-sharing loop for the file writers (quantize, convert, init,
// load's packing) and perplexity's per-row work: indices handed out one at a
// time to up to n_threads threads, the caller's included; the first exception
// a body throws stops the rest and is rethrown.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace toy {

// The most threads a -t flag may ask for: ggml's GGML_MAX_N_THREADS, the
// most its CPU thread pool is built for (-t 100000 crashed inside it; the
// two are held equal where toy starts one, runtime/engine.cpp).
constexpr int kMaxThreads = 512;

// n_threads, or every hardware thread when n_threads <= 0 (toy's -t 0).
// Throws toy::Error naming -t for more than kMaxThreads.
int thread_count(int n_threads);

// Runs body(i) for i in [0, n) on up to thread_count(n_threads) threads (the caller's included).
void parallel_for(int64_t n, int n_threads, const std::function<void(int64_t)> &body);

// The lowest of the indices a parallel_for's bodies report, so that an error
// several of them find names the same one whatever order the threads ran in.
class LowestIndex {
public:
    void report(int64_t i) {
        int64_t seen = lowest_.load();
        while (i < seen && !lowest_.compare_exchange_weak(seen, i)) {
        }
    }
    bool any() const { return lowest_.load() != kNone; }
    int64_t get() const { return lowest_.load(); }

private:
    static constexpr int64_t kNone = INT64_MAX;
    std::atomic<int64_t> lowest_{kNone};
};

}  // namespace toy
