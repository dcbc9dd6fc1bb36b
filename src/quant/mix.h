// Which ggml type each tensor of a model is stored in, for a llama.cpp file
// type ("Q4_K_M"): llama.cpp's type mixes, so `toy quantize` writes the same
// types llama-quantize writes for the same input. `toy init --type` and
// `toy export --type` choose their types here too: one implementation of the
// rules.
//
// The rules, in the order they are applied to a tensor:
//   1. only weight matrices are quantized (quantizable(): 2-D or 3-D, named
//      "*weight", not norms, routers, learned positions or a few tiny tables);
//      others keep their type;
//   2. --token-embedding-type / --output-tensor-type name a type outright;
//   3. the file type's base type, changed by the mix for the tensor's role
//      (attn_v, ffn_down, output, ...), layer and the model's shape (GQA
//      ratio, 8 experts), unless --pure;
//   4. a row length that is not a multiple of the type's block falls back to
//      a type with smaller blocks, or F16.
#pragma once

#include <ggml.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace toy::gguf {
class File;
}

namespace toy::quant {

// llama.cpp's file types: the values of general.file_type (LLAMA_FTYPE_*).
enum class FileType : int {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9,
    Q2_K = 10, Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15,
    Q5_K_S = 16, Q5_K_M = 17, Q6_K = 18, IQ2_XXS = 19, IQ2_XS = 20, Q2_K_S = 21,
    IQ3_XS = 22, IQ3_XXS = 23, IQ1_S = 24, IQ4_NL = 25, IQ3_S = 26, IQ3_M = 27,
    IQ2_S = 28, IQ2_M = 29, IQ4_XS = 30, IQ1_M = 31, BF16 = 32, TQ1_0 = 36,
    TQ2_0 = 37, MXFP4_MOE = 38, Q1_0 = 40, Q2_0 = 41,
};

// One name `toy quantize` accepts for a file type (llama-quantize's names and aliases).
struct QuantTypeName {
    const char *name;   // "Q4_K_M"
    FileType ftype;
    bool copy;          // COPY: every tensor as it is
    const char *about;
};
const std::vector<QuantTypeName> &quant_type_names();
// A name (any case) or a file type number; throws toy::Error listing the names.
const QuantTypeName &parse_quant_type(const std::string &s);
// The type most tensors of a file type get ("Q4_K_M" -> Q4_K).
ggml_type file_type_base(FileType ft);
// A ggml type by name ("q8_0", any case); throws toy::Error naming `flag`.
ggml_type parse_ggml_type(const std::string &s, const char *flag);

// What the rules need to know about the model.
struct MixModel {
    std::string arch;          // general.architecture (falcon and a few 70B-class models have rules of their own)
    int64_t n_layer = 0;       // block_count
    int64_t n_head = 0, n_head_kv = 0;
    int64_t n_expert = 0;
    static MixModel from_gguf(const gguf::File &f);
};

struct MixOptions {
    FileType ftype = FileType::Q8_0;
    bool pure = false;                          // --pure: no mix, the base type everywhere (fallbacks still apply)
    bool copy = false;                          // COPY: nothing is converted
    bool quantize_output = true;                // false: --leave-output-tensor
    ggml_type output_type = GGML_TYPE_COUNT;    // --output-tensor-type (COUNT: the mix decides)
    ggml_type token_embd_type = GGML_TYPE_COUNT;
    bool imatrix = false;                       // an importance matrix will be used (two mixes differ with one)
};

struct TensorDesc {
    std::string name;
    ggml_type type = GGML_TYPE_F32;             // as the tensor is now
    std::array<int64_t, 4> ne{1, 1, 1, 1};
};

struct TypeChoice {
    ggml_type type = GGML_TYPE_F32;     // what to store
    ggml_type wanted = GGML_TYPE_F32;   // before the block-size fallback (== type when none)
    bool quantizable = false;           // a weight matrix the rules apply to
    bool needs_imatrix = false;         // llama.cpp refuses this type for this tensor without an imatrix
};

// Whether the rules convert this tensor at all (rule 1).
bool quantizable(const TensorDesc &t, const MixOptions &o);

// The types of all tensors of a model, in the order given. All at once,
// because two rules depend on a tensor's position among the tensors of its
// role, counted in llama.cpp's order (by layer, then name). Throws
// toy::Error for a tensor no type fits.
std::vector<TypeChoice> choose_types(const std::vector<TensorDesc> &tensors, const MixModel &m, const MixOptions &o);

}  // namespace toy::quant
