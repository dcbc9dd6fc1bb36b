// A whole file mapped read-only (MAP_PRIVATE), for the checkpoint readers:
// their tensors stay in the mapping until a converter reads them. An empty
// file maps to no bytes (data() is null); the caller says what it expected.
#pragma once

#include <cstdint>
#include <string>

namespace toy::convert {

class MappedFile {
public:
    explicit MappedFile(const std::string &path);  // throws toy::Error naming the file
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;

    const uint8_t *data() const { return base_; }
    uint64_t size() const { return size_; }

private:
    const uint8_t *base_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace toy::convert
