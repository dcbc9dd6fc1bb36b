// Hugging Face checkpoints (config.json + safetensors + tokenizer files) as
// GGUF, for every architecture toy runs. What llama.cpp's converter does,
// written as data: a table row per Hugging Face architecture (the GGUF
// architecture, whether Q/K rows are permuted for llama's rope layout,
// whether norms are stored as 1 + w), one map from checkpoint tensor names
// to GGUF names, and the config.json keys each GGUF key comes from.
#pragma once

#include "convert/output.h"
#include "convert/safetensors.h"

#include <memory>
#include <string>
#include <vector>

namespace toy::convert {

// The Hugging Face architectures (config.json "architectures") toy converts.
std::vector<std::string> hf_architectures();

// Fills `out` from the checkpoint directory. The checkpoint stays mapped
// while `out` lives (its tensors read from it when written). Throws
// toy::Error naming the file and what was expected.
void convert_hf(const std::string &dir, Converted &out);

}  // namespace toy::convert
