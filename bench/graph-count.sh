#!/usr/bin/env bash
# Work per decode step, toy against llama.cpp: the graph's nodes, the ops that
# compute (views and reshapes do not), and the thread barriers one token waits at.
#
#   bench/graph-count.sh [MODEL.gguf ...]   (default: the bench/compare.sh models that exist)
#
# toy: `toy bench -p 0 -n 2` prints its decode step's counts (Session::graph_work).
# llama.cpp: llama-eval-callback with an empty prompt evaluates one token (BOS)
# and names every node it computes; counted the same way: ggml-cpu waits at a
# barrier after every computing op but the last (plus one at the end), runs an
# RMS_NORM and the MUL after it as one op, and inside every MUL_MAT whose
# input must be converted to the weights' dot type (all but F32 weights) waits
# once more after converting it. toy's packed kernels convert decode inputs
# in each thread, without that barrier. Environment: BUILD_DIR [<repo>/build],
# REF_DIR [~/.cache/toy-reference], MODEL_DIR [~/.cache/toy/bench-models], THREADS [2].
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference}
MODEL_DIR=${MODEL_DIR:-$HOME/.cache/toy/bench-models}
THREADS=${THREADS:-2}
CB=$REF_DIR/bin/llama-eval-callback
[ -x "$BUILD_DIR/toy" ] || { echo "graph-count: $BUILD_DIR/toy is missing (make build)" >&2; exit 1; }
[ -x "$CB" ] || { echo "graph-count: $CB is missing (../shared/tools/build-llama-reference.sh)" >&2; exit 1; }
models=("$@")
if [ ${#models[@]} = 0 ]; then
  for m in smollm2-135m.f16 smollm2-135m.q8_0 qwen2.5-0.5b.q8_0 llama-3.2-1b.q4_k_m; do
    [ -f "$MODEL_DIR/$m.gguf" ] && models+=("$MODEL_DIR/$m.gguf")
  done
fi
[ ${#models[@]} -gt 0 ] || { echo "graph-count: no models (pass paths, or run bench/compare.sh once)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model | toy nodes | toy ops | toy barriers | llama.cpp nodes | llama.cpp ops | llama.cpp barriers | toy / llama.cpp barriers |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for m in "${models[@]}"; do
  "$BUILD_DIR/toy" bench -m "$m" -p 0 -n 2 -r 1 -t "$THREADS" > "$tmp/toy.txt" 2>&1 ||
    { echo "graph-count: toy bench failed on $m" >&2; cat "$tmp/toy.txt" >&2; exit 1; }
  "$CB" -m "$m" -p "" -n 1 -t "$THREADS" > "$tmp/llama.txt" 2>&1 ||
    { echo "graph-count: llama-eval-callback failed on $m" >&2; tail -5 "$tmp/llama.txt" >&2; exit 1; }
  python3 - "$m" "$tmp/toy.txt" "$tmp/llama.txt" <<'PY'
import os, re, sys
model, toy_txt, llama_txt = sys.argv[1:]
m = re.search(r"one decode step is (\d+) graph nodes, (\d+) ops that compute \((\d+) fused by ggml\), (\d+) thread barriers",
              open(toy_txt).read())
if not m:
    sys.exit(f"graph-count: no decode-step line in toy bench's output for {model}")
t_nodes, t_ops, _, t_bar = map(int, m.groups())
nodes = []
for line in open(llama_txt, errors="replace"):
    n = re.match(r"common_debug_cb_eval:\s+(\S+) = \(\w+\)\s+(\w+)\((.*)$", line)
    if n:
        nodes.append(n.groups())
EMPTY = {"NONE", "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE"}
ops = [n for n in nodes if n[1] not in EMPTY]
fused = sum(1 for a, b in zip(nodes, nodes[1:])
            if a[1] == "RMS_NORM" and b[1] == "MUL" and b[2].startswith(a[0] + "{"))
converting = sum(1 for n in ops if n[1] in ("MUL_MAT", "MUL_MAT_ID"))
l_bar = len(ops) - fused + converting
name = os.path.basename(model).removesuffix(".gguf")
print(f"| {name} | {t_nodes} | {t_ops} | {t_bar} | {len(nodes)} | {len(ops)} | {l_bar} | {t_bar / l_bar:.2f} |")
PY
done
