// share_work (graph/custom_ops.h): the units of a custom op handed out while
// its threads run, the counter kept in the op's own tensor.
#include "graph/custom_ops.h"

#include <ggml-cpu.h>
#include <ggml.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace {

// Adds 1 to every unit's count each run; the units are dst's int32 elements.
void count_units(ggml_tensor *dst, int ith, int nth, void *) {
    auto *counts = static_cast<int32_t *>(dst->data);
    toy::graph::share_work(
        dst, ggml_nelements(dst), ith, nth,
        [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) std::atomic_ref<int32_t>(counts[i]).fetch_add(1, std::memory_order_relaxed);
        },
        [&](int64_t begin) { ASSERT_LT(begin, ggml_nelements(dst)); });
}

}  // namespace

// Every unit exactly once per run, whatever the threads and the unit count,
// over runs of the same graph (the counter is reset for the next run).
TEST(ShareWork, EveryUnitOnceInEachRunOfTheGraph) {
    for (int64_t n : {1, 2, 7, 37, 100, 3072}) {
        for (int threads : {1, 2, 3, 4}) {
            ggml_init_params params{size_t(1) << 20, nullptr, false};
            std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(params), &ggml_free);
            ggml_tensor *src = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, n);
            ggml_tensor *args[] = {src};
            ggml_tensor *dst = ggml_custom_4d(ctx.get(), GGML_TYPE_I32, n, 1, 1, 1, args, 1, count_units, GGML_N_TASKS_MAX, nullptr);
            std::fill_n(static_cast<int32_t *>(dst->data), n, 0);
            ggml_cgraph *graph = ggml_new_graph(ctx.get());
            ggml_build_forward_expand(graph, dst);
            constexpr int kRuns = 5;
            for (int run = 0; run < kRuns; ++run) ASSERT_EQ(ggml_graph_compute_with_ctx(ctx.get(), graph, threads), GGML_STATUS_SUCCESS);
            const auto *counts = static_cast<const int32_t *>(dst->data);
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(counts[i], kRuns) << "unit " << i << " of " << n << ", " << threads << " threads";
        }
    }
}

namespace {

struct Ranges {
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> seen;
};

// Records every range handed out (userdata: Ranges).
void record_ranges(ggml_tensor *dst, int ith, int nth, void *userdata) {
    auto *r = static_cast<Ranges *>(userdata);
    toy::graph::share_work(dst, ggml_nelements(dst), ith, nth, [&](int64_t begin, int64_t end) {
        std::lock_guard<std::mutex> lock(r->m);
        r->seen.emplace_back(begin, end);
    });
}

}  // namespace

// After each thread's contiguous share of the first half, the chunks never
// grow and the last is one unit, so no thread is left with a long chunk while
// the others have run out of work.
TEST(ShareWork, ChunksShrinkToOneUnitAtTheEnd) {
    for (int64_t n : {7, 100, 3072, 9496}) {
        for (int threads : {2, 3, 4}) {
            ggml_init_params params{size_t(1) << 20, nullptr, false};
            std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(params), &ggml_free);
            ggml_tensor *src = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, n);
            ggml_tensor *args[] = {src};
            Ranges ranges;
            ggml_tensor *dst = ggml_custom_4d(ctx.get(), GGML_TYPE_I32, n, 1, 1, 1, args, 1, record_ranges, threads, &ranges);
            ggml_cgraph *graph = ggml_new_graph(ctx.get());
            ggml_build_forward_expand(graph, dst);
            ASSERT_EQ(ggml_graph_compute_with_ctx(ctx.get(), graph, threads), GGML_STATUS_SUCCESS);
            auto &seen = ranges.seen;
            std::sort(seen.begin(), seen.end());
            const int64_t per = n / (2 * threads);
            const size_t shares = per > 0 ? threads : 0;  // (none where half the units do not go round)
            ASSERT_GT(seen.size(), shares) << n << " units, " << threads << " threads";
            for (size_t t = 0; t < shares; ++t) ASSERT_EQ(seen[t], std::make_pair(int64_t(t) * per, int64_t(t + 1) * per));
            int64_t covered = threads * per;
            for (size_t i = shares; i < seen.size(); ++i) {
                ASSERT_EQ(seen[i].first, covered) << "range " << i << " of " << n << " units, " << threads << " threads";
                if (i > shares) {
                    ASSERT_LE(seen[i].second - seen[i].first, seen[i - 1].second - seen[i - 1].first)
                        << "range " << i << " of " << n << " units, " << threads << " threads";
                }
                covered = seen[i].second;
            }
            EXPECT_EQ(covered, n);
            EXPECT_EQ(seen.back().second - seen.back().first, 1) << n << " units, " << threads << " threads";
        }
    }
}
