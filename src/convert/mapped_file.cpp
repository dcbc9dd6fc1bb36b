#include "convert/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace toy::convert {

MappedFile::MappedFile(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open ({})", path, std::strerror(errno));
    struct stat sb{};
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path);
    }
    size_ = (uint64_t)sb.st_size;
    if (size_ > 0) {
        void *p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            fail("{}: cannot map ({})", path, std::strerror(err));
        }
        base_ = static_cast<const uint8_t *>(p);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (base_) munmap(const_cast<uint8_t *>(base_), size_);
}

}  // namespace toy::convert
