#include <gtest/gtest.h>
#include <ggml.h>

TEST(Smoke, GgmlLinks) { EXPECT_GT(ggml_type_size(GGML_TYPE_F32), 0u); }
