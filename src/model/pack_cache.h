// PackCache: a model's matrices in toy's packed layouts (graph/packed_matmul.h),
// kept in a file between runs (LoadOptions::pack_cache_dir, --pack-cache DIR).
//
// Packing copies each matrix into fresh memory at every load: the load's
// largest cost, more so on VMs that hand free memory back to their host
// (every fresh page faulted in from the host again; Llama-3.2-1B Q4_K_M took
// 2.2-2.5 s to answer one token there after a few idle seconds, 0.9 s right
// after another run). With a cache the first load packs as before and writes
// the packed bytes to DIR; later loads map that file read-only, as llama.cpp
// maps a model: nothing is packed or copied, the pages come from the page
// cache, and processes running the same model share them.
//
// A cache file serves only the load it was made for: its header holds a
// description of the model file (canonical path, size, modification time,
// device and inode; each file of a split model), of every packed tensor (name, type, shape, offset) and a
// fingerprint of the packed layouts themselves (small matrices of each type
// packed by this build), and a load uses the file only when that description
// is byte for byte its own and the file has exactly the expected size.
// Anything else (a missing, stale, truncated or foreign file) is a miss: the
// load packs and replaces the file (atomically, core/atomic_file.h). The file
// name is a hash of the model's path and its packed tensors, so a model
// edited in place replaces its own entry rather than adding one; other load
// options (--weight-type, --no-fuse) get files of their own, and an entry
// whose model file is gone is removed by the next write to DIR. The packed bytes
// themselves are trusted like the model file: keep DIR private.
#pragma once

#include <ggml.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace toy {

class PackCache {
public:
    struct Tensor {
        std::string name;
        ggml_type type;
        int64_t n_in, n_out;
        size_t offset;  // in the packed buffer
    };
    // A read-only mapping of a cache file's packed bytes.
    class Mapping {
    public:
        Mapping(void *base, size_t length, size_t data_offset) : base_(base), length_(length), data_offset_(data_offset) {}
        ~Mapping();
        Mapping(const Mapping &) = delete;
        Mapping &operator=(const Mapping &) = delete;
        const void *data() const { return static_cast<const uint8_t *>(base_) + data_offset_; }

    private:
        void *base_;
        size_t length_, data_offset_;
    };

    // The entry for these packed tensors (`bytes` in all) of the model in
    // the files at `model_paths` (one, or a split model's), in directory
    // `dir`; throws toy::Error when a model file cannot be described (stat).
    PackCache(const std::string &dir, const std::vector<std::string> &model_paths, const std::vector<Tensor> &tensors, size_t bytes);

    const std::string &path() const { return path_; }
    // The packed bytes mapped, or null on a miss; with huge_pages, the page
    // cache reads them in 2 MiB folios where the kernel can.
    std::unique_ptr<Mapping> map(bool huge_pages) const;
    // The packed bytes read into dst (`bytes` of them); false on a miss.
    bool read_into(void *dst) const;
    // Writes the packed bytes at data as this entry (creating DIR if needed),
    // atomically; throws toy::Error when that fails. Then removes the
    // entries in DIR whose model file no longer exists, and temporary files
    // that killed writers left there.
    void store(const void *data) const;

private:
    // The file's header checked against this entry: the offset of its packed
    // bytes, or 0 when the file is not this entry's (fd open on it).
    uint64_t check(int fd) const;
    void remove_orphans() const;

    std::string dir_, path_, key_;
    size_t bytes_;
};

}  // namespace toy
