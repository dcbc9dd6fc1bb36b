#include "core/remote_wait.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace toy {
namespace {

using Clock = std::chrono::steady_clock;

struct Wait {
    Clock::time_point since;
    const char *doing;
};

// The waits under way (by id: the oldest first) and the watchdog thread that
// looks at the oldest. Never destroyed: a wait may end during static
// destruction (a model freed at exit tells its servers).
struct Watchdog {
    std::mutex mu;
    std::condition_variable changed;
    std::map<unsigned long, Wait> waits;
    unsigned long next_id = 1;
    std::chrono::milliseconds limit{0};
    std::string servers;
    bool started = false;

    void run() {
        std::unique_lock<std::mutex> lock(mu);
        for (;;) {
            if (limit.count() == 0 || waits.empty()) {
                changed.wait(lock);
                continue;
            }
            const Wait oldest = waits.begin()->second;
            const Clock::time_point deadline = oldest.since + limit;
            if (Clock::now() < deadline) {
                changed.wait_until(lock, deadline);
                continue;
            }
            const bool several = servers.find(',') != std::string::npos;
            std::fflush(stdout);
            std::fprintf(stderr,
                         "toy: error: no answer from RPC server%s %s for %g s while %s (a stopped, overloaded or unreachable "
                         "server; --rpc-timeout sets the limit)\n",
                         several ? "s" : "", servers.c_str(), limit.count() / 1000.0, oldest.doing);
            std::fflush(stderr);
            std::_Exit(1);
        }
    }
};

Watchdog &watchdog() {
    static auto *w = new Watchdog;
    return *w;
}

}  // namespace

void set_remote_wait_limit(std::chrono::milliseconds limit, const std::string &servers) {
    Watchdog &w = watchdog();
    std::lock_guard<std::mutex> lock(w.mu);
    w.limit = limit;
    w.servers = servers;
    if (!w.started && limit.count() > 0) {
        std::thread([&w] { w.run(); }).detach();
        w.started = true;
    }
    w.changed.notify_all();
}

RemoteWait::RemoteWait(const char *doing) {
    Watchdog &w = watchdog();
    std::lock_guard<std::mutex> lock(w.mu);
    if (w.limit.count() == 0) return;
    id_ = w.next_id++;
    const bool first = w.waits.empty();
    w.waits.emplace(id_, Wait{Clock::now(), doing});
    if (first) w.changed.notify_all();
}

RemoteWait::~RemoteWait() {
    if (id_ == 0) return;
    Watchdog &w = watchdog();
    std::lock_guard<std::mutex> lock(w.mu);
    w.waits.erase(id_);
}

}  // namespace toy
