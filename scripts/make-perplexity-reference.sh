#!/usr/bin/env bash
# Reference numbers for tests/test_perplexity.cpp and tests/test_imatrix.cpp,
# computed by llama.cpp's own tools (built from the same pinned ggml by
# ../shared/tools/build-llama-reference.sh; llama-imatrix is built here into
# the same tree when missing). The tests then need none of these tools.
#
#   scripts/make-perplexity-reference.sh
#
# Environment: REF_DIR [~/.cache/toy-reference]  BUILD_DIR [<repo>/build]
#              THREADS [2]
# Writes tests/data/perplexity/:
#   reference.json            llama-perplexity's values: per-chunk running PPL, final PPL +/- error,
#                             the KL statistics of a Q8_0 copy of stories260K against the F32 model
#                             (base file written by llama-perplexity, and base file written by toy)
#   stories260K.imatrix.gguf  llama-imatrix on stories260K (-c 128)
#   mixtral.imatrix.gguf      llama-imatrix on the MoE fixture mixtral.f32 (-c 128, experts)
# and checks on the way that each tool reads the other's base file.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference}
BUILD_DIR=${BUILD_DIR:-$HERE/build}
THREADS=${THREADS:-2}
SHARED=$(cd "$HERE/../shared" && pwd)
OUT=$HERE/tests/data/perplexity
TEXT=$OUT/stories.txt
TOY=$BUILD_DIR/toy
PPL=$REF_DIR/bin/llama-perplexity
IMATRIX=$REF_DIR/bin/llama-imatrix
STORIES=$SHARED/models/stories260K.gguf
GPT2=$SHARED/fixtures/gpt2.f32.gguf
LLAMA256=$SHARED/fixtures/llama-256.f32.gguf
MIXTRAL=$SHARED/fixtures/mixtral.f32.gguf

[ -x "$TOY" ] || { echo "no toy at $TOY (set BUILD_DIR)" >&2; exit 1; }
[ -x "$PPL" ] || { echo "no llama-perplexity in $REF_DIR/bin (run ../shared/tools/build-llama-reference.sh)" >&2; exit 1; }
if [ ! -x "$IMATRIX" ]; then
  echo "building llama-imatrix in $REF_DIR/build" >&2
  cmake --build "$REF_DIR/build" --target llama-imatrix -j"$(nproc)" >/dev/null
  cp "$REF_DIR/build/bin/llama-imatrix" "$REF_DIR/bin/"
fi

TMP=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$TMP"' EXIT
export OMP_WAIT_POLICY=PASSIVE
# Flash attention off, in every tool and in the tests: ggml's CPU flash
# attention takes a path that depends on the CPU and on the batch's layout
# (with a head of 8, F16 queries where the head is not a multiple of the SIMD
# width, F32 tiles where it is and 64 queries share a stream). llama-imatrix's
# default batch of 16 windows then differs from one window per batch by
# 2.6e-4 on an AVX2-only Zen 3, where toy equals either exactly. Without it
# the numbers hold on every CPU.
FA=(-fa off)

# llama-perplexity MODEL CTX NAME [extra flags]: its whole log in $TMP/NAME.log
run_ppl() {
  local model=$1 ctx=$2 name=$3; shift 3
  "$PPL" -m "$model" -f "$TEXT" -c "$ctx" -t "$THREADS" "${FA[@]}" "$@" >"$TMP/$name.log" 2>&1 ||
    { cat "$TMP/$name.log" >&2; exit 1; }
}

# llama-perplexity --kl-divergence BASE NAME: its log in $TMP/NAME.log. Its
# logger sometimes loses the last lines at exit: run again until they are there.
run_kl() {
  local base=$1 name=$2
  for _ in 1 2 3 4 5; do
    "$PPL" -m "$TMP/stories260K.q8_0.gguf" -c 128 -t "$THREADS" "${FA[@]}" --kl-divergence-base "$base" --kl-divergence \
      >"$TMP/$name.log" 2>&1 || { cat "$TMP/$name.log" >&2; exit 1; }
    grep -q "Same top p" "$TMP/$name.log" && return 0
  done
  echo "llama-perplexity --kl-divergence printed no statistics (see $TMP/$name.log)" >&2; exit 1
}

run_ppl "$STORIES" 128 stories260K
run_ppl "$GPT2" 64 gpt2 --chunks 16
run_ppl "$LLAMA256" 128 llama256 --chunks 8

# KL divergence of a Q8_0 copy (made by toy export, the same file the test makes)
"$TOY" export -m "$STORIES" --type q8_0 -o "$TMP/stories260K.q8_0.gguf" >/dev/null 2>&1
run_ppl "$STORIES" 128 base --kl-divergence-base "$TMP/llama-base.kld"
run_kl "$TMP/llama-base.kld" kl
# the same with the base file toy writes: llama-perplexity must read it
"$TOY" perplexity -m "$STORIES" -f "$TEXT" -c 128 -t "$THREADS" "${FA[@]}" --kl-divergence-base "$TMP/toy-base.kld" >/dev/null 2>&1
run_kl "$TMP/toy-base.kld" kl-toy-base
cmp -s "$TMP/llama-base.kld" "$TMP/toy-base.kld" && echo "base files: toy's is byte for byte llama-perplexity's" ||
  echo "base files differ (see the KL values below)"
# and toy must read llama-perplexity's
"$TOY" perplexity -m "$TMP/stories260K.q8_0.gguf" -t "$THREADS" "${FA[@]}" --kl-divergence-base "$TMP/llama-base.kld" \
  --kl-divergence >"$TMP/toy-kl-llama-base.log" 2>&1 || { cat "$TMP/toy-kl-llama-base.log" >&2; exit 1; }

"$IMATRIX" -m "$STORIES" -f "$TEXT" -c 128 -t "$THREADS" "${FA[@]}" -o "$OUT/stories260K.imatrix.gguf" >"$TMP/im1.log" 2>&1 ||
  { cat "$TMP/im1.log" >&2; exit 1; }
"$IMATRIX" -m "$MIXTRAL" -f "$TEXT" -c 128 -t "$THREADS" "${FA[@]}" --chunks 8 -o "$OUT/mixtral.imatrix.gguf" >"$TMP/im2.log" 2>&1 ||
  { cat "$TMP/im2.log" >&2; exit 1; }

python3 - "$TMP" "$OUT/reference.json" <<'EOF'
import json, re, sys
tmp, out = sys.argv[1], sys.argv[2]
def ppl(name, **extra):
    log = open(f"{tmp}/{name}.log").read()
    chunks = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", log)]
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    return dict(extra, chunks=chunks, ppl=float(m.group(1)), ppl_err=float(m.group(2)))
def kl(name):
    log = open(f"{tmp}/{name}.log").read()
    def est(label):
        m = re.search(re.escape(label) + r"\s*:\s*(-?[0-9.]+) ± +(-?[0-9.]+)", log)
        return [float(m.group(1)), float(m.group(2))]
    def val(label):
        return float(re.search(re.escape(label) + r":\s*(-?[0-9.]+)", log).group(1))
    return {"ppl": est("Mean PPL(Q)"), "ppl_base": est("Mean PPL(base)"),
            "ln_ppl_ratio": est("Mean ln(PPL(Q)/PPL(base))"), "kld": est("Mean    KLD"),
            "kld_max": val("Maximum KLD"), "kld_median": val("Median  KLD"),
            "p_diff_rms_percent": est("RMS Δp"), "same_top_percent": est("Same top p")}
ref = {
    "about": "llama.cpp reference values (scripts/make-perplexity-reference.sh); text: stories.txt",
    "stories260K": ppl("stories260K", model="models/stories260K.gguf", ctx=128),
    "gpt2": ppl("gpt2", model="fixtures/gpt2.f32.gguf", ctx=64, chunks_limit=16),
    "llama256": ppl("llama256", model="fixtures/llama-256.f32.gguf", ctx=128, chunks_limit=8),
    "kl_q8_0": dict(kl("kl"), model="stories260K as toy export --type q8_0 writes it", ctx=128),
    "kl_q8_0_toy_base": kl("kl-toy-base"),
}
json.dump(ref, open(out, "w"), indent=1)
toy = open(f"{tmp}/toy-kl-llama-base.log").read()
m = re.search(r"Mean    KLD:\s*(-?[0-9.]+)", toy)
print(f"KL of the Q8_0 copy: llama-perplexity {ref['kl_q8_0']['kld'][0]:.6f} "
      f"(toy's base file: {ref['kl_q8_0_toy_base']['kld'][0]:.6f}), toy on llama's base file {float(m.group(1)):.6f}")
EOF
echo "wrote $OUT/reference.json, $OUT/stories260K.imatrix.gguf, $OUT/mixtral.imatrix.gguf"
