#include "core/atomic_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
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

}  // namespace

AtomicFile::AtomicFile(const std::string &target) : target_(target) {
    std::string templ = target + ".tmp.XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    fd_ = mkstemp(buf.data());
    if (fd_ < 0) fail("{}: cannot create a temporary file next to it: {}", target, std::strerror(errno));
    path_ = buf.data();
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
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
    struct stat st {};
    mode_t mode = 0666 & ~current_umask();
    if (::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode & 07777;
    if (fchmod(fd_, mode) != 0) fail("{}: cannot set permissions: {}", target_, std::strerror(errno));
    if (fsync(fd_) != 0) fail("{}: fsync failed: {}", target_, std::strerror(errno));
    if (::close(fd_) != 0) {
        fd_ = -1;
        fail("{}: close failed: {}", target_, std::strerror(errno));
    }
    fd_ = -1;
    if (std::rename(path_.c_str(), target_.c_str()) != 0) {
        fail("{}: cannot rename the temporary file into place: {}", target_, std::strerror(errno));
    }
    path_.clear();
    // Make the rename itself durable.
    const std::filesystem::path parent = std::filesystem::path(target_).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
