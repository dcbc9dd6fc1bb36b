# Helpers the benchmark scripts share (sourced, not run).

# The CPU's name with its family and model ("AMD EPYC (family 25 model 1)"): a
# VM often shows the vendor's bare name, which Zen 3 and Zen 4 share.
cpu_name() {
  awk -F': *' '/^model name/ && !hn { n = $2; hn = 1 } /^cpu family/ && !hf { f = $2; hf = 1 }
    /^model[ \t]*:/ && !hm { m = $2; hm = 1 } END { printf "%s (family %s model %s)\n", n, f, m }' /proc/cpuinfo
}

# The vector units toy's kernels choose between: "AMX", "AVX-512, no AMX",
# "AVX2, no AVX-512" or "no AVX2".
cpu_kind() {
  if grep -qw amx_tile /proc/cpuinfo; then echo "AMX"
  elif grep -qw avx512f /proc/cpuinfo; then echo "AVX-512, no AMX"
  elif grep -qw avx2 /proc/cpuinfo; then echo "AVX2, no AVX-512"
  else echo "no AVX2"; fi
}

# "CPU: <name> (family F model M); <kind>": which machine a table comes from.
cpu_line() {
  echo "CPU: $(cpu_name); $(cpu_kind)"
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
