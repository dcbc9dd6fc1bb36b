// ConnectionPool: cpp-httplib's task queue for toy serve. Each connection
// holds a thread while its request is read and answered, so a fixed pool is
// starved by clients that send a request slowly (slowloris) or never finish
// it: `min` threads always wait, and when all are busy a new one starts, up
// to `max` (a slow client then costs a sleeping thread, not the service);
// threads beyond `min` end after a few idle seconds. Beyond `max`
// connections wait their turn.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace toy::serve {

class ConnectionPool : public httplib::TaskQueue {
public:
    ConnectionPool(size_t min, size_t max, std::chrono::milliseconds idle = std::chrono::seconds(5));
    ~ConnectionPool() override;

    void enqueue(std::function<void()> fn) override;
    void shutdown() override;

    size_t threads() const;  // running now (for tests)

private:
    struct State;
    void start_worker();
    std::shared_ptr<State> st_;
};

}  // namespace toy::serve
