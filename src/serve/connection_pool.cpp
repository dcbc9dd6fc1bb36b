#include "serve/connection_pool.h"

#include <algorithm>
#include <thread>

namespace toy::serve {

// Shared with the workers (which are detached: an idle one ends on its own).
struct ConnectionPool::State {
    std::mutex mu;
    std::condition_variable work, gone;
    std::deque<std::function<void()>> queue;
    size_t min = 1, max = 1;
    std::chrono::milliseconds idle{5000};
    size_t running = 0, waiting = 0;
    bool stop = false;
};

ConnectionPool::ConnectionPool(size_t min, size_t max, std::chrono::milliseconds idle) : st_(std::make_shared<State>()) {
    st_->min = std::max<size_t>(1, min);
    st_->max = std::max(st_->min, max);
    st_->idle = idle;
    std::lock_guard lock(st_->mu);
    for (size_t i = 0; i < st_->min; ++i) start_worker();
}

ConnectionPool::~ConnectionPool() { shutdown(); }

// Called with the lock held.
void ConnectionPool::start_worker() {
    st_->running++;
    std::thread([st = st_] {
        std::unique_lock lock(st->mu);
        for (;;) {
            st->waiting++;
            const bool woke = st->work.wait_for(lock, st->idle, [&] { return st->stop || !st->queue.empty(); });
            st->waiting--;
            if (st->queue.empty() && (st->stop || (!woke && st->running > st->min))) break;
            if (st->queue.empty()) continue;
            std::function<void()> fn = std::move(st->queue.front());
            st->queue.pop_front();
            lock.unlock();
            fn();
            lock.lock();
        }
        st->running--;
        st->gone.notify_all();
    }).detach();
}

void ConnectionPool::enqueue(std::function<void()> fn) {
    std::lock_guard lock(st_->mu);
    st_->queue.push_back(std::move(fn));
    if (st_->waiting < st_->queue.size() && st_->running < st_->max) start_worker();
    st_->work.notify_one();
}

void ConnectionPool::shutdown() {
    std::unique_lock lock(st_->mu);
    st_->stop = true;
    st_->work.notify_all();
    st_->gone.wait(lock, [&] { return st_->running == 0; });
}

size_t ConnectionPool::threads() const {
    std::lock_guard lock(st_->mu);
    return st_->running;
}

}  // namespace toy::serve
