// llama.cpp's quantization mixes (src/llama-quant.cpp of the pinned bundle),
// restated as one rule function per tensor role. The facts are llama.cpp's;
// where a rule looks arbitrary, it is: it reproduces llama-quantize's
// choices type for type.
#include "quant/mix.h"

#include "core/error.h"
#include "gguf/gguf_reader.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <numeric>

namespace toy::quant {
namespace {

using F = FileType;

// ------------------------------------------------------------ file types

struct FileTypeRow {
    FileType ftype;
    ggml_type base;
};

constexpr FileTypeRow kBase[] = {
    {F::F32, GGML_TYPE_F32},         {F::F16, GGML_TYPE_F16},         {F::BF16, GGML_TYPE_BF16},
    {F::Q4_0, GGML_TYPE_Q4_0},       {F::Q4_1, GGML_TYPE_Q4_1},       {F::Q5_0, GGML_TYPE_Q5_0},
    {F::Q5_1, GGML_TYPE_Q5_1},       {F::Q8_0, GGML_TYPE_Q8_0},       {F::Q1_0, GGML_TYPE_Q1_0},
    {F::Q2_0, GGML_TYPE_Q2_0},       {F::MXFP4_MOE, GGML_TYPE_MXFP4}, {F::Q2_K, GGML_TYPE_Q2_K},
    {F::Q2_K_S, GGML_TYPE_Q2_K},     {F::IQ3_XS, GGML_TYPE_IQ3_S},    {F::Q3_K_S, GGML_TYPE_Q3_K},
    {F::Q3_K_M, GGML_TYPE_Q3_K},     {F::Q3_K_L, GGML_TYPE_Q3_K},     {F::Q4_K_S, GGML_TYPE_Q4_K},
    {F::Q4_K_M, GGML_TYPE_Q4_K},     {F::Q5_K_S, GGML_TYPE_Q5_K},     {F::Q5_K_M, GGML_TYPE_Q5_K},
    {F::Q6_K, GGML_TYPE_Q6_K},       {F::TQ1_0, GGML_TYPE_TQ1_0},     {F::TQ2_0, GGML_TYPE_TQ2_0},
    {F::IQ2_XXS, GGML_TYPE_IQ2_XXS}, {F::IQ2_XS, GGML_TYPE_IQ2_XS},   {F::IQ2_S, GGML_TYPE_IQ2_XS},
    {F::IQ2_M, GGML_TYPE_IQ2_S},     {F::IQ3_XXS, GGML_TYPE_IQ3_XXS}, {F::IQ1_S, GGML_TYPE_IQ1_S},
    {F::IQ1_M, GGML_TYPE_IQ1_M},     {F::IQ4_NL, GGML_TYPE_IQ4_NL},   {F::IQ4_XS, GGML_TYPE_IQ4_XS},
    {F::IQ3_S, GGML_TYPE_IQ3_S},     {F::IQ3_M, GGML_TYPE_IQ3_S},
};

bool is_one_of(FileType ft, std::initializer_list<FileType> set) { return std::find(set.begin(), set.end(), ft) != set.end(); }

bool contains(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

// ------------------------------------------------------------ rule 1: which tensors are quantized

// Substrings of tensors llama.cpp never quantizes although they are weight
// matrices: routers, small per-layer tables of other architectures, vision and
// audio parts.
constexpr const char *kKeptParts[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight",
    "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
    "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_",
    ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};
// ... and whole names (learned positions, BERT's token types).
constexpr const char *kKeptNames[] = {"position_embd.weight", "token_types.weight"};

int n_dims_of(const std::array<int64_t, 4> &ne) {
    int n = 4;
    while (n > 1 && ne[(size_t)n - 1] == 1) --n;
    return n;
}

// ------------------------------------------------------------ roles

// What a tensor is to the mixes, from its name alone (any architecture).
enum class Role { TokenEmbd, Output, AttnQ, AttnK, AttnV, AttnOut, FfnUp, FfnGate, FfnDown, Other };

Role role_of(const std::string &name) {
    if (name == "output.weight") return Role::Output;
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Role::TokenEmbd;
    // a fused QKV and MLA's kv_b carry V, so V's rules apply to them
    if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight")) return Role::AttnV;
    if (contains(name, "attn_k.weight")) return Role::AttnK;
    if (contains(name, "attn_q.weight")) return Role::AttnQ;
    if (contains(name, "attn_output.weight")) return Role::AttnOut;
    if (contains(name, "ffn_up")) return Role::FfnUp;
    if (contains(name, "ffn_gate")) return Role::FfnGate;
    if (contains(name, "ffn_down")) return Role::FfnDown;
    return Role::Other;
}

int layer_in_name(const std::string &name) {
    int il = -1;
    if (std::sscanf(name.c_str(), "blk.%d.", &il) != 1) return -1;
    return il;
}

// ------------------------------------------------------------ rule 3: the mixes

// Everything a rule may look at for one tensor.
struct Site {
    FileType ft;
    ggml_type base;       // the file type's base type
    Role role;
    int64_t ne0, ne2;     // row length; experts (3-D weights)
    // Layer-dependent rules: ffn_* use the layer (of n_layer), attn_v the
    // tensor's position among the attn_v-like tensors (of n_attn_v). The very
    // low-bit mixes use ffn_down's position among ffn_down tensors instead of its layer.
    int64_t layer, n_layer, attn_v_index, n_attn_v, ffn_down_index;
    int64_t n_gqa, n_expert;
    bool falcon, big_70b, tied, imatrix;
    ggml_type output_type;   // --output-tensor-type, or COUNT
};

// Layers that get more bits in the _M mixes: the first and last eighth and every third one between.
bool more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool very_low_bit(FileType ft) { return is_one_of(ft, {F::IQ2_XXS, F::IQ2_XS, F::IQ1_S, F::IQ2_S, F::IQ2_M, F::IQ1_M}); }

// The output projection, and a tied token embedding (it is the output projection too).
ggml_type output_rule(const Site &s) {
    if (s.output_type != GGML_TYPE_COUNT) return s.output_type;
    if (s.ft == F::MXFP4_MOE) return GGML_TYPE_Q8_0;
    if (s.falcon || s.ne0 % ggml_blck_size(s.base) != 0) return GGML_TYPE_Q8_0;
    if (very_low_bit(s.ft) || s.ft == F::IQ3_XXS) return GGML_TYPE_Q5_K;
    return s.base == GGML_TYPE_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q6_K;
}

ggml_type token_embd_rule(const Site &s) {
    if (is_one_of(s.ft, {F::IQ2_XXS, F::IQ2_XS, F::IQ1_S, F::IQ1_M})) return GGML_TYPE_Q2_K;
    if (is_one_of(s.ft, {F::IQ2_S, F::IQ2_M, F::IQ3_XXS})) return GGML_TYPE_IQ3_S;
    if (is_one_of(s.ft, {F::TQ1_0, F::TQ2_0, F::Q2_0})) return GGML_TYPE_Q4_K;
    return s.base;
}

// IQ1/IQ2 mixes: a few roles get a 2-3 bit type instead of the 1-2 bit base.
ggml_type very_low_bit_rule(const Site &s) {
    const bool iq2_s_m = is_one_of(s.ft, {F::IQ2_S, F::IQ2_M});
    switch (s.role) {
        case Role::AttnV:
            if (s.n_gqa >= 4 || s.n_expert >= 4) return GGML_TYPE_Q4_K;
            return iq2_s_m ? GGML_TYPE_IQ3_S : GGML_TYPE_Q2_K;
        case Role::AttnK:
            return s.n_expert == 8 ? GGML_TYPE_Q4_K : s.base;
        case Role::FfnDown:
            if (s.ffn_down_index < s.n_layer / 8) return iq2_s_m ? GGML_TYPE_IQ3_S : GGML_TYPE_Q2_K;
            return s.base;
        case Role::AttnOut:
            if (s.n_expert == 8) return GGML_TYPE_Q5_K;
            if (is_one_of(s.ft, {F::IQ1_S, F::IQ1_M})) return GGML_TYPE_IQ2_XXS;
            if (iq2_s_m) return GGML_TYPE_IQ3_S;
            return s.base;
        default:
            return s.base;
    }
}

ggml_type attn_v_rule(const Site &s) {
    const bool gqa4 = s.n_gqa >= 4;
    ggml_type t = s.base;
    switch (s.ft) {
        case F::Q2_K: t = gqa4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K; break;
        case F::Q2_K_S: if (gqa4) t = GGML_TYPE_Q4_K; break;
        case F::IQ3_XXS: t = gqa4 ? GGML_TYPE_Q4_K : s.imatrix ? GGML_TYPE_IQ3_XXS : GGML_TYPE_IQ3_S; break;
        case F::IQ3_XS:
        case F::IQ3_S: if (gqa4) t = GGML_TYPE_Q4_K; break;
        case F::IQ3_M: t = GGML_TYPE_Q4_K; break;
        case F::Q3_K_M: t = s.attn_v_index < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K; break;
        case F::Q3_K_L: t = GGML_TYPE_Q5_K; break;
        case F::IQ4_NL:
        case F::IQ4_XS: if (gqa4) t = GGML_TYPE_Q5_K; break;
        case F::Q4_K_M:
        case F::Q5_K_M: if (more_bits(s.attn_v_index, s.n_attn_v)) t = GGML_TYPE_Q6_K; break;
        case F::Q4_K_S: if (s.attn_v_index < 4) t = GGML_TYPE_Q5_K; break;
        default: break;
    }
    // 70B-class models share one V among 8 query heads: V is 8x smaller than Q, so more bits cost little
    if (s.big_70b && (t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K)) t = GGML_TYPE_Q5_K;
    if (s.n_expert == 8) t = GGML_TYPE_Q8_0;
    return t;
}

ggml_type attn_k_rule(const Site &s) {
    if (s.n_expert == 8) return GGML_TYPE_Q8_0;
    if (s.ft == F::IQ3_XS) return GGML_TYPE_IQ3_XXS;
    if (s.ft == F::IQ3_XXS) return GGML_TYPE_IQ2_S;
    return s.base;
}

ggml_type attn_q_rule(const Site &s) {
    if (s.ft == F::IQ3_XS) return GGML_TYPE_IQ3_XXS;
    if (s.ft == F::IQ3_XXS) return GGML_TYPE_IQ2_S;
    return s.base;
}

ggml_type ffn_down_rule(const Site &s) {
    const int64_t i = s.layer, n = s.n_layer;
    const bool first_eighth = i < n / 8;
    switch (s.ft) {
        case F::Q2_K: return GGML_TYPE_Q3_K;
        case F::Q2_K_S: return first_eighth ? GGML_TYPE_Q4_K : s.base;
        case F::IQ3_XXS:
            if (!s.imatrix) return first_eighth ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
            return s.base;
        case F::Q3_K_M:
            if (i < n / 16) return GGML_TYPE_Q5_K;
            return !s.falcon || more_bits(i, n) ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
        case F::IQ3_M:
            return first_eighth || (s.n_expert == 8 && more_bits(i, n)) ? GGML_TYPE_Q4_K : s.base;
        case F::Q3_K_L: return s.falcon ? GGML_TYPE_Q4_K : GGML_TYPE_Q5_K;
        case F::Q4_K_M:
            if (s.falcon) return i < n / 16 ? GGML_TYPE_Q6_K : more_bits(i, n) ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
            return more_bits(i, n) ? GGML_TYPE_Q6_K : s.base;
        case F::IQ4_NL:
        case F::IQ4_XS: return first_eighth && !s.imatrix ? GGML_TYPE_Q5_K : s.base;
        case F::Q5_K_M: return more_bits(i, n) ? GGML_TYPE_Q6_K : s.base;
        case F::Q4_K_S: return !s.falcon && first_eighth ? GGML_TYPE_Q5_K : s.base;
        // with an imatrix only, so that a file made without one stays as it always was
        case F::Q4_0: return s.imatrix && first_eighth ? GGML_TYPE_Q4_1 : s.base;
        case F::Q5_0: return s.imatrix && first_eighth ? GGML_TYPE_Q5_1 : s.base;
        default: return s.base;
    }
}

ggml_type attn_out_rule(const Site &s) {
    if (s.falcon) return s.ft == F::Q3_K_L ? GGML_TYPE_Q4_K : s.base;
    if (s.n_expert == 8) {
        const bool bump = is_one_of(s.ft, {F::Q2_K, F::IQ3_XS, F::IQ3_XXS, F::Q3_K_S, F::Q3_K_M, F::IQ4_NL, F::Q4_K_S,
                                           F::Q4_K_M, F::IQ3_S, F::IQ3_M, F::IQ4_XS});
        return bump ? GGML_TYPE_Q5_K : s.base;
    }
    switch (s.ft) {
        case F::Q2_K: return GGML_TYPE_Q3_K;
        case F::IQ3_XXS: return GGML_TYPE_IQ3_S;
        case F::Q3_K_M: return GGML_TYPE_Q4_K;
        case F::Q3_K_L: return GGML_TYPE_Q5_K;
        case F::IQ3_M: return GGML_TYPE_Q4_K;
        default: return s.base;
    }
}

// ffn_gate and ffn_up: IQ3_XS keeps its base type only in the first and last eighth of the layers.
ggml_type ffn_gate_up_rule(const Site &s) {
    if (s.ft == F::IQ3_XS && s.layer >= s.n_layer / 8 && s.layer < 7 * s.n_layer / 8) return GGML_TYPE_IQ3_XXS;
    return s.base;
}

ggml_type mix_rule(const Site &s, const std::string &arch) {
    if (s.role == Role::Output || (s.tied && s.role == Role::TokenEmbd)) return output_rule(s);
    if (s.ft == F::MXFP4_MOE) {
        // experts in MXFP4, everything else Q8_0 (bailingmoe3's 3-D MLA projections are not experts)
        const bool expert_role = s.role == Role::FfnUp || s.role == Role::FfnGate || s.role == Role::FfnDown;
        return s.ne2 > 1 && (arch != "bailingmoe3" || expert_role) ? GGML_TYPE_MXFP4 : GGML_TYPE_Q8_0;
    }
    if (s.role == Role::TokenEmbd) return token_embd_rule(s);
    if (very_low_bit(s.ft)) return very_low_bit_rule(s);
    switch (s.role) {
        case Role::AttnV: return attn_v_rule(s);
        case Role::AttnK: return attn_k_rule(s);
        case Role::AttnQ: return attn_q_rule(s);
        case Role::FfnDown: return ffn_down_rule(s);
        case Role::AttnOut: return attn_out_rule(s);
        case Role::FfnGate:
        case Role::FfnUp: return ffn_gate_up_rule(s);
        default: return s.base;
    }
}

// ------------------------------------------------------------ rule 4: block-size fallback

// A type with 32-element blocks for one with 256 (or 64/128), F16 when even that does not fit.
ggml_type fallback(ggml_type t, int64_t ne0, const std::string &name) {
    if (ne0 % ggml_blck_size(t) == 0) return t;
    ggml_type f = t;
    switch (t) {
        case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
        case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ4_XS:
            f = GGML_TYPE_IQ4_NL; break;
        case GGML_TYPE_Q2_0: case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_TQ1_0: case GGML_TYPE_TQ2_0:
            f = GGML_TYPE_Q4_0; break;
        case GGML_TYPE_Q4_K: f = GGML_TYPE_Q5_0; break;
        case GGML_TYPE_Q5_K: f = GGML_TYPE_Q5_1; break;
        case GGML_TYPE_Q6_K: f = GGML_TYPE_Q8_0; break;
        default:
            if (ggml_blck_size(t) > 32) {
                fail("tensor '{}': rows of {} are not a multiple of {}'s block of {}, and {} has no smaller-block fallback",
                     name, ne0, ggml_type_name(t), ggml_blck_size(t), ggml_type_name(t));
            }
            break;
    }
    return ne0 % ggml_blck_size(f) == 0 ? f : GGML_TYPE_F16;
}

bool needs_imatrix(Role role, ggml_type t, FileType ft) {
    if (role == Role::TokenEmbd || role == Role::Output) return false;
    switch (t) {
        case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
        case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ1_S:
            return true;
        case GGML_TYPE_Q2_K:
            return ft == F::Q2_K_S;  // the one K-quant mix that is made for an imatrix
        default:
            return false;
    }
}

// llama.cpp treats these as 70B models (one V per 8 query heads): architecture, layers, needs GQA.
struct Big70b {
    const char *arch;
    int64_t n_layer;
    bool gqa;
};
constexpr Big70b kBig70b[] = {{"llama", 80, true}, {"deci", 80, false}, {"olmo", 80, false}, {"qwen2", 80, false}, {"jais2", 68, false}};

bool is_big_70b(const MixModel &m) {
    for (const auto &b : kBig70b) {
        if (m.arch != b.arch || m.n_layer != b.n_layer) continue;
        if (m.arch == std::string("llama") && m.n_expert == 8) return false;  // Mixtral-style, not a 70B
        return !b.gqa || m.n_head != m.n_head_kv;
    }
    return false;
}

std::string upper(std::string s) {
    for (char &c : s) c = (char)std::toupper((unsigned char)c);
    return s;
}

}  // namespace

// ------------------------------------------------------------ public

const std::vector<QuantTypeName> &quant_type_names() {
    static const std::vector<QuantTypeName> names = {
        {"Q1_0", F::Q1_0, false, "1.125 bpw"},
        {"Q2_0", F::Q2_0, false, "2.25 bpw (group 64)"},
        {"Q4_0", F::Q4_0, false, "4.5 bpw"},
        {"Q4_1", F::Q4_1, false, "5.0 bpw"},
        {"MXFP4_MOE", F::MXFP4_MOE, false, "MXFP4 experts, Q8_0 elsewhere"},
        {"Q5_0", F::Q5_0, false, "5.5 bpw"},
        {"Q5_1", F::Q5_1, false, "6.0 bpw"},
        {"IQ2_XXS", F::IQ2_XXS, false, "2.06 bpw, needs an imatrix"},
        {"IQ2_XS", F::IQ2_XS, false, "2.31 bpw, needs an imatrix"},
        {"IQ2_S", F::IQ2_S, false, "2.5 bpw, needs an imatrix"},
        {"IQ2_M", F::IQ2_M, false, "2.7 bpw, needs an imatrix"},
        {"IQ1_S", F::IQ1_S, false, "1.56 bpw, needs an imatrix"},
        {"IQ1_M", F::IQ1_M, false, "1.75 bpw, needs an imatrix"},
        {"TQ1_0", F::TQ1_0, false, "1.69 bpw ternary"},
        {"TQ2_0", F::TQ2_0, false, "2.06 bpw ternary"},
        {"Q2_K", F::Q2_K, false, "mostly Q2_K"},
        {"Q2_K_S", F::Q2_K_S, false, "mostly Q2_K, needs an imatrix"},
        {"IQ3_XXS", F::IQ3_XXS, false, "3.06 bpw, needs an imatrix"},
        {"IQ3_S", F::IQ3_S, false, "3.44 bpw"},
        {"IQ3_M", F::IQ3_M, false, "3.66 bpw mix"},
        {"Q3_K", F::Q3_K_M, false, "alias for Q3_K_M"},
        {"IQ3_XS", F::IQ3_XS, false, "3.3 bpw mix"},
        {"Q3_K_S", F::Q3_K_S, false, "mostly Q3_K"},
        {"Q3_K_M", F::Q3_K_M, false, "Q3_K, more bits for attn_v, ffn_down, attn_output"},
        {"Q3_K_L", F::Q3_K_L, false, "Q3_K, Q5_K for attn_v, ffn_down, attn_output"},
        {"IQ4_NL", F::IQ4_NL, false, "4.5 bpw non-linear"},
        {"IQ4_XS", F::IQ4_XS, false, "4.25 bpw non-linear"},
        {"Q4_K", F::Q4_K_M, false, "alias for Q4_K_M"},
        {"Q4_K_S", F::Q4_K_S, false, "mostly Q4_K"},
        {"Q4_K_M", F::Q4_K_M, false, "Q4_K, Q6_K for half of attn_v and ffn_down"},
        {"Q5_K", F::Q5_K_M, false, "alias for Q5_K_M"},
        {"Q5_K_S", F::Q5_K_S, false, "mostly Q5_K"},
        {"Q5_K_M", F::Q5_K_M, false, "Q5_K, Q6_K for half of attn_v and ffn_down"},
        {"Q6_K", F::Q6_K, false, "6.56 bpw"},
        {"Q8_0", F::Q8_0, false, "8.5 bpw"},
        {"F16", F::F16, false, "16 bpw"},
        {"BF16", F::BF16, false, "16 bpw, bfloat16"},
        {"F32", F::F32, false, "32 bpw"},
        {"COPY", F::F32, true, "every tensor as it is (metadata rewritten)"},
    };
    return names;
}

const QuantTypeName &parse_quant_type(const std::string &s) {
    const std::string u = upper(s);
    for (const auto &q : quant_type_names()) {
        if (u == q.name) return q;
    }
    // a file type number, as llama-quantize accepts (COPY has none of its own)
    if (!s.empty() && s.size() <= 3 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        const int n = std::stoi(s);
        for (const auto &q : quant_type_names()) {
            if (!q.copy && (int)q.ftype == n) return q;
        }
    }
    std::string all;
    for (const auto &q : quant_type_names()) all += (all.empty() ? "" : ", ") + std::string(q.name);
    fail("type: unknown quantization type '{}' (expected one of {})", s, all);
}

ggml_type file_type_base(FileType ft) {
    for (const auto &r : kBase) {
        if (r.ftype == ft) return r.base;
    }
    fail("file type {} has no base type", (int)ft);
}

ggml_type parse_ggml_type(const std::string &s, const char *flag) {
    // the types ggml_quantize_chunk produces from F32
    static constexpr ggml_type kProducible[] = {
        GGML_TYPE_F32,  GGML_TYPE_F16,   GGML_TYPE_BF16,    GGML_TYPE_Q4_0,   GGML_TYPE_Q4_1,    GGML_TYPE_Q5_0,
        GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,  GGML_TYPE_Q1_0,    GGML_TYPE_Q2_0,   GGML_TYPE_MXFP4,   GGML_TYPE_NVFP4,
        GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,  GGML_TYPE_Q4_K,    GGML_TYPE_Q5_K,   GGML_TYPE_Q6_K,    GGML_TYPE_TQ1_0,
        GGML_TYPE_TQ2_0, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S,
        GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    };
    std::string lower = s;
    for (char &c : lower) c = (char)std::tolower((unsigned char)c);
    std::string all;
    for (ggml_type t : kProducible) {
        std::string name = ggml_type_name(t);
        for (char &c : name) c = (char)std::tolower((unsigned char)c);
        if (lower == name) return t;
        all += (all.empty() ? "" : ", ") + name;
    }
    fail("{}: unknown ggml type '{}' (expected one of {})", flag, s, all);
}

MixModel MixModel::from_gguf(const gguf::File &f) {
    MixModel m;
    m.arch = f.opt_string("general.architecture").value_or("");
    const std::string a = m.arch + ".";
    // a per-layer array: its first element, as llama.cpp's GQA ratio takes layer 0
    auto first_int = [&](const std::string &key) -> int64_t {
        const gguf::Value *v = f.find(key);
        if (!v) return 0;
        if (v->type == gguf::ValueType::ARRAY) {
            if (v->n == 0 || v->elem_type == gguf::ValueType::STRING) fail("{}: key '{}': expected a number or numbers, found an empty or string array", f.path(), key);
            return (int64_t)v->number_at(0);
        }
        return f.get_int(key);
    };
    m.n_layer = first_int(a + "block_count");
    m.n_head = first_int(a + "attention.head_count");
    m.n_head_kv = f.has(a + "attention.head_count_kv") ? first_int(a + "attention.head_count_kv") : m.n_head;
    m.n_expert = first_int(a + "expert_count");
    return m;
}

bool quantizable(const TensorDesc &t, const MixOptions &o) {
    if (o.copy || n_dims_of(t.ne) < 2) return false;
    const std::string &n = t.name;
    if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
    if (!o.quantize_output && n == "output.weight") return false;
    for (const char *part : kKeptParts) {
        if (contains(n, part)) return false;
    }
    for (const char *name : kKeptNames) {
        if (n == name) return false;
    }
    return true;
}

std::vector<TypeChoice> choose_types(const std::vector<TensorDesc> &tensors, const MixModel &m, const MixOptions &o) {
    const ggml_type base = file_type_base(o.ftype);
    // llama.cpp visits tensors by layer (non-layer tensors first), then by name
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int la = layer_in_name(tensors[a].name), lb = layer_in_name(tensors[b].name);
        if (la != lb) return la < lb;
        return tensors[a].name < tensors[b].name;
    });

    bool tied = true;
    int64_t n_attn_v = 0;
    for (const auto &t : tensors) {
        const Role r = role_of(t.name);
        tied &= r != Role::Output;
        n_attn_v += r == Role::AttnV;
    }
    Site site{};
    site.ft = o.ftype;
    site.base = base;
    site.n_layer = m.n_layer;
    site.n_attn_v = n_attn_v;
    site.n_gqa = m.n_head_kv > 0 ? m.n_head / m.n_head_kv : 0;
    site.n_expert = m.n_expert;
    site.falcon = m.arch == "falcon";
    site.big_70b = is_big_70b(m);
    site.tied = tied;
    site.imatrix = o.imatrix;
    site.output_type = o.output_type;

    int64_t attn_v_seen = 0, down_seen = 0, gate_seen = 0, up_seen = 0;
    std::vector<TypeChoice> out(tensors.size());
    for (size_t k : order) {
        const TensorDesc &t = tensors[k];
        TypeChoice &c = out[k];
        c.type = c.wanted = t.type;
        c.quantizable = quantizable(t, o);
        if (!c.quantizable) continue;
        const Role role = role_of(t.name);
        // explicit types for the two ends of the model, as given (no mix, no fallback)
        if (o.token_embd_type != GGML_TYPE_COUNT && role == Role::TokenEmbd) {
            c.type = c.wanted = o.token_embd_type;
        } else if (o.output_type != GGML_TYPE_COUNT && role == Role::Output) {
            c.type = c.wanted = o.output_type;
        } else if (!ggml_is_quantized(base)) {
            c.type = c.wanted = base;  // F32 / F16 / BF16: every matrix, no mix
        } else {
            ggml_type want = base;
            if (!o.pure) {
                site.role = role;
                site.ne0 = t.ne[0];
                site.ne2 = t.ne[2];
                site.attn_v_index = attn_v_seen;
                site.ffn_down_index = down_seen;
                int64_t *seen = role == Role::FfnDown ? &down_seen : role == Role::FfnGate ? &gate_seen : role == Role::FfnUp ? &up_seen : nullptr;
                // Positions count the tensors of a role the mix has seen. MXFP4_MOE counts
                // none; the other mixes number an expert model's ffn tensors by the layer in
                // their name instead (a MoE file may hold several ffn_down per layer: shared
                // experts), except the IQ1/IQ2 mixes, which go by ffn_down's position.
                const bool counted = o.ftype != F::MXFP4_MOE;
                const bool by_name = counted && !very_low_bit(o.ftype) && m.n_expert > 1;
                site.layer = seen ? *seen : 0;
                if (seen && by_name) {
                    site.layer = layer_in_name(t.name);
                    if (site.layer < 0 || site.layer >= m.n_layer) {
                        fail("tensor '{}': expected a name 'blk.N.' with N in 0..{}, as MoE mixes go by layer", t.name, m.n_layer - 1);
                    }
                }
                want = mix_rule(site, m.arch);
                if (counted && role == Role::AttnV) ++attn_v_seen;
                // the IQ1/IQ2 mixes count ffn_down only
                if (counted && seen && (!very_low_bit(o.ftype) || role == Role::FfnDown)) ++*seen;
            }
            c.wanted = want;
            c.type = fallback(want, t.ne[0], t.name);
        }
        c.needs_imatrix = needs_imatrix(role, c.type, o.ftype);
    }
    return out;
}

}  // namespace toy::quant
