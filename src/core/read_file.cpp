#include "core/read_file.h"

#include "core/error.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace toy {

namespace {

struct FileCloser {
    void operator()(std::FILE *f) const { std::fclose(f); }
};

// Appends what `in` gives to `out` until its end; false on a read error.
// When `bounded`, more than kMaxStreamBytes is an error naming `what` and
// `source`.
bool read_to_end(std::FILE *in, std::string &out, bool bounded, std::string_view what, std::string_view source) {
    char buf[1 << 16];
    for (;;) {
        const size_t n = std::fread(buf, 1, sizeof buf, in);
        if (bounded && n > kMaxStreamBytes - std::min(kMaxStreamBytes, out.size())) {
            fail("{}: {} gives more than {} GiB (a stream without end?); save the text to a file to read more", what,
                 source, kMaxStreamBytes >> 30);
        }
        out.append(buf, n);
        if (n < sizeof buf) return !std::ferror(in);
    }
}

}  // namespace

std::string read_whole_file(const std::string &path, std::string_view what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail("{}: '{}' is a directory, not a file", what, path);
    std::unique_ptr<std::FILE, FileCloser> in(std::fopen(path.c_str(), "rb"));
    if (!in) fail("{}: cannot read '{}'", what, path);
    // A regular file is read to its end (it may have grown since stat); a
    // pipe or device only up to the bound.
    const bool regular = S_ISREG(st.st_mode);
    std::string out;
    if (regular) out.reserve((size_t)st.st_size);
    if (!read_to_end(in.get(), out, !regular, what, "'" + path + "'")) fail("{}: '{}' could not be read", what, path);
    return out;
}

std::string read_whole_stdin(std::string_view what) {
    std::string out;
    if (!read_to_end(stdin, out, true, what, "standard input")) {
        fail("{}: standard input could not be read", what);
    }
    return out;
}

bool read_line(std::FILE *in, std::string &line, std::string_view what) {
    line.clear();
    errno = 0;
    int c;
    ::flockfile(in);
    struct Unlock {
        std::FILE *f;
        ~Unlock() { ::funlockfile(f); }
    } unlock{in};
    while ((c = ::getc_unlocked(in)) != EOF) {
        if (c == '\n') break;
        if (line.size() >= kMaxLineBytes) {
            fail("{}: a line of more than {} MiB (an input without line ends?)", what, kMaxLineBytes >> 20);
        }
        line.push_back((char)c);
    }
    if (c == EOF && (line.empty() || std::ferror(in))) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
}

}  // namespace toy
