#pragma once

namespace toy {

// Routes ggml's log through toy's: warnings and errors go to stderr as ggml
// prints them; its info and debug chatter (one line per repacked tensor, ...)
// only when the environment sets TOY_GGML_LOG=info or TOY_GGML_LOG=debug.
// Idempotent; Model::load calls it.
void route_ggml_logs();

}  // namespace toy
