#!/usr/bin/env bash
# Checks that what `toy train` writes is usable by llama.cpp (built from the
# same pinned bundle by ../shared/tools/build-llama-reference.sh): a fully
# fine-tuned model and a model trained from scratch load and generate in
# llama-completion, and LoRA adapters (standard and per-head) load with --lora.
# Then one full fine-tune step of toy and of llama-finetune on the same model,
# window and AdamW settings must give the same updated weights (1e-4 relative)
# for every tensor llama-finetune trains with a complete gradient: in this
# llama.cpp, token_embd is frozen (a FIXME in llama_context::opt_init) and
# attn_k / attn_v get no gradient (K and V reach attention through the KV
# cache, which the backward pass does not cross), so everything below the
# last block's attention differs by construction; the check asserts that
# llama-finetune leaves those unchanged, so a fixed llama.cpp is noticed.
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
  # loading is what is checked: a random model may sample its end-of-text
  # first (ggml's threads make near-ties fall either way) and print little
  if out=$("$@" 2>"$W/err"); then
    echo "ok    $what: $(echo "$out" | tr '\n' ' ' | cut -c1-70)"; pass=$((pass+1))
  else
    echo "FAIL  $what: $(tail -n 2 "$W/err" | tr '\n' ' ')"; fail=$((fail+1))
  fi
}
gen() { "$LC" -m "$1" "${@:2}" -p "Once upon a time" -n 16 --temp 0 -no-cnv --no-warmup; }
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
# one step against llama-finetune (tests/data/llama-finetune-step holds one
# such run for ctest: TrainCli.OneAdamWStepEqualsLlamaFinetunes): its n_ctx is padded to 256 and its window
# count is (tokens - n_ctx - 1) / (n_ctx / 2), so 385..511 tokens give exactly
# one window, the same first 257 tokens toy's single window holds
LF=$REF/bin/llama-finetune
python3 - "$W/one.txt" <<'PY'
import random, sys
random.seed(1)
names, things = ["Tom", "Lily", "Ben", "Mia"], ["ball", "cat", "kite", "boat"]
open(sys.argv[1], "w").write(" ".join(f"{random.choice(names)} found a {random.choice(things)}." for _ in range(46)))
PY
"$TOY" init --arch llama --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --vocab-from "$S" --n-ctx 256 \
  --type f32 --untied -o "$W/one.init.gguf" 2>/dev/null
"$LF" -m "$W/one.init.gguf" -f "$W/one.txt" -c 256 -b 256 -ub 256 -lr 1e-4 -epochs 1 -val-split 0 -t 2 \
  -o "$W/one.ref.gguf" >"$W/lf.log" 2>&1 || { tail -n 3 "$W/lf.log"; }
"$TOY" train -m "$W/one.init.gguf" -f "$W/one.txt" -c 256 -b 256 -lr 1e-4 --lr-schedule constant --grad-clip 0 \
  --epochs 1 -t 2 -q -o "$W/one.toy.gguf"
one_step() {
  [ -f "$W/one.ref.gguf" ] || { echo "llama-finetune wrote nothing" >&2; return 1; }
  "$TOY" inspect "$W/one.toy.gguf" --diff "$W/one.ref.gguf" --json >"$W/toy-vs-ref.json"
  "$TOY" inspect "$W/one.init.gguf" --diff "$W/one.ref.gguf" --json >"$W/init-vs-ref.json"
  python3 - "$W/toy-vs-ref.json" "$W/init-vs-ref.json" <<'PY'
import json, sys
toy, init = (json.load(open(p)) for p in sys.argv[1:3])
moved = {t["name"]: t["rel"] for t in init["tensors"]}
complete = ["output.weight", "output_norm.weight", "blk.1.attn_q.weight", "blk.1.attn_output.weight",
            "blk.1.ffn_norm.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight"]
frozen = ["token_embd.weight"] + [f"blk.{i}.attn_{p}.weight" for i in (0, 1) for p in "kv"]
worst = max((t["rel"], t["name"]) for t in toy["tensors"] if t["name"] in complete)
bad = [n for n in complete if moved[n] == 0 and n != "output_norm.weight"] + [n for n in frozen if moved[n] != 0]
print(f"largest relative difference {worst[0]:.2e} ({worst[1]}) over {len(complete)} tensors; "
      f"llama-finetune leaves {len(frozen)} frozen/cut tensors unchanged")
sys.exit(0 if worst[0] <= 1e-4 and not bad else 1)
PY
}
check "one AdamW step equals llama-finetune's" one_step
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
