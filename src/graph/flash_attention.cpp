#include "graph/flash_attention.h"

#include "graph/packed_kernels.h"

#include <ggml-backend.h>
#include <ggml-cpu.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace toy::graph {
namespace {

constexpr int kRows = 16;    // queries per unit of work
constexpr int kCells = 16;   // KV cells per tile: one register of scores per query
constexpr int64_t kMaxHead = 256;

// The scale of an attention op, where its kernel finds it (userdata): one
// slot per distinct value, kept for the process (a model has one or two).
const float *scale_slot(float scale) {
    static std::mutex mu;
    static std::deque<float> slots;
    std::lock_guard<std::mutex> lock(mu);
    for (const float &s : slots)
        if (s == scale) return &s;
    return &slots.emplace_back(scale);
}

#if defined(__x86_64__)
TOY_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// e^x, to about 1 ulp (Cephes' polynomial after x = n ln 2 + r); exactly 0
// below -110 (e^x is far under the smallest denormal there), so a masked
// score weighs nothing.
inline __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-110.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

// K [head_dim, n_kv, n_head_kv] (F16 or F32, rows strided) -> F32 tiles
// [16 cells, head_dim, n_tiles, n_head_kv]: element (d, cell j) of a tile at
// d * 16 + j, so a tile's 16 scores of a query are one vector per d. Cells
// past n_kv are zero.
void k_tiles_kernel(ggml_tensor *dst, int ith, int nth, void *) {
    const ggml_tensor *k = dst->src[0];
    const int64_t D = k->ne[0], n_kv = k->ne[1], n_tiles = dst->ne[2], units = n_tiles * dst->ne[3];
    alignas(64) float rows[kCells * kMaxHead];
    for (int64_t u = ith; u < units; u += nth) {
        const int64_t hk = u / n_tiles, t = u % n_tiles;
        for (int j = 0; j < kCells; ++j) {
            float *row = rows + j * D;
            const int64_t cell = t * kCells + j;
            if (cell >= n_kv) {
                std::fill(row, row + D, 0.0f);
                continue;
            }
            const char *src = static_cast<const char *>(k->data) + cell * k->nb[1] + hk * k->nb[2];
            if (k->type == GGML_TYPE_F16) {
                for (int64_t d = 0; d < D; d += 16) {
                    _mm512_store_ps(row + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src) + d / 16)));
                }
            } else {
                std::memcpy(row, src, D * sizeof(float));
            }
        }
        float *out = reinterpret_cast<float *>(static_cast<char *>(dst->data) + t * dst->nb[2] + hk * dst->nb[3]);
        for (int64_t d = 0; d < D; ++d)
            for (int j = 0; j < kCells; ++j) out[d * kCells + j] = rows[j * D + d];
    }
}

// Four rows of O (o, `o_row` apart), B x 16 values each, += their weights in
// p (kCells per row) times the V rows (v, `v_row` apart) of n_cells cells.
template <int B>
inline void add_weighted_rows(float *o, int64_t o_row, const float *p, const float *v, int64_t v_row, int n_cells) {
    __m512 acc[4][B];
    for (int i = 0; i < 4; ++i)
        for (int b = 0; b < B; ++b) acc[i][b] = _mm512_load_ps(o + i * o_row + 16 * b);
    for (int j = 0; j < n_cells; ++j) {
        __m512 vj[B];
        for (int b = 0; b < B; ++b) vj[b] = _mm512_loadu_ps(v + j * v_row + 16 * b);
        for (int i = 0; i < 4; ++i) {
            const __m512 pij = _mm512_set1_ps(p[i * kCells + j]);
            for (int b = 0; b < B; ++b) acc[i][b] = _mm512_fmadd_ps(pij, vj[b], acc[i][b]);
        }
    }
    for (int i = 0; i < 4; ++i)
        for (int b = 0; b < B; ++b) _mm512_store_ps(o + i * o_row + 16 * b, acc[i][b]);
}

// One unit: queries [r0, r0 + n_rows) of head h against every tile.
void attend(const ggml_tensor *q, const ggml_tensor *kt, const ggml_tensor *v, const ggml_tensor *mask, ggml_tensor *dst,
            float scale, int64_t h, int64_t r0, int n_rows) {
    const int64_t D = q->ne[0], Dv = v->ne[0], n_kv = v->ne[1], n_tiles = kt->ne[2];
    const int64_t hk = h / (q->ne[2] / v->ne[2]);
    alignas(64) float Q[kRows * kMaxHead];
    alignas(64) float O[kRows * kMaxHead];
    alignas(64) float P[kRows * kCells];
    float m[kRows], l[kRows];
    for (int i = 0; i < kRows; ++i) {
        float *qi = Q + i * D;
        if (i < n_rows) {
            std::memcpy(qi, static_cast<const char *>(q->data) + (r0 + i) * q->nb[1] + h * q->nb[2], D * sizeof(float));
        } else {
            std::fill(qi, qi + D, 0.0f);
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    std::fill(O, O + kRows * Dv, 0.0f);
    std::fill(P, P + kRows * kCells, 0.0f);
    const char *mask_rows = static_cast<const char *>(mask->data) + (h % mask->ne[2]) * mask->nb[2];
    const float *kbase = reinterpret_cast<const float *>(static_cast<const char *>(kt->data) + hk * kt->nb[3]);
    const float *vbase = reinterpret_cast<const float *>(static_cast<const char *>(v->data) + hk * v->nb[2]);
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t c0 = t * kCells;
        const int n_cells = (int)std::min<int64_t>(kCells, n_kv - c0);
        const __mmask16 valid = (__mmask16)((1u << n_cells) - 1);
        __m512 mk[kRows];
        bool any = false;
        for (int i = 0; i < n_rows; ++i) {
            const auto *mrow = reinterpret_cast<const ggml_fp16_t *>(mask_rows + (r0 + i) * mask->nb[1]) + c0;
            const __m256i bits = _mm256_maskz_loadu_epi16(valid, mrow);
            mk[i] = _mm512_mask_blend_ps(valid, neg_inf, _mm512_cvtph_ps(bits));
            any |= _mm512_cmp_ps_mask(mk[i], neg_inf, _CMP_NEQ_OQ) != 0;
        }
        if (!any) continue;
        // the 16 x 16 scores: query i's in s[i]
        __m512 s[kRows];
        for (int i = 0; i < kRows; ++i) s[i] = _mm512_setzero_ps();
        const float *kb = kbase + t * kCells * D;
        for (int64_t d = 0; d < D; ++d) {
            const __m512 kd = _mm512_loadu_ps(kb + d * kCells);
            for (int i = 0; i < kRows; ++i) s[i] = _mm512_fmadd_ps(_mm512_set1_ps(Q[i * D + d]), kd, s[i]);
        }
        // online softmax, row by row
        for (int i = 0; i < n_rows; ++i) {
            const __m512 si = _mm512_add_ps(_mm512_mul_ps(s[i], _mm512_set1_ps(scale)), mk[i]);
            const float tile_max = _mm512_reduce_max_ps(si);
            float *pi = P + i * kCells;
            if (tile_max == -INFINITY) {
                _mm512_store_ps(pi, _mm512_setzero_ps());
                continue;
            }
            const float m_new = std::max(m[i], tile_max);
            const __m512 p = exp_ps(_mm512_sub_ps(si, _mm512_set1_ps(m_new)));
            _mm512_store_ps(pi, p);
            const float alpha = m[i] == -INFINITY ? 0.0f : std::exp(m[i] - m_new);
            l[i] = l[i] * alpha + _mm512_reduce_add_ps(p);
            if (alpha != 1.0f) {
                float *oi = O + i * Dv;
                for (int64_t c = 0; c < Dv; c += 16) _mm512_store_ps(oi + c, _mm512_mul_ps(_mm512_load_ps(oi + c), _mm512_set1_ps(alpha)));
            }
            m[i] = m_new;
        }
        // O += P V: four queries by 64 values at a time (16 sums), 16 at the end
        const float *vt = vbase + c0 * (v->nb[1] / sizeof(float));
        const int64_t v_row = v->nb[1] / sizeof(float);
        for (int i0 = 0; i0 < n_rows; i0 += 4) {
            int64_t c = 0;
            for (; c + 64 <= Dv; c += 64) add_weighted_rows<4>(O + i0 * Dv + c, Dv, P + i0 * kCells, vt + c, v_row, n_cells);
            for (; c < Dv; c += 16) add_weighted_rows<1>(O + i0 * Dv + c, Dv, P + i0 * kCells, vt + c, v_row, n_cells);
        }
    }
    // out [head_dim_v, n_head, n_q]: row i / its sum (0 for a row that sees nothing, as ggml)
    for (int i = 0; i < n_rows; ++i) {
        float *out = reinterpret_cast<float *>(static_cast<char *>(dst->data) + (r0 + i) * dst->nb[2] + h * dst->nb[1]);
        const __m512 inv = _mm512_set1_ps(l[i] == 0.0f ? 0.0f : 1.0f / l[i]);
        for (int64_t c = 0; c < Dv; c += 16) _mm512_storeu_ps(out + c, _mm512_mul_ps(_mm512_load_ps(O + i * Dv + c), inv));
    }
}

void attention_kernel(ggml_tensor *dst, int ith, int nth, void *userdata) {
    const float scale = *static_cast<const float *>(userdata);
    const ggml_tensor *q = dst->src[0], *kt = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const int64_t n_q = q->ne[1], n_head = q->ne[2], n_units_per_head = (n_q + kRows - 1) / kRows;
    for (int64_t u = ith; u < n_head * n_units_per_head; u += nth) {
        const int64_t h = u / n_units_per_head, r0 = (u % n_units_per_head) * kRows;
        attend(q, kt, v, mask, dst, scale, h, r0, (int)std::min<int64_t>(kRows, n_q - r0));
    }
}

#pragma GCC diagnostic pop

TOY_TARGET_END
#endif  // __x86_64__

bool cpu_has_avx512() {
#if defined(__x86_64__)
    static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                            __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return has;
#else
    return false;
#endif
}

// Where t's bytes are: in host memory, or not allocated yet (computed in this graph).
bool on_host(const ggml_tensor *t) {
    const ggml_tensor *base = t->view_src ? t->view_src : t;
    return !base->buffer || ggml_backend_buffer_is_host(base->buffer);
}

}  // namespace

bool host_flash_attn_applies(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v, const ggml_tensor *mask,
                             float softcap) {
    static const bool off = [] {
        const char *e = std::getenv("TOY_FLASH_ATTN_KERNEL");
        return e && std::strcmp(e, "ggml") == 0;
    }();
    if (off || !cpu_has_avx512() || !mask || softcap != 0.0f) return false;
    const bool kv_types = (k->type == GGML_TYPE_F16 || k->type == GGML_TYPE_F32) && v->type == k->type;
    return kv_types && q->type == GGML_TYPE_F32 && mask->type == GGML_TYPE_F16 && q->ne[1] >= kRows &&
           q->ne[0] % 16 == 0 && q->ne[0] <= kMaxHead && v->ne[0] % 16 == 0 && v->ne[0] <= kMaxHead &&
           k->ne[0] == q->ne[0] && k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2] && q->ne[2] % k->ne[2] == 0 &&
           q->ne[3] == 1 && k->ne[3] == 1 && mask->ne[0] >= k->ne[1] && mask->ne[1] >= q->ne[1] &&
           q->nb[0] == sizeof(float) && k->nb[0] == ggml_type_size(k->type) && v->nb[0] == ggml_type_size(v->type) &&
           on_host(k) && on_host(v) && on_host(mask);
}

ggml_tensor *host_flash_attn(ggml_context *ctx, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, ggml_tensor *mask, float scale) {
#if defined(__x86_64__)
    const int64_t n_tiles = (k->ne[1] + kCells - 1) / kCells;
    ggml_tensor *k_args[] = {k};
    ggml_tensor *kt =
        ggml_custom_4d(ctx, GGML_TYPE_F32, kCells, k->ne[0], n_tiles, k->ne[2], k_args, 1, k_tiles_kernel, GGML_N_TASKS_MAX, nullptr);
    ggml_tensor *v32 = v->type == GGML_TYPE_F32 ? ggml_cont(ctx, v) : ggml_cast(ctx, v, GGML_TYPE_F32);  // [head_dim_v, n_kv, n_head_kv]
    ggml_tensor *args[] = {q, kt, v32, mask};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0], q->ne[2], q->ne[1], 1, args, 4, attention_kernel, GGML_N_TASKS_MAX,
                          const_cast<float *>(scale_slot(scale)));
#else
    (void)ctx, (void)q, (void)k, (void)v, (void)mask, (void)scale;
    return nullptr;
#endif
}

}  // namespace toy::graph
