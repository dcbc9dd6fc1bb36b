// Model: a GGUF file opened, its Config read, and its tensors bound for ggml.
//
// By default weights are zero-copy: ggml tensors point into the read-only
// mapping of the file. A tensor is copied into a backend buffer instead when
// it must be transformed: per-head checkpoints assembled, Q|K|V fused into
// one matrix, F32/F16 requantized to Q8_0, or rows repacked
// for a faster CPU kernel; where huge pages are on (LoadOptions::huge_pages),
// the other matrices are copied as they are onto them (decoding streams
// them faster), unless repack is off or they would take more than half the
// available memory; with use_mmap = false, every tensor is copied.
// The mapping's pages of copied tensors are released after the copy.
#pragma once

#include "gguf/gguf_reader.h"
#include "model/config.h"
#include "model/pack_cache.h"
#include "model/split.h"
#include "model/weights.h"

#include <ggml-backend.h>
#include <ggml.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace toy {

enum class HugePages { Auto, On, Off };

struct LoadOptions {
    bool use_mmap = true;
    // GGML_TYPE_COUNT keeps every tensor's file type; GGML_TYPE_Q8_0 or
    // GGML_TYPE_BF16 converts F32/F16 linear weights (norms, biases,
    // embeddings stay). BF16 trades F16's 3 more mantissa bits for the
    // bfloat16 dot product (twice the multiply-adds per instruction on
    // AVX512_BF16 CPUs): faster prompts, results no longer ggml's F16 ones.
    ggml_type weight_type = GGML_TYPE_COUNT;
    // Store matrices in the layouts of the CPU backend's extra kernels (AMX
    // tiles, interleaved repacked rows) where one takes their type and shape,
    // preferring them in the backend's order, as llama.cpp does. Those tensors
    // are copied out of the mapping.
    bool repack = true;
    // One matmul for Q|K|V where the parts share a type: fewer, larger matrix
    // products per layer (same results, row by row). Gate and up likewise
    // in a block on an offload device (a GPU decodes at the speed of its
    // kernel launches) and on the CPU where toy's packed kernel takes them,
    // not into ggml's AMX buffer, whose prompt kernel ran 5-16% slower on
    // the wide result (BENCHMARKS.md).
    bool fuse = true;
    // Transparent huge pages for the copied weights (advise_huge_pages in
    // model.cpp): decoding streams every weight each token and 2 MiB pages
    // let the hardware prefetchers run on (+7-9% tg on F16 and K-quant
    // models). Auto asks for them unless the machine is a VM that hands free
    // memory back to its host and a probe finds fresh 2 MiB pages faulting in
    // slower than 4 KiB ones: there they come from memory the host must fault
    // in again (loading took 0.7-1.7 s longer on one such VM; on another,
    // huge pages faulted in faster and decoding gained 4-20%).
    HugePages huge_pages = HugePages::Auto;
    // How many tokens the caller means to decode (toy run -n, toy logits), -1 for
    // unknown or unbounded. On a VM that hands free memory back to its host,
    // auto keeps 4 KiB pages for a run of fewer than kShortRunTokens: there
    // huge pages cost more at load than they save (Llama-3.2-1B Q4_K_M on
    // an AMX Xeon VM: a load of 1.4-1.7 s against 0.5-0.6 s, which their
    // faster decoding, 32 against 24 t/s, wins back only after 80-105
    // tokens; BENCHMARKS.md), and takes huge pages without the probe for a
    // run of kLongRunTokens or more. kServingTokens: a server's, always long.
    int64_t decode_tokens = -1;
    // A directory that keeps the matrices packed for toy's kernels between
    // loads (model/pack_cache.h): empty for none. The first load packs and
    // writes a file there; later loads of the same model with the same
    // options map it (use_mmap) or read it, and pack nothing.
    std::string pack_cache_dir;
    // The memory the load may count on for copies, in bytes: huge-page
    // copies of mapped matrices and the packed layouts much larger than
    // their types' (the IQ types below IQ4_XS) each need all their bytes within half
    // of it. 0: what the kernel says is available (MemAvailable) at load.
    size_t available_memory = 0;
    // Blocks on other devices (GPUs, RPC servers): copied into their memory,
    // never repacked. The default keeps everything on the CPU.
    SplitOptions split;
    // Read every tensor of the file back as floats before anything else and
    // refuse one that holds a NaN or an infinity (llama.cpp's
    // --check-tensors): a pass over the whole file.
    bool check_tensors = false;
};

// Throws toy::Error naming the first tensor of `f` (in file order) and its
// row that holds a non-finite value, read back as floats on n_threads
// threads; tensors of integer types and F64 are skipped.
void check_tensor_values(const gguf::File &f, int n_threads = 0);

// A run that decodes fewer tokens than this is short (LoadOptions::decode_tokens).
constexpr int64_t kShortRunTokens = 64;
// A run that decodes at least this many is long: auto takes huge pages
// whatever the probe says. The probe answers for the load alone, and on the
// one kind of VM where it has answered no (the AMX Xeon's, differently from
// one process to the next) the slower load (0.3-1.1 s more for Llama-3.2-1B
// Q4_K_M) was won back by the faster decoding (33-34 against 23-24 t/s)
// after 25-105 tokens; where loads ran slowest on huge pages (5.6-6.9 ms per
// 2 MiB on the Zen 3 VM) the probe had answered yes all the same.
constexpr int64_t kLongRunTokens = 256;
// LoadOptions::decode_tokens of a process that loads once and then decodes
// for as long as it runs (toy serve): auto takes huge pages without the
// probe. Their load cost is paid once, and decoding on them was never slower:
// on the Zen 4 VM it reached that machine's faster bandwidth level (55 GB/s,
// decoding at 44-46) only on huge pages; on 4 KiB pages it stayed at the
// slower one (about 32; BENCHMARKS.md).
constexpr int64_t kServingTokens = INT64_MAX;

// Whether huge pages are asked for on this machine: by `mode`, and for
// auto, for a run that decodes `decode_tokens` (-1: unknown).
bool want_huge_pages(HugePages mode, int64_t decode_tokens = -1);

class Model {
public:
    static std::unique_ptr<Model> load(const std::string &path, const LoadOptions &opts = {});
    ~Model();
    Model(const Model &) = delete;
    Model &operator=(const Model &) = delete;

    const Config &config() const { return cfg_; }
    const Weights &weights() const { return w_; }
    const gguf::File &file() const { return *file_; }
    const std::string &path() const { return file_->path(); }

    // Any weight of the file, by GGUF name, as float32 on the host, with the
    // values the engine computes with (dequantized; requantized when asked).
    std::vector<float> read_weight(const std::string &name, std::array<int64_t, 4> *ne = nullptr) const;
    // The same weight's bytes in the type the model holds it in (*type).
    std::vector<uint8_t> read_weight_bytes(const std::string &name, ggml_type *type) const;
    bool has_weight(const std::string &name) const;
    // The shape of a weight (ggml order) by GGUF name; throws when absent.
    std::array<int64_t, 4> weight_shape(const std::string &name) const;
    // The type a weight has in the file (for a per-head one, its heads' type).
    ggml_type file_type(const std::string &name) const;
    // The tensors the graph uses (fused ones under their own names, e.g.
    // blk.0.attn_qkv.weight), for byte accounting.
    std::vector<const ggml_tensor *> bound_tensors() const;

    size_t weight_bytes() const;      // bytes of all bound weights
    size_t copied_bytes() const;      // of which copied into backend buffers
    size_t repacked_bytes() const;    // of which stored in AMX / repack / toy's packed layouts
    // Bytes of weights per buffer, by ggml's buffer name ("CPU_Mapped" for
    // tensors used in place in the file mapping, "AMX", "CPU_REPACK",
    // "TOY_PACKED" (graph/packed_matmul.h), "CPU" for plain copies, an
    // offload device's name such as "RPC0[host:port]"); a tied output
    // projection's own copy counts too.
    std::vector<std::pair<std::string, size_t>> placement() const;
    bool per_head_checkpoint() const { return per_head_; }
    // Whether the packed matrices came from LoadOptions::pack_cache_dir.
    bool packed_from_cache() const { return packed_cached_; }
    // Which device holds each block and the output head (LoadOptions::split).
    const LayerSplit &split() const { return split_; }

    // Where a copied tensor's bytes come from: pieces of the mapping (one, or
    // one per head for per-head checkpoints) and their type.
    struct Source {
        ggml_type type = GGML_TYPE_F32;
        std::vector<const void *> parts;
        std::vector<size_t> part_bytes;
        std::vector<uint8_t> joined() const;
    };

private:
    Model() = default;
    std::unique_ptr<gguf::File> file_;
    Config cfg_;
    Weights w_;
    ggml_context *ctx_ = nullptr;                   // tensor metadata (no data)
    std::vector<ggml_backend_buffer_t> mmap_bufs_;  // wrap the file's mapping (a split model's: one per file; null: unused)
    ggml_backend_buffer_t copy_buf_ = nullptr;      // copied / transformed tensors
    std::vector<ggml_backend_buffer_t> extra_bufs_; // matrices in the CPU's AMX / repack layouts
    std::vector<ggml_backend_buffer_t> device_bufs_; // blocks split to other devices, one buffer each
    ggml_backend_buffer_t packed_buf_ = nullptr;    // matrices in toy's packed layout (Weights::packed)
    std::unique_ptr<PackCache::Mapping> packed_map_; // the pack cache file packed_buf_ wraps, if it does
    bool packed_cached_ = false;                     // packed_buf_'s bytes came from the pack cache
    bool per_head_ = false;
    LayerSplit split_;
    // every weight of the file by name: where its bytes are and what it is
    // bound as; read_weight() converts from here (backend layouts such as the
    // repacked ones cannot be read back, fused ones have no tensor of their own)
    struct Stored {
        Source src;
        ggml_type type;
        std::array<int64_t, 4> ne;
    };
    std::unordered_map<std::string, Stored> stored_;
};

}  // namespace toy
