#!/usr/bin/env bash
# Checks that what `toy train` writes is usable by llama.cpp (built from the
# same pinned bundle by ../shared/tools/build-llama-reference.sh): a fully
# fine-tuned model and a model trained from scratch load and generate in
# llama-completion, and LoRA adapters (standard and per-head) load with --lora.
#
#   scripts/check-train-llama.sh     (REF=dir of the reference build, default ~/.cache/toy-reference)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
REF=${REF:-$HOME/.cache/toy-reference}
SHARED=${SHARED:-$HERE/../shared}
TOY=$HERE/build/toy
LC=$REF/bin/llama-completion
[ -x "$LC" ] || { echo "check-train-llama: build the reference first: $SHARED/tools/build-llama-reference.sh" >&2; exit 1; }
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
python3 - "$W/text.txt" <<'PY'
import random, sys
random.seed(0)
names, things = ["Tom", "Lily", "Ben", "Mia"], ["ball", "cat", "kite", "boat"]
docs = [f"Once upon a time, {random.choice(names)} found a {random.choice(things)}. It was a happy day." for _ in range(300)]
open(sys.argv[1], "w").write("\n<|endoftext|>\n".join(docs))
PY
S=$SHARED/models/stories260K.gguf
pass=0; fail=0
check() {  # description, command...
  local what=$1; shift
  if out=$("$@" 2>"$W/err") && [ -n "$out" ]; then
    echo "ok    $what: $(echo "$out" | tr '\n' ' ' | cut -c1-70)"; pass=$((pass+1))
  else
    echo "FAIL  $what: $(tail -n 2 "$W/err" | tr '\n' ' ')"; fail=$((fail+1))
  fi
}
gen() { "$LC" -m "$1" "${@:2}" -p "Once upon a time" -n 16 --temp 0 -no-cnv --no-warmup 2>/dev/null; }
"$TOY" train -m "$S" -f "$W/text.txt" -c 64 -b 128 --steps 20 -lr 1e-3 -q -o "$W/full.gguf"
check "full fine-tune of stories260K" gen "$W/full.gguf"
"$TOY" train --from-scratch --arch llama --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --vocab-from "$S" \
  -f "$W/text.txt" -c 64 -b 128 --steps 20 -lr 1e-3 -q -o "$W/scratch.gguf"
check "from scratch (llama, stories260K vocab)" gen "$W/scratch.gguf"
"$TOY" train -m "$S" -f "$W/text.txt" -c 64 -b 128 --steps 20 -lr 1e-3 --lora-rank 4 --lora-targets all -q -o "$W/lora.gguf"
check "LoRA adapter (all targets)" gen "$S" --lora "$W/lora.gguf"
"$TOY" train -m "$S" -f "$W/text.txt" -c 64 -b 128 --steps 20 -lr 1e-3 --lora-rank 2 --lora-targets q,v --lora-per-head -q \
  -o "$W/lora-ph.gguf"
check "per-head LoRA adapter" gen "$S" --lora "$W/lora-ph.gguf"
for arch in qwen2 gemma2 gpt2; do
  "$TOY" init --arch "$arch" --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 4 --n-ff 128 --type f32 -o "$W/$arch.init.gguf" 2>/dev/null
  "$TOY" train -m "$W/$arch.init.gguf" -f "$W/text.txt" -c 32 --steps 5 -q -o "$W/$arch.gguf"
  check "full fine-tune of a random $arch" gen "$W/$arch.gguf"
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
