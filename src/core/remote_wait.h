// A limit on waits for other machines. ggml's RPC client waits for a
// server's answer without one: a server that stopped (a suspended process, a
// frozen machine, a network that drops packets but keeps the connection)
// would hang toy forever. Code that may wait on an RPC server holds a
// RemoteWait while it does; one held longer than the limit ends the process
// with one error line ("toy: error: no answer from RPC server ... for N s
// while ...") and exit code 1, as a server that died does (ggml aborts, and
// the CLI says so on one line). Temporary files of a write cut short are
// removed by the next write to the same target (core/atomic_file.h).
#pragma once

#include <chrono>
#include <string>

namespace toy {

// Enables the limit for the servers named (host:port, comma-separated, as
// the message will name them); 0 seconds: wait forever. Until it is called,
// RemoteWait does nothing. Process-wide; the last call wins.
void set_remote_wait_limit(std::chrono::milliseconds limit, const std::string &servers);

class RemoteWait {
public:
    // `doing` names the work in the message ("computing a batch"); a string
    // literal, or one that outlives the wait.
    explicit RemoteWait(const char *doing);
    ~RemoteWait();
    RemoteWait(const RemoteWait &) = delete;
    RemoteWait &operator=(const RemoteWait &) = delete;

private:
    unsigned long id_ = 0;  // 0: the limit was off when this wait began
};

}  // namespace toy
