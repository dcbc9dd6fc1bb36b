#!/usr/bin/env bash
# Trains toy's own default model, models/toy-stories.gguf, from nothing:
#
#   1. a corpus of short stories sampled by toy from ../shared/models/stories260K.gguf
#      (Karpathy's llama2.c TinyStories model, MIT license) at temperature 0.8,
#      each started by one of a few openings, seed = story number, so the text
#      is the same on every machine;
#   2. a 6-layer llama (n_embd 192, 6 heads, 2 KV heads, n_ff 512, 2.5 M
#      parameters) with stories260K's tokenizer, trained from scratch by
#      `toy train` on the first 95% of the stories, the rest held out;
#   3. exported as F16 (about 5 MB), with its loss log, loss plot and the
#      held-out losses of it and of stories260K in models/toy-stories.json.
#
# About 25 minutes on 2 cores (make default-model). Deterministic for a given
# thread count (-t 2).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TOY=$HERE/build/toy
SHARED=${SHARED:-$HERE/../shared}
TEACHER=$SHARED/models/stories260K.gguf
WORK=${WORK:-$HERE/build/default-model}
OUT=$HERE/models
N_STORIES=${N_STORIES:-4000}
STEPS=${STEPS:-1200}
mkdir -p "$WORK/stories" "$OUT"
start=$(date +%s)

echo "default model: sampling $N_STORIES stories from $TEACHER" >&2
# two samplers at a time; the opening follows from the story number
seq 0 $((N_STORIES - 1)) | xargs -P 2 -I{} sh -c '
  i=$1; f="$2/stories/$i.txt"; [ -s "$f" ] && exit 0
  case $((i % 6)) in
    0) p="Once upon a time";; 1) p="One day";; 2) p="Lily";; 3) p="Tom";; 4) p="There was a";;
    *) p="Once upon a time, there was a little";;
  esac
  "$3" run -m "$4" -p "$p" -n 256 --temp 0.8 -s "$i" -t 1 2>/dev/null > "$f.tmp" && mv "$f.tmp" "$f"
' _ {} "$WORK" "$TOY" "$TEACHER"
for i in $(seq 0 $((N_STORIES - 1))); do [ -s "$WORK/stories/$i.txt" ] || { echo "story $i missing" >&2; exit 1; }; done
n_train=$((N_STORIES * 95 / 100))
: > "$WORK/train.txt"; : > "$WORK/val.txt"
for i in $(seq 0 $((N_STORIES - 1))); do
  if [ "$i" -lt "$n_train" ]; then f=$WORK/train.txt; else f=$WORK/val.txt; fi
  { cat "$WORK/stories/$i.txt"; printf '\n<|endoftext|>\n'; } >> "$f"
done
cp "$WORK/val.txt" "$OUT/toy-stories.val.txt"
sampled=$(date +%s)

echo "default model: training ($STEPS steps)" >&2
"$TOY" train --from-scratch --arch llama --n-embd 192 --n-layer 6 --n-head 6 --n-head-kv 2 --n-ff 512 --n-ctx 256 \
  --name toy-stories --vocab-from "$TEACHER" -f "$WORK/train.txt" --val-file "$WORK/val.txt" \
  -c 256 -b 2048 --steps "$STEPS" -lr 2e-3 --lr-min 1e-4 --warmup 50 -wd 0.1 --eval-every 100 -s 1 -t 2 \
  --log "$OUT/toy-stories.csv" --plot "$OUT/toy-stories.svg" -o "$WORK/toy-stories.f32.gguf"
"$TOY" export -m "$WORK/toy-stories.f32.gguf" --type f16 -o "$OUT/toy-stories.gguf"
"$TOY" eval -m "$OUT/toy-stories.gguf" -f "$OUT/toy-stories.val.txt" -c 256 -t 2 --json > "$WORK/own.json"
"$TOY" eval -m "$TEACHER" -f "$OUT/toy-stories.val.txt" -c 256 -t 2 --json > "$WORK/teacher.json"
python3 - "$WORK/own.json" "$WORK/teacher.json" "$OUT/toy-stories.json" "$((sampled - start))" "$(( $(date +%s) - sampled ))" <<'PY'
import json, sys
own, teacher = (json.load(open(p)) for p in sys.argv[1:3])
json.dump({"model": "models/toy-stories.gguf", "held_out": "models/toy-stories.val.txt",
           "held_out_loss": own["loss"], "stories260K_held_out_loss": teacher["loss"],
           "held_out_tokens": own["n_targets"], "sampling_seconds": int(sys.argv[4]),
           "training_seconds": int(sys.argv[5])}, open(sys.argv[3], "w"), indent=2)
print(f"default model: held-out loss {own['loss']:.4f} (stories260K {teacher['loss']:.4f}); "
      f"sampling {sys.argv[4]} s, training and export {sys.argv[5]} s")
PY
