// Atomic file writes: bytes go to `<target>.tmp.<pid>.XXXXXX` next to the
// target, which commit() fsyncs and renames over it (keeping an existing
// target's permissions). Until then the target is untouched; a write that
// fails or is abandoned (an exception, the object destroyed without commit)
// removes the temporary file, and so does SIGINT or SIGTERM when nothing else
// in the process handles them (the signal then ends the process as before).
// A temporary file left by a killed process (SIGKILL, a crash) is
// recognised by its name and dead pid and removed by the next commit to the
// same target (or by remove_stale_temporaries).
//
// A target that is a symbolic link stays one: the file it points to is
// replaced. A target that is a stream (a character device such as
// /dev/null or /dev/stdout's terminal, or a FIFO) cannot be replaced and is
// written as it is, each write and the close checked (so /dev/full fails);
// any other kind (a directory, a block device, a socket) is an error.
#pragma once

#include <cstdint>
#include <functional>
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
    std::string target_;  // as given (messages)
    std::string real_;    // the file replaced: target_ with its links resolved
    std::string path_;    // the temporary file ("" when written in place or committed)
    bool stream_ = false; // written in place (a device or FIFO)
    int fd_ = -1;
    int slot_ = -1;  // in the signal handler's list of temporaries
    uint64_t written_ = 0;
};

// Removes the temporary files in `dir` that processes no longer running left
// behind (`<target>.tmp.<pid>.XXXXXX`) for the targets `owns` accepts. Each
// commit does this for its own target; a writer of many names (checkpoints)
// calls it for all of them.
void remove_stale_temporaries(const std::string &dir, const std::function<bool(std::string_view target)> &owns);

// The whole file in one atomic write.
void write_file_atomic(const std::string &path, std::string_view bytes);

// Fails now as writing `target` would later (its directory missing or not
// writable, a directory in its place), leaving nothing behind: for commands
// that work for a long time before they write (training, an imatrix).
void check_writable(const std::string &target);

// Creates `dir` and its missing parents for what `flag` names; a one-line
// toy::Error when it cannot ("--checkpoint-dir x/y: cannot create the
// directory: Not a directory").
void make_directories(const std::string &dir, std::string_view flag);

}  // namespace toy
