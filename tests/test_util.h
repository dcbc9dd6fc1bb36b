// Helpers shared by the tests: fixture paths, reference files, comparisons.
#pragma once

#include "core/error.h"
#include "core/lists.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>

#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

namespace toy::test {

inline std::string shared_path(const std::string &rel) { return std::string(TOY_SHARED_DIR) + "/" + rel; }
inline std::string fixture_path(const std::string &name) { return shared_path("fixtures/" + name); }

inline nlohmann::json read_json(const std::string &path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
}

inline std::vector<float> read_f32(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    in.seekg(0, std::ios::end);
    const size_t n = (size_t)in.tellg() / sizeof(float);
    in.seekg(0);
    std::vector<float> v(n);
    in.read(reinterpret_cast<char *>(v.data()), (std::streamsize)(n * sizeof(float)));
    return v;
}

// "1,2,3" (or with another separator) from ids, for command lines and comparisons.
template <class Ints>
std::string join_ids(const Ints &ids, const char *sep = ",") {
    std::string out;
    for (auto id : ids) {
        if (!out.empty()) out.append(sep);
        out.append(std::to_string(id));
    }
    return out;
}

// The fixture README's metric: per row, max |got - ref| / (max(ref) - min(ref)).
struct RowStats {
    double d_max = 0;          // worst row
    double argmax_equal = 0;   // fraction of rows whose argmax agrees
};

inline int argmax(const float *x, size_t n) {
    size_t b = 0;
    for (size_t i = 1; i < n; ++i)
        if (x[i] > x[b]) b = i;
    return (int)b;
}

inline RowStats compare_rows(const std::vector<float> &got, const std::vector<float> &ref, size_t n_vocab) {
    RowStats s;
    const size_t rows = ref.size() / n_vocab;
    size_t agree = 0;
    for (size_t r = 0; r < rows; ++r) {
        const float *g = got.data() + r * n_vocab, *f = ref.data() + r * n_vocab;
        float lo = f[0], hi = f[0];
        double d = 0;
        for (size_t i = 0; i < n_vocab; ++i) {
            lo = std::min(lo, f[i]);
            hi = std::max(hi, f[i]);
            d = std::max(d, (double)std::abs(g[i] - f[i]));
        }
        s.d_max = std::max(s.d_max, d / std::max(1e-30, (double)(hi - lo)));
        agree += argmax(g, n_vocab) == argmax(f, n_vocab);
    }
    s.argmax_equal = rows ? (double)agree / rows : 1.0;
    return s;
}

// Quotes a string for a POSIX shell command line.
inline std::string shell_quote(const std::string &s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

struct CommandResult {
    int code = -1;    // exit code (-1 when killed by a signal)
    std::string out;  // stdout
    std::string err;  // stderr
};

// Runs a shell command line, capturing stdout and stderr separately.
inline CommandResult run_command(const std::string &cmd) {
    char err_path[] = "/tmp/toy-test-stderr-XXXXXX";
    const int fd = mkstemp(err_path);
    if (fd >= 0) close(fd);
    CommandResult r;
    FILE *p = popen((cmd + " 2>" + err_path).c_str(), "r");
    if (p) {
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
        const int status = pclose(p);
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::ifstream e(err_path, std::ios::binary);
    r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
    std::remove(err_path);
    return r;
}

// The message of the toy::Error that f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const Error &e) {
        return e.what();
    }
    return "";
}

// The toy executable the tests run: this build's, or $TOY_TEST_BIN when set
// (a CUDA build of toy driven by a CPU build of the tests on a machine with
// a GPU: bench/gpu-check.sh).
inline const char *toy_bin() {
    static const char *const bin = [] {
        const char *e = std::getenv("TOY_TEST_BIN");
        return e && *e ? e : TOY_BIN;
    }();
    return bin;
}

// Runs the toy executable under test with these arguments.
inline CommandResult run_toy(const std::string &args) { return run_command(shell_quote(toy_bin()) + " " + args); }

// Every .gguf in ../shared's fixtures, models and models/vocab, sorted.
inline std::vector<std::string> shared_gguf_files() {
    std::vector<std::string> out;
    for (const char *sub : {"fixtures", "models", "models/vocab"}) {
        const std::filesystem::path dir = std::filesystem::path(TOY_SHARED_DIR) / sub;
        if (!std::filesystem::is_directory(dir)) continue;
        for (const auto &e : std::filesystem::directory_iterator(dir)) {
            if (e.is_regular_file() && e.path().extension() == ".gguf") out.push_back(e.path().string());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

// The columns loss, val_loss and grad_norm of a toy train --log CSV, row by row.
inline std::vector<std::array<double, 3>> loss_columns(const std::string &csv) {
    std::ifstream in(csv);
    std::vector<std::array<double, 3>> rows;
    std::string line;
    std::getline(in, line);  // header: step,epoch,loss,val_loss,lr,grad_norm,...
    while (std::getline(in, line)) {
        const std::vector<std::string> f = toy::split_list(line);
        auto num = [](const std::string &v) { return v.empty() ? -1.0 : std::stod(v); };
        rows.push_back({num(f.at(2)), num(f.at(3)), num(f.at(5))});
    }
    return rows;
}

// A scratch directory removed at the end of the test.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        path = std::filesystem::temp_directory_path() /
               ("toy-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string file(const std::string &name) const { return (path / name).string(); }
    static int &counter() {
        static int c = 0;
        return c;
    }
};

// `toy logits -m MODEL --tokens IDS -o FILE FLAGS`: the logits it wrote, or
// none (and a test failure) when it failed; its stderr in *err.
inline std::vector<float> toy_logits(const std::string &model, const std::vector<int32_t> &tokens, const std::string &flags,
                                     std::string *err = nullptr) {
    TempDir dir;
    const std::string out = dir.file("logits.f32");
    const CommandResult r = run_toy("logits -m " + model + " --tokens " + join_ids(tokens) + " -o " + out + " " + flags);
    EXPECT_EQ(r.code, 0) << r.err;
    if (err) *err = r.err;
    return r.code == 0 ? read_f32(out) : std::vector<float>{};
}

}  // namespace toy::test
