#!/usr/bin/env bash
# Reference data for tests/test_convert.cpp (toy convert, issue 15), made with
# the pinned bundle's own convert_hf_to_gguf.py and llama.cpp's refdump. Run
# once; the results are kept in git so the tests need neither Python nor the
# reference tools.
#
#   scripts/make-convert-reference.sh [--new-checkpoints]
#
# Needs ../shared/tools/build-llama-reference.sh's refdump, and Debian's
# python3-torch, -numpy, -sentencepiece, -yaml and -tqdm (installed here when
# run as root). Debian has no transformers: scripts/convert-reference/
# transformers stands in for the parts the converter reads, and
# hf_bpe.py computes Hugging Face's BPE tokenization as the ground truth of
# TinyStories-656K's byte-fallback tokenizer.
#
# Writes tests/data/convert/:
#   hf/<name>/                 tiny random checkpoints, one per architecture
#                              (made only when missing or with --new-checkpoints)
#   <name>.<outtype>.json      the reference converter's GGUF described by
#                              convert-reference/describe_gguf.py
#   <name>.json, .logits.f32   refdump of the f32 reference GGUF (8 tokens)
#   tinystories.*              the same for ../shared/models/TinyStories-656K,
#                              and hf_tokens.json: texts and their Hugging
#                              Face token ids
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LLAMA=$(scripts/fetch-ggml.sh)
SHARED=${TOY_SHARED_DIR:-$ROOT/../shared}
REFDUMP=${TOY_REFERENCE_DIR:-$HOME/.cache/toy-reference}/bin/refdump
OUT=tests/data/convert
[ -x "$REFDUMP" ] || { echo "make-convert-reference: $REFDUMP is missing; run ../shared/tools/build-llama-reference.sh" >&2; exit 1; }

PKGS="python3-torch python3-numpy python3-sentencepiece python3-yaml python3-tqdm"
if ! /usr/bin/python3 -c "import torch, numpy, sentencepiece, yaml, tqdm" 2>/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "make-convert-reference: install $PKGS" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -qq $PKGS >/dev/null
fi
PY=(env PYTHONPATH="$ROOT/scripts/convert-reference" /usr/bin/python3)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -d "$OUT/hf" ] || [ "${1:-}" = --new-checkpoints ]; then
  rm -rf "$OUT/hf"
  cat "$LLAMA/README.md" "$LLAMA/docs/build.md" > "$TMP/train.txt"  # the tokenizer's training text
  "${PY[@]}" scripts/convert-reference/make_checkpoints.py "$OUT/hf" "$TMP/train.txt"
fi

convert() {  # DIR OUTTYPE GGUF
  "${PY[@]}" scripts/convert-reference/run_convert.py "$LLAMA" "$1" --outfile "$3" --outtype "$2" >"$TMP/log" 2>&1 \
    || { tail -n 20 "$TMP/log" >&2; exit 1; }
}
for d in "$OUT"/hf/*/; do
  name=$(basename "$d")
  for type in f32 f16 bf16 q8_0 auto; do
    convert "$d" $type "$TMP/$name.$type.gguf"
    "${PY[@]}" scripts/convert-reference/describe_gguf.py "$LLAMA" "$TMP/$name.$type.gguf" > "$OUT/$name.$type.json"
  done
  "$REFDUMP" "$TMP/$name.f32.gguf" "$OUT/$name" --T 8 >/dev/null 2>&1
  echo "$name: done"
done

# TinyStories-656K: the bundle's converter names its tied embedding
# output.weight only, a file llama.cpp cannot load (no token_embd.weight);
# refdump runs on a copy where that tensor is renamed.
TS=$SHARED/models/TinyStories-656K
convert "$TS" f32 "$TMP/tinystories.gguf"
"${PY[@]}" scripts/convert-reference/describe_gguf.py "$LLAMA" "$TMP/tinystories.gguf" > "$OUT/tinystories.f32.json"
"${PY[@]}" - "$LLAMA" "$TMP/tinystories.gguf" "$TMP/tinystories-loadable.gguf" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1] + "/gguf-py")
import gguf
r = gguf.GGUFReader(sys.argv[2])
w = gguf.GGUFWriter(sys.argv[3], arch="llama")
for f in r.fields.values():
    if f.name.startswith("GGUF.") or f.name == "general.architecture":
        continue
    v = f.contents()
    vt = f.types[0]
    if vt == gguf.GGUFValueType.ARRAY:
        w.add_key_value(f.name, v, vt, sub_type=f.types[-1])
    else:
        w.add_key_value(f.name, v, vt)
for t in r.tensors:
    name = "token_embd.weight" if t.name == "output.weight" else t.name
    w.add_tensor(name, t.data, raw_shape=list(reversed([int(x) for x in t.shape])), raw_dtype=t.tensor_type)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
EOF
"$REFDUMP" "$TMP/tinystories-loadable.gguf" "$OUT/tinystories" --text "Once upon a time" --T 8 >/dev/null 2>&1
cat > "$TMP/texts.json" <<'EOF'
["Once upon a time", "Once upon a time, there was a little girl named Lily. She loved to play outside.",
 " leading space", "double  space", "Tom said, \"Hello!\" and ran away.", "numbers 123 and 4567",
 "line one\nline two\n\nline three", "a", "The end.", "They were happy. The sun was shining and the birds sang."]
EOF
"${PY[@]}" - "$TMP/texts.json" "$TS/tokenizer.json" > "$OUT/tinystories.hf_tokens.json" <<'EOF'
import json, subprocess, sys
texts = json.load(open(sys.argv[1]))
ids = json.loads(subprocess.run([sys.executable, "scripts/convert-reference/hf_bpe.py", sys.argv[2], sys.argv[1]],
                                capture_output=True, text=True, check=True).stdout)
json.dump([{"text": t, "ids": i} for t, i in zip(texts, ids)], sys.stdout, indent=1)
print()
EOF
echo "tinystories: done"
