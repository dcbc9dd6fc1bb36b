// The tokenizer of a Hugging Face checkpoint as GGUF tokenizer.* metadata:
//
// - tokenizer.model (SentencePiece, protobuf): tokenizer.ggml.model "llama",
//   pieces, scores and types as SentencePiece has them;
// - tokenizer.json with a byte-level BPE model: "gpt2", vocabulary, merges
//   and tokenizer.ggml.pre — chosen by behaviour: the tokenizer.json's own
//   pre-tokenizer (its Split regexes, ByteLevel, Digits) must cut a probe
//   text exactly as the named toy/llama.cpp style does;
// - tokenizer.json with a byte-fallback BPE model over U+2581 (Llama's
//   SentencePiece exported as BPE): "llama", with scores from the merge
//   ranks so that score-driven merging reproduces the BPE merges.
//
// Special tokens, add_bos/add_eos and the chat template come from
// tokenizer_config.json (tokenizer.json's added tokens, config.json's ids
// as fallbacks), chat_template.jinja when present. Tokens the embedding has
// rows for but the tokenizer does not name become [PAD<id>] (unused).
#pragma once

#include "convert/output.h"

#include <nlohmann/json.hpp>

#include <string>

namespace toy::convert {

// n_vocab: the model's embedding rows (config.json vocab_size; 0 unknown).
void add_hf_tokenizer(const std::string &dir, const nlohmann::json &config, int64_t n_vocab, Converted &out);

// The tokenizer.ggml.pre of a tokenizer.json's pre-tokenizer (exposed for
// tests). Throws toy::Error when no known style behaves like it.
std::string detect_bpe_pre(const nlohmann::json &tokenizer_json, bool clean_spaces, const std::string &where);

}  // namespace toy::convert
