#!/usr/bin/env bash
# Serving under load, toy serve vs llama-server (built from the same pinned
# bundle), one after the other on the same model, same -np, -c and threads,
# loopback only: CLIENTS streaming clients send chat requests (temperature 0)
# back to back for SECONDS. Prints per server: requests, errors, aggregate
# generated tokens/s, time to first token p50/p99, inter-token latency
# p50/p99, peak RSS and the RSS slope after warm-up (MiB/min), and how many
# replies equal the same request served alone; then toy / llama ratios.
#
#   bench/serve-compare.sh      CLIENTS=32 SECONDS=600 NP=8 CTX=8192 THREADS=2 MAX_TOKENS=64 PRESET=smollm2-135m TYPE=q8_0
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
. "$HERE/bench/lib.sh"
CLIENTS=${CLIENTS:-32} DURATION=${SECONDS_RUN:-${DURATION:-600}} NP=${NP:-8} CTX=${CTX:-8192} THREADS=${THREADS:-2}
MAX_TOKENS=${MAX_TOKENS:-64} PRESET=${PRESET:-smollm2-135m} TYPE=${TYPE:-q8_0}
REF=${REF:-$HOME/.cache/toy-reference}
WORK=${WORK:-$HOME/.cache/toy-bench-serve}
TOY=$HERE/build/toy
mkdir -p "$WORK"
[ -x "$TOY" ] || make -C "$HERE" build >/dev/null
[ -x "$REF/bin/llama-server" ] || bash "$HERE/../shared/tools/build-llama-reference.sh" "$REF" >/dev/null
MODEL=$WORK/$PRESET.$TYPE.gguf
[ -f "$MODEL" ] || "$TOY" init --preset "$PRESET" --type "$TYPE" --seed 1 -o "$MODEL" >&2
cpu_line
echo "model $PRESET $TYPE, -np $NP -c $CTX -t $THREADS, $CLIENTS clients for ${DURATION}s, max_tokens $MAX_TOKENS"

run_one() {  # name port command...
  local name=$1 port=$2; shift 2
  "$@" > "$WORK/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do curl -sf "localhost:$port/health" >/dev/null 2>&1 && break; sleep 0.5; done
  python3 "$HERE/bench/serve_load.py" --port "$port" --pid "$pid" --clients "$CLIENTS" --seconds "$DURATION" \
    --max-tokens "$MAX_TOKENS" --name "$name" --out "$WORK/$name.json"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
run_one toy 18181 "$TOY" serve -m "$MODEL" --port 18181 -np "$NP" -c "$CTX" -t "$THREADS"
run_one llama 18182 "$REF/bin/llama-server" -m "$MODEL" --port 18182 -np "$NP" -c "$CTX" -t "$THREADS" --no-webui
python3 - "$WORK/toy.json" "$WORK/llama.json" <<'PY'
import json, sys
t, l = (json.load(open(p)) for p in sys.argv[1:3])
for k, better in [("tokens_per_s", "higher"), ("ttft_p50_ms", "lower"), ("ttft_p99_ms", "lower"), ("itl_p50_ms", "lower"), ("itl_p99_ms", "lower")]:
    print(f"toy / llama-server {k:14s} {t[k] / l[k] if l[k] else float('nan'):.2f}  ({better} is better)")
PY
