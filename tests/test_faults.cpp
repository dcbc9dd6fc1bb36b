// Faults from outside (issue 14): a disk that fills while toy writes a model,
// an adapter, a checkpoint or a training log, and a server under slow and
// malformed clients. A full disk must leave the previous file intact, no
// temporary file behind, and one error line.
#include "test_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

namespace {

using toy::test::run_command;
using toy::test::shell_quote;
using toy::test::TempDir;

const std::string kStories = toy::test::shared_path("models/stories260K.gguf");

std::string stories(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "Once upon a time, a little dog found a ball. It played all day and was happy.\n<|endoftext|>\n";
    return s;
}

// The cases, as one shell script (run in a private mount namespace with a
// small tmpfs at $D, or with a file size limit). Each case prints
// "CASE <name> rc=<exit code> same=<previous file unchanged> tmp=<temporaries left>"
// and its stderr.
const char *kScript = R"SH(
set -u
MODE=$1; TOY=$2; M=$3; DATA=$4; D=$5; OUT=$6
LIMIT=
sum() { sha256sum "$1" 2>/dev/null | cut -c1-64; }
tmps() { find "$D" -name '*.tmp.*' | wc -l; }
# leave about $1 bytes: a file filling the tmpfs, or a file size limit
fill() {
  if [ "$MODE" = tmpfs ]; then
    rm -f "$D/fill"; avail=$(df --output=avail -B1 "$D" | tail -1); head -c $((avail - $1)) /dev/zero > "$D/fill" 2>/dev/null; true
  else
    LIMIT=$(( $1 / 1024 )); [ "$LIMIT" -ge 1 ] || LIMIT=1
  fi
}
unfill() { rm -f "$D/fill"; LIMIT=; }
limited() { if [ -n "$LIMIT" ]; then (ulimit -f "$LIMIT"; "$@"); else "$@"; fi; }
report() { echo "CASE $1 rc=$2 same=$3 tmp=$(tmps)"; sed 's/^/ERR /' "$OUT/err"; }
train() { limited "$TOY" train -m "$M" -f "$DATA" --lora-rank 4 -c 32 -b 64 -lr 1e-3 -t 1 -q "$@"; }

# a model: the one there stays when the new one does not fit
cp "$M" "$D/m.gguf"; before=$(sum "$D/m.gguf"); fill 65536
limited "$TOY" init --arch llama --n-embd 256 --n-layer 4 --n-head 4 --n-ff 512 --n-vocab 512 -o "$D/m.gguf" -q 2> "$OUT/err"; rc=$?
report model $rc $([ "$(sum "$D/m.gguf")" = "$before" ] && echo 1 || echo 0)

# an adapter: trained once, then again onto a full disk
unfill
train --steps 2 -o "$D/a.gguf" 2> "$OUT/err"; before=$(sum "$D/a.gguf"); fill 4096
train --steps 3 -s 7 -o "$D/a.gguf" 2> "$OUT/err"; rc=$?
report adapter $rc $([ -n "$before" ] && [ "$(sum "$D/a.gguf")" = "$before" ] && echo 1 || echo 0)

# a checkpoint: a run whose checkpoint does not fit stops with the error;
# the checkpoints of an earlier run in the directory stay as they were
unfill; rm -f "$D/a.gguf"
train --steps 2 -o "$OUT/a2.gguf" --checkpoint-dir "$D/ck" --checkpoint-every 1 2> "$OUT/err"
before=$(sum "$D/ck/checkpoint-000002.gguf"); size=$(stat -c %s "$D/ck/checkpoint-000002.gguf")
fill $((size / 2))
train --steps 2 -s 7 -o "$OUT/a3.gguf" --checkpoint-dir "$D/ck" --checkpoint-every 1 2> "$OUT/err"; rc=$?
report checkpoint $rc $([ -n "$before" ] && [ "$(sum "$D/ck/checkpoint-000002.gguf")" = "$before" ] && echo 1 || echo 0)

# the training log: an error, not rows silently lost
unfill; rm -rf "$D/ck"; fill 1024
train --steps 40 -o "$OUT/a4.gguf" --log "$D/log.csv" 2> "$OUT/err"; rc=$?
report log $rc 1
)SH";

struct Case {
    int rc = -1;
    bool same = false;
    int tmp = -1;
    std::string err;
};

std::map<std::string, Case> parse_cases(const std::string &out) {
    std::map<std::string, Case> cases;
    std::istringstream in(out);
    std::string line, current;
    const std::regex head(R"(CASE (\w+) rc=(\d+) same=(\d) tmp=\s*(\d+))");
    for (std::smatch m; std::getline(in, line);) {
        if (std::regex_match(line, m, head)) {
            current = m[1];
            cases[current] = {std::stoi(m[2]), m[3] == "1", std::stoi(m[4]), ""};
        } else if (line.rfind("ERR ", 0) == 0 && !current.empty()) {
            cases[current].err += line.substr(4) + "\n";
        }
    }
    return cases;
}

void expect_clean_failures(const std::map<std::string, Case> &cases, const std::string &cause) {
    for (const char *name : {"model", "adapter", "checkpoint", "log"}) {
        SCOPED_TRACE(name);
        auto it = cases.find(name);
        ASSERT_NE(it, cases.end());
        const Case &c = it->second;
        EXPECT_EQ(c.rc, 1) << c.err;
        EXPECT_TRUE(c.same) << "the previous file changed";
        EXPECT_EQ(c.tmp, 0) << "temporary files left behind";
        EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
        EXPECT_EQ(c.err.rfind("toy: error: ", 0), 0u) << c.err;
        EXPECT_NE(c.err.find(std::string(name) == "log" ? "writing the training log failed" : cause), std::string::npos) << c.err;
    }
}

}  // namespace

namespace {

// Runs the cases; `wrap` turns the script's command line into the one to run.
std::map<std::string, Case> run_cases(const std::string &mode, const std::function<std::string(const std::string &)> &wrap,
                                       TempDir &d) {
    std::ofstream(d.file("data.txt")) << stories(40);
    std::ofstream(d.file("cases.sh")) << kScript;
    std::filesystem::create_directories(d.file("disk"));
    std::filesystem::create_directories(d.file("out"));
    std::string cmd = "bash " + shell_quote(d.file("cases.sh")) + " " + mode;
    for (const std::string &a : {std::string(toy::test::toy_bin()), kStories, d.file("data.txt"), d.file("disk"), d.file("out")}) cmd += " " + shell_quote(a);
    const auto r = run_command(wrap(cmd));
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    return parse_cases(r.out);
}

}  // namespace

TEST(Faults, AFullDiskLeavesThePreviousFilesIntactWithOneErrorLine) {
    // a 4 MiB tmpfs of our own: a private mount namespace, as an unprivileged user
    const auto probe = run_command("unshare -rm true");
    if (probe.code != 0) GTEST_SKIP() << "no user namespaces here (unshare -rm: " << probe.err << "); see FileSizeLimit";
    TempDir d;
    auto cases = run_cases("tmpfs", [&](const std::string &cmd) {
        return "unshare -rm sh -c " + shell_quote("mount -t tmpfs -o size=4m tmpfs " + shell_quote(d.file("disk")) + " && " + cmd);
    }, d);
    expect_clean_failures(cases, "No space left on device");
}

TEST(Faults, AFileSizeLimitActsLikeAFullDisk) {
    // the same cases anywhere: writes past `ulimit -f` fail with EFBIG
    // (SIGXFSZ ignored), part way through a file, as on a disk that fills
    TempDir d;
    auto cases = run_cases("ulimit", [](const std::string &cmd) { return "trap '' XFSZ; " + cmd; }, d);
    expect_clean_failures(cases, "File too large");
}

// Outputs that are not plain files. The atomic write renamed its temporary
// file over whatever the path named: run as root, `-o /dev/null` (the suite
// itself does that) replaced the device with a regular file for every later
// process, and a symbolic link became a file. Streams are now written in
// place (each write checked: /dev/full is a full disk), links keep pointing
// where they did, and a directory is an error.
TEST(Faults, DevicesLinksAndDirectoriesAreNotReplaced) {
    namespace fs = std::filesystem;
    const std::string logits = "logits -m " + kStories + " --tokens 1,2 -o ";
    auto r = toy::test::run_toy(logits + "/dev/null");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
    r = toy::test::run_toy(logits + "/dev/full");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("toy: error: /dev/full: write failed: No space left on device"), std::string::npos) << r.err;
    EXPECT_TRUE(fs::is_character_file("/dev/full"));

    // every command that writes a model can write it to a device (the size
    // reported is what was written: a file size of /dev/null was
    // "internal: filesystem error", or 16 EiB)
    const std::string bin = toy::test::shared_path("models/stories260K.bin"), tok = toy::test::shared_path("models/tok512.bin");
    for (const std::string &cmd : {"quantize " + kStories + " /dev/null Q8_0", "export -m " + kStories + " -o /dev/null",
                                   "convert " + bin + " --tokenizer " + tok + " -o /dev/null",
                                   std::string("init --arch llama --n-layer 1 -o /dev/null")}) {
        SCOPED_TRACE(cmd);
        r = toy::test::run_toy(cmd);
        EXPECT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.err.find("toy: wrote /dev/null: "), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find(" GiB"), std::string::npos) << r.err;
        EXPECT_TRUE(fs::is_character_file("/dev/null"));
    }

    TempDir d;
    const std::string real = d.file("real.bin"), link = d.file("link.bin");
    std::ofstream(real) << "old";
    fs::create_symlink("real.bin", link);
    r = toy::test::run_toy(logits + link);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_EQ(fs::file_size(real), 2u * 512u * sizeof(float));

    r = toy::test::run_toy(logits + d.file(""));
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("it is a directory, not a file"), std::string::npos) << r.err;
    size_t left = 0;  // nothing but the two files
    for (const auto &e : fs::directory_iterator(d.file(""))) left += e.path().filename().string().find(".tmp.") != std::string::npos;
    EXPECT_EQ(left, 0u);
}

// Names shaped like toy's temporaries or checkpoints but with numbers no
// writer could have used: a pid past pid_t (or 0), a step past int64. Every
// write to the target then failed with "internal: stol" after writing it,
// and --resume with "internal: stoll".
TEST(Faults, TemporaryAndCheckpointNamesWithImpossibleNumbersAreLeftAlone) {
    namespace fs = std::filesystem;
    TempDir d;
    const std::string target = d.file("m.gguf");
    const std::string huge_pid = target + ".tmp.99999999999999999999.abcdef", pid0 = target + ".tmp.0.abcdef";
    std::ofstream(huge_pid) << "x";
    std::ofstream(pid0) << "x";
    auto r = toy::test::run_toy("logits -m " + kStories + " --tokens 1,2 -o " + shell_quote(target));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(target));
    EXPECT_TRUE(fs::exists(huge_pid) && fs::exists(pid0));  // not ours to remove

    const std::string ckpt = d.file("ckpt");
    fs::create_directory(ckpt);
    std::ofstream(ckpt + "/checkpoint-99999999999999999999999.gguf") << "x";
    r = toy::test::run_toy("train --resume " + shell_quote(ckpt));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err.find("internal"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("toy: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}
