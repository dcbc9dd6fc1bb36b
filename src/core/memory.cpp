#include "core/memory.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace toy {

// a virtio balloon (device 5) with feature bit 5 set
bool free_pages_go_to_host() {
    std::error_code ec;
    for (const auto &dev : std::filesystem::directory_iterator("/sys/bus/virtio/devices", ec)) {
        std::ifstream id(dev.path() / "device"), features(dev.path() / "features");
        std::string device, bits;
        if (!(id >> device) || device != "0x0005" || !(features >> bits)) continue;
        if (bits.size() > 5 && bits[5] == '1') return true;
    }
    return false;
}

void advise_whole_blocks(const void *p, size_t n, size_t block, int advice) {
    const auto start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = (start + block - 1) / block * block;
    const uintptr_t hi = (start + n) / block * block;
    if (hi > lo) madvise(reinterpret_cast<void *>(lo), hi - lo, advice);
}

std::vector<double> fault_in_seconds(size_t n, const std::vector<bool> &huge) {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t bytes = n + kHuge;
    std::vector<void *> maps;
    std::vector<double> out;
    for (bool h : huge) {
        void *raw = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {
            out.push_back(-1.0);
            continue;
        }
        maps.push_back(raw);
        auto *p = reinterpret_cast<volatile uint8_t *>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) / kHuge * kHuge);
        madvise(const_cast<uint8_t *>(p), n, h ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        const auto t0 = std::chrono::steady_clock::now();
        for (size_t o = 0; o < n; o += 4096) p[o] = 1;
        out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    for (void *raw : maps) munmap(raw, bytes);
    return out;
}

namespace {
// A "Key:   1234 kB" line of a /proc file, in bytes; 0 when it has none.
size_t proc_kib_field(const char *path, std::string_view key) {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':') {
            return (size_t)std::stoull(line.substr(key.size() + 1)) * 1024;
        }
    }
    return 0;
}
}  // namespace

size_t peak_rss_bytes() {
    if (const size_t hwm = proc_kib_field("/proc/self/status", "VmHWM")) return hwm;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

size_t available_memory_bytes() { return proc_kib_field("/proc/meminfo", "MemAvailable"); }

}  // namespace toy
