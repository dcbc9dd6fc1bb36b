#include "eval/windows.h"

#include "core/error.h"

#include <algorithm>

namespace toy::eval {
namespace {

// Tokens per graph when several windows share one: the windows of a graph
// share one KV cache, so every query also scans (and skips) the other
// windows' masked cells; past 256 tokens that scan cost more than fewer,
// larger graphs saved (stories260K, llama-2-tiny-random, -c 32..128 on 2
// Zen 4 cores: CPU time +5-15 % at 512 tokens per graph).
constexpr int64_t kWindowTokensPerGraph = 256;

}  // namespace

std::vector<int32_t> window_tokens(const text::Vocab &vocab, const std::string &text) {
    if (vocab.add_eos()) {
        fail("the vocabulary appends EOS to every text (tokenizer.ggml.add_eos_token); windows of it cannot be scored");
    }
    return vocab.tokenize(text, /*add_special=*/true, /*parse_special=*/false);
}

WindowPlan plan_windows(int64_t n_tokens, const WindowOptions &o, int64_t n_ubatch, const std::string &source) {
    if (o.n_ctx < kMinWindow) {
        fail("-c: a window needs at least {} tokens (the second half of each is scored), found {}", kMinWindow, o.n_ctx);
    }
    if (o.n_batch <= 0) fail("-b: expected a batch size > 0, found {}", o.n_batch);
    if (o.n_chunks == 0 || o.n_chunks < -1) fail("--chunks: expected a count > 0, found {}", o.n_chunks);
    if (n_tokens < 2 * o.n_ctx) {
        fail("{}: {} token{}, but a context of {} needs at least 2 x {} = {} tokens (more text or a smaller -c)", source,
             n_tokens, n_tokens == 1 ? "" : "s", o.n_ctx, o.n_ctx, 2 * o.n_ctx);
    }
    WindowPlan p;
    p.n_ctx = o.n_ctx;
    p.n_chunks = n_tokens / o.n_ctx;
    if (o.n_chunks > 0) p.n_chunks = std::min(p.n_chunks, o.n_chunks);
    p.n_seq = std::max<int64_t>(1, std::min({o.n_batch, n_ubatch, kWindowTokensPerGraph}) / o.n_ctx);
    p.n_seq = std::min({p.n_seq, p.n_chunks, (int64_t)KvCache::kMaxSeqs});
    return p;
}

SessionOptions window_session_options(SessionOptions base, const WindowPlan &p) {
    base.n_ctx = p.n_ctx * p.n_seq;
    base.n_batch = base.n_ctx;
    base.n_ubatch = std::min(base.n_ubatch, base.n_ctx);
    return base;
}

void evaluate_windows(Session &s, std::span<const int32_t> tokens, const WindowPlan &p, int32_t bos,
                      int64_t out_begin, int64_t out_end,
                      const std::function<void(int64_t first, int64_t count, const float *logits)> &on_windows,
                      const std::function<void()> &after_decode) {
    for (int64_t first = 0; first < p.n_chunks; first += p.n_seq) {
        const int64_t count = std::min(p.n_seq, p.n_chunks - first);
        s.reset();
        Batch b;
        for (int64_t w = 0; w < count; ++w) {
            const int32_t *win = tokens.data() + (first + w) * p.n_ctx;
            for (int64_t k = 0; k < p.n_ctx; ++k) {
                const int32_t tok = k == 0 && bos != text::Vocab::kNoToken ? bos : win[k];
                b.add(tok, (int32_t)k, (int32_t)w, k >= out_begin && k < out_end);
            }
        }
        s.decode(b);
        if (after_decode) after_decode();
        on_windows(first, count, s.logits().data());
    }
}

}  // namespace toy::eval
