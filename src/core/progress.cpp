#include "core/progress.h"

#include <unistd.h>

#include <algorithm>

namespace toy {
namespace {

struct Settings {
    bool quiet = false;
    FILE *out = stderr;
    bool terminal = isatty(STDERR_FILENO) != 0;
    std::chrono::milliseconds after{1000};
};

Settings &settings() {
    static Settings s;
    return s;
}

std::string amount(uint64_t n, uint64_t total) {
    if (total < (1u << 20)) return std::to_string(n) + "/" + std::to_string(total);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f/%.1f MiB", n / 1048576.0, total / 1048576.0);
    return buf;
}

}  // namespace

void Progress::set_quiet(bool quiet) { settings().quiet = quiet; }

void Progress::set_output(FILE *out, bool terminal, std::chrono::milliseconds after) {
    settings().out = out;
    settings().terminal = terminal;
    settings().after = after;
}

Progress::Progress(std::string what, uint64_t total)
    : what_(std::move(what)), total_(std::max<uint64_t>(total, 1)), start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
    if (drawn_ && done_ < total_) draw(true);  // cut short: end the line
}

void Progress::update(uint64_t done) {
    done_ = std::min(done, total_);
    const Settings &s = settings();
    if (s.quiet) return;
    const auto now = std::chrono::steady_clock::now();
    if (!drawn_ && now - start_ < s.after) return;
    if (s.terminal) {
        // redraw at most ten times a second, and at the end
        if (done_ < total_ && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
        last_draw_ = now;
        draw(done_ == total_);
    } else {
        const int quarter = (int)(4 * done_ / total_);
        if (quarter == last_quarter_ && drawn_) return;
        last_quarter_ = quarter;
        draw(done_ == total_);
    }
}

void Progress::draw(bool final) {
    const Settings &s = settings();
    const int pct = (int)(100 * done_ / total_);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s.terminal) {
        constexpr int kWidth = 30;
        const int fill = (int)(kWidth * done_ / total_);
        std::fprintf(s.out, "\rtoy: %s [%s%s] %3d%% %s %.1fs%s", what_.c_str(), std::string(fill, '#').c_str(),
                     std::string(kWidth - fill, ' ').c_str(), pct, amount(done_, total_).c_str(), secs,
                     final ? "\n" : "");
    } else {
        std::fprintf(s.out, "toy: %s: %d%% (%s, %.1fs)\n", what_.c_str(), pct, amount(done_, total_).c_str(), secs);
    }
    std::fflush(s.out);
    drawn_ = !final;
}

}  // namespace toy
