// Training data: token windows with a loss mask.
//
// Plain text: documents (split at a separator, "<|endoftext|>" by default)
// are tokenized with the model's tokenizer, each ended by EOS, joined into one
// stream and cut into windows of T+1 tokens (T inputs, T next-token targets,
// consecutive windows sharing one token). Chat JSONL ({"messages": [...]} per
// line) is rendered with the model's chat template and only the assistant's
// tokens are targets (supervised fine-tuning); conversations are packed the
// same way. Windows are shuffled per epoch by the seed.
#pragma once

#include "text/chat_template.h"
#include "text/vocab.h"

#include <cstdint>
#include <string>
#include <vector>

namespace toy::train {

struct Window {
    std::vector<int32_t> tokens;  // T + 1
    std::vector<uint8_t> mask;    // T: 1 where tokens[i + 1] is a target
    int64_t n_targets = 0;
};

struct Dataset {
    std::vector<Window> windows;
    int64_t n_documents = 0;   // documents or conversations used
    int64_t n_tokens = 0;      // tokens in the stream
    int64_t n_skipped = 0;     // conversations without an assistant turn, windows without a target
    std::string source;

    // Moves the last `fraction` of the windows (at least one) into a new
    // dataset: held-out data never seen in training.
    Dataset split_tail(double fraction);
};

// Reads `path` (chat JSONL when it ends in .jsonl, else plain text) into
// windows of n_ctx inputs. Throws toy::Error naming the file (and line) for
// an empty file, a line that is not a conversation, or too little text.
Dataset load_dataset(const std::string &path, const text::Vocab &vocab, const text::ChatTemplate *chat,
                     int64_t n_ctx, const std::string &separator = "<|endoftext|>");

// Windows of n_ctx from a token stream and its target mask (mask[i]: token i is a target).
Dataset pack_stream(const std::vector<int32_t> &stream, const std::vector<uint8_t> &mask, int64_t n_ctx);

// The window order of epoch `epoch`: a permutation of 0..n-1 fixed by seed and epoch.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace toy::train
