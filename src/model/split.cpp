#include "model/split.h"

#include "core/error.h"
#include "core/ggml_log.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace toy {
namespace {

std::string device_names(const std::vector<ggml_backend_dev_t> &devs) {
    std::string s;
    for (ggml_backend_dev_t d : devs) s += (s.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(d));
    return s.empty() ? "none" : s;
}

// The offload devices --device names (all of them when it names none).
std::vector<ggml_backend_dev_t> chosen_devices(const std::vector<std::string> &names) {
    const std::vector<ggml_backend_dev_t> avail = offload_devices();
    if (names.empty()) return avail;
    if (names.size() == 1 && names[0] == "none") return {};
    std::vector<ggml_backend_dev_t> out;
    for (const std::string &n : names) {
        auto it = std::find_if(avail.begin(), avail.end(), [&](ggml_backend_dev_t d) { return n == ggml_backend_dev_name(d); });
        if (it == avail.end()) {
            fail("--device {}: no such offload device (available: {}; `toy devices` lists them, --rpc adds servers)", n,
                 device_names(avail));
        }
        if (std::find(out.begin(), out.end(), *it) != out.end()) fail("--device: {} is named twice", n);
        out.push_back(*it);
    }
    return out;
}

// How much of the offloaded blocks each device takes.
std::vector<double> shares(const SplitOptions &o, const std::vector<ggml_backend_dev_t> &devs) {
    o.check();
    std::vector<double> w(devs.size(), 0.0);
    if (o.mode == SplitMode::None) {
        if (o.main_gpu < 0 || o.main_gpu >= (int)devs.size()) {
            fail("--main-gpu {}: expected 0 to {} (the offload devices: {})", o.main_gpu, devs.size() - 1, device_names(devs));
        }
        w[(size_t)o.main_gpu] = 1.0;
        return w;
    }
    if (!o.tensor_split.empty()) {
        if (o.tensor_split.size() > devs.size()) {
            fail("--tensor-split: {} proportions for {} offload device{} ({})", o.tensor_split.size(), devs.size(),
                 devs.size() == 1 ? "" : "s", device_names(devs));
        }
        std::copy(o.tensor_split.begin(), o.tensor_split.end(), w.begin());
        return w;
    }
    // as llama.cpp: by free memory, so a larger device takes more blocks
    for (size_t i = 0; i < devs.size(); ++i) {
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(devs[i], &free, &total);
        w[i] = (double)free;
    }
    if (std::accumulate(w.begin(), w.end(), 0.0) <= 0.0) std::fill(w.begin(), w.end(), 1.0);
    return w;
}

}  // namespace

void SplitOptions::check() const {
    for (const float v : tensor_split) {
        if (!(v >= 0.0f) || !std::isfinite(v)) fail("--tensor-split: expected proportions >= 0, found {}", v);
    }
    if (!tensor_split.empty() && std::accumulate(tensor_split.begin(), tensor_split.end(), 0.0) <= 0.0) {
        fail("--tensor-split: every proportion is 0");
    }
    if (main_gpu < 0) fail("--main-gpu: expected an offload device's index >= 0, found {}", main_gpu);
}

std::vector<ggml_backend_dev_t> offload_devices() {
    std::vector<ggml_backend_dev_t> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(d) != GGML_BACKEND_DEVICE_TYPE_CPU) out.push_back(d);
    }
    return out;
}

LayerSplit plan_split(const SplitOptions &o, int n_layer) {
    LayerSplit s;
    s.layer.assign((size_t)n_layer, nullptr);
    if (o.n_gpu_layers < SplitOptions::kAllLayers) {
        fail("-ngl: expected a number of layers >= 0 (-1: all), found {}", o.n_gpu_layers);
    }
    const std::vector<ggml_backend_dev_t> devs = chosen_devices(o.devices);
    const int ngl = o.n_gpu_layers == SplitOptions::kAllLayers ? (devs.empty() ? 0 : n_layer + 1) : o.n_gpu_layers;
    if (ngl > 0 && devs.empty()) {
        const std::string &why = backend_start_notes();  // a CUDA build without a GPU says so
        fail("-ngl {}: no GPU or RPC device to offload layers to ({}{}; `toy devices` lists them, --rpc adds servers)", ngl,
             o.devices.empty() ? "this toy sees none" : "--device none", why.empty() ? "" : ": " + why);
    }
    if (ngl == 0) return s;
    const std::vector<double> w = shares(o, devs);
    const double total = std::accumulate(w.begin(), w.end(), 0.0);

    // the last n_off blocks, in runs: device d takes its share of them
    const int n_off = std::min(ngl, n_layer), first = n_layer - n_off;
    const size_t last = (size_t)(std::find_if(w.rbegin(), w.rend(), [](double v) { return v > 0; }).base() - w.begin()) - 1;
    double cum = 0;
    int at = first;
    for (size_t d = 0; d <= last; ++d) {
        cum += w[d];
        const int end = d == last ? n_layer : first + (int)std::lround(cum / total * n_off);
        for (; at < end; ++at) s.layer[(size_t)at] = devs[d];
    }
    if (ngl > n_layer) s.output = devs[last];
    for (ggml_backend_dev_t d : devs) {
        const bool used = d == s.output || std::find(s.layer.begin(), s.layer.end(), d) != s.layer.end();
        if (used) s.devices.push_back(d);
    }
    return s;
}

bool asks_offload(const SplitOptions &o) { return plan_split(o, 1).offloads(); }

std::string LayerSplit::describe() const {
    auto name = [](ggml_backend_dev_t d) { return d ? std::string(ggml_backend_dev_name(d)) : std::string("CPU"); };
    std::string s;
    for (size_t i = 0; i < layer.size();) {
        size_t j = i;
        while (j + 1 < layer.size() && layer[j + 1] == layer[i]) ++j;
        s += fmt::format("{}{} {}: {}", s.empty() ? "" : "; ", i == j ? "block" : "blocks",
                         i == j ? std::to_string(i) : fmt::format("{}-{}", i, j), name(layer[i]));
        i = j + 1;
    }
    return s + "; output: " + name(output);
}

}  // namespace toy
