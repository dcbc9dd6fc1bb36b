#pragma once

#include <string>

namespace toy {

// Routes ggml's log through toy's: warnings and errors go to stderr as ggml
// prints them; its info and debug chatter (one line per repacked tensor, ...)
// only when the environment sets TOY_GGML_LOG=info or TOY_GGML_LOG=debug.
// An error is held until the next message or the end of the process, so that
// when ggml aborts right after one (an RPC server gone: "send failed", then
// the abort) the CLI can say both on one line (take_held_ggml_error).
// Idempotent; Model::load calls it.
void route_ggml_logs();

// The error ggml logged last and nobody has printed yet (one line, without
// its newline), or "" — and it will not be printed.
std::string take_held_ggml_error();

// Starts ggml's backends (its device registry) once, with its log routed,
// and returns the errors they logged while starting, or "". A CUDA build on
// a machine without a GPU logs "ggml_cuda_init: failed to initialize CUDA:
// no CUDA-capable device is detected": held here instead of printed at exit
// of every command, and said where it matters (`toy devices`, an -ngl with
// nothing to offload to). The CLI calls it first thing.
const std::string &backend_start_notes();

}  // namespace toy
