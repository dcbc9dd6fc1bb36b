#!/usr/bin/env bash
# Speed of models split across ggml RPC servers against the same models run
# locally, for toy and for llama.cpp (llama-bench --rpc, against the same
# `toy rpc-server`s). The servers run on this machine (loopback): the numbers
# show what the split itself costs (activations through TCP each block
# boundary, one round trip per graph), not a second machine's gain.
#
#   bench/split.sh
#
# Environment (defaults in brackets):
#   MODELS ["smollm2-135m:q8_0 llama-3.2-1b:q4_k_m"]  MODEL_DIR [~/.cache/toy/bench-models]
#   THREADS [nproc]: the client's threads (for the blocks it keeps and, in
#     "local", all of them)
#   SERVER_THREADS [nproc / 2, at least 1]: each of rpc-two's servers (two of
#     them may compute at once; more threads than cores makes both crawl).
#     rpc-all's and rpc-half's server has THREADS, as the local run.
#   PP [128]  TG [32]  REPS [3]
#   BUILD_DIR [<repo>/build]  REF_DIR [~/.cache/toy-reference]  RESULTS_DIR [a new temporary directory]
#
# Configurations, each model:
#   local     everything on this process's CPU (-ngl 0)
#   rpc-all   every block and the head on one server (-ngl 99)
#   rpc-half  the second half of the blocks on one server, the rest local
#   rpc-two   every block, shared by two servers (-ngl 99, --tensor-split 1,1)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$here/build}
MODEL_DIR=${MODEL_DIR:-$HOME/.cache/toy/bench-models}
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference}
MODELS=${MODELS:-"smollm2-135m:q8_0 llama-3.2-1b:q4_k_m"}
THREADS=${THREADS:-$(nproc)}
SERVER_THREADS=${SERVER_THREADS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
PP=${PP:-128}
TG=${TG:-32}
REPS=${REPS:-3}
RESULTS_DIR=${RESULTS_DIR:-$(mktemp -d /tmp/toy-split-XXXXXX)}
toy=$BUILD_DIR/toy
llama_bench=$REF_DIR/bin/llama-bench
[ -x "$toy" ] || { echo "split.sh: build toy first ($toy)" >&2; exit 1; }
[ -x "$llama_bench" ] || llama_bench=""

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
# start_server THREADS: a server in the background (killed on exit), its
# address in $server (not through $(...), whose subshell would lose the pid)
start_server() {
    local port; port=$(free_port)
    "$toy" rpc-server -t "$1" --port "$port" >"$RESULTS_DIR/server-$port.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
    server="127.0.0.1:$port"
}
start_server "$THREADS"; s0=$server
start_server "$SERVER_THREADS"; s1=$server
start_server "$SERVER_THREADS"; s2=$server

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $cpu; client and one-server runs $THREADS threads, rpc-two's servers $SERVER_THREADS each; loopback; pp$PP, tg$TG, $REPS repetitions"
echo "results: $RESULTS_DIR"
echo
echo "| model | engine | config | pp$PP t/s | tg$TG t/s | pp vs local | tg vs local |"
echo "|---|---|---|---|---|---|---|"

# mean tokens/s of the pp and tg rows of a llama-bench-style JSON file
rates() {
    python3 - "$1" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
pp = [r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0]
tg = [r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0]
print(f"{pp[0]:.1f} {tg[0]:.1f}")
EOF
}

for spec in $MODELS; do
    name=${spec%%:*}
    type=${spec#*:}
    model=$MODEL_DIR/$name.$type.gguf
    [ -f "$model" ] || { echo "split.sh: no $model (bench/compare.sh makes it)" >&2; continue; }
    n_layer=$("$toy" inspect "$model" --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["hyperparameters"]["block_count"])')
    half=$((n_layer / 2))
    for engine in toy llama.cpp; do
        [ "$engine" = llama.cpp ] && [ -z "$llama_bench" ] && continue
        local_pp=""
        local_tg=""
        for config in local rpc-all rpc-half rpc-two; do
            case $config in
            local) flags=(-ngl 0) ;;
            rpc-all) flags=(--rpc "$s0" -ngl 99) ;;
            rpc-half) flags=(--rpc "$s0" -ngl "$half") ;;
            rpc-two) flags=(--rpc "$s1,$s2" -ngl 99 -ts 1,1) ;;
            esac
            out=$RESULTS_DIR/$name.$type.$engine.$config.json
            if [ "$engine" = toy ]; then
                "$toy" bench -m "$model" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o json "${flags[@]}" >"$out" 2>"$out.err"
            else
                "$llama_bench" -m "$model" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o json "${flags[@]}" >"$out" 2>"$out.err"
            fi
            read -r pp tg < <(rates "$out")
            if [ "$config" = local ]; then
                local_pp=$pp
                local_tg=$tg
            fi
            ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
            echo "| $name $type | $engine | $config | $pp | $tg | $(ratio "$pp" "$local_pp") | $(ratio "$tg" "$local_tg") |"
        done
    done
done
