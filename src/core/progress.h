// Progress of long work on stderr: a bar redrawn in place on a terminal,
// plain lines at each quarter otherwise, nothing under --quiet. Nothing is
// shown for work that ends within `after` (a second by default), so quick
// commands stay silent.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace toy {

class Progress {
public:
    // `total` units of work (bytes, tensors, windows); `what` names it.
    Progress(std::string what, uint64_t total);
    ~Progress();  // ends the bar's line, when one was drawn
    Progress(const Progress &) = delete;
    Progress &operator=(const Progress &) = delete;

    void add(uint64_t units) { update(done_ + units); }
    void update(uint64_t done);

    // Process-wide settings: --quiet, and (for tests) the stream, whether it
    // counts as a terminal and the delay before anything is shown.
    static void set_quiet(bool quiet);
    static void set_output(FILE *out, bool terminal, std::chrono::milliseconds after);

private:
    void draw(bool final);

    std::string what_;
    uint64_t total_, done_ = 0;
    std::chrono::steady_clock::time_point start_, last_draw_{};
    int last_quarter_ = 0;
    bool drawn_ = false;
};

}  // namespace toy
