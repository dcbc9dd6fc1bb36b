#!/usr/bin/env bash
# Checks LoRA adapters against llama.cpp (the reference build of the pinned
# bundle, ../shared/tools/build-llama-reference.sh): toy trains an adapter on
# each parity fixture, then toy (`toy logits --lora`) and llama.cpp
# (scripts/lora-refdump.cpp, built here against the reference) compute the
# logits of the fixture's tokens with it. Per row, d = max|toy - llama| /
# (max - min of llama's row) must meet ../shared/fixtures/README.md's
# tolerance: 1e-3 on F32 bases, 2e-2 on F16 and quantized ones. Then
# `toy export` merges adapters: llama.cpp loads the merged file, and its
# logits equal llama.cpp's own with the adapter applied; quantized on write,
# it is the file llama-quantize makes of the merged F32 model, byte for byte.
#
#   scripts/check-lora-llama.sh     (REF=dir of the reference build, default ~/.cache/toy-reference)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
REF=${REF:-$HOME/.cache/toy-reference}
SHARED=${SHARED:-$HERE/../shared}
TOY=$HERE/build/toy
FX=$SHARED/fixtures
[ -f "$REF/build/src/libllama.a" ] || { echo "check-lora-llama: build the reference first: $SHARED/tools/build-llama-reference.sh" >&2; exit 1; }
DUMP=$REF/bin/lora-refdump
if [ ! -x "$DUMP" ] || [ "$HERE/scripts/lora-refdump.cpp" -nt "$DUMP" ]; then
  B=$REF/build L=$REF/llama.cpp
  g++ -O2 -std=c++17 "$HERE/scripts/lora-refdump.cpp" -I$L/include -I$L/ggml/include $B/src/libllama.a $B/ggml/src/libggml.a \
    $B/ggml/src/ggml-rpc/libggml-rpc.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl -o "$DUMP"
fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
python3 - "$W/text.txt" <<'PY'
import random, sys
random.seed(0)
names, things = ["Tom", "Lily", "Ben", "Mia"], ["ball", "cat", "kite", "boat"]
docs = [f"Once upon a time, {random.choice(names)} found a {random.choice(things)}. It was a happy day." for _ in range(200)]
open(sys.argv[1], "w").write("\n<|endoftext|>\n".join(docs))
PY
pass=0; fail=0
compare() {  # tolerance, name, tokens: $W/toy.f32 against $W/ref.f32 ($W/base.f32: without the adapters)
  python3 - "$W/toy.f32" "$W/ref.f32" "$W/base.f32" "$1" "$2" "$(echo "$3" | tr ',' '\n' | wc -l)" <<'PY' && pass=$((pass+1)) || fail=$((fail+1))
import array, sys
def load(p):
    a = array.array("f"); a.frombytes(open(p, "rb").read()); return a
toy, ref, base = (load(p) for p in sys.argv[1:4])
tol, name, T = float(sys.argv[4]), sys.argv[5], int(sys.argv[6])
V = len(ref) // T
def worst(got, want):
    d = 0.0
    for r in range(T):
        g, w = got[r * V:(r + 1) * V], want[r * V:(r + 1) * V]
        d = max(d, max(abs(x - y) for x, y in zip(g, w)) / max(1e-30, max(w) - min(w)))
    return d
d, moved = worst(toy, ref), worst(base, ref)
ok = len(toy) == len(ref) and d <= tol and moved > max(5e-3, 10 * d)
print(f"{'ok  ' if ok else 'FAIL'}  {name}: d = {d:.2e} (tolerance {tol:g}; the adapter moves the logits by {moved:.2e})")
sys.exit(0 if ok else 1)
PY
}
# fixture, tolerance, training flags, [second adapter's flags]
check() {
  local fx=$1 tol=$2 flags=$3 flags2=${4:-}
  local name="$fx ${flags}${flags2:+ + $flags2}"
  local model=$FX/$fx.gguf
  local tokens; tokens=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$FX/$fx.json")
  # shellcheck disable=SC2086
  "$TOY" train -m "$model" -f "$W/text.txt" -c 32 --steps 4 -lr 1e-2 $flags -q -o "$W/a.gguf" 2>"$W/err" || { echo "FAIL  $name: $(tail -1 "$W/err")"; fail=$((fail+1)); return; }
  local toy_args=(--lora "$W/a.gguf") ref_args=("$W/a.gguf" 1)
  if [ -n "$flags2" ]; then
    # shellcheck disable=SC2086
    "$TOY" train -m "$model" -f "$W/text.txt" -c 32 --steps 4 -lr 1e-2 -s 7 $flags2 -q -o "$W/b.gguf" 2>"$W/err"
    toy_args+=(--lora-scaled "$W/b.gguf" 0.5); ref_args+=("$W/b.gguf" 0.5)
  fi
  "$TOY" logits -m "$model" "${toy_args[@]}" --tokens "$tokens" -ctk f32 -ctv f32 -fa off -t 2 -o "$W/toy.f32" 2>"$W/err" \
    || { echo "FAIL  $name: toy: $(tail -1 "$W/err")"; fail=$((fail+1)); return; }
  "$DUMP" "$model" "$W/ref.f32" "$tokens" "${ref_args[@]}" >/dev/null 2>"$W/err" \
    || { echo "FAIL  $name: llama.cpp: $(grep -v '^llama\|^load\|^print_info' "$W/err" | tail -1)"; fail=$((fail+1)); return; }
  "$DUMP" "$model" "$W/base.f32" "$tokens" >/dev/null 2>&1
  compare "$tol" "$name" "$tokens"
}
# toy export: llama.cpp's logits of the merged file against its own with the adapter applied
check_export() {  # fixture, type (or ""), tolerance
  local fx=$1 type=$2 tol=$3 model=$FX/$1.gguf
  local name="toy export $fx${type:+ --type $type}"
  local tokens; tokens=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$FX/$fx.json")
  "$TOY" train -m "$model" -f "$W/text.txt" -c 32 --steps 4 -lr 1e-2 --lora-rank 4 --lora-targets all -q -o "$W/e.gguf"
  "$TOY" export -m "$model" --lora "$W/e.gguf" ${type:+--type $type} -o "$W/merged.gguf" 2>/dev/null
  "$DUMP" "$W/merged.gguf" "$W/toy.f32" "$tokens" >/dev/null 2>&1 || { echo "FAIL  $name: llama.cpp cannot load it"; fail=$((fail+1)); return; }
  "$DUMP" "$model" "$W/ref.f32" "$tokens" "$W/e.gguf" 1 >/dev/null 2>&1
  "$DUMP" "$model" "$W/base.f32" "$tokens" >/dev/null 2>&1
  compare "$tol" "$name" "$tokens"
}
check llama-tied.f32 1e-3 "--lora-rank 4 --lora-targets all"
check llama-tied.f32 1e-3 "--lora-rank 2 --lora-targets q,v --lora-per-head" "--lora-rank 4 --lora-targets o,gate"
check llama-untied.f16 2e-2 "--lora-rank 4 --lora-targets all"
check llama-256.q8_0 2e-2 "--lora-rank 8 --lora-targets q,k,v,o"
check llama-256.q4_k_m 2e-2 "--lora-rank 8 --lora-targets all"
check llama3-rope.f32 1e-3 "--lora-rank 4 --lora-targets all"
check qwen2.f32 1e-3 "--lora-rank 4 --lora-targets all"
check qwen3.f32 1e-3 "--lora-rank 4 --lora-targets all --lora-per-head"
check gemma2.f32 1e-3 "--lora-rank 4 --lora-targets all"
check granite.f32 1e-3 "--lora-rank 4 --lora-targets all"
check gpt2.f32 1e-3 "--lora-rank 4 --lora-targets q,k,v,o,up,down"
check_export llama-tied.f32 "" 1e-3
check_export qwen2.f32 "" 1e-3
check_export llama-256.q8_0 q8_0 2e-2
# quantizing on write: the same types and values as llama-quantize of the merged F32 file
check_quantize() {  # fixture, toy type, llama-quantize type
  local name="toy export --type $2 of $1 = llama-quantize $3"
  "$TOY" train -m "$FX/$1.gguf" -f "$W/text.txt" -c 32 --steps 4 -lr 1e-2 --lora-rank 4 --lora-targets all -q -o "$W/e.gguf"
  "$TOY" export -m "$FX/$1.gguf" --lora "$W/e.gguf" -o "$W/m32.gguf" 2>/dev/null
  "$TOY" export -m "$FX/$1.gguf" --lora "$W/e.gguf" --type "$2" -o "$W/toyq.gguf" 2>/dev/null
  "$REF/bin/llama-quantize" "$W/m32.gguf" "$W/refq.gguf" "$3" >/dev/null 2>&1
  if python3 - "$TOY" "$W/toyq.gguf" "$W/refq.gguf" "$name" <<'PY'
import json, subprocess, sys
toy, a, b, name = sys.argv[1:5]
types = lambda f: {t["name"]: t["type"] for t in json.loads(subprocess.check_output([toy, "inspect", "--json", f]))["tensors"]}
diff = json.loads(subprocess.check_output([toy, "inspect", a, "--diff", b, "--json"]))
same_types = types(a) == types(b)
ok = same_types and diff["worst_rel"] == 0 and not diff["only_in_a"] and not diff["only_in_b"]
print(f"{'ok  ' if ok else 'FAIL'}  {name}: types {'equal' if same_types else 'differ'}, largest relative difference {diff['worst_rel']:.2e}")
sys.exit(0 if ok else 1)
PY
  then pass=$((pass+1)); else fail=$((fail+1)); fi
}
check_quantize llama-256.f32 q4_k_m Q4_K_M
check_quantize llama-256.f32 q8_0 Q8_0
check_quantize qwen2.f32 q6_k Q6_K
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
