# Helpers the benchmark scripts share (sourced, not run).

# "CPU: <model>; AMX: yes|no": which machine a table comes from.
cpu_line() {
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); AMX: $(grep -q amx_tile /proc/cpuinfo && echo yes || echo no)"
}

# random_words FILE N: one line of N words drawn (seed 0) from a small
# vocabulary, a training text every engine tokenizes alike.
random_words() {
  python3 - "$1" "$2" <<'PY'
import random, sys
random.seed(0)
w = "the a cat dog ran sat on mat and happy little big house tree saw went to Once upon time".split()
open(sys.argv[1], "w").write(" ".join(random.choice(w) for _ in range(int(sys.argv[2]))) + "\n")
PY
}

# llama_fixed_options ROOT: sets LLAMA_FIXED_OPTIONS to the cmake options of
# llama.cpp built with toy's AMX compiler fix ("fixed" in bench/compare.sh,
# also made by bench/cross-build.sh): static, its tools only, the fix
# (ROOT/cmake/amx_tile_config.h) force-included.
llama_fixed_options() {
  LLAMA_FIXED_OPTIONS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=OFF "-DCMAKE_CXX_FLAGS=-include $1/cmake/amx_tile_config.h")
}
