// fuzz_gguf: the input is a GGUF file. Checks that the reader, Config, the
// tokenizer metadata and Model::load's tensor binding (zero-copy from the
// mapping, and copied with use_mmap = false) answer any bytes with a model or
// a toy::Error: every value the reader hands out can be printed, every
// tensor's bytes lie inside the mapping, a bound model's weights can be read.
// The input is the first of a split model's two files (its second beside
// it), so inputs that say they are split are loaded with it.
// Seeds: tiny models of every architecture (scripts/fuzz.sh, make_seeds).
#include "fuzz_common.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"
#include "model/config.h"
#include "model/model.h"
#include "text/vocab.h"

#include <filesystem>

using namespace toy;

namespace {

// Reads every byte of every tensor: one outside the mapping is a SEGV/SIGBUS.
// Without coverage instrumentation: the loop has no branch on the data, and
// tracing its bound took a seventh of the target's time.
__attribute__((no_sanitize("coverage"))) uint8_t touch_tensors(const gguf::File &f) {
    uint8_t acc = 0;
    for (const auto &t : f.tensors()) {
        const uint8_t *p = (const uint8_t *)f.tensor_data(t);
        for (uint64_t i = 0; i < t.nbytes; ++i) acc ^= p[i];
    }
    return acc;
}

void inspect(const gguf::File &f) {
    for (const auto &kv : f.metadata()) {
        (void)kv.value.to_string();
        if (kv.value.type == gguf::ValueType::ARRAY && kv.value.n > 0 && kv.value.strings.empty() &&
            kv.value.elem_type != gguf::ValueType::STRING) {
            (void)kv.value.number_at(0);
            (void)kv.value.number_at(kv.value.n - 1);
        }
    }
    for (const auto &t : f.tensors()) (void)t.shape_string();
    volatile uint8_t sink = touch_tensors(f);
    (void)sink;
}

void load_model(const std::string &path, bool mmap, bool requantize) {
    LoadOptions o;
    o.use_mmap = mmap;
    o.huge_pages = HugePages::Off;
    if (requantize) {
        o.weight_type = GGML_TYPE_Q8_0;
        o.repack = false;
        o.fuse = false;
    }
    try {
        auto m = Model::load(path, o);
        (void)m->weight_bytes();
        (void)m->placement();
        const auto &tensors = m->file().tensors();
        if (!tensors.empty() && m->has_weight(tensors.front().name)) (void)m->read_weight(tensors.front().name);
    } catch (const Error &) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    fuzz::quiet_ggml();
    // the input is named as the first file of a split model of two, whose
    // second file lies beside it (a tiny llama's last three tensors): an
    // input that says it is split (the seed split-llama-00001-of-00002.gguf)
    // is opened with it
    const std::string first = fuzz::scratch_dir() + "/split-first.gguf";
    fuzz::write_split_pair(fuzz::tiny_model("llama"), first, fuzz::scratch_dir() + "/input-00002-of-00002.gguf");
    std::filesystem::remove(first);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz::ScratchFile file("input-00001-of-00002.gguf");
    const std::string &path = file.write(data, size);

    std::unique_ptr<gguf::File> f;
    try {
        f = gguf::File::open(path);
    } catch (const Error &) {
        return 0;
    }
    inspect(*f);
    try {
        inspect(*gguf::File::open_model(path));  // with a split model's other file
    } catch (const Error &) {
    }
    bool config_ok = false;
    try {
        (void)Config::from_gguf(*f);
        config_ok = true;
    } catch (const Error &) {
    }
    try {
        text::Vocab v = text::Vocab::load(*f);
        const auto ids = v.tokenize("Hello world <s>\n\xe2\x96\x81 x", true, true);
        (void)v.detokenize(ids, true);
    } catch (const Error &) {
    }
    f.reset();
    if (!config_ok) return 0;
    // both bindings each time; the input's size picks the second one's options
    load_model(path, /*mmap=*/true, /*requantize=*/false);
    load_model(path, /*mmap=*/false, /*requantize=*/size & 1);
    return 0;
}
