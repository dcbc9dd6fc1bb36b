// Config: every hyper-parameter and architectural choice of a model, read
// once from GGUF metadata. Graph builders branch on these fields, never on
// the architecture's name (DESIGN.md: "architecture differences are data").
#pragma once

#include "gguf/gguf_reader.h"

#include <cstdint>
#include <string>
#include <vector>

namespace toy {

enum class NormKind { Rms, Layer };            // RMSNorm (weight) or LayerNorm (weight + bias)
enum class FfnKind { SwiGlu, GeGlu, Gelu };     // gated silu, gated tanh-gelu, plain gelu (gpt2)
enum class QkNormKind { None, PerHead, Full };  // per-head [head_dim] or over the whole projection
enum class RopeScalingKind { None, Linear, Yarn, Llama3 };
enum class PosKind { Rope, Learned };           // rotary or learned absolute (gpt2)

struct RopeConfig {
    int mode = 0;               // GGML_ROPE_TYPE_NORMAL (0) or GGML_ROPE_TYPE_NEOX (2)
    int n_rot = 0;              // rotated dimensions per head
    float freq_base = 10000.0f;
    RopeScalingKind scaling = RopeScalingKind::None;
    float freq_scale = 1.0f;    // 1 / scaling factor
    int n_ctx_orig = 0;         // YaRN / Llama-3: original training context
    float ext_factor = 0.0f;    // YaRN extrapolation mix (0 disables YaRN)
    float attn_factor = 1.0f;   // YaRN magnitude scaling
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
    // Llama-3 frequency factors computed from metadata when the model has no
    // rope_freqs.weight tensor (empty otherwise): one per rotated pair.
    std::vector<float> freq_factors;
};

struct Config {
    std::string arch;         // general.architecture, for messages and file output only
    std::string name;         // general.name (may be empty)

    // ---- sizes ----
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_ff = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim_k = 0;   // per-head size of Q and K
    int64_t head_dim_v = 0;   // per-head size of V
    int64_t n_embd_q() const { return n_head * head_dim_k; }
    int64_t n_embd_k_gqa() const { return n_head_kv * head_dim_k; }
    int64_t n_embd_v_gqa() const { return n_head_kv * head_dim_v; }

    // ---- blocks ----
    NormKind norm = NormKind::Rms;
    float norm_eps = 1e-5f;
    FfnKind ffn = FfnKind::SwiGlu;
    QkNormKind qk_norm = QkNormKind::None;
    bool qkv_bias = false;        // biases on Q, K, V projections (qwen2)
    bool fused_qkv = false;       // one attn_qkv projection (gpt2)
    bool linear_bias = false;     // biases on every linear layer + norms (gpt2)
    bool post_norms = false;      // RMSNorm after attention and FFN, before the residual add (gemma2)
    PosKind pos = PosKind::Rope;
    RopeConfig rope;

    // ---- attention ----
    float attn_scale = 0.0f;      // scale on Q·K; 0 means 1/sqrt(head_dim_k)
    float query_scale = 0.0f;     // extra scale applied to Q before attention (gemma2); 0 = none
    float attn_softcap = 0.0f;    // tanh soft-cap on attention logits; 0 = none
    int64_t n_swa = 0;            // sliding window length; 0 = none
    std::vector<bool> swa_layers; // per layer: uses the sliding window

    // ---- scales ----
    float embd_scale = 1.0f;      // multiplies token embeddings (gemma2 sqrt(d), granite)
    float residual_scale = 1.0f;  // multiplies each block's output before the residual add (granite)
    float logit_scale = 1.0f;     // divides the final logits (granite)
    float final_softcap = 0.0f;   // tanh soft-cap on the final logits; 0 = none

    // ---- mixture of experts ----
    int64_t n_expert = 0;         // 0 = dense FFN
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;
    bool expert_weights_norm = false;  // renormalize the selected experts' weights to sum 1

    bool is_moe() const { return n_expert > 0; }
    bool layer_uses_swa(int64_t il) const { return n_swa > 0 && il < (int64_t)swa_layers.size() && swa_layers[il]; }

    // Reads and validates the metadata. Throws toy::Error naming the file and key.
    static Config from_gguf(const gguf::File &file);
};

// Names of the architectures toy can run (for --help and errors).
std::vector<std::string> supported_architectures();

}  // namespace toy
