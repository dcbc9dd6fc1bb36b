#include "convert/llama2c.h"

#include "convert/mapped_file.h"

#include "core/error.h"
#include "core/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace toy::convert {
namespace {

struct Header {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6 };

void read_tokenizer(const std::string &path, int64_t n_vocab, Converted &out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path);
    auto read = [&](void *p, size_t n, const char *what, int64_t id) {
        if (!in.read(static_cast<char *>(p), (std::streamsize)n)) {
            fail("{}: truncated at token {} of {} (reading its {}); is it the tokenizer of this model?", path, id, n_vocab, what);
        }
    };
    int32_t max_len = 0;
    read(&max_len, 4, "header", 0);
    if (max_len <= 0 || max_len > 1 << 16) fail("{}: max token length {} is not plausible; expected a llama2.c tokenizer.bin", path, max_len);
    std::vector<std::string> tokens((size_t)n_vocab);
    std::vector<float> scores((size_t)n_vocab);
    std::vector<int32_t> types((size_t)n_vocab);
    for (int64_t id = 0; id < n_vocab; ++id) {
        float score = 0;
        int32_t len = 0;
        read(&score, 4, "score", id);
        read(&len, 4, "length", id);
        if (std::isnan(score)) fail("{}: token {} has score NaN (tokenization orders merges by score)", path, id);
        if (len < 0 || len > max_len) fail("{}: token {} has length {}, expected 0..{}", path, id, len, max_len);
        std::string text((size_t)len, '\0');
        read(text.data(), (size_t)len, "text", id);
        int32_t type = kNormal;
        unsigned byte = 0;
        char tail = 0;
        if (id == 0) {
            text = "<unk>", type = kUnknown;
        } else if (id == 1) {
            text = "<s>", type = kControl;
        } else if (id == 2) {
            text = "</s>", type = kControl;
        } else if (text.empty()) {
            type = kControl;
        } else if (text.size() == 6 && std::sscanf(text.c_str(), "<0x%2X%c", &byte, &tail) == 2 && tail == '>') {
            type = kByte;
        }
        // SentencePiece writes spaces as U+2581
        std::string escaped;
        for (char c : text) escaped += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
        tokens[(size_t)id] = std::move(escaped);
        scores[(size_t)id] = score;
        types[(size_t)id] = type;
    }
    if (in.peek() != std::char_traits<char>::eof()) {
        out.notes.push_back(fmt::format("{} holds more tokens than the model's {}; the rest are ignored", path, n_vocab));
    }
    out.set("tokenizer.ggml.model", gguf::Value::str("llama"));
    out.set("tokenizer.ggml.tokens", gguf::Value::str_array(std::move(tokens)));
    out.set("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
    out.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
    out.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(1));
    out.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(2));
    out.set("tokenizer.ggml.unknown_token_id", gguf::Value::u32(0));
}

}  // namespace

void convert_llama2c(const std::string &model_bin, const std::string &tokenizer_bin, Converted &out) {
    auto map = std::make_shared<MappedFile>(model_bin);  // shared by the tensors' producers
    Header h{};
    if (map->size() == 0) fail("{}: expected a non-empty regular file", model_bin);
    if (map->size() < sizeof(Header)) fail("{}: {} bytes, too short for a llama2.c header (28 bytes)", model_bin, map->size());
    std::memcpy(&h, map->data(), sizeof(Header));
    const bool shared = h.vocab_size > 0;
    const int64_t n_vocab = std::abs((int64_t)h.vocab_size);
    auto check = [&](const char *what, int64_t v, int64_t max) {
        if (v <= 0 || v > max) fail("{}: header {} = {}, expected 1..{} (is this a llama2.c checkpoint?)", model_bin, what, v, max);
    };
    check("dim", h.dim, 1 << 16);
    check("hidden_dim", h.hidden_dim, 1 << 18);
    check("n_layers", h.n_layers, 1024);
    check("n_heads", h.n_heads, 1024);
    check("n_kv_heads", h.n_kv_heads, h.n_heads);
    check("vocab_size", n_vocab, 1 << 22);
    check("seq_len", h.seq_len, 1 << 22);
    if (h.dim % h.n_heads != 0) fail("{}: dim {} is not a multiple of n_heads {}", model_bin, h.dim, h.n_heads);
    if (h.n_heads % h.n_kv_heads != 0) fail("{}: n_heads {} is not a multiple of n_kv_heads {}", model_bin, h.n_heads, h.n_kv_heads);
    const int64_t dim = h.dim, ff = h.hidden_dim, L = h.n_layers, head = dim / h.n_heads, kv_dim = head * h.n_kv_heads;

    // [name in messages, elements per layer (or whole), layers]
    struct Part {
        const char *name;
        int64_t n;
        int64_t layers;
    };
    const std::vector<Part> parts = {
        {"token_embedding", n_vocab * dim, 1}, {"rms_att", dim, L}, {"wq", dim * dim, L}, {"wk", dim * kv_dim, L},
        {"wv", dim * kv_dim, L}, {"wo", dim * dim, L}, {"rms_ffn", dim, L}, {"w1", ff * dim, L}, {"w2", dim * ff, L},
        {"w3", ff * dim, L}, {"rms_final", dim, 1}, {"freq_cis", (int64_t)h.seq_len * head, 1},
        {"wcls", shared ? 0 : n_vocab * dim, 1},
    };
    std::map<std::string, uint64_t> offset;
    uint64_t pos = sizeof(Header);
    for (const Part &p : parts) {
        offset[p.name] = pos;
        pos += (uint64_t)(p.n * p.layers) * sizeof(float);
    }
    if (pos != map->size()) {
        fail("{}: {} bytes, but its header (dim {}, hidden_dim {}, {} layers, {} heads, {} kv heads, vocab {}, seq_len {}) "
             "needs {} bytes{}",
             model_bin, map->size(), h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size, h.seq_len, pos,
             pos > map->size() ? " (truncated)" : "");
    }

    out.set("general.architecture", gguf::Value::str("llama"));
    out.set("general.name", gguf::Value::str(std::filesystem::path(model_bin).stem().string()));
    out.set("llama.context_length", gguf::Value::u32((uint32_t)h.seq_len));
    out.set("llama.embedding_length", gguf::Value::u32((uint32_t)dim));
    out.set("llama.feed_forward_length", gguf::Value::u32((uint32_t)ff));
    out.set("llama.block_count", gguf::Value::u32((uint32_t)L));
    out.set("llama.attention.head_count", gguf::Value::u32((uint32_t)h.n_heads));
    out.set("llama.attention.head_count_kv", gguf::Value::u32((uint32_t)h.n_kv_heads));
    out.set("llama.rope.dimension_count", gguf::Value::u32((uint32_t)head));
    out.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));  // llama2.c's run.c
    read_tokenizer(tokenizer_bin, n_vocab, out);
    out.first_matrix_dtype = "F32";

    // A tensor is `n` floats at the part's offset plus layer * n.
    auto add = [&](std::string name, const char *part, int64_t layer, std::vector<int64_t> ne) {
        int64_t n = 1;
        for (int64_t d : ne) n *= d;
        const uint64_t at = offset.at(part) + (uint64_t)(layer * n) * sizeof(float);
        out.tensors.push_back({std::move(name), std::move(ne), [map, at, n] {
                                   std::vector<float> v((size_t)n);
                                   std::memcpy(v.data(), map->data() + at, (size_t)n * sizeof(float));
                                   advise_whole_blocks(map->data() + at, (size_t)n * sizeof(float), (size_t)sysconf(_SC_PAGESIZE), MADV_DONTNEED);
                                   return v;
                               }});
    };
    add("token_embd.weight", "token_embedding", 0, {dim, n_vocab});
    add("output_norm.weight", "rms_final", 0, {dim});
    if (!shared) add("output.weight", "wcls", 0, {dim, n_vocab});
    for (int64_t l = 0; l < L; ++l) {
        const std::string b = fmt::format("blk.{}.", l);
        add(b + "attn_norm.weight", "rms_att", l, {dim});
        add(b + "attn_q.weight", "wq", l, {dim, dim});
        add(b + "attn_k.weight", "wk", l, {dim, kv_dim});
        add(b + "attn_v.weight", "wv", l, {dim, kv_dim});
        add(b + "attn_output.weight", "wo", l, {dim, dim});
        add(b + "ffn_norm.weight", "rms_ffn", l, {dim});
        add(b + "ffn_gate.weight", "w1", l, {dim, ff});
        add(b + "ffn_down.weight", "w2", l, {ff, dim});
        add(b + "ffn_up.weight", "w3", l, {dim, ff});
    }
}

}  // namespace toy::convert
