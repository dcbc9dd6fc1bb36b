// Atomic file writes: bytes go to `<target>.tmp.XXXXXX` next to the target,
// which commit() fsyncs and renames over it (keeping an existing target's
// permissions). Until then the target is untouched; a write that fails or is
// abandoned (an exception, the object destroyed without commit) removes the
// temporary file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace toy {

class AtomicFile {
public:
    explicit AtomicFile(const std::string &target);  // throws toy::Error when no file can be created
    ~AtomicFile();
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile &operator=(const AtomicFile &) = delete;

    void write(const void *data, uint64_t n);
    // Zeros up to the next multiple of `alignment` bytes written.
    void pad_to(uint64_t alignment);
    uint64_t written() const { return written_; }
    // The bytes are durable under the target's name.
    void commit();

private:
    std::string target_, path_;
    int fd_ = -1;
    uint64_t written_ = 0;
};

// The whole file in one atomic write.
void write_file_atomic(const std::string &path, std::string_view bytes);

}  // namespace toy
