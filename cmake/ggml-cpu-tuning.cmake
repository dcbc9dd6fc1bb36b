# Build adjustments to the pinned ggml CPU backend, applied after
# add_subdirectory(ggml). Each one is measured in BENCHMARKS.md.
include(CheckCXXCompilerFlag)

if(NOT TARGET ggml-cpu OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  return()
endif()

# 1. AMX: compile the tile kernel with a correct `ldtilecfg` operand
#    (cmake/amx_tile_config.h). Without it GCC <= 12 miscompiles the kernel and
#    every quantized prompt on an AMX CPU crashes. Harmless elsewhere: the
#    header does nothing unless the compiler targets AMX.
set(_toy_amx_src ${TOY_LLAMA_SOURCE_DIR}/ggml/src/ggml-cpu/amx/mmq.cpp)
set_source_files_properties(${_toy_amx_src}
  DIRECTORY ${TOY_LLAMA_SOURCE_DIR}/ggml/src
  PROPERTIES COMPILE_OPTIONS "-include;${CMAKE_CURRENT_LIST_DIR}/amx_tile_config.h")

# 2. No AVX512-FP16 vector type for ggml's F16 dot products. With it, ggml
#    accumulates F16 dots in half precision in steps of 128 elements and sums
#    any remainder one element at a time; a 576-wide row (SmolLM2) spends ~40%
#    of its time in that scalar tail and a 64-wide attention head never reaches
#    the vector loop. Without it the AVX-512F path converts to fp32 (steps of
#    64, fp32 accumulation): faster on every benchmark model and more exact.
#    Everything else stays -march=native (GGML_NATIVE).
check_cxx_compiler_flag(-mno-avx512fp16 TOY_HAVE_MNO_AVX512FP16)
if(TOY_HAVE_MNO_AVX512FP16 AND TOY_GGML_F16_ACCUMULATE_FP32)
  target_compile_options(ggml-cpu PRIVATE -mno-avx512fp16)
endif()
