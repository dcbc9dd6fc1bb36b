// Progress on stderr: plain lines at each quarter when not a terminal, a bar
// redrawn in place on one, nothing under --quiet or for quick work.
#include "core/progress.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

std::string captured(bool terminal, std::chrono::milliseconds after, bool quiet, uint64_t total, int steps) {
    FILE *f = std::tmpfile();
    toy::Progress::set_output(f, terminal, after);
    toy::Progress::set_quiet(quiet);
    {
        toy::Progress p("writing x.gguf", total);
        for (int i = 0; i < steps; ++i) p.add(total / steps);
    }
    toy::Progress::set_output(stderr, false, std::chrono::milliseconds(1000));
    toy::Progress::set_quiet(false);
    std::string out(4096, '\0');
    std::rewind(f);
    out.resize(std::fread(out.data(), 1, out.size(), f));
    std::fclose(f);
    return out;
}

}  // namespace

TEST(Progress, PlainLinesAtEachQuarterWhenNotATerminal) {
    const std::string out = captured(false, std::chrono::milliseconds(0), false, 100, 100);
    EXPECT_EQ(out.find('\r'), std::string::npos);
    for (const char *pct : {": 1%", ": 25%", ": 50%", ": 75%", ": 100%"}) {
        EXPECT_NE(out.find(std::string("toy: writing x.gguf") + pct), std::string::npos) << pct << "\n" << out;
    }
    int lines = 0;
    for (char c : out) lines += c == '\n';
    EXPECT_LE(lines, 5) << out;
}

TEST(Progress, ABarRedrawnInPlaceOnATerminal) {
    const std::string out = captured(true, std::chrono::milliseconds(0), false, 1 << 22, 4);
    EXPECT_NE(out.find("\rtoy: writing x.gguf ["), std::string::npos) << out;
    EXPECT_NE(out.find("100%"), std::string::npos) << out;
    EXPECT_NE(out.find("4.0/4.0 MiB"), std::string::npos) << out;
    EXPECT_EQ(out.back(), '\n');  // the line ends when the work does
}

TEST(Progress, NothingWhenQuietOrQuick) {
    EXPECT_EQ(captured(false, std::chrono::milliseconds(0), true, 100, 10), "");
    EXPECT_EQ(captured(true, std::chrono::milliseconds(60000), false, 100, 10), "");
}

TEST(Progress, QuietIsAFlagOfEveryCommand) {
    toy::test::TempDir dir;
    const auto r = toy::test::run_toy("init --arch llama -o " + dir.file("m.gguf") + " --quiet");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("writing"), std::string::npos) << r.err;
}
