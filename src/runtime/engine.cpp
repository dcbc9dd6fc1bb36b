#include "runtime/engine.h"

#include "core/error.h"
#include "core/parallel.h"
#include "core/remote_wait.h"

#include <algorithm>

namespace toy {

static_assert(kMaxThreads == GGML_MAX_N_THREADS, "-t's bound is ggml's thread pool's size");

Engine::Engine(int n_threads, std::span<const ggml_backend_dev_t> devices) {
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
    for (ggml_backend_dev_t d : devices) {
        RemoteWait wait("starting a backend");
        ggml_backend_t b = ggml_backend_dev_init(d, nullptr);
        if (!b) {
            const std::string name = ggml_backend_dev_name(d);
            release();
            fail("could not start a backend on {}", name);
        }
        offload_.push_back(b);
    }
}

Engine::~Engine() { release(); }

void Engine::release() {
    RemoteWait wait("closing the backends");
    for (ggml_backend_t b : offload_) ggml_backend_free(b);
    offload_.clear();
    ggml_backend_free(backend_);
    backend_ = nullptr;
    ggml_threadpool_free(threadpool_);
    threadpool_ = nullptr;
}

ggml_backend_sched_t Engine::make_scheduler(size_t graph_size, OpOffload offload) const {
    std::vector<ggml_backend_t> all = offload_;
    all.push_back(backend_);  // ggml's scheduler takes the last backend for the CPU
    ggml_backend_sched_t s = ggml_backend_sched_new(all.data(), nullptr, (int)all.size(), graph_size, false,
                                                    offload == OpOffload::Allowed);
    if (!s) fail("could not create a graph scheduler");
    return s;
}

void Engine::place_ops(ggml_backend_sched_t sched, ggml_cgraph *gf) const {
    if (offload_.empty()) return;
    // the backend of the offload device whose memory holds w, or null
    auto backend_of = [&](const ggml_tensor *w) -> ggml_backend_t {
        if (!w->buffer || ggml_backend_buffer_get_usage(w->buffer) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS) return nullptr;
        ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(w->buffer));
        for (ggml_backend_t b : offload_)
            if (ggml_backend_get_device(b) == dev) return b;
        return nullptr;
    };
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor *t = ggml_graph_node(gf, i);
        if (t->op == GGML_OP_CUSTOM) ggml_backend_sched_set_tensor_backend(sched, t, backend_);
        if (t->op != GGML_OP_MUL || !t->src[0] || !t->src[1]) continue;
        ggml_tensor *norm = t->src[0];
        if (norm->op != GGML_OP_RMS_NORM && norm->op != GGML_OP_NORM) continue;
        if (ggml_backend_t b = backend_of(t->src[1])) ggml_backend_sched_set_tensor_backend(sched, norm, b);
    }
}

}  // namespace toy
