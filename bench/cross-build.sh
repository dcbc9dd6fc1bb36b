#!/usr/bin/env bash
# The three engines of bench/compare.sh (toy, llama.cpp with toy's AMX fix,
# ik_llama.cpp) built on this machine for another x86 CPU: each project's own
# GGML_NATIVE build through a compiler wrapper that passes -march=MARCH where
# the build asks for -march=native. For a machine with little time to build
# (the GPU machines' 16-core AMX Xeon: BENCHMARKS.md); the binaries run only
# on CPUs with MARCH's instructions.
#
#   bench/cross-build.sh MARCH OUT_DIR [IK_SRC]
#     MARCH   a GCC -march value (sapphirerapids, znver4, ...)
#     IK_SRC  ik_llama.cpp's source [~/.cache/ik-llama-reference/src, left out if missing]
# Result, laid out for compare.sh (about 35 minutes on 2 cores):
#   OUT_DIR/toy                          BUILD_TOY=0 BUILD_DIR=OUT_DIR
#   OUT_DIR/fixed/build/bin/llama-bench  LLAMA=fixed FIXED_DIR=OUT_DIR/fixed REF_DIR=OUT_DIR/fixed/build ONESHOTS=0
#   OUT_DIR/ik/build/bin/llama-bench     IK_DIR=OUT_DIR/ik
# llama.cpp's source is the reference build's (../shared/tools/build-llama-reference.sh).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/cross-build.sh MARCH OUT_DIR [IK_SRC]" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
MARCH=$1
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
IK_SRC=${3:-$HOME/.cache/ik-llama-reference/src}
LLAMA_SRC=${REF_DIR:-$HOME/.cache/toy-reference}/llama.cpp
echo 'int main() { return 0; }' > "$OUT/probe.c"
gcc -march="$MARCH" -c "$OUT/probe.c" -o /dev/null 2>/dev/null ||
  { echo "cross-build: gcc does not know -march=$MARCH" >&2; exit 1; }
rm -f "$OUT/probe.c"
[ -d "$LLAMA_SRC" ] || { echo "cross-build: no llama.cpp source in $LLAMA_SRC (../shared/tools/build-llama-reference.sh)" >&2; exit 1; }
mkdir -p "$OUT/cc"
for c in gcc g++; do
  cat > "$OUT/cc/$c" <<EOF
#!/bin/bash
args=()
for a in "\$@"; do [ "\$a" = -march=native ] && a=-march=$MARCH; args+=("\$a"); done
exec /usr/bin/$c "\${args[@]}"
EOF
  chmod +x "$OUT/cc/$c"
done
CC=$OUT/cc/gcc CXX=$OUT/cc/g++
jobs=$(nproc)
LOG=$OUT/build.log
: > "$LOG"
# configure ARGS... -B DIR and build DIR TARGET, their output in the log
# (ggml's sources warn a lot when compiled for AMX)
configure() { cmake "$@" >>"$LOG" 2>&1 || { echo "cross-build: configuring ${*: -1} failed (see $LOG)" >&2; exit 1; }; }
build() { cmake --build "$1" --target "$2" -j"$jobs" >>"$LOG" 2>&1 || { echo "cross-build: building $2 in $1 failed (see $LOG)" >&2; exit 1; }; }
echo "cross-build: toy for $MARCH" >&2
configure -S "$ROOT" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" -B "$OUT/toy-build"
build "$OUT/toy-build" toy
cp "$OUT/toy-build/toy" "$OUT/toy"
echo "cross-build: llama.cpp (AMX fix) for $MARCH" >&2
llama_fixed_options "$ROOT"
configure -S "$LLAMA_SRC" "${LLAMA_FIXED_OPTIONS[@]}" -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" -B "$OUT/fixed/build"
build "$OUT/fixed/build" llama-bench
if [ -d "$IK_SRC" ]; then
  echo "cross-build: ik_llama.cpp for $MARCH" >&2
  configure -S "$IK_SRC" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_CXX_COMPILER="$CXX" -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -B "$OUT/ik/build"
  build "$OUT/ik/build" llama-bench
else
  echo "cross-build: no ik_llama.cpp source in $IK_SRC; skipped" >&2
fi
echo "cross-build: done in $OUT" >&2
