// toy's own default model (models/toy-stories.gguf, made by
// scripts/make-default-model.sh): its held-out loss is the one recorded next
// to it and stated in the README, it beats the model whose samples it learned
// from on the same held-out text, and it tells a story.
#include "runtime/session.h"
#include "test_util.h"
#include "text/vocab.h"
#include "train/run.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace {

std::string source_path(const std::string &rel) { return std::string(TOY_SOURCE_DIR) + "/" + rel; }

}  // namespace

TEST(DefaultModel, HeldOutLossIsTheOneTheReadmeStates) {
    const nlohmann::json rec = toy::test::read_json(source_path("models/toy-stories.json"));
    const double stated = rec["held_out_loss"];
    int64_t n = 0;
    const double loss =
        toy::train::held_out_loss(source_path("models/toy-stories.gguf"), source_path("models/toy-stories.val.txt"), 256, 2, &n);
    EXPECT_NEAR(loss, stated, 1e-3);
    EXPECT_EQ(n, rec["held_out_tokens"].get<int64_t>());
    EXPECT_LT(loss, rec["stories260K_held_out_loss"].get<double>());
    std::ifstream readme(source_path("README.md"));
    std::stringstream text;
    text << readme.rdbuf();
    EXPECT_NE(text.str().find(fmt::format("held-out loss {:.3f}", stated)), std::string::npos)
        << "README.md should state the held-out loss " << fmt::format("{:.3f}", stated);
}

TEST(DefaultModel, IsSmallAndWritesText) {
    auto model = toy::Model::load(source_path("models/toy-stories.gguf"));
    EXPECT_LE(std::filesystem::file_size(source_path("models/toy-stories.gguf")), 10u << 20);
    const toy::text::Vocab vocab = toy::text::Vocab::load(model->file());
    toy::Session s(*model);
    std::vector<int32_t> ids = vocab.tokenize("Once upon a time", true, false);
    std::string out;
    s.eval(ids);
    for (int i = 0; i < 24; ++i) {
        const float *l = s.last_logits();
        const int32_t next = (int32_t)(std::max_element(l, l + s.n_vocab()) - l);
        out += vocab.token_to_piece(next);
        const int32_t one[1] = {next};
        s.eval(one);
    }
    // greedy text of a story model: words, spaces, no byte soup
    EXPECT_GT(std::count(out.begin(), out.end(), ' '), 4) << out;
}
