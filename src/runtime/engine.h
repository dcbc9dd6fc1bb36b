// Engine: the compute side a process shares between everything it runs — a
// backend and one persistent thread pool — so that inference sessions and the
// trainer never start threads per graph or fight over cores with a pool each.
// Graphs are scheduled with ggml's scheduler (make_scheduler), which also
// carries the trace callback.
#pragma once

#include <ggml-backend.h>
#include <ggml-cpu.h>

#include <cstddef>

namespace toy {

class Engine {
public:
    // n_threads 0: all hardware threads.
    explicit Engine(int n_threads = 0);
    ~Engine();
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;

    ggml_backend_t backend() const { return backend_; }
    ggml_backend_buffer_type_t buffer_type() const { return ggml_backend_get_default_buffer_type(backend_); }
    int n_threads() const { return n_threads_; }

    // A scheduler over this engine's backend for graphs of up to graph_size nodes.
    ggml_backend_sched_t make_scheduler(size_t graph_size) const;

private:
    ggml_backend_t backend_ = nullptr;
    ggml_threadpool_t threadpool_ = nullptr;
    int n_threads_ = 0;
};

}  // namespace toy
