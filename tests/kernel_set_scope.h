// Runs a test body with one of toy's CPU kernel sets ("avx512", "avx2"),
// putting the process's set back after: the packed matmuls and the prompt
// flash attention follow it.
#pragma once

#include "graph/packed_matmul.h"

#include <string>

class KernelSetScope {
public:
    explicit KernelSetScope(const std::string &name) : before_(toy::graph::packed_kernels_name()) {
        ok_ = toy::graph::use_packed_kernels(name);
    }
    ~KernelSetScope() { toy::graph::use_packed_kernels(before_); }
    bool ok() const { return ok_; }

private:
    std::string before_;
    bool ok_ = false;
};
