// share_work (graph/custom_ops.h): the units of a custom op handed out while
// its threads run, the counter kept in the op's own tensor.
#include "graph/custom_ops.h"

#include <ggml-cpu.h>
#include <ggml.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
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
