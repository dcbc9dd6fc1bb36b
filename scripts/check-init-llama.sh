#!/usr/bin/env bash
# check-init-llama.sh: every model `toy init` writes must load and generate in
# llama.cpp (built from the same pinned package as toy's ggml) and in toy.
#
#   scripts/check-init-llama.sh [--quick]
#
# Makes one small custom model per supported architecture (f16 and q4_k_m)
# and, unless --quick, the four presets in f16, q8_0 and q4_k_m (135M..1.1B
# parameters: several minutes, up to ~2.5 GB at a time under $TMPDIR, each
# file deleted after its check). For each model runs
#   llama-completion -m FILE -p "hello" -n 8 -no-cnv
# and `toy logits` on three tokens; prints PASS or FAIL per model and exits
# non-zero on any failure. PASS needs exit status 0 from both (llama-completion
# returns 0 only after loading the model and generating); the text shown is
# informative only: llama.cpp writes it through an asynchronous logger that
# can lose its tail at exit on a busy machine.
#
# Environment:
#   TOY            toy executable (default: build/toy, built if missing)
#   TOY_REFERENCE  directory with llama-completion (default ~/.cache/toy-reference/bin,
#                  built with ../shared/tools/build-llama-reference.sh if missing)
#   LLAMA_EXTRA    extra llama-completion flags (default --no-repack: on CPUs that
#                  report AMX in a VM, llama.cpp's AMX repacked matmul crashes on
#                  quantized weights, its own llama-quantize outputs included)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1

TOY=${TOY:-$ROOT/build/toy}
if [ ! -x "$TOY" ] || ! "$TOY" init --help >/dev/null 2>&1; then
  echo "building toy in $ROOT/build ..." >&2
  cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$ROOT/build" --target toy -j2 >/dev/null || { echo "toy build failed" >&2; exit 2; }
fi

REF=${TOY_REFERENCE:-$HOME/.cache/toy-reference/bin}
if [ ! -x "$REF/llama-completion" ]; then
  BUILDER="$ROOT/../shared/tools/build-llama-reference.sh"
  [ -x "$BUILDER" ] || BUILDER="${TOY_SHARED_DIR:-/work/shared}/tools/build-llama-reference.sh"
  echo "building the llama.cpp reference tools with $BUILDER ..." >&2
  bash "$BUILDER" >&2 || { echo "reference build failed" >&2; exit 2; }
  REF=$HOME/.cache/toy-reference/bin
fi
LLAMA_EXTRA=${LLAMA_EXTRA---no-repack}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/toy-init-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The architectures toy supports, from its own error message.
ARCHS=$("$TOY" init --arch '?' -o "$WORK/none.gguf" 2>&1 | sed -n 's/.*(supported: \(.*\))$/\1/p' | tr -d ',')
[ -n "$ARCHS" ] || { echo "could not list toy's architectures" >&2; exit 2; }

fails=0
total=0
check() {  # check LABEL INIT-ARGS...
  local label=$1; shift
  local f="$WORK/model.gguf" t0 t1 why=""
  total=$((total + 1))
  t0=$(date +%s)
  if ! "$TOY" init "$@" -o "$f" 2>"$WORK/init.err"; then
    why="toy init failed: $(tail -1 "$WORK/init.err")"
  else
    # shellcheck disable=SC2086
    timeout 600 "$REF/llama-completion" -m "$f" -p "hello" -n 8 -no-cnv -c 256 -t 2 -s 1 $LLAMA_EXTRA \
      >"$WORK/out.txt" 2>"$WORK/llama.err"
    local rc=$?
    if [ $rc -ne 0 ]; then
      why="llama-completion exit $rc: $(grep -v '^\s*$' "$WORK/llama.err" | tail -1)"
    elif ! "$TOY" logits -m "$f" --tokens 1,2,3 -c 256 -o "$WORK/logits.f32" 2>"$WORK/toy.err"; then
      why="toy logits failed: $(tail -1 "$WORK/toy.err")"
    fi
  fi
  t1=$(date +%s)
  local size
  size=$(du -h "$f" 2>/dev/null | cut -f1)
  if [ -z "$why" ]; then
    printf 'PASS  %-28s %6s %4ss  %s\n' "$label" "$size" $((t1 - t0)) "$(head -c 60 "$WORK/out.txt" | tr -c '[:print:]' '?')"
  else
    printf 'FAIL  %-28s %6s %4ss  %s\n' "$label" "$size" $((t1 - t0)) "$why"
    fails=$((fails + 1))
  fi
  rm -f "$f" "$WORK/logits.f32"
}

SMALL="--n-embd 256 --n-layer 2 --n-head 4 --n-ff 512 --n-vocab 1000 --n-ctx 256"
for arch in $ARCHS; do
  for type in f16 q4_k_m; do
    # shellcheck disable=SC2086
    check "$arch/$type" --arch "$arch" --type "$type" $SMALL
  done
done
# odd shapes: K-quant fallbacks, head size override, experts on llama, Llama-3 rope factors, untied
check "llama/q4_k_m rows-of-320" --arch llama --type q4_k_m --n-embd 320 --n-head 5 --n-head-kv 5 --n-ff 640 --n-vocab 1000
check "qwen3/q8_0 head-dim-32" --arch qwen3 --type q8_0 --n-embd 256 --n-head 4 --head-dim 32 --n-vocab 1000
check "llama/q4_k moe-8x2" --arch llama --type q4_k --n-expert 8 --n-expert-used 2 --n-vocab 1000
check "llama/f16 llama3-rope" --arch llama --type f16 --rope-scaling llama3 --rope-scale 32 --untied --n-vocab 1000

if [ $QUICK -eq 0 ]; then
  for preset in smollm2-135m qwen2.5-0.5b llama-3.2-1b tinyllama-1.1b; do
    for type in f16 q8_0 q4_k_m; do
      check "$preset/$type" --preset "$preset" --type "$type"
    done
  done
fi

echo "$((total - fails)) of $total models passed"
[ $fails -eq 0 ]
