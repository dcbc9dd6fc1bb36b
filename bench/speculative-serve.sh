#!/usr/bin/env bash
# Speculative decoding in the servers: toy serve against llama-server (same
# pinned bundle), plain and with n-gram drafts from the context (toy's
# --lookup-ngram 2; llama-server's --spec-type ngram-map-k with a 2-gram key,
# the fastest of its n-gram types on this prompt: ngram-simple drafted nothing),
# and with the target drafting for itself (every guess right: the acceptance
# upper bound). CLIENTS clients at once send the same repetitive completion
# prompt (temperature 0, MAX_TOKENS tokens, ignore_eos) ROUNDS times each;
# printed per server: generated tokens per second of wall time over all
# clients, drafted and accepted tokens where the server reports them, and
# whether every reply equals the plain server's.
#
#   bench/speculative-serve.sh    CLIENTS="1 4" ROUNDS=3 MAX_TOKENS=96 THREADS=2 NP=4 CTX=2048
#
# MODEL defaults to bench/speculative.sh's target (random weights in
# SmolLM2-360M's shape, Q8_0), made there. PAUSE_FUZZ=1 pauses a background
# fuzzer (~/fuzzpause.sh) while timing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
CLIENTS=${CLIENTS:-"1 4"} ROUNDS=${ROUNDS:-3} MAX_TOKENS=${MAX_TOKENS:-96} THREADS=${THREADS:-2}
NP=${NP:-4} CTX=${CTX:-2048}
MODEL=${MODEL:-$HOME/.cache/toy/bench-models/spec-target-360m-q8_0.gguf}
REF=${REF:-$HOME/.cache/toy-reference}
WORK=${WORK:-$(mktemp -d /tmp/toy-bench-spec-serve.XXXXXX)}
TOY=$ROOT/build/toy
[ -x "$TOY" ] || { echo "no $TOY: run make build first" >&2; exit 1; }
[ -x "$REF/bin/llama-server" ] || { echo "no $REF/bin/llama-server (../shared/tools/build-llama-reference.sh)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no $MODEL: bench/speculative.sh makes it" >&2; exit 1; }
if [ "${PAUSE_FUZZ:-0}" = 1 ] && [ -x "$HOME/fuzzpause.sh" ]; then
  "$HOME/fuzzpause.sh" stop
  trap '"$HOME/fuzzpause.sh" cont' EXIT
fi
cpu_line
echo "model $(basename "$MODEL"), -np $NP -c $CTX -t $THREADS, max_tokens $MAX_TOKENS, $ROUNDS rounds per client"

PROMPT="The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox"

# serve NAME PORT COMMAND...: starts the server, runs every client count, stops it
serve() {
  local name=$1 port=$2; shift 2
  "$@" > "$WORK/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 240); do curl -sf "localhost:$port/health" >/dev/null 2>&1 && break; sleep 0.5; done
  for c in $CLIENTS; do
    python3 - "$port" "$c" "$ROUNDS" "$MAX_TOKENS" "$PROMPT" > "$WORK/$name.$c.json" <<'PY'
import json, sys, threading, time, urllib.request
port, clients, rounds, max_tokens, prompt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def post():
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))
post()  # warm-up
texts, tokens = [], [0]
def client():
    for _ in range(rounds):
        r = post()
        texts.append(r["choices"][0]["text"])
        tokens[0] += r["usage"]["completion_tokens"]
t0 = time.time()
threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"tps": tokens[0] / (time.time() - t0), "texts": sorted(set(texts))}))
PY
  done
  curl -s "localhost:$port/metrics" > "$WORK/$name.metrics" || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

serve toy 18191 "$TOY" serve -m "$MODEL" --port 18191 -np "$NP" -c "$CTX" -t "$THREADS"
serve toy-lookup 18192 "$TOY" serve -m "$MODEL" --port 18192 -np "$NP" -c "$CTX" -t "$THREADS" --lookup-ngram 2 --draft-max 16
serve toy-self 18193 "$TOY" serve -m "$MODEL" --port 18193 -np "$NP" -c "$CTX" -t "$THREADS" -md "$MODEL" --draft-max 8 --draft-p-min 0
LS=("$REF/bin/llama-server" -m "$MODEL" -np "$NP" -c "$CTX" -t "$THREADS" --no-webui)
serve llama 18194 "${LS[@]}" --port 18194
serve llama-ngram 18195 "${LS[@]}" --port 18195 --spec-type ngram-map-k --spec-ngram-map-k-size-n 2 --spec-ngram-map-k-size-m 16
# (-md alone loads the draft model but drafts nothing: the type must be named)
serve llama-self 18196 "${LS[@]}" --port 18196 --spec-type draft-simple -md "$MODEL" --spec-draft-n-max 8 --spec-draft-p-min 0

python3 - "$WORK" "$CLIENTS" <<'PY'
import json, re, sys
work, clients = sys.argv[1], sys.argv[2].split()
def load(name, c): return json.load(open(f"{work}/{name}.{c}.json"))
def drafts(name):
    try: m = open(f"{work}/{name}.metrics").read()
    except OSError: return "-"
    d = re.search(r"^toy_draft_tokens_total (\d+)", m, re.M); a = re.search(r"^toy_draft_tokens_accepted_total (\d+)", m, re.M)
    return f"{a.group(1)}/{d.group(1)}" if d and a else "-"
print("| server | " + " | ".join(f"{c} client{'s' if c != '1' else ''} t/s" for c in clients) + " | accepted/drafted | reply = plain's |")
print("|---|" + "---:|" * len(clients) + "---:|---|")
for engine in ["toy", "llama"]:
    for kind in ["", "-lookup" if engine == "toy" else "-ngram", "-self"]:
        name = engine + kind
        same = all(load(name, c)["texts"] == load(engine, c)["texts"] for c in clients)
        print(f"| {name} | " + " | ".join(f"{load(name, c)['tps']:.1f}" for c in clients) + f" | {drafts(name)} | {'yes' if same else 'NO'} |")
for kind, lk in [("", ""), ("-lookup", "-ngram"), ("-self", "-self")]:
    print(f"toy{kind} / llama{lk}: " + ", ".join(f"{load('toy' + kind, c)['tps'] / load('llama' + lk, c)['tps']:.2f} ({c} clients)" for c in clients))
PY
echo "logs in $WORK"
