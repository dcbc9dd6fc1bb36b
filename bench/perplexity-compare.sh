#!/usr/bin/env bash
# Side-by-side speed of `toy perplexity` and llama-perplexity (built from the
# same pinned ggml) on the same model, text, context, batch and threads.
# Prints a markdown table: wall time and CPU time (user + system) of each
# whole process (load, tokenize, evaluate, exit; medians of ROUNDS), the
# ratios toy/llama.cpp and both PPLs. On a machine shared with other work the
# CPU time is the steadier measure.
#
#   bench/perplexity-compare.sh
#   MODELS="a.gguf b.gguf" CTX=512 THREADS=2 bench/perplexity-compare.sh
#
# Environment (defaults in brackets):
#   MODELS [stories260K.gguf and llama-2-tiny-random.gguf from ../shared/models]
#   TEXT [tests/data/perplexity/stories.txt repeated REPEAT [8] times]
#   CTX [128]  BATCH [2048]  CHUNKS [all]  THREADS [nproc]  ROUNDS [3]
#   BUILD_DIR [<repo>/build]  REF_DIR [~/.cache/toy-reference]
# Rounds alternate which tool runs first, so a drifting machine load hits both
# alike. Timed assertions do not belong in tests; this is a benchmark.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED_DIR=${TOY_SHARED_DIR:-$ROOT/../shared}
MODELS=${MODELS:-"$SHARED_DIR/models/stories260K.gguf $SHARED_DIR/models/llama-2-tiny-random.gguf"}
CTX=${CTX:-128}
BATCH=${BATCH:-2048}
CHUNKS=${CHUNKS:-}
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
REPEAT=${REPEAT:-8}
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference}
TOY=$BUILD_DIR/toy
LLAMA=$REF_DIR/bin/llama-perplexity

log() { echo "perplexity-compare: $*" >&2; }
[ -x "$TOY" ] || { log "no toy at $TOY (set BUILD_DIR)"; exit 1; }
[ -x /usr/bin/time ] || { log "/usr/bin/time is missing (apt-get install time)"; exit 1; }
[ -x "$LLAMA" ] || { log "no llama-perplexity in $REF_DIR/bin (../shared/tools/build-llama-reference.sh)"; exit 1; }

WORK=$(mktemp -d /tmp/toy-ppl-compare.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
if [ -z "${TEXT:-}" ]; then
  TEXT=$WORK/text.txt
  for _ in $(seq "$REPEAT"); do cat "$ROOT/tests/data/perplexity/stories.txt"; done > "$TEXT"
fi
EXTRA=()
[ -n "$CHUNKS" ] && EXTRA=(--chunks "$CHUNKS")
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

# run TOOL MODEL LOG: prints "wall cpu" seconds of one whole run
run() {
  local tool=$1 model=$2 out=$3 bin
  if [ "$tool" = toy ]; then bin=("$TOY" perplexity); else bin=("$LLAMA"); fi
  /usr/bin/time -f "%e %U %S" -o "$WORK/time" "${bin[@]}" -m "$model" -f "$TEXT" -c "$CTX" -b "$BATCH" \
    -t "$THREADS" "${EXTRA[@]}" >"$out" 2>&1 || { cat "$out" >&2; exit 1; }
  awk '{print $1, $2 + $3}' "$WORK/time"
}
final_ppl() { grep -o 'Final estimate: PPL = [0-9.]*' "$1" | awk '{print $5}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

log "text: $(wc -c < "$TEXT") bytes; -c $CTX -b $BATCH -t $THREADS; $ROUNDS rounds; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| model | llama-perplexity wall s | toy wall s | toy/llama wall | llama CPU s | toy CPU s | toy/llama CPU | PPL llama | PPL toy |"
echo "|---|---|---|---|---|---|---|---|---|"
for model in $MODELS; do
  name=$(basename "$model" .gguf)
  : > "$WORK/t.llama"; : > "$WORK/t.toy"
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="llama toy"; else order="toy llama"; fi
    for tool in $order; do run "$tool" "$model" "$WORK/$tool.log" >> "$WORK/t.$tool"; done
  done
  tl=$(cut -d' ' -f1 "$WORK/t.llama" | median); tt=$(cut -d' ' -f1 "$WORK/t.toy" | median)
  cl=$(cut -d' ' -f2 "$WORK/t.llama" | median); ct=$(cut -d' ' -f2 "$WORK/t.toy" | median)
  printf '| %s | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f | %s | %s |\n' "$name" "$tl" "$tt" "$(echo "$tt / $tl" | bc -l)" \
    "$cl" "$ct" "$(echo "$ct / $cl" | bc -l)" "$(final_ppl "$WORK/llama.log")" "$(final_ppl "$WORK/toy.log")"
done
