"""Tiny random Hugging Face checkpoints, one per architecture toy converts,
for tests/data/convert/hf/<name>/ (config.json, model.safetensors,
tokenizer.model, tokenizer_config.json). Run once by
scripts/make-convert-reference.sh; the files are kept in git so the tests
need neither Python nor the reference tools.

The weights are small random numbers (seeded), stored in the dtype each
config names, so the converter's F32/F16/BF16 paths are all exercised. The
tokenizer is a 512-piece SentencePiece BPE model trained here on English
text, with byte fallback.

usage: make_checkpoints.py OUT_DIR TRAINING_TEXT
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import sentencepiece as spm

OUT, TEXT = sys.argv[1], sys.argv[2]
V = 512

DTYPES = {"F32": np.float32, "F16": np.float16}


def to_bytes(a, dtype):
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "BF16":  # round to nearest even, as torch does
        u = a.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return u.tobytes()
    return a.astype(DTYPES[dtype]).tobytes()


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        b = to_bytes(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def llama_like(rng, c, qkv_bias=False, qk_norm=None, gemma=False, moe=None):
    """Tensors of a llama-style checkpoint. qk_norm: 'head' (Qwen3, per head)
    or 'full' (OLMoE, over all heads). moe: 'mixtral' or 'qwen'."""
    d, ff, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim", d // nh)
    r = lambda *s: (rng.standard_normal(s) * 0.08).astype(np.float32)
    norm = lambda n: (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    t = [("model.embed_tokens.weight", r(V, d))]
    for l in range(L):
        p = f"model.layers.{l}."
        t.append((p + "input_layernorm.weight", norm(d)))
        t.append((p + "self_attn.q_proj.weight", r(nh * hd, d)))
        t.append((p + "self_attn.k_proj.weight", r(nkv * hd, d)))
        t.append((p + "self_attn.v_proj.weight", r(nkv * hd, d)))
        t.append((p + "self_attn.o_proj.weight", r(d, nh * hd)))
        if qkv_bias:
            t += [(p + "self_attn.q_proj.bias", r(nh * hd)), (p + "self_attn.k_proj.bias", r(nkv * hd)),
                  (p + "self_attn.v_proj.bias", r(nkv * hd))]
        if qk_norm == "head":
            t += [(p + "self_attn.q_norm.weight", norm(hd)), (p + "self_attn.k_norm.weight", norm(hd))]
        elif qk_norm == "full":
            t += [(p + "self_attn.q_norm.weight", norm(nh * hd)), (p + "self_attn.k_norm.weight", norm(nkv * hd))]
        t.append((p + "post_attention_layernorm.weight", norm(d)))
        if gemma:
            t += [(p + "pre_feedforward_layernorm.weight", norm(d)), (p + "post_feedforward_layernorm.weight", norm(d))]
        if moe == "mixtral":
            ne = c["num_local_experts"]
            t.append((p + "block_sparse_moe.gate.weight", r(ne, d)))
            for e in range(ne):
                q = p + f"block_sparse_moe.experts.{e}."
                t += [(q + "w1.weight", r(ff, d)), (q + "w2.weight", r(d, ff)), (q + "w3.weight", r(ff, d))]
        elif moe == "qwen":
            ne, fe = c["num_experts"], c.get("moe_intermediate_size", ff)
            t.append((p + "mlp.gate.weight", r(ne, d)))
            for e in range(ne):
                q = p + f"mlp.experts.{e}."
                t += [(q + "gate_proj.weight", r(fe, d)), (q + "up_proj.weight", r(fe, d)), (q + "down_proj.weight", r(d, fe))]
        else:
            t += [(p + "mlp.gate_proj.weight", r(ff, d)), (p + "mlp.up_proj.weight", r(ff, d)),
                  (p + "mlp.down_proj.weight", r(d, ff))]
    t.append(("model.norm.weight", norm(d)))
    if not c.get("tie_word_embeddings", True):
        t.append(("lm_head.weight", r(V, d)))
    return t


def gpt2(rng, c):
    d, L, n_pos = c["n_embd"], c["n_layer"], c["n_positions"]
    r = lambda *s: (rng.standard_normal(s) * 0.08).astype(np.float32)
    norm = lambda n: (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    t = [("transformer.wte.weight", r(V, d)), ("transformer.wpe.weight", r(n_pos, d))]
    for l in range(L):
        p = f"transformer.h.{l}."
        t += [(p + "ln_1.weight", norm(d)), (p + "ln_1.bias", r(d)),
              (p + "attn.c_attn.weight", r(d, 3 * d)), (p + "attn.c_attn.bias", r(3 * d)),  # Conv1D: [in, out]
              (p + "attn.c_proj.weight", r(d, d)), (p + "attn.c_proj.bias", r(d)),
              (p + "ln_2.weight", norm(d)), (p + "ln_2.bias", r(d)),
              (p + "mlp.c_fc.weight", r(d, 4 * d)), (p + "mlp.c_fc.bias", r(4 * d)),
              (p + "mlp.c_proj.weight", r(4 * d, d)), (p + "mlp.c_proj.bias", r(d))]
    t += [("transformer.ln_f.weight", norm(d)), ("transformer.ln_f.bias", r(d))]
    return t


BASE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0, vocab_size=V, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2)

# name: (HF architecture, config overrides, dtype, builder options)
MODELS = {
    "llama": ("LlamaForCausalLM", dict(model_type="llama"), "BF16", {}),
    "llama3-rope": ("LlamaForCausalLM", dict(model_type="llama", tie_word_embeddings=True, rope_theta=500000.0,
                    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                      original_max_position_embeddings=64)), "F16", {}),
    "mistral": ("MistralForCausalLM", dict(model_type="mistral", sliding_window=4096), "F32", {}),
    "mixtral": ("MixtralForCausalLM", dict(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2), "BF16",
                dict(moe="mixtral")),
    "qwen2": ("Qwen2ForCausalLM", dict(model_type="qwen2", tie_word_embeddings=True, rope_theta=1000000.0,
              rope_scaling=dict(type="yarn", factor=4.0, original_max_position_embeddings=64)), "BF16", dict(qkv_bias=True)),
    "qwen3": ("Qwen3ForCausalLM", dict(model_type="qwen3", tie_word_embeddings=True, head_dim=16, rms_norm_eps=1e-6),
              "BF16", dict(qk_norm="head")),
    "qwen3moe": ("Qwen3MoeForCausalLM", dict(model_type="qwen3_moe", head_dim=16, num_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=32, norm_topk_prob=True), "BF16", dict(qk_norm="head", moe="qwen")),
    "olmoe": ("OlmoeForCausalLM", dict(model_type="olmoe", num_experts=4, num_experts_per_tok=2, num_key_value_heads=4),
              "F32", dict(qk_norm="full", moe="qwen")),
    "gemma2": ("Gemma2ForCausalLM", dict(model_type="gemma2", tie_word_embeddings=True, head_dim=16, rms_norm_eps=1e-6,
               attn_logit_softcapping=50.0, final_logit_softcapping=30.0, sliding_window=8, query_pre_attn_scalar=16,
               hidden_activation="gelu_pytorch_tanh"), "F32", dict(gemma=True)),
    "granite": ("GraniteForCausalLM", dict(model_type="granite", tie_word_embeddings=True, attention_multiplier=0.0625,
                embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=8.0), "BF16", {}),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    prefix = os.path.join(OUT, "spm")
    spm.SentencePieceTrainer.train(input=TEXT, model_prefix=prefix, vocab_size=V, model_type="bpe", byte_fallback=True,
                                   num_threads=1, seed_sentencepiece_size=100000,
                                   user_defined_symbols=["<|user|>"], normalization_rule_name="identity", minloglevel=2)
    chat = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    rng = np.random.default_rng(20261123)
    for name, (hf, over, dtype, opts) in MODELS.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        c = dict(BASE, architectures=[hf], torch_dtype={"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype])
        c.update(over)
        tensors = llama_like(rng, c, **opts)
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
        shutil.copy(prefix + ".model", os.path.join(d, "tokenizer.model"))
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "chat_template": chat}, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=2)
    # GPT-2: its own config keys and Conv1D layout
    d = os.path.join(OUT, "gpt2")
    os.makedirs(d, exist_ok=True)
    c = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", n_embd=32, n_head=4, n_layer=2, n_positions=128,
             n_ctx=128, layer_norm_epsilon=1e-5, vocab_size=V, bos_token_id=1, eos_token_id=2)
    write_safetensors(os.path.join(d, "model.safetensors"), gpt2(rng, c), "F32")
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
    shutil.copy(prefix + ".model", os.path.join(d, "tokenizer.model"))
    json.dump({"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"), indent=2)
    os.remove(prefix + ".model")
    os.remove(prefix + ".vocab")


main()
