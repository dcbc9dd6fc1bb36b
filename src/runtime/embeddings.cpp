#include "runtime/embeddings.h"

#include "core/error.h"

#include <cmath>

namespace toy {

Pooling parse_pooling(const std::string &name, const std::string &flag, bool allow_none) {
    if (name == "none" && allow_none) return Pooling::None;
    if (name == "mean") return Pooling::Mean;
    if (name == "cls") return Pooling::Cls;
    if (name == "last") return Pooling::Last;
    fail("{} {}: expected {}mean, cls or last", flag, name, allow_none ? "none, " : "");
}

const char *pooling_name(Pooling p) {
    switch (p) {
        case Pooling::None: return "none";
        case Pooling::Mean: return "mean";
        case Pooling::Cls: return "cls";
        case Pooling::Last: return "last";
    }
    return "?";
}

Pooling model_pooling(const Model &model) {
    const std::optional<int64_t> t = model.file().opt_int(model.config().arch + ".pooling_type");
    if (!t) return Pooling::Mean;
    switch (*t) {
        case 0: return Pooling::None;
        case 1: return Pooling::Mean;
        case 2: return Pooling::Cls;
        case 3: return Pooling::Last;
        default: fail("{}: key '{}.pooling_type': expected 0 (none), 1 (mean), 2 (cls) or 3 (last), found {}", model.path(),
                      model.config().arch, *t);
    }
}

void normalize_embedding(std::vector<float> &v, int norm) {
    double sum = 0.0;
    if (norm == -1) {
        sum = 1.0;
    } else if (norm == 0) {
        for (float x : v) sum = std::max(sum, (double)std::abs(x));
        sum /= 32760.0;
    } else if (norm == 2) {
        for (float x : v) sum += x * x;
        sum = std::sqrt(sum);
    } else {
        for (float x : v) sum += std::pow(std::abs(x), norm);
        sum = std::pow(sum, 1.0 / norm);
    }
    const float scale = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (float &x : v) x *= scale;
}

std::vector<std::vector<float>> embed(Session &session, const std::vector<int32_t> &tokens, Pooling pooling, int norm) {
    if (tokens.empty()) fail("nothing to embed: the text has no tokens");
    session.reset();
    session.eval(tokens, /*all_logits=*/true);
    const std::vector<float> &h = session.logits();
    const size_t n_embd = (size_t)session.n_row(), n = tokens.size();
    auto row = [&](size_t i) { return std::vector<float>(h.begin() + (ptrdiff_t)(i * n_embd), h.begin() + (ptrdiff_t)((i + 1) * n_embd)); };
    std::vector<std::vector<float>> out;
    if (pooling == Pooling::None) {
        for (size_t i = 0; i < n; ++i) out.push_back(row(i));
    } else if (pooling == Pooling::Mean) {
        std::vector<float> m(n_embd, 0.0f);
        for (size_t i = 0; i < n; ++i)
            for (size_t j = 0; j < n_embd; ++j) m[j] += h[i * n_embd + j];
        for (float &x : m) x /= (float)n;
        out.push_back(std::move(m));
    } else {
        out.push_back(row(pooling == Pooling::Cls ? 0 : n - 1));
    }
    for (auto &v : out) normalize_embedding(v, norm);
    return out;
}

}  // namespace toy
