#include "core/memory.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace toy {

void advise_whole_blocks(const void *p, size_t n, size_t block, int advice) {
    const auto start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = (start + block - 1) / block * block;
    const uintptr_t hi = (start + n) / block * block;
    if (hi > lo) madvise(reinterpret_cast<void *>(lo), hi - lo, advice);
}

size_t peak_rss_bytes() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("VmHWM:", 0) == 0) return (size_t)std::stoull(line.substr(6)) * 1024;  // "VmHWM:  1234 kB"
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

}  // namespace toy
