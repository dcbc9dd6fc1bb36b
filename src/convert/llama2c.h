// llama2.c checkpoints (Karpathy's model.bin + tokenizer.bin) as a llama GGUF.
//
// model.bin: seven int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means the classifier is stored
// apart from the embedding), then float32 arrays in a fixed order, each
// layer's matrices stacked: token embedding, attention norms, wq, wk, wv, wo,
// ffn norms, w1, w2, w3, final norm, the rope tables (skipped), classifier.
// Matrices are row-major [out][in], which is ggml's [in, out]; the rope pairs
// are already adjacent, as llama's GGUF layout wants, so nothing is permuted.
//
// tokenizer.bin: int32 max token length, then per token float32 score,
// int32 length and the bytes. Ids 0, 1, 2 are <unk>, <s>, </s>.
#pragma once

#include "convert/output.h"

#include <memory>
#include <string>

namespace toy::convert {

// Reads and validates both files (the checkpoint stays mapped while `out`
// lives: its tensors read from it when written).
void convert_llama2c(const std::string &model_bin, const std::string &tokenizer_bin, Converted &out);

}  // namespace toy::convert
