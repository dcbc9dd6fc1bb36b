#!/usr/bin/env bash
# llama.cpp's llama-bench and llama-completion with ggml's CUDA backend, for
# bench/compare.sh with NGL (bench/gpu-check.sh): the llama.cpp reference
# build's own objects (libllama, common, each tool's main, made by
# ../shared/tools/build-llama-reference.sh from the same pinned bundle) linked
# against the ggml libraries of toy's CUDA build. Both engines then run the
# same compiled ggml, and ggml's CUDA kernels are compiled once, not twice
# (about 45 minutes on 2 cores for one GPU architecture).
#
#   bench/link-llama-cuda.sh [CUDA_BUILD [REF_DIR [OUT_DIR]]]
#   defaults: build-cuda, ~/.cache/toy-reference, ~/.cache/toy-reference-cuda
# Result: OUT_DIR/bin/llama-bench, llama-completion and refdump-gpu (the fixtures'
# reference dump of ../shared/tools with every layer on the GPU).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CB=$(cd "${1:-$ROOT/build-cuda}" && pwd)
REF=${2:-$HOME/.cache/toy-reference}
OUT=${3:-$HOME/.cache/toy-reference-cuda}
[ -f "$CB/ggml/src/ggml-cuda/libggml-cuda.a" ] ||
  { echo "link-llama-cuda: no libggml-cuda.a in $CB (make build-cuda first)" >&2; exit 1; }
[ -f "$REF/build/src/libllama.a" ] ||
  { echo "link-llama-cuda: no llama.cpp reference build in $REF (../shared/tools/build-llama-reference.sh)" >&2; exit 1; }
# the CUDA libraries toy itself links (the toolkit's cudart, cuBLAS, the driver stub)
read -r -a cuda_libs <<< "$(tr ' ' '\n' < "$CB/CMakeFiles/toy.dir/link.txt" | grep -E '/(libcudart|libcublas|libcublasLt|libculibos|stubs/libcuda)\.' | tr '\n' ' ')"
rpath=$(tr ' ' '\n' < "$CB/CMakeFiles/toy.dir/link.txt" | grep -m1 -- '-Wl,-rpath' || true)
G=$CB/ggml/src
mkdir -p "$OUT/bin"
for tool in llama-bench:llama-bench llama-completion:completion; do
  name=${tool%%:*} dir=$REF/build/tools/${tool##*:}
  c++ -O3 "$dir/CMakeFiles/$name.dir/main.cpp.o" -o "$OUT/bin/$name" ${rpath:+"$rpath"} "$dir/lib$name-impl.a" \
    "$REF/build/common/libllama-common.a" "$REF/build/common/libllama-common-base.a" \
    "$REF/build/vendor/cpp-httplib/libcpp-httplib.a" "$REF/build/src/libllama.a" "$G/libggml.a" -ldl \
    "$G/ggml-cuda/libggml-cuda.a" "${cuda_libs[@]}" "$G/ggml-rpc/libggml-rpc.a" "$G/libggml-cpu.a" "$G/libggml-base.a" \
    -fopenmp -lpthread -lm
done
# refdump (the fixtures' reference logits, ../shared/tools) with every layer on the GPU
shared=${TOY_SHARED_DIR:-$ROOT/../shared}
sed 's/mp.n_gpu_layers = 0;/mp.n_gpu_layers = 999;/' "$shared/tools/refdump.cpp" > "$OUT/refdump-gpu.cpp"
grep -q 'n_gpu_layers = 999' "$OUT/refdump-gpu.cpp" || { echo "link-llama-cuda: refdump.cpp no longer sets n_gpu_layers = 0" >&2; exit 1; }
c++ -O2 -std=c++17 "$OUT/refdump-gpu.cpp" -I"$REF/llama.cpp/include" -I"$REF/llama.cpp/ggml/include" -o "$OUT/bin/refdump-gpu" \
  ${rpath:+"$rpath"} "$REF/build/src/libllama.a" "$G/libggml.a" "$G/ggml-cuda/libggml-cuda.a" "${cuda_libs[@]}" \
  "$G/ggml-rpc/libggml-rpc.a" "$G/libggml-cpu.a" "$G/libggml-base.a" -fopenmp -lpthread -ldl -lm
echo "llama.cpp tools with toy's CUDA ggml in $OUT/bin (llama-bench, llama-completion, refdump-gpu)"
