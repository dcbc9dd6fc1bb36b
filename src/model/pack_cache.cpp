#include "model/pack_cache.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "graph/packed_matmul.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace toy {
namespace {

// File layout: the magic, three little-endian uint64 (the key's length, the
// offset of the packed bytes, their length), the key, zeros up to the offset
// (a multiple of 64 KiB, so the bytes map on any page size), the bytes.
constexpr char kMagic[8] = {'T', 'O', 'Y', 'P', 'A', 'C', 'K', '1'};
constexpr uint64_t kHeaderBytes = sizeof kMagic + 3 * sizeof(uint64_t);
constexpr uint64_t kDataAlign = uint64_t(64) << 10;
// how every key starts: its second line is the model file's path
constexpr std::string_view kKeyLead = "toy packed weights\nmodel ";

struct Fd {
    int fd;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

// A cache file opened for reading, or -1 when it is missing or not a regular
// file: opening a FIFO named like a cache file waited for a writer forever.
int open_regular(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st {};
    if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        ::close(fd);
        return -1;
    }
    return fd;
}

bool read_exact(int fd, void *dst, size_t n, uint64_t at) {
    auto *p = static_cast<uint8_t *>(dst);
    while (n > 0) {
        const ssize_t got = ::pread(fd, p, std::min<size_t>(n, size_t(1) << 30), (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= (size_t)got;
        at += (uint64_t)got;
    }
    return true;
}

uint64_t data_offset_for(size_t key_bytes) { return (kHeaderBytes + key_bytes + kDataAlign - 1) / kDataAlign * kDataAlign; }

// A fingerprint of the packed layouts this build writes: small matrices of
// every type the packed kernels take, packed, hashed. Any change to a layout
// changes it, so a cache written by another build is never read as this one's.
// The matrices are bytes of a fixed pseudo-random sequence, not quantized
// values: the packers take any bytes (fuzz_gguf), and quantizing to the IQ2
// and IQ1 types would first build ggml's grid tables, 17 s of CPU time at
// every load with --pack-cache.
uint64_t packed_layout_fingerprint() {
    static const uint64_t fingerprint = [] {
        // several super-blocks of 256 per row and groups of 16 rows, so a
        // change to how blocks or groups follow each other shows too
        constexpr int64_t n_in = 1024, n_out = 48;
        uint64_t h = kFnv1aStart;
        const ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL,
                                   GGML_TYPE_F16,  GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q3_K, GGML_TYPE_Q2_K, GGML_TYPE_IQ3_S, GGML_TYPE_IQ3_XXS,
                                   GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M, GGML_TYPE_BF16};
        for (ggml_type type : types) {
            const int64_t ne[2] = {n_in, n_out};
            if (!graph::packed_matmul_supports(type, ne, 2)) continue;
            std::vector<uint8_t> src(ggml_row_size(type, n_in) * n_out);
            uint32_t x = 12345;
            for (uint8_t &b : src) b = (uint8_t)((x = x * 1664525u + 1013904223u) >> 24);
            std::vector<uint8_t> packed(graph::packed_size(type, n_in, n_out));
            graph::pack_matrix(type, src.data(), packed.data(), n_in, n_out);
            h = fnv1a(ggml_type_name(type), h);
            h = fnv1a_bytes(packed.data(), packed.size(), h);
        }
        return h;
    }();
    return fingerprint;
}

}  // namespace

PackCache::Mapping::~Mapping() { ::munmap(base_, length_); }

PackCache::PackCache(const std::string &dir, const std::vector<std::string> &model_paths, const std::vector<Tensor> &tensors,
                     size_t bytes)
    : dir_(dir), bytes_(bytes) {
    std::string where, files;  // the canonical paths; each file's path and identity
    for (const std::string &model_path : model_paths) {
        struct stat st {};
        if (::stat(model_path.c_str(), &st) != 0) fail("{}: cannot stat the model file: {}", model_path, std::strerror(errno));
        std::error_code ec;
        const std::string canonical = std::filesystem::canonical(model_path, ec).string(), path = ec ? model_path : canonical;
        where += (where.empty() ? "" : "\n") + path;
        files += fmt::format("{}\nfile size {} mtime {}.{:09} device {} inode {}\n", path, (uint64_t)st.st_size,
                             (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec, (uint64_t)st.st_dev, (uint64_t)st.st_ino);
    }
    std::string tensor_lines;
    for (const Tensor &t : tensors) {
        tensor_lines += fmt::format("{} {} {} {} {}\n", t.name, ggml_type_name(t.type), t.n_in, t.n_out, t.offset);
    }
    key_ = fmt::format("{}{}layouts {:016x}\nbytes {}\n{}", kKeyLead, files, packed_layout_fingerprint(), bytes, tensor_lines);
    // the name leaves out what changes when the model file is rewritten, so
    // a new version replaces the old entry
    const std::string stem = std::filesystem::path(model_paths.at(0)).stem().string();
    path_ = (std::filesystem::path(dir) / fmt::format("{}.{:016x}.toypack", stem, fnv1a(where + "\n" + tensor_lines))).string();
}

uint64_t PackCache::check(int fd) const {
    struct stat st {};
    uint8_t header[kHeaderBytes];
    if (::fstat(fd, &st) != 0 || !read_exact(fd, header, sizeof header, 0)) return 0;
    uint64_t fields[3];
    std::memcpy(fields, header + sizeof kMagic, sizeof fields);
    const uint64_t key_bytes = fields[0], data_offset = fields[1], data_bytes = fields[2];
    if (std::memcmp(header, kMagic, sizeof kMagic) != 0 || key_bytes != key_.size() ||
        data_offset != data_offset_for(key_bytes) || data_bytes != bytes_ || (uint64_t)st.st_size != data_offset + data_bytes) {
        return 0;
    }
    std::string key(key_bytes, '\0');
    if (!read_exact(fd, key.data(), key.size(), kHeaderBytes) || key != key_) return 0;
    return data_offset;
}

std::unique_ptr<PackCache::Mapping> PackCache::map(bool huge_pages) const {
    const Fd f(open_regular(path_));
    if (f.fd < 0) return nullptr;
    const uint64_t offset = check(f.fd);
    if (offset == 0) return nullptr;
    void *base = ::mmap(nullptr, offset + bytes_, PROT_READ, MAP_SHARED, f.fd, 0);
    if (base == MAP_FAILED) return nullptr;
    // pages the file reads into the page cache from here on come in 2 MiB
    // folios, mapped whole (decoding streams them as fast as the anonymous
    // huge pages of a packing load); then read ahead of decoding
    if (huge_pages) ::madvise(base, offset + bytes_, MADV_HUGEPAGE);
    ::madvise(static_cast<uint8_t *>(base) + offset, bytes_, MADV_WILLNEED);
    return std::make_unique<Mapping>(base, offset + bytes_, offset);
}

bool PackCache::read_into(void *dst) const {
    const Fd f(open_regular(path_));
    if (f.fd < 0) return false;
    const uint64_t offset = check(f.fd);
    return offset != 0 && read_exact(f.fd, dst, bytes_, offset);
}

void PackCache::store(const void *data) const {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) fail("--pack-cache: cannot create directory {}: {}", dir_, ec.message());
    // (AtomicFile writes a stream in place: a FIFO would wait for a reader)
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) fail("{} is not a regular file", path_);
    AtomicFile out(path_);
    const uint64_t fields[3] = {key_.size(), data_offset_for(key_.size()), bytes_};
    out.write(kMagic, sizeof kMagic);
    out.write(fields, sizeof fields);
    out.write(key_.data(), key_.size());
    out.pad_to(kDataAlign);
    out.write(data, bytes_);
    out.commit();
    // The page cache now holds the bytes as written, in small folios, which
    // a mapping maps 4 KiB at a time (decoding Llama-3.2-1B 5% slower than
    // from huge pages); dropped, the next load reads them back in 2 MiB ones
    // (map()). Written and synced, so this only frees memory.
    Fd f(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (f.fd >= 0) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
    remove_orphans();
}

void PackCache::remove_orphans() const {
    remove_stale_temporaries(dir_, [](std::string_view target) { return target.ends_with(".toypack"); });
    std::error_code ec;
    for (const auto &e : std::filesystem::directory_iterator(dir_, ec)) {
        if (e.path().extension() != ".toypack" || e.path() == path_) continue;
        const Fd f(open_regular(e.path().string()));
        char head[kHeaderBytes + 4096];
        const ssize_t n = f.fd < 0 ? -1 : ::pread(f.fd, head, sizeof head, 0);
        if (n < (ssize_t)kHeaderBytes || std::memcmp(head, kMagic, sizeof kMagic) != 0) continue;  // not one of ours
        const std::string_view key(head + kHeaderBytes, (size_t)n - kHeaderBytes);
        const size_t end = key.find('\n', kKeyLead.size());
        if (!key.starts_with(kKeyLead) || end == std::string_view::npos) continue;
        struct stat st {};
        const std::string model(key.substr(kKeyLead.size(), end - kKeyLead.size()));
        if (::stat(model.c_str(), &st) != 0 && errno == ENOENT) std::filesystem::remove(e.path(), ec);
    }
}

}  // namespace toy
