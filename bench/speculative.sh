#!/usr/bin/env bash
# Speculative decoding, toy against llama.cpp (built from the same pinned
# bundle): generation speed of plain decoding, a draft model, the target as
# its own draft (the acceptance upper bound: every guess is right, but the
# draft costs what the target costs), and prompt lookup on a repetitive
# prompt. Prints a markdown table; logs stay in $RESULTS_DIR.
#
#   bench/speculative.sh
#
# Environment (defaults in brackets):
#   THREADS [2]  N [128] tokens generated  REPS [3] runs per row (the median is shown)
#   DRAFT_MAX [16]  P_MIN [0.8] (--draft-p-min for the draft-model rows)
#   BUILD_DIR [<repo>/build]  MODEL_DIR [~/.cache/toy/bench-models]
#   REF_DIR [~/.cache/toy-reference]: llama.cpp's build; the script builds
#     llama-speculative(-simple) and llama-lookup there when they are missing
#   RESULTS_DIR [a new temporary directory]
#   PAUSE_FUZZ [0]: 1 pauses a background fuzzer (~/fuzzpause.sh) while timing
#   TARGET, DRAFT, CTX [2048]: another pair, e.g. a trained one:
#     TARGET=models/toy-stories.gguf DRAFT=../shared/models/stories260K.gguf CTX=256
#     (toy's default model, 2.5 M parameters, and stories260K, the model whose
#     stories it was trained on: same tokenizer, real acceptance rates)
#
# Default models (made once with toy init; random weights, so a draft model's
# guesses are rarely right and --draft-p-min 0.8 stops most drafts at once):
#   target: SmolLM2-360M's shape (960 x 32 blocks, 15/5 heads, ff 2560), Q8_0
#   draft:  SmolLM2-135M's shape with the target's vocabulary, Q8_0
# Greedy (--temp 0) everywhere, so every row emits the same text per engine.
#
# Rows:
#   plain                toy run                          | llama-completion
#   draft model          toy run -md DRAFT                | llama-speculative-simple -md DRAFT
#                        (llama-speculative's tree drafts ignore --spec-draft-p-min;
#                        -simple is llama.cpp's greedy draft with p-min, toy's algorithm)
#   draft, p-min 0       ... --draft-p-min 0 (drafts always run to DRAFT_MAX) | llama-speculative
#   self-draft           toy run -md TARGET --draft-p-min 0 | llama-speculative -md TARGET
#   prompt lookup        toy run --lookup-ngram 2 (repetitive prompt) | llama-lookup
#                        (llama-lookup: n-gram caches of sizes 1-4 from the context)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
THREADS=${THREADS:-2}
N=${N:-128}
REPS=${REPS:-3}
DRAFT_MAX=${DRAFT_MAX:-16}
P_MIN=${P_MIN:-0.8}
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
MODEL_DIR=${MODEL_DIR:-$HOME/.cache/toy/bench-models}
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference}
RESULTS_DIR=${RESULTS_DIR:-$(mktemp -d /tmp/toy-bench-spec.XXXXXX)}
PAUSE_FUZZ=${PAUSE_FUZZ:-0}
TOY=$BUILD_DIR/toy
LB=$REF_DIR/build/bin
mkdir -p "$MODEL_DIR" "$RESULTS_DIR"

[ -x "$TOY" ] || { echo "no $TOY: build toy first (cmake --build $BUILD_DIR --target toy)" >&2; exit 1; }
if [ ! -x "$LB/llama-speculative" ] || [ ! -x "$LB/llama-speculative-simple" ] || [ ! -x "$LB/llama-lookup" ]; then
  [ -d "$REF_DIR/build" ] || { echo "no llama.cpp build in $REF_DIR (see ../shared/tools/build-llama-reference.sh)" >&2; exit 1; }
  cmake --build "$REF_DIR/build" --target llama-speculative llama-speculative-simple llama-lookup llama-completion -j"$(nproc)" >/dev/null
fi

CTX=${CTX:-2048}
OWN_PAIR=${TARGET:+1}
TARGET=${TARGET:-$MODEL_DIR/spec-target-360m-q8_0.gguf}
DRAFT=${DRAFT:-$MODEL_DIR/spec-draft-135m-q8_0.gguf}
VOCAB=$MODEL_DIR/spec-vocab-135m.gguf
if [ -n "$OWN_PAIR" ]; then
  for f in "$TARGET" "$DRAFT"; do [ -f "$f" ] || { echo "no model $f" >&2; exit 1; }; done
elif [ ! -f "$TARGET" ] || [ ! -f "$DRAFT" ]; then
  echo "making the models in $MODEL_DIR ..." >&2
  "$TOY" init -q --preset smollm2-135m --type q8_0 -s 1 -o "$VOCAB"
  "$TOY" init -q --preset smollm2-135m --n-embd 960 --n-layer 32 --n-head 15 --n-head-kv 5 --n-ff 2560 \
    --name smollm2-360m-shape --type q8_0 --vocab-from "$VOCAB" -s 7 -o "$TARGET"
  "$TOY" init -q --preset smollm2-135m --type q8_0 --vocab-from "$TARGET" -s 8 -o "$DRAFT"
  rm -f "$VOCAB"
fi

P_TEXT="Once upon a time, in a small village at the edge of a forest, there lived an old clockmaker who"
P_REP="The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox"

if [ "$PAUSE_FUZZ" = 1 ] && [ -x "$HOME/fuzzpause.sh" ]; then
  "$HOME/fuzzpause.sh" stop
  trap '"$HOME/fuzzpause.sh" cont' EXIT
fi

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else printf "%.1f\n", (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }

# toy_row NAME PROMPT FLAGS...: REPS runs; the median of --json's predicted_per_second, and the acceptance
toy_row() {
  local name=$1 prompt=$2; shift 2
  local log=$RESULTS_DIR/toy-${name// /_}.log tps=() acc="-"
  : >"$log"
  for _ in $(seq "$REPS"); do
    "$TOY" run -m "$TARGET" -p "$prompt" -n "$N" --temp 0 --ignore-eos -t "$THREADS" -c "$CTX" --json "$@" \
      >"$RESULTS_DIR/out.json" 2>>"$log"
    cat "$RESULTS_DIR/out.json" >>"$log"
    tps+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings"]["predicted_per_second"])' "$RESULTS_DIR/out.json")")
    acc=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])).get("speculative"); print("-" if s is None else "%d/%d (%.0f%%)" % (s["accepted"], s["drafted"], 100*s["acceptance"]))' "$RESULTS_DIR/out.json")
  done
  TOY_TPS=$(printf '%s\n' "${tps[@]}" | median)
  TOY_ACC=$acc
}

# llama_row NAME TOOL PROMPT FLAGS...: the median of the tool's "decoded ... t/s" (or llama-completion's eval rate)
llama_row() {
  local name=$1 tool=$2 prompt=$3; shift 3
  local log=$RESULTS_DIR/llama-${name// /_}.log tps=() acc="-"
  : >"$log"
  for _ in $(seq "$REPS"); do
    local one=$RESULTS_DIR/one.log
    "$LB/$tool" -m "$TARGET" -p "$prompt" -n "$N" --temp 0 --ignore-eos -t "$THREADS" -c "$CTX" "$@" >"$one" 2>&1 </dev/null || true
    cat "$one" >>"$log"
    if [ "$tool" = llama-completion ]; then
      tps+=("$(grep -E 'eval time' "$one" | grep -v prompt | tail -1 | sed -E 's/.*, *([0-9.]+) tokens per second.*/\1/')")
    else
      tps+=("$(grep -E '^decoded|decoded +[0-9]+ tokens' "$one" | tail -1 | sed -E 's/.*speed: *([0-9.]+) t\/s.*/\1/')")
      local d a
      d=$(grep -E 'n_drafted *=' "$one" | tail -1 | sed -E 's/.*= *([0-9]+).*/\1/')
      a=$(grep -E 'n_accept *=' "$one" | tail -1 | sed -E 's/.*= *([0-9]+).*/\1/')
      [ -n "$d" ] && [ -n "$a" ] && acc=$(awk -v a="$a" -v d="$d" 'BEGIN {printf "%d/%d (%.0f%%)", a, d, d ? 100*a/d : 0}')
    fi
  done
  LLAMA_TPS=$(printf '%s\n' "${tps[@]}" | median)
  LLAMA_ACC=$acc
}

SPEC="--spec-draft-n-max $DRAFT_MAX"
ROWS=()
add_row() { ROWS+=("| $1 | $TOY_TPS | $TOY_ACC | $LLAMA_TPS | $LLAMA_ACC | $(awk -v a="$TOY_TPS" -v b="$LLAMA_TPS" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "-"}') |"); }

toy_row plain "$P_TEXT";                 llama_row plain llama-completion "$P_TEXT" -no-cnv --no-warmup; add_row "plain"
toy_row draft "$P_TEXT" -md "$DRAFT" --draft-max "$DRAFT_MAX" --draft-p-min "$P_MIN"
llama_row draft llama-speculative-simple "$P_TEXT" -md "$DRAFT" $SPEC --spec-type draft-simple --spec-draft-p-min "$P_MIN";  add_row "draft model (p-min $P_MIN)"
toy_row draft0 "$P_TEXT" -md "$DRAFT" --draft-max "$DRAFT_MAX" --draft-p-min 0
llama_row draft0 llama-speculative "$P_TEXT" -md "$DRAFT" $SPEC --spec-draft-p-min 0;        add_row "draft model (p-min 0)"
toy_row self "$P_TEXT" -md "$TARGET" --draft-max "$DRAFT_MAX" --draft-p-min 0
llama_row self llama-speculative "$P_TEXT" -md "$TARGET" $SPEC --spec-draft-p-min 0;         add_row "self-draft (p-min 0)"
toy_row rep-plain "$P_REP";              llama_row rep-plain llama-completion "$P_REP" -no-cnv --no-warmup; add_row "plain, repetitive prompt"
toy_row lookup "$P_REP" --lookup-ngram 2 --draft-max "$DRAFT_MAX"
llama_row lookup llama-lookup "$P_REP" $SPEC;                                                add_row "prompt lookup, repetitive prompt"

echo
echo "Speculative decoding: $(basename "$TARGET") (target), $(basename "$DRAFT") (draft); -n $N --temp 0, -t $THREADS, draft max $DRAFT_MAX, median of $REPS"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo
echo "| row | toy t/s | toy accepted | llama.cpp t/s | llama.cpp accepted | toy/llama.cpp |"
echo "|---|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
echo
echo "logs: $RESULTS_DIR"
