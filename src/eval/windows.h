// A text cut into windows ("chunks") of n_ctx tokens the way llama.cpp's
// perplexity and imatrix tools cut it, shared by toy perplexity and toy
// imatrix so the two see the same tokens:
//
//   - the whole text is tokenized once, BOS added as the vocabulary asks and
//     special-token text left as plain text;
//   - window i is tokens [i*n_ctx, (i+1)*n_ctx); its first token is replaced
//     by BOS when the vocabulary adds one (every window starts like a
//     document), positions restart at 0 and windows never see each other;
//   - there are floor(n_tokens / n_ctx) windows (at most --chunks), and at
//     least 2*n_ctx tokens are needed;
//   - positions n_ctx/2 .. n_ctx-2 of a window predict the next token and are
//     scored, so a window has at least kMinWindow = 3 tokens.
//
// Several windows run in one graph as separate sequences of one KV cache
// (runtime/batch.h), which is where a small context runs faster than one
// window at a time.
#pragma once

#include "runtime/session.h"
#include "text/vocab.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace toy::eval {

constexpr int64_t kMinWindow = 3;

struct WindowOptions {
    int64_t n_ctx = 512;     // tokens per window (-c)
    int64_t n_batch = 2048;  // -b: at most n_batch / n_ctx windows per graph (llama.cpp's n_seq)
    int64_t n_chunks = -1;   // windows to evaluate at most (-1: every whole window of the text)
};

struct WindowPlan {
    int64_t n_ctx = 0;
    int64_t n_chunks = 0;  // windows evaluated
    int64_t n_seq = 1;     // windows per graph
};

// The tokens llama.cpp's tools evaluate for `text` (BOS as the vocabulary
// asks, no special-token parsing). Throws when the vocabulary appends EOS
// (windows would end in it; llama.cpp refuses such a vocabulary too).
std::vector<int32_t> window_tokens(const text::Vocab &vocab, const std::string &text);

// Windows for n_tokens tokens. n_seq: windows per graph, at least 1, as
// many as fit the batch (-b), the session's ubatch and 256 tokens: the
// windows of a graph share one KV cache and each query scans the others'
// masked cells, so small windows gain from sharing a graph and large ones
// do not (the results are the same either way). Throws (naming `source`) when there are fewer than
// 2 * n_ctx tokens or a size is out of range.
WindowPlan plan_windows(int64_t n_tokens, const WindowOptions &o, int64_t n_ubatch, const std::string &source);

// `base` with the context and batch sizes the plan's decodes need.
SessionOptions window_session_options(SessionOptions base, const WindowPlan &p);

// Evaluates windows 0 .. p.n_chunks-1 of `tokens`, p.n_seq per decode on a
// cleared cache, keeping the logits of positions [out_begin, out_end) of
// each window. on_windows(first window, count, logits) then gets them:
// count windows' rows in order, (out_end - out_begin) x n_vocab floats each.
// `bos`: the token that replaces each window's first (Vocab::kNoToken: none).
// after_decode (optional) runs after each decode, before on_windows.
void evaluate_windows(Session &s, std::span<const int32_t> tokens, const WindowPlan &p, int32_t bos,
                      int64_t out_begin, int64_t out_end,
                      const std::function<void(int64_t first, int64_t count, const float *logits)> &on_windows,
                      const std::function<void()> &after_decode = {});

}  // namespace toy::eval
