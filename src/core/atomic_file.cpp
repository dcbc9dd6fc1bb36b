#include "core/atomic_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <vector>

namespace toy {
namespace {

constexpr size_t kChunk = 1 << 20;  // bytes per write(2) call

// The process umask, read without changing it (umask(2) is racy in threaded code).
mode_t current_umask() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("Umask:", 0) == 0) return (mode_t)std::stoul(line.substr(6), nullptr, 8);
    }
    return 022;
}

// The temporary files being written, for the signal handler (fixed slots:
// only async-signal-safe work happens there).
constexpr int kSlots = 16;
char g_paths[kSlots][4096];
std::atomic<bool> g_used[kSlots];

extern "C" void remove_temporaries_and_die(int sig) {
    for (int i = 0; i < kSlots; ++i) {
        if (g_used[i].load()) unlink(g_paths[i]);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

// Installs the handler for SIGINT and SIGTERM where their disposition is the
// default (a command with its own handler, such as training's Ctrl-C
// checkpoint, keeps it and finishes or abandons its writes itself).
void install_handlers() {
    static std::atomic<bool> done{false};
    if (done.exchange(true)) return;
    for (int sig : {SIGINT, SIGTERM}) {
        struct sigaction old {};
        if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
        struct sigaction sa {};
        sa.sa_handler = remove_temporaries_and_die;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, nullptr);
    }
}

int claim_slot(const std::string &path) {
    if (path.size() >= sizeof g_paths[0]) return -1;
    static std::mutex mu;
    std::lock_guard lock(mu);
    for (int i = 0; i < kSlots; ++i) {
        if (g_used[i].load()) continue;
        std::memcpy(g_paths[i], path.c_str(), path.size() + 1);  // the path first, then "in use"
        g_used[i].store(true);
        return i;
    }
    return -1;  // more than kSlots writes at once: this one is only removed by its destructor
}

// The directory a file is in ("." for a bare name).
std::filesystem::path dir_of(const std::string &file) {
    const std::filesystem::path parent = std::filesystem::path(file).parent_path();
    return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

void check_writable(const std::string &target) {
    AtomicFile probe(target);  // not committed: its temporary file goes again
}

void make_directories(const std::string &dir, std::string_view flag) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail("{} {}: cannot create the directory: {}", flag, dir, ec.message());
}

void remove_stale_temporaries(const std::string &dir, const std::function<bool(std::string_view target)> &owns) {
    std::error_code ec;
    for (const auto &e : std::filesystem::directory_iterator(dir, ec)) {
        // <target>.tmp.<pid>.XXXXXX
        const std::string name = e.path().filename().string();
        const size_t tmp = name.rfind(".tmp.");
        if (tmp == std::string::npos || tmp == 0) continue;
        const std::string rest = name.substr(tmp + 5);
        const size_t dot = rest.find('.');
        if (dot == std::string::npos || dot == 0 || rest.find_first_not_of("0123456789") != dot || rest.size() - dot != 7) continue;
        if (!owns(std::string_view(name).substr(0, tmp))) continue;
        // a number no process can have (past pid_t, or 0) is not a writer's: leave the file alone
        int64_t number = 0;
        if (std::from_chars(rest.data(), rest.data() + dot, number).ec != std::errc() || number <= 0 ||
            number > std::numeric_limits<pid_t>::max()) {
            continue;
        }
        const pid_t pid = (pid_t)number;
        if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
        std::filesystem::remove(e.path(), ec);
    }
}

AtomicFile::AtomicFile(const std::string &target) : target_(target), real_(target) {
    struct stat st {};
    if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
            fail("{}: cannot write here: it is {}, not a file", target,
                 S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ? "a block device" : "a socket");
        }
        fd_ = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd_ < 0) fail("{}: cannot open: {}", target, std::strerror(errno));
        stream_ = true;
        return;
    }
    // through a link (even a chain of them) to the file it names
    std::error_code ec;
    if (std::filesystem::is_symlink(target, ec)) {
        const std::filesystem::path real = std::filesystem::weakly_canonical(target, ec);
        if (!ec) real_ = real.string();
    }
    install_handlers();
    std::string templ = real_ + ".tmp." + std::to_string(getpid()) + ".XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    fd_ = mkstemp(buf.data());
    if (fd_ < 0) fail("{}: cannot create a temporary file next to it: {}", target, std::strerror(errno));
    path_ = buf.data();
    slot_ = claim_slot(path_);
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
    if (slot_ >= 0) g_used[slot_].store(false);
}

void AtomicFile::write(const void *data, uint64_t n) {
    const auto *p = static_cast<const uint8_t *>(data);
    while (n > 0) {
        const size_t want = (size_t)std::min<uint64_t>(n, kChunk);
        const ssize_t got = ::write(fd_, p, want);
        if (got < 0) {
            if (errno == EINTR) continue;
            fail("{}: write failed: {}", target_, std::strerror(errno));
        }
        p += got;
        n -= (uint64_t)got;
        written_ += (uint64_t)got;
    }
}

void AtomicFile::pad_to(uint64_t alignment) {
    static const uint8_t zeros[256] = {};
    uint64_t n = (written_ + alignment - 1) / alignment * alignment - written_;
    while (n > 0) {
        const uint64_t k = std::min<uint64_t>(n, sizeof zeros);
        write(zeros, k);
        n -= k;
    }
}

void AtomicFile::commit() {
    if (stream_) {
        const int fd = fd_;
        fd_ = -1;
        if (::close(fd) != 0) fail("{}: close failed: {}", target_, std::strerror(errno));
        return;
    }
    struct stat st {};
    mode_t mode = 0666 & ~current_umask();
    if (::stat(real_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode & 07777;
    if (fchmod(fd_, mode) != 0) fail("{}: cannot set permissions: {}", target_, std::strerror(errno));
    if (fsync(fd_) != 0) fail("{}: fsync failed: {}", target_, std::strerror(errno));
    if (::close(fd_) != 0) {
        fd_ = -1;
        fail("{}: close failed: {}", target_, std::strerror(errno));
    }
    fd_ = -1;
    if (std::rename(path_.c_str(), real_.c_str()) != 0) {
        fail("{}: cannot rename the temporary file into place: {}", target_, std::strerror(errno));
    }
    path_.clear();
    if (slot_ >= 0) g_used[slot_].store(false);
    slot_ = -1;
    const std::string name = std::filesystem::path(real_).filename().string();
    remove_stale_temporaries(dir_of(real_).string(), [&](std::string_view t) { return t == name; });
    // Make the rename itself durable.
    const int dfd = ::open(dir_of(real_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        ::close(dfd);
    }
}

void write_file_atomic(const std::string &path, std::string_view bytes) {
    AtomicFile f(path);
    f.write(bytes.data(), bytes.size());
    f.commit();
}

}  // namespace toy
