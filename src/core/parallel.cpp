#include "core/parallel.h"

#include "core/error.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace toy {

int thread_count(int n_threads) {
    if (n_threads > kMaxThreads) fail("-t {}: expected at most {} threads (0: all cores)", n_threads, kMaxThreads);
    // (-1 is llama.cpp's spelling of all cores)
    if (n_threads < -1) fail("-t {}: expected a number of threads (0: all cores)", n_threads);
    return n_threads > 0 ? n_threads : std::clamp((int)std::thread::hardware_concurrency(), 1, kMaxThreads);
}

void parallel_for(int64_t n, int n_threads, const std::function<void(int64_t)> &body) {
    const int nt = (int)std::max<int64_t>(1, std::min<int64_t>(thread_count(n_threads), n));
    if (nt == 1) {
        for (int64_t i = 0; i < n; ++i) body(i);
        return;
    }
    std::atomic<int64_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto work = [&] {
        try {
            for (int64_t i; (i = next.fetch_add(1)) < n;) body(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex);
            if (!error) error = std::current_exception();
            next = n;
        }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < nt; ++t) threads.emplace_back(work);
    work();
    for (auto &t : threads) t.join();
    if (error) std::rethrow_exception(error);
}

}  // namespace toy
