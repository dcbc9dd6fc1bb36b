#!/usr/bin/env bash
# Training speed, toy vs llama-finetune (same pinned llama.cpp bundle) and
# llm.c's CPU trainer, in one run, same threads, same ctx and batch.
#
#   bench/train-compare.sh            THREADS=2 ROUNDS=3 LLMC=1 (GPT-2 124M vs llm.c; 3-12 min on 2 cores)
#
# Models (made with toy init, cached in $WORK): stories260K (../shared/models),
# a 5-layer llama (n_embd 512, 8 heads, 4 KV heads, n_ff 1536, vocab 512, F32),
# GPT-2 124M (F32). Full fine-tune, -c 128 -b 128 (one 128-token window per
# AdamW step, as llama-finetune -c 128 -b 128 -ub 128 does), AdamW lr 1e-4, no
# weight decay. Each engine trains on the same text for the same number of
# steps; tokens/s = steps * 128 / wall time of the whole process (load
# included for both). Prints medians over ROUNDS and the ratio toy / llama.cpp,
# and peak RSS. Needs python3 (and python3-numpy for llm.c's checkpoint).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
LLMC=${LLMC:-1}
WORK=${WORK:-$HOME/.cache/toy-bench-train}
REF=${REF:-$HOME/.cache/toy-reference}
SHARED=${SHARED:-$HERE/../shared}
TOY=$HERE/build/toy
mkdir -p "$WORK"
[ -x "$TOY" ] || make -C "$HERE" build >/dev/null
[ -x "$REF/bin/llama-finetune" ] || bash "$SHARED/tools/build-llama-reference.sh" "$REF" >/dev/null
. "$HERE/bench/lib.sh"
cd "$WORK"
echo "$(cpu_line); threads $THREADS"

# text: llama-finetune makes windows of 128 with stride 64 from one document
random_words words.txt 6000
[ -f l5.gguf ] || "$TOY" init --arch llama --n-embd 512 --n-layer 5 --n-head 8 --n-head-kv 4 --n-ff 1536 --n-vocab 512 --type f32 -o l5.gguf 2>/dev/null
cp "$SHARED/models/stories260K.gguf" stories260K.gguf

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
peak() { grep "Maximum resident" "$1" | awk '{printf "%.0f", $6/1024}'; }

bench_pair() {  # name model
  local name=$1 model=$2
  local ndata
  # one timed llama-finetune epoch tells how many windows (steps) it trains
  for r in $(seq "$ROUNDS"); do
    /usr/bin/time -v -o ft.time "$REF/bin/llama-finetune" -m "$model" -f words.txt -c 128 -b 128 -ub 128 -t "$THREADS" \
      -lr 1e-4 -epochs 1 -val-split 0 -o ft-out.gguf > ft.log 2>&1 || { echo "llama-finetune failed on $name"; tail -3 ft.log; return; }
    ndata=$(grep -o 'data=[0-9]*/[0-9]*' ft.log | tail -1 | cut -d/ -f2 | sed 's/^0*//')
    secs=$(grep "Elapsed (wall" ft.time | awk '{print $NF}' | awk -F: '{print ($1*60+$2)}')
    echo "$ndata $secs" | awk '{printf "%.1f\n", $1*128/$2}' >> ft.tps
    peak ft.time > ft.rss
    /usr/bin/time -v -o toy.time "$TOY" train -m "$model" -f words.txt -c 128 -b 128 --steps "$ndata" -t "$THREADS" \
      -lr 1e-4 --grad-clip 0 --lr-schedule constant -q -o toy-out.gguf
    secs=$(grep "Elapsed (wall" toy.time | awk '{print $NF}' | awk -F: '{print ($1*60+$2)}')
    echo "$ndata $secs" | awk '{printf "%.1f\n", $1*128/$2}' >> toy.tps
    peak toy.time > toy.rss
  done
  local f t
  f=$(median < ft.tps); t=$(median < toy.tps)
  printf "%-12s steps %4s | llama-finetune %8.1f tok/s %5s MiB | toy %8.1f tok/s %5s MiB | toy/llama %.2f\n" \
    "$name" "$ndata" "$f" "$(cat ft.rss)" "$t" "$(cat toy.rss)" "$(echo "$t $f" | awk '{print $1/$2}')"
  rm -f ft.tps toy.tps
}

bench_pair stories260K stories260K.gguf
bench_pair llama-5L l5.gguf

if [ "$LLMC" = 1 ]; then
  [ -f gpt2.gguf ] || "$TOY" init --arch gpt2 --n-embd 768 --n-layer 12 --n-head 12 --n-ff 3072 --n-vocab 50257 --n-ctx 1024 \
    --type f32 -o gpt2.gguf 2>/dev/null
  # llm.c's run.sh writes its random checkpoint with /usr/bin/python3 and numpy
  if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    echo "train-compare: llm.c skipped: /usr/bin/python3 has no numpy (apt-get install python3-numpy)" >&2
    exit 1
  fi
  llmc=$(bash "$SHARED/anchors/llm.c/run.sh" "$THREADS" 2>llmc.err | grep "tokens/s" | sed 's/.*= \([0-9.]*\) tokens.*/\1/') || true
  [ -n "$llmc" ] || { echo "train-compare: llm.c's run.sh failed:" >&2; tail -3 llmc.err >&2; exit 1; }
  # B=4, T=64: 256 tokens per step; toy's own per-step rate after the first step
  /usr/bin/time -v -o gpt2.time "$TOY" train -m gpt2.gguf -f words.txt -c 64 -b 256 --steps 7 -t "$THREADS" -q \
    -o gpt2-out.gguf --log gpt2.csv
  toy=$(tail -n +3 gpt2.csv | awk -F, '{print $(NF-1)}' | median)
  rss=$(peak gpt2.time)
  printf "%-12s B=4 T=64   | llm.c          %8.1f tok/s           | toy %8.1f tok/s %5s MiB | toy/llm.c %.2f\n" \
    "gpt2-124M" "$llmc" "$toy" "$rss" "$(echo "$toy $llmc" | awk '{print $1/$2}')"
fi
