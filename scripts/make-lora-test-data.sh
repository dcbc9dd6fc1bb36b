#!/usr/bin/env bash
# Makes tests/data/lora-llama: LoRA adapters toy trained on parity fixtures and
# the logits llama.cpp (the pinned bundle's reference build, through
# scripts/lora-refdump.cpp; run scripts/check-lora-llama.sh once to build it)
# computes with them, for tests/test_lora.cpp (Lora.LlamaCppGivesToysLogits...).
#
#   scripts/make-lora-test-data.sh     (REF=dir of the reference build, default ~/.cache/toy-reference)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
REF=${REF:-$HOME/.cache/toy-reference}
FX=${SHARED:-$HERE/../shared}/fixtures
TOY=$HERE/build/toy
DUMP=$REF/bin/lora-refdump
OUT=$HERE/tests/data/lora-llama
[ -x "$DUMP" ] || { echo "make-lora-test-data: build $DUMP first (scripts/check-lora-llama.sh)" >&2; exit 1; }
mkdir -p "$OUT"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
python3 - "$W/text.txt" <<'PY'
import random, sys
random.seed(0)
names, things = ["Tom", "Lily", "Ben", "Mia"], ["ball", "cat", "kite", "boat"]
docs = [f"Once upon a time, {random.choice(names)} found a {random.choice(things)}." for _ in range(200)]
open(sys.argv[1], "w").write("\n<|endoftext|>\n".join(docs))
PY
# case name, fixture, adapter flags, [second adapter flags, applied at scale 0.5]
make_case() {
  local name=$1 fx=$2 flags=$3 flags2=${4:-}
  local tokens; tokens=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$FX/$fx.json")
  # shellcheck disable=SC2086
  "$TOY" train -m "$FX/$fx.gguf" -f "$W/text.txt" -c 32 --steps 4 -lr 1e-2 $flags -q -o "$OUT/$name.a.gguf"
  local args=("$OUT/$name.a.gguf" 1) adapters="[[\"$name.a.gguf\", 1.0]"
  if [ -n "$flags2" ]; then
    # shellcheck disable=SC2086
    "$TOY" train -m "$FX/$fx.gguf" -f "$W/text.txt" -c 32 --steps 4 -lr 1e-2 -s 7 $flags2 -q -o "$OUT/$name.b.gguf"
    args+=("$OUT/$name.b.gguf" 0.5); adapters+=", [\"$name.b.gguf\", 0.5]"
  fi
  "$DUMP" "$FX/$fx.gguf" "$OUT/$name.logits.f32" "$tokens" "${args[@]}" >/dev/null 2>&1
  echo "{\"fixture\": \"$fx\", \"adapters\": $adapters], \"flags\": \"$flags${flags2:+ + $flags2}\"}" > "$OUT/$name.json"
  echo "$name: $(stat -c %s "$OUT/$name.logits.f32") bytes of llama.cpp logits"
}
make_case llama-per-head llama-tied.f32 "--lora-rank 2 --lora-targets q,v --lora-per-head" "--lora-rank 4 --lora-targets o,gate"
make_case gpt2-fused-qkv gpt2.f32 "--lora-rank 4 --lora-targets q,k,v,o,up,down"
make_case qwen2-bias qwen2.f32 "--lora-rank 4 --lora-targets all"
make_case llama-q8_0 llama-256.q8_0 "--lora-rank 8 --lora-targets q,k,v,o"
