#include "runtime/trace.h"

#include <ggml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace toy {

bool is_traced_name(std::string_view n) {
    static constexpr std::string_view kExact[] = {"inp_embd", "result_norm", "result_output"};
    static constexpr std::string_view kPerLayer[] = {"attn_norm-", "Qcur-", "Kcur-", "Vcur-", "kqv_out-",
                                                     "ffn_inp-", "ffn_out-", "l_out-", "ffn_moe_topk-"};
    for (auto e : kExact) if (n == e) return true;
    // per-layer names are exactly "<name>-<layer>" (not derived views like "Kcur-0 (view)")
    for (auto p : kPerLayer) {
        if (!n.starts_with(p) || n.size() == p.size()) continue;
        if (n.find_first_not_of("0123456789", p.size()) == std::string_view::npos) return true;
    }
    return false;
}

bool trace_callback(ggml_tensor *t, bool ask, void *user_data) {
    auto *st = static_cast<TraceState *>(user_data);
    if (ask) return is_traced_name(ggml_get_name(t));
    if (!is_traced_name(ggml_get_name(t))) return true;

    const int64_t n = ggml_nelements(t);
    // gather the rows (views such as the top-k expert ids are strided)
    const size_t row_bytes = ggml_row_size(t->type, t->ne[0]);
    std::vector<uint8_t> raw(row_bytes * (n / t->ne[0]));
    const bool rows_contiguous = t->nb[0] == ggml_type_size(t->type);
    if (rows_contiguous) {
        size_t at = 0;
        for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
            for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
                for (int64_t i1 = 0; i1 < t->ne[1]; ++i1, at += row_bytes)
                    ggml_backend_tensor_get(t, raw.data() + at, i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], row_bytes);
    }
    std::fprintf(st->out, "trace %d %-16s %-4s [%lld, %lld, %lld, %lld]", st->graph, ggml_get_name(t),
                 ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                 (long long)t->ne[3]);
    if (!rows_contiguous) {
        std::fprintf(st->out, " (strided rows)\n");
        return true;
    }
    if (t->type == GGML_TYPE_I32) {
        // expert choices: one line of ids per token
        const auto *ids = reinterpret_cast<const int32_t *>(raw.data());
        std::fprintf(st->out, " experts:");
        for (int64_t r = 0; r < n / t->ne[0]; ++r) {
            std::fprintf(st->out, r ? " |" : "");
            for (int64_t i = 0; i < t->ne[0]; ++i) std::fprintf(st->out, " %d", ids[r * t->ne[0] + i]);
        }
        std::fprintf(st->out, "\n");
        return true;
    }
    std::vector<float> v(n);
    if (t->type == GGML_TYPE_F32) {
        std::copy_n(reinterpret_cast<const float *>(raw.data()), n, v.data());
    } else if (const auto *tr = ggml_get_type_traits(t->type); tr->to_float) {
        tr->to_float(raw.data(), v.data(), n);
    } else {
        std::fprintf(st->out, "\n");
        return true;
    }
    float mn = std::numeric_limits<float>::infinity(), mx = -mn;
    double sum_abs = 0;
    int64_t nan = 0;
    for (float x : v) {
        if (std::isnan(x)) { ++nan; continue; }
        mn = std::min(mn, x);
        mx = std::max(mx, x);
        sum_abs += std::fabs(x);
    }
    std::fprintf(st->out, " min=%.6g max=%.6g mean|x|=%.6g nan=%lld\n", mn, mx, n > nan ? sum_abs / (n - nan) : 0.0,
                 (long long)nan);
    return true;
}

}  // namespace toy
