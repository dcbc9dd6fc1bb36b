// Splitting a model's blocks between the CPU and other ggml devices (GPUs,
// RPC servers), with llama.cpp's flags: -ngl puts the last N blocks on the
// offload devices (N > n_layer: the output norm and head too), shared out by
// --tensor-split or by the devices' free memory; --split-mode none puts them
// all on --main-gpu; --device picks the offload devices by name. The token
// embedding (a row lookup) always stays on the CPU, as in llama.cpp.
//
// The weights of a block then live in its device's memory (model.cpp), its K
// and V too (runtime/kv_cache.cpp), and ggml's scheduler runs each op where
// its weights are, moving activations between devices (runtime/engine.cpp).
#pragma once

#include <ggml-backend.h>

#include <string>
#include <vector>

namespace toy {

enum class SplitMode { None, Layer };

struct SplitOptions {
    // Blocks to offload, counted from the last; kAllLayers: every block and
    // the output head when an offload device exists, none otherwise (the
    // CLI's default). The library's default keeps everything on the CPU.
    static constexpr int kAllLayers = -1;
    int n_gpu_layers = 0;
    SplitMode mode = SplitMode::Layer;
    std::vector<float> tensor_split;   // a proportion per offload device; empty: by free memory
    int main_gpu = 0;                  // split mode none: the offload device (an index into them) that takes all
    std::vector<std::string> devices;  // offload devices by ggml name; empty: every GPU and RPC device

    // The values that make sense whatever the devices (proportions finite and
    // >= 0, not all 0; a device index >= 0); throws toy::Error naming the flag.
    void check() const;
};

struct LayerSplit {
    std::vector<ggml_backend_dev_t> devices;  // the offload devices that hold something, in order
    std::vector<ggml_backend_dev_t> layer;    // per block: its device, nullptr for the CPU
    ggml_backend_dev_t output = nullptr;      // the output norm and head (nullptr: the CPU)

    bool offloads() const { return !devices.empty(); }
    // Where a tensor lives: block `layer`'s device (layer >= 0), the head's
    // (output norm and projection), or the CPU (nullptr: the embedding,
    // positions, rope factors; everything when nothing is split).
    ggml_backend_dev_t device_of(int layer, bool head) const {
        if (layer >= 0) return layer < (int)this->layer.size() ? this->layer[(size_t)layer] : nullptr;
        return head ? output : nullptr;
    }
    // "blocks 0-3: CPU; blocks 4-7: RPC0[...]; output: CPU"
    std::string describe() const;
};

// The devices layers can be offloaded to: every non-CPU device ggml knows
// (GPUs, and RPC servers once added), in ggml's order.
std::vector<ggml_backend_dev_t> offload_devices();

// Where each of n_layer blocks goes. Throws toy::Error naming the flag for an
// unknown device, -ngl > 0 with nothing to offload to, a --tensor-split with
// more entries than devices or no positive one, a --main-gpu out of range.
LayerSplit plan_split(const SplitOptions &o, int n_layer);

// Whether `o` puts anything on an offload device (whatever the model's
// depth); throws as plan_split does.
bool asks_offload(const SplitOptions &o);

}  // namespace toy
