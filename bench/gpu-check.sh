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
#   STEPS ["info tests bench train"]  which parts to run
#   SHARED [<repo>/../shared]      fixtures and models (bench/train-split.sh takes stories260K)
#   THREADS [8] REPS [3] ROUNDS [2] ONESHOTS [1] MODELS [compare.sh's]  for the benchmark
#   MODEL_DIR [~/.cache/toy/bench-models]  where the benchmark models are (made if missing)
# Output: OUT_DIR/info.txt, gpu-tests.log, compare.md, compare.log,
# compare-raw.tar.gz (compare.sh's raw results) and train.md.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: bench/gpu-check.sh OUT_DIR}
TOY=${TOY:-$ROOT/build-cuda/toy}
TESTS=${TESTS:-$ROOT/build/toy_tests}
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference-cuda}
STEPS=${STEPS:-"info tests bench train"}
SHARED=${SHARED:-$ROOT/../shared}
THREADS=${THREADS:-8}
mkdir -p "$OUT"
say() { echo "gpu-check: $*" >&2; }
[ -x "$TOY" ] || { say "no toy at $TOY (make build-cuda)"; exit 1; }

if [[ " $STEPS " == *" info "* ]]; then
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus"
    echo "toy: $("$TOY" --version)"
    "$TOY" devices 2>&1
  } | tee "$OUT/info.txt"
fi

status=0
if [[ " $STEPS " == *" tests "* ]]; then
  say "GPU tests"
  TOY_TEST_BIN=$TOY OMP_WAIT_POLICY=PASSIVE "$TESTS" --gtest_filter='*GpuParity*:GpuTraining*' > "$OUT/gpu-tests.log" 2>&1 ||
    status=1
  grep '^gpu-' "$OUT/gpu-tests.log" | sort
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/gpu-tests.log" | tail -n 60
fi

if [[ " $STEPS " == *" bench "* ]]; then
  say "benchmark against llama.cpp"
  raw=$(mktemp -d /tmp/gpu-compare.XXXXXX)
  NGL=99 BUILD_TOY=0 BUILD_DIR=$(dirname "$TOY") REF_DIR=$REF_DIR IK= LLAMA=on THREADS=$THREADS \
    REPS=${REPS:-3} ROUNDS=${ROUNDS:-2} ONESHOTS=${ONESHOTS:-1} RESULTS_DIR=$raw \
    "$ROOT/bench/compare.sh" > "$OUT/compare.md" 2> "$OUT/compare.log" || { status=1; tail -n 20 "$OUT/compare.log"; }
  tar -czf "$OUT/compare-raw.tar.gz" -C "$(dirname "$raw")" "$(basename "$raw")"
  cat "$OUT/compare.md"
fi
if [[ " $STEPS " == *" train "* ]]; then
  say "training: CPU alone vs every block on the GPU"
  gpu=$("$TOY" devices | sed -n 's/^ *\([^:]*\):.* \[GPU\]$/\1/p' | head -n 1)
  SPLIT="-t $THREADS -ngl 99 --device $gpu" LOCAL_THREADS=$THREADS ROUNDS=${TRAIN_ROUNDS:-2} TOY=$TOY SHARED=$SHARED \
    WORK=$(mktemp -d /tmp/gpu-train.XXXXXX) "$ROOT/bench/train-split.sh" > "$OUT/train.md" 2>&1 || status=1
  cat "$OUT/train.md"
fi
exit $status
