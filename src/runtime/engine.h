// Engine: the compute side a process shares between everything it runs — a
// backend and one persistent thread pool — so that inference sessions and the
// trainer never start threads per graph or fight over cores with a pool each.
// Graphs are scheduled with ggml's scheduler (make_scheduler), which also
// carries the trace callback. A model split across devices (model/split.h)
// adds a backend per offload device; the scheduler runs each op where its
// weights are and moves activations between them.
#pragma once

#include <ggml-backend.h>
#include <ggml-cpu.h>

#include <cstddef>
#include <span>
#include <vector>

namespace toy {

class Engine {
public:
    // n_threads 0: all hardware threads. `devices`: offload devices (a split
    // model's LayerSplit::devices) to start a backend on each.
    explicit Engine(int n_threads = 0, std::span<const ggml_backend_dev_t> devices = {});
    ~Engine();
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;

    // The CPU backend and its buffer type (graph inputs live there).
    ggml_backend_t backend() const { return backend_; }
    ggml_backend_buffer_type_t buffer_type() const { return ggml_backend_get_default_buffer_type(backend_); }
    bool offloads() const { return !offload_.empty(); }
    int n_threads() const { return n_threads_; }

    // Whether ggml's scheduler may move an op whose weight is in CPU memory
    // to an offload device that asks for it (a GPU takes matrix products of
    // 32 tokens or more, copying the weight over: prompts on a partly
    // offloaded model), or must run every op where its weights are.
    enum class OpOffload { Allowed, Off };
    // A scheduler over this engine's backends (offload devices first, the CPU
    // last) for graphs of up to graph_size nodes.
    ggml_backend_sched_t make_scheduler(size_t graph_size, OpOffload offload = OpOffload::Allowed) const;
    // Places what ggml's scheduler would place badly, before the graph is
    // allocated: toy's custom ops (host functions a remote or GPU backend
    // cannot run) on the CPU; and a norm whose result is scaled by an
    // offloaded weight on that weight's device, with it — left alone, the
    // scheduler runs a block's first norm on the previous block's device and
    // sends both its result and the residual across.
    void place_ops(ggml_backend_sched_t sched, ggml_cgraph *gf) const;

private:
    void release();  // frees the backends and the pool (the destructor, or a failed constructor)

    ggml_backend_t backend_ = nullptr;
    ggml_threadpool_t threadpool_ = nullptr;
    std::vector<ggml_backend_t> offload_;
    int n_threads_ = 0;
};

}  // namespace toy
