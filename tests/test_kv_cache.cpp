// KvCache bookkeeping: cells found, stored, removed per sequence and reused;
// masks follow the cells' sequences and positions; a full cache and a bad
// sequence id are one-line errors that leave the cache as it was.
#include "runtime/kv_cache.h"
#include "runtime/session.h"
#include "test_models.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace toy;

namespace {

struct Fixture {
    std::unique_ptr<Model> model = Model::load(test::tiny_model("llama"));
    Engine engine{1};
    KvCache kv{engine, model->config(), 8, GGML_TYPE_F32, GGML_TYPE_F32, true};
};

Batch tokens_of(int32_t seq, int32_t from, int32_t n) {
    Batch b;
    for (int32_t i = 0; i < n; ++i) b.add(1, from + i, seq, false);
    return b;
}

}  // namespace

TEST(KvCache, CellsAreFoundStoredRemovedAndReused) {
    Fixture f;
    const Batch a = tokens_of(0, 0, 3), b = tokens_of(1, 0, 4);
    f.kv.store(a, f.kv.find_slot(a));
    f.kv.store(b, f.kv.find_slot(b));
    EXPECT_EQ(f.kv.n_used(), 7);
    EXPECT_EQ(f.kv.pos_max(0), 2);
    EXPECT_EQ(f.kv.pos_max(1), 3);
    EXPECT_EQ(f.kv.n_active(), 7);
    EXPECT_EQ(f.kv.n_active(a), 3);  // sequence 0 sees cells 0..2 only
    EXPECT_EQ(f.kv.n_active(b), 7);
    f.kv.remove(0);  // sequence 0's cells 0..2 become free and are found first
    EXPECT_EQ(f.kv.pos_max(0), -1);
    EXPECT_EQ(f.kv.n_used(), 4);
    EXPECT_EQ(f.kv.find_slot(tokens_of(2, 0, 4)), (std::vector<int64_t>{0, 1, 2, 7}));
    f.kv.remove(1, 2);  // positions 2 and 3 of sequence 1
    EXPECT_EQ(f.kv.pos_max(1), 1);
    f.kv.clear();
    EXPECT_EQ(f.kv.n_used(), 0);
    EXPECT_EQ(f.kv.n_active(), 0);
}

TEST(KvCache, MasksFollowSequencesAndPositions) {
    Fixture f;
    Batch b;  // sequence 0 at positions 0, 1 and sequence 1 at 0, 1, interleaved
    b.add(1, 0, 0, true);
    b.add(1, 0, 1, true);
    b.add(1, 1, 0, true);
    b.add(1, 1, 1, true);
    f.kv.store(b, f.kv.find_slot(b));
    ggml_init_params ip{ggml_tensor_overhead() * 2, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 4);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, f.engine.backend());
    f.kv.fill_mask(mask, b, 0);
    std::vector<float> m(32);
    ggml_backend_tensor_get(mask, m.data(), 0, m.size() * sizeof(float));
    // token i sees cell j: same sequence, position not after its own
    const bool want[4][4] = {{1, 0, 0, 0}, {0, 1, 0, 0}, {1, 0, 1, 0}, {0, 1, 0, 1}};
    for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 8; ++j) {
            const bool seen = j < 4 && want[i][j];
            EXPECT_EQ(m[i * 8 + j], seen ? 0.0f : -INFINITY) << "token " << i << " cell " << j;
        }
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

TEST(KvCache, FullCacheAndBadSequenceAreOneLineErrorsThatChangeNothing) {
    Fixture f;
    const Batch a = tokens_of(0, 0, 6);
    f.kv.store(a, f.kv.find_slot(a));
    const std::string full = test::error_of([&] { f.kv.find_slot(tokens_of(1, 0, 3)); });
    EXPECT_NE(full.find("2 of the context's 8 are free"), std::string::npos) << full;
    EXPECT_EQ(full.find('\n'), std::string::npos);
    EXPECT_EQ(f.kv.n_used(), 6);

    // through a session: the cache is as before the failed decode
    Session s(*f.model, SessionOptions{.n_ctx = 8, .n_threads = 1});
    s.eval(std::vector<int32_t>{1, 2, 3});
    Batch bad;
    bad.add(1, 0, KvCache::kMaxSeqs, true);
    const std::string seq = test::error_of([&] { s.decode(bad); });
    EXPECT_NE(seq.find("sequence id 64"), std::string::npos) << seq;
    EXPECT_EQ(s.kv().n_used(), 3);
    const std::string over = test::error_of([&] { s.eval(std::vector<int32_t>(6, 1)); });
    EXPECT_NE(over.find("context overflow"), std::string::npos) << over;
    EXPECT_EQ(s.n_past(), 3);
}
