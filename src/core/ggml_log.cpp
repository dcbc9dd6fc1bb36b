#include "core/ggml_log.h"

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace toy {
namespace {

ggml_log_level threshold_from_env() {
    const char *v = std::getenv("TOY_GGML_LOG");
    if (!v || !*v || std::strcmp(v, "warn") == 0) return GGML_LOG_LEVEL_WARN;
    if (std::strcmp(v, "debug") == 0) return GGML_LOG_LEVEL_DEBUG;
    if (std::strcmp(v, "info") == 0) return GGML_LOG_LEVEL_INFO;
    std::fprintf(stderr, "toy: warning: TOY_GGML_LOG=%s: expected info, debug or warn; using warn\n", v);
    return GGML_LOG_LEVEL_WARN;
}

std::mutex held_mutex;
std::string held;  // error text not printed yet

void print_held() {
    std::lock_guard<std::mutex> lock(held_mutex);
    std::fputs(held.c_str(), stderr);
    held.clear();
}

void log_to_stderr(ggml_log_level level, const char *text, void *user) {
    static ggml_log_level last = GGML_LOG_LEVEL_NONE;
    const auto threshold = *static_cast<const ggml_log_level *>(user);
    // CONT continues the previous message at its level
    const ggml_log_level effective = level == GGML_LOG_LEVEL_CONT ? last : level;
    if (level != GGML_LOG_LEVEL_CONT) last = level;
    if (effective == GGML_LOG_LEVEL_ERROR) {
        std::lock_guard<std::mutex> lock(held_mutex);
        held += text;
        return;
    }
    print_held();
    if (effective == GGML_LOG_LEVEL_NONE || effective >= threshold) std::fputs(text, stderr);
}

}  // namespace

std::string take_held_ggml_error() {
    std::lock_guard<std::mutex> lock(held_mutex);
    std::string s;
    for (char ch : held) s += ch == '\n' ? ' ' : ch;
    while (!s.empty() && s.back() == ' ') s.pop_back();
    held.clear();
    return s;
}

const std::string &backend_start_notes() {
    static const std::string notes = [] {
        route_ggml_logs();
        take_held_ggml_error();  // not ours: whatever came before
        ggml_backend_dev_count();
        return take_held_ggml_error();
    }();
    return notes;
}

void route_ggml_logs() {
    static std::once_flag once;
    static ggml_log_level threshold;
    std::call_once(once, [] {
        threshold = threshold_from_env();
        ggml_log_set(log_to_stderr, &threshold);
        std::atexit(print_held);
    });
}

}  // namespace toy
