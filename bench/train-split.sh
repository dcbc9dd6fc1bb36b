#!/usr/bin/env bash
# Training with blocks on a ggml RPC server (or a GPU) vs on the CPU alone, in
# one run.
#
#   bench/train-split.sh          ROUNDS=3 STEPS=4 (about 5 min)
#   TOY=/path/to/other/toy bench/train-split.sh    (another build, e.g. an older commit)
#   SPLIT="-ngl 99 --device CUDA0" LOCAL_THREADS=8 TOY=build-cuda/toy bench/train-split.sh
#                                 (every block on a GPU instead of a server)
#
# The server is a `toy rpc-server -t 1` on this machine (loopback), so the
# table shows what the exchanges cost, not what a second machine gains: the
# split run's client has 1 thread and the server 1 (the client's OpenMP
# threads passive, README: Backends), the local run 2 threads. Models:
# stories260K (../shared/models; every exchange is all there is) and a
# SmolLM2-135M-shaped llama (toy init, random F32 weights, vocab 49152 —
# real shapes). LoRA (rank 8 on q,k,v,o) and full fine-tune, -c 128, one
# window per step; tokens/s from toy's own closing line (training steps
# only). LORA_TYPES="f16 q4_k_m" adds LoRA rows on the smol shape stored in
# those types (a frozen F16 or quantized base). Prints medians over ROUNDS
# and split / local.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-4}
WORK=${WORK:-$HOME/.cache/toy-bench-split}
SHARED=${SHARED:-$HERE/../shared}
TOY=${TOY:-$HERE/build/toy}
SPLIT=${SPLIT:-}                  # the split run's flags; default: a local server's (below)
LOCAL_THREADS=${LOCAL_THREADS:-2}
mkdir -p "$WORK"
[ -x "$TOY" ] || make -C "$HERE" build >/dev/null
. "$HERE/bench/lib.sh"
cd "$WORK"
echo "$(cpu_line); toy: $TOY"
random_words words.txt 8000
smol_shape=(--arch llama --n-embd 576 --n-layer 30 --n-head 9 --n-head-kv 3 --n-ff 1536 --n-vocab 49152)
[ -f smol.gguf ] || "$TOY" init "${smol_shape[@]}" --type f32 -o smol.gguf 2>/dev/null
cp "$SHARED/models/stories260K.gguf" stories260K.gguf
LORA_TYPES=${LORA_TYPES:-}
for t in $LORA_TYPES; do
  [ -f "smol-$t.gguf" ] || "$TOY" init "${smol_shape[@]}" --type "$t" -o "smol-$t.gguf" 2>/dev/null
done

if [ -z "$SPLIT" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$TOY" rpc-server -t 1 --port "$port" > server.log 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null' EXIT
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  SPLIT="-t 1 --rpc 127.0.0.1:$port -ngl 99"
fi
echo "local: -t $LOCAL_THREADS; split: $SPLIT"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tps() {  # toy train flags...: tokens/s of its closing line (nothing when it fails, and its last lines on stderr)
  "$TOY" train -f words.txt -c 128 -b 128 --steps "$STEPS" --val-split 0 -o out.gguf "$@" > train.log 2>&1 || true
  grep -o '[0-9.]* tokens/s' train.log | tail -1 | cut -d' ' -f1 ||
    { echo "toy train $* failed:" >&2; tail -n 3 train.log >&2; }
}

printf "| model | training | local t/s | split t/s | split / local |\n|---|---|---:|---:|---:|\n"
for model in stories260K smol $(for t in $LORA_TYPES; do echo "smol-$t"; done); do
  for mode in lora full; do
    [ "$mode" = full ] && [[ "$model" == smol-* ]] && continue  # a frozen F16 or quantized base: LoRA only
    flags="-m $model.gguf"
    [ "$mode" = lora ] && flags="$flags --lora-rank 8 --lora-targets q,k,v,o"
    : > local.tps; : > split.tps
    for r in $(seq "$ROUNDS"); do
      tps $flags -t "$LOCAL_THREADS" >> local.tps
      # shellcheck disable=SC2086
      OMP_WAIT_POLICY=PASSIVE tps $flags $SPLIT >> split.tps
    done
    l=$(median < local.tps); s=$(median < split.tps)
    if [ -z "$s" ]; then printf "| %s | %s | %s | (fails) | |\n" "$model" "$mode" "$l"; continue; fi
    printf "| %s | %s | %s | %s | %.2f |\n" "$model" "$mode" "$l" "$s" "$(echo "$s $l" | awk '{print $1/$2}')"
  done
done
