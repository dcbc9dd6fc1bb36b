// Trace taps: statistics of named activations while a graph computes (the
// original engine's diagnostic). Installed as the scheduler's eval callback
// only when tracing is on, so it costs nothing otherwise.
#pragma once

#include <ggml-backend.h>

#include <cstdio>
#include <string_view>

namespace toy {

struct TraceState {
    FILE *out = nullptr;
    int graph = 0;
};

// True for the activation names a trace reports (llama-eval-callback's names).
bool is_traced_name(std::string_view name);

// ggml_backend_sched_eval_callback; user_data is a TraceState*.
bool trace_callback(ggml_tensor *t, bool ask, void *user_data);

}  // namespace toy
