#include "runtime/engine.h"

#include "core/error.h"
#include "core/parallel.h"

#include <algorithm>

namespace toy {

Engine::Engine(int n_threads) {
    n_threads_ = thread_count(n_threads);
    backend_ = ggml_backend_cpu_init();
    if (!backend_) fail("could not start the CPU backend");
    ggml_backend_cpu_set_n_threads(backend_, n_threads_);
    ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads_);
    threadpool_ = ggml_threadpool_new(&tpp);
    if (!threadpool_) {
        ggml_backend_free(backend_);
        fail("could not start a pool of {} threads", n_threads_);
    }
    ggml_backend_cpu_set_threadpool(backend_, threadpool_);
}

Engine::~Engine() {
    ggml_backend_free(backend_);
    ggml_threadpool_free(threadpool_);
}

ggml_backend_sched_t Engine::make_scheduler(size_t graph_size) const {
    ggml_backend_t b = backend_;
    ggml_backend_sched_t s = ggml_backend_sched_new(&b, nullptr, 1, graph_size, false, true);
    if (!s) fail("could not create a graph scheduler");
    return s;
}

}  // namespace toy
