// Helpers shared by the libFuzzer targets in fuzz/ (see fuzz/README.md).
//
// Every target follows one rule: a toy::Error is the expected answer to bad
// input and is caught; anything else (a crash, an ASan/UBSan report, another
// exception escaping, a hang, more than 2 GB) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace toy {
class Model;
namespace train {
class TrainableModel;
}
}  // namespace toy

namespace toy::fuzz {

// A file under ../shared (fixtures, models), or TOY_SHARED_DIR from the
// environment when set.
std::string shared_path(const std::string &rel);
// A file of the pinned llama.cpp tree (grammars/, models/templates/).
std::string llama_path(const std::string &rel);
std::string read_file(const std::string &path);
// A private directory for this process (created on first use, removed at exit).
const std::string &scratch_dir();

// One file in scratch_dir() whose contents each input replaces: the readers
// under test take paths (and some choose the format by the name's suffix).
class ScratchFile {
public:
    explicit ScratchFile(const std::string &name);
    const std::string &write(const uint8_t *data, size_t size);
    const std::string &write(std::string_view s) { return write((const uint8_t *)s.data(), s.size()); }
    const std::string &path() const { return path_; }

private:
    std::string path_;
};

// Reads an input from the front: a byte, then strings cut at a separator.
class Input {
public:
    Input(const uint8_t *data, size_t size) : p_((const char *)data), n_(size) {}
    uint8_t byte() { return n_ ? (--n_, (uint8_t)*p_++) : 0; }
    // Up to the next `sep` (consumed) or the end.
    std::string_view until(char sep);
    std::string_view rest() { std::string_view s(p_, n_); p_ += n_; n_ = 0; return s; }
    bool empty() const { return n_ == 0; }

private:
    const char *p_;
    size_t n_;
};

// A tiny random model of architecture `arch` (1 layer, n_embd 16, F32),
// written once per process under scratch_dir() with toy's own `init` code;
// the checkpoint and adapter targets load it as their base, make_seeds
// writes their seeds from it. Returns its path.
std::string tiny_model(const std::string &arch = "llama", bool f16 = false);
// The model at `model` as a split of two files (llama.cpp's gguf-split
// layout: the metadata and all but the last three tensors in `first`, those
// three in `second`, split.no / split.count / split.tensors.count in each).
void write_split_pair(const std::string &model, const std::string &first, const std::string &second);

// The trainable models whose checkpoints and adapters make_seeds writes and
// the checkpoint target loads into: 0 full fine-tune, 1 LoRA of rank 2 on
// every projection, 2 LoRA with per-head query adapters.
constexpr int kTrainableKinds = 3;
std::unique_ptr<train::TrainableModel> tiny_trainable(const Model &base, int kind);

// Silences ggml's log (toy routes it to stderr) so libFuzzer's output stays readable.
void quiet_ggml();

}  // namespace toy::fuzz
