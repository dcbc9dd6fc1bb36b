#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, as one short run (the project borrows a
# GPU machine for minutes at a time): what the machine has; the GPU tests
# (tests/test_gpu.cpp: every parity fixture with all its blocks on the GPU,
# training with its blocks there) run by a test binary against a CUDA build
# of toy; then bench/compare.sh with -ngl 99 against llama.cpp's tools linked
# against the same CUDA ggml (bench/link-llama-cuda.sh).
#
#   bench/gpu-check.sh OUT_DIR
#
# Environment (defaults in brackets):
#   TOY [build-cuda/toy]           a CUDA build of toy (make build-cuda)
#   TESTS [build/toy_tests]        the tests; a CPU build drives $TOY through TOY_TEST_BIN
#   REF_DIR [~/.cache/toy-reference-cuda]  llama-bench and llama-completion in REF_DIR/bin
#   CHECKS ["info tests logits bench train"]  which parts to run
#   SHARED [<repo>/../shared]      fixtures and models (bench/train-split.sh takes stories260K)
#   THREADS [8] REPS [3] ROUNDS [2] ONESHOTS [1] MODELS [compare.sh's]  for the benchmark
#   TRAIN_ROUNDS [2] LORA_TYPES ["f16 q4_k_m"]  for bench/train-split.sh
#   MODEL_DIR [~/.cache/toy/bench-models]  where the benchmark models are (made if missing)
# Output: OUT_DIR/info.txt, gpu-tests.log, logits.md (toy and llama.cpp on the
# GPU against each other and against llama.cpp's CPU reference) with
# logits.tar.gz, compare.md, compare.log, compare-raw.tar.gz (compare.sh's raw
# results) and train.md.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: bench/gpu-check.sh OUT_DIR}
TOY=${TOY:-$ROOT/build-cuda/toy}
TESTS=${TESTS:-$ROOT/build/toy_tests}
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference-cuda}
CHECKS=${CHECKS:-"info tests logits bench train"}
SHARED=${SHARED:-$ROOT/../shared}
THREADS=${THREADS:-8}
mkdir -p "$OUT"
say() { echo "gpu-check: $*" >&2; }
[ -x "$TOY" ] || [ "$CHECKS" = logits ] || { say "no toy at $TOY (make build-cuda)"; exit 1; }

if [[ " $CHECKS " == *" info "* ]]; then
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus"
    echo "toy: $("$TOY" --version)"
    "$TOY" devices 2>&1
  } | tee "$OUT/info.txt"
fi

status=0
if [[ " $CHECKS " == *" tests "* ]]; then
  say "GPU tests"
  TOY_TEST_BIN=$TOY OMP_WAIT_POLICY=PASSIVE "$TESTS" --gtest_filter='*GpuParity*:GpuTraining*' > "$OUT/gpu-tests.log" 2>&1 ||
    status=1
  grep '^gpu-' "$OUT/gpu-tests.log" | sort
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/gpu-tests.log" | tail -n 60
fi

if [[ " $CHECKS " == *" logits "* ]]; then
  say "fixture logits on the GPU: toy and llama.cpp (refdump-gpu)"
  lg=$(mktemp -d /tmp/gpu-logits.XXXXXX)
  for js in "$SHARED"/fixtures/*.json; do
    name=$(basename "$js" .json)
    read -r model kv fa T < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["model"], d["kv_type"], "on" if d["flash_attn"] else "off", d["T"])' "$js")
    if [ -x "$REF_DIR/bin/refdump-gpu" ]; then
      "$REF_DIR/bin/refdump-gpu" "$SHARED/fixtures/$model" "$lg/$name.llama" --kv "$kv" $([ "$fa" = on ] && echo --fa) \
        --T "$T" > "$lg/$name.llama.log" 2>&1 || say "refdump-gpu failed on $name"
    fi
    toks=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$js")
    if [ -x "$TOY" ]; then
      "$TOY" logits -m "$SHARED/fixtures/$model" --tokens "$toks" -c 256 -t 2 -ctk "$kv" -ctv "$kv" -fa "$fa" -ngl 99 \
        -o "$lg/$name.toy.logits.f32" > "$lg/$name.toy.log" 2>&1 || say "toy logits failed on $name"
    fi
  done
  python3 - "$SHARED/fixtures" "$lg" > "$OUT/logits.md" <<'PY'
import array, glob, json, os, sys
fx, lg = sys.argv[1], sys.argv[2]
def f32(p):
    a = array.array("f")
    with open(p, "rb") as f: a.frombytes(f.read())
    return a
def stats(got, ref, V):
    dmax, agree, rows = 0.0, 0, len(ref) // V
    for r in range(rows):
        g, x = got[r*V:(r+1)*V], ref[r*V:(r+1)*V]
        span = max(x) - min(x)
        dmax = max(dmax, max(abs(a - b) for a, b in zip(g, x)) / span)
        agree += max(range(V), key=g.__getitem__) == max(range(V), key=x.__getitem__)
    return f"{dmax:.2e} / {agree / rows:.3f}"
print("| fixture | toy GPU vs llama.cpp GPU | toy GPU vs CPU reference | llama.cpp GPU vs CPU reference |")
print("|---|---:|---:|---:|")
for js in sorted(glob.glob(f"{fx}/*.json")):
    d = json.load(open(js)); name = os.path.basename(js)[:-5]; V = d["n_vocab"]
    ref = f32(f"{fx}/{d['logits_file']}") if os.path.exists(f"{fx}/{d['logits_file']}") else None
    toy = f"{lg}/{name}.toy.logits.f32"; lla = f"{lg}/{name}.llama.logits.f32"
    t = f32(toy) if os.path.exists(toy) else None
    l = f32(lla) if os.path.exists(lla) else None
    if l is not None and json.load(open(f"{lg}/{name}.llama.json"))["tokens"] != d["tokens"]: l = None  # other tokens
    cell = lambda a, b: stats(a, b, V) if a is not None and b is not None and len(a) == len(b) else "n/a"
    print(f"| {name} | {cell(t, l)} | {cell(t, ref)} | {cell(l, ref)} |")
print()
print("Each cell: the worst row's max |difference| / the row's logit range (d_max), and the fraction of rows whose argmax agrees.")
PY
  tar -czf "$OUT/logits.tar.gz" -C "$(dirname "$lg")" "$(basename "$lg")"
  cat "$OUT/logits.md"
fi

if [[ " $CHECKS " == *" bench "* ]]; then
  say "benchmark against llama.cpp"
  raw=$(mktemp -d /tmp/gpu-compare.XXXXXX)
  NGL=99 BUILD_TOY=0 BUILD_DIR=$(dirname "$TOY") REF_DIR=$REF_DIR IK= LLAMA=on THREADS=$THREADS \
    REPS=${REPS:-3} ROUNDS=${ROUNDS:-2} ONESHOTS=${ONESHOTS:-1} RESULTS_DIR=$raw \
    "$ROOT/bench/compare.sh" > "$OUT/compare.md" 2> "$OUT/compare.log" || { status=1; tail -n 20 "$OUT/compare.log"; }
  tar -czf "$OUT/compare-raw.tar.gz" -C "$(dirname "$raw")" "$(basename "$raw")"
  cat "$OUT/compare.md"
fi
if [[ " $CHECKS " == *" train "* ]]; then
  say "training: CPU alone vs every block on the GPU"
  gpu=$("$TOY" devices | sed -n 's/^ *\([^:]*\):.* \[GPU\]$/\1/p' | head -n 1)
  SPLIT="-t $THREADS -ngl 99 --device $gpu" LOCAL_THREADS=$THREADS ROUNDS=${TRAIN_ROUNDS:-2} TOY=$TOY SHARED=$SHARED \
    LORA_TYPES=${LORA_TYPES-"f16 q4_k_m"} \
    WORK=$(mktemp -d /tmp/gpu-train.XXXXXX) "$ROOT/bench/train-split.sh" > "$OUT/train.md" 2>&1 || status=1
  cat "$OUT/train.md"
fi
exit $status
