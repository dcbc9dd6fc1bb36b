// GGUF writing: metadata and tensors of any ggml type, streamed to disk so a
// model larger than memory can be written, and atomic: the bytes go to a
// temporary file next to the target, which is fsync'd and renamed over it.
#pragma once

#include "gguf/gguf_reader.h"

#include <functional>

namespace toy::gguf {

class Writer {
public:
    // Produces a tensor's bytes into `out` (exactly nbytes). Called once,
    // in order, while the file is written.
    using Fill = std::function<void(uint8_t *out, uint64_t nbytes)>;

    explicit Writer(uint64_t alignment = 32) : alignment_(alignment) {}

    // Metadata in insertion order; setting a key again replaces its value.
    void set(const std::string &key, Value v);
    // Copies every key of `src` except those for which `skip(key)` is true
    // and a split model's split.no, split.count and split.tensors.count.
    void copy_metadata(const File &src, const std::function<bool(const std::string &)> &skip = {});

    // A tensor from memory the caller keeps alive until write() returns.
    void add_tensor(const std::string &name, ggml_type type, std::array<int64_t, 4> ne, int n_dims,
                    const void *data);
    // A tensor whose bytes are produced on demand (streaming).
    void add_tensor(const std::string &name, ggml_type type, std::array<int64_t, 4> ne, int n_dims,
                    Fill fill);

    size_t n_tensors() const { return tensors_.size(); }
    // Writes the file atomically; throws toy::Error. Returns the bytes written
    // (the size of the file, or what went to a device such as /dev/null).
    uint64_t write(const std::string &path) const;

private:
    struct Pending {
        TensorInfo info;
        Fill fill;
    };
    uint64_t alignment_;
    std::vector<KeyValue> kv_;
    std::vector<Pending> tensors_;
};

// `src`'s tensors, in order, as a split model in llama.cpp's gguf-split
// layout: file i (paths[i]) holds the next per_file[i] tensors (the last file
// all that are left) and split.no, split.count and split.tensors.count; the
// first file also holds src's other metadata. `edit(i, w)`, when given, may
// change file i's writer before it is written. Each file is written
// atomically, in order.
void write_split(const File &src, const std::vector<std::string> &paths, const std::vector<size_t> &per_file,
                 const std::function<void(size_t, Writer &)> &edit = {});

}  // namespace toy::gguf
