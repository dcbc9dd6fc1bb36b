// Graph inputs live in their own buffer on cache-line boundaries, so the
// compute buffer's activations start aligned (runtime/inputs.h).
#include "runtime/inputs.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

using namespace toy;

namespace {

TEST(InputBuffer, PlacesEachInputOnACacheLineAndKeepsActivationsAligned) {
    ggml_init_params ip{64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    // odd-sized inputs, as a one-token decode step has them
    ggml_tensor *tok = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1);
    ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 5);
    for (ggml_tensor *t : {tok, x}) ggml_set_input(t);
    ggml_tensor *y = ggml_scale(ctx, x, 2.0f);
    ggml_tensor *z = ggml_add(ctx, y, x);
    ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, z);
    ggml_build_forward_expand(gf, ggml_get_rows(ctx, x, tok));

    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_buffer_type_t buft = ggml_backend_get_default_buffer_type(cpu);
    InputBuffer inputs;
    inputs.place(buft, {tok, x});
    for (ggml_tensor *t : {tok, x}) {
        ASSERT_NE(t->data, nullptr);
        EXPECT_EQ((uintptr_t)t->data % 64, 0u) << ggml_get_name(t);
    }
    ggml_gallocr_t alloc = ggml_gallocr_new(buft);
    ASSERT_TRUE(ggml_gallocr_alloc_graph(alloc, gf));
    EXPECT_EQ((uintptr_t)y->data % 64, 0u);  // the first activation is not shifted by the inputs

    // placed inputs take data and the graph computes with it
    const int32_t t0 = 4;
    std::vector<float> xv(15);
    for (int i = 0; i < 15; ++i) xv[i] = (float)i;
    ggml_backend_tensor_set(tok, &t0, 0, sizeof t0);
    ggml_backend_tensor_set(x, xv.data(), 0, xv.size() * sizeof(float));
    ASSERT_EQ(ggml_backend_graph_compute(cpu, gf), GGML_STATUS_SUCCESS);
    std::vector<float> zv(15);
    ggml_backend_tensor_get(z, zv.data(), 0, zv.size() * sizeof(float));
    for (int i = 0; i < 15; ++i) EXPECT_EQ(zv[i], 3.0f * i);

    // a larger set later grows the buffer and stays aligned
    ggml_tensor *big = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100000);
    inputs.place(buft, {big});
    EXPECT_EQ((uintptr_t)big->data % 64, 0u);
    std::vector<float> b(100000, 1.5f), back(100000);
    ggml_backend_tensor_set(big, b.data(), 0, b.size() * sizeof(float));
    ggml_backend_tensor_get(big, back.data(), 0, back.size() * sizeof(float));
    EXPECT_EQ(back, b);

    ggml_gallocr_free(alloc);
    ggml_backend_free(cpu);
    ggml_free(ctx);
}

}  // namespace
