#!/usr/bin/env bash
# libFuzzer targets (fuzz/, issue 14): build them with clang under ASan +
# UBSan and run each in turn.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
#   FUZZ_RUNS=10000000 scripts/fuzz.sh [TARGET...]       (each until N executions)
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS="fuzz_grammar ..."]
#   FUZZ_TIMEOUT=300 ...   seconds a unit may take (default 10; wall-clock, so
#                          raise it for a niced run that others may pause)
#   FUZZ_JOBS=2 ...        processes per target, side by side on its one corpus
#                          (libFuzzer reloads what the others add); FUZZ_RUNS is
#                          then each one's limit, and the line sums their work
#
# Targets: fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_sampler_params
# fuzz_train_data fuzz_checkpoint fuzz_adapter fuzz_grammar fuzz_json_schema
# fuzz_request fuzz_convert (a name without the fuzz_ prefix works too).
#
# In build-fuzz/: corpus/<target> (kept between runs, grows), seeds/<pid>/<target>
# (made by each run from the fixtures, fuzz/seeds and the llama.cpp bundle,
# removed at its end, so runs of different targets can go side by side),
# crashes/<target>/ (reproducers: crash-*, leak-*, timeout-*, oom-*),
# logs/<target>.log. Reproduce a finding with
#   build-fuzz/<target> build-fuzz/crashes/<target>/crash-...
# Prints one line per target: executions, executions/s, coverage (libFuzzer's
# cov: edges and ft: features), corpus size and findings. Exits 1 if any
# target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${FUZZ_BUILD:-build-fuzz}
ALL=(fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_sampler_params fuzz_train_data
     fuzz_checkpoint fuzz_adapter fuzz_grammar fuzz_json_schema fuzz_request fuzz_convert)

SECONDS_PER_TARGET=60
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then SECONDS_PER_TARGET=$1; shift; fi
TARGETS=()
for t in "$@"; do
  t=fuzz_${t#fuzz_}
  [[ " ${ALL[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (expected one of ${ALL[*]})" >&2; exit 2; }
  TARGETS+=("$t")
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
JOBS=${FUZZ_JOBS:-1}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: FUZZ_JOBS must be a whole number >= 1 (got '$JOBS')" >&2; exit 2; }

# ---- clang with libFuzzer (Debian's clang; the newest installed is used) ----
find_clang() {
  for v in 19 18 17 16 15 14; do
    if command -v clang++-$v >/dev/null && [ -n "$(ls /usr/lib/llvm-$v/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ]; then
      echo $v; return 0
    fi
  done
  return 1
}
V=${FUZZ_CLANG:-}  # e.g. FUZZ_CLANG=14: that version (its build dir must be new: FUZZ_BUILD=...)
if [ -z "$V" ] && ! V=$(find_clang); then
  PKGS="clang"  # bookworm: clang 14, with libFuzzer in libclang-common-14-dev
  if [ "$(id -u)" -eq 0 ]; then
    echo "fuzz: installing $PKGS" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y --no-install-recommends -qq $PKGS >/dev/null
  else
    echo "fuzz: clang with libFuzzer is missing; run as root:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $PKGS" >&2
    exit 1
  fi
  V=$(find_clang)
fi
scripts/install-deps.sh

# ---- build ----
# (runs started together take turns: one build directory)
mkdir -p "$BUILD"
exec 9>"$BUILD/.build.lock"
flock 9
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CC=clang-$V CXX=clang++-$V cmake -S fuzz -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" --target make_seeds "${TARGETS[@]}" >"$BUILD/build.log" 2>&1 \
  || { tail -n 30 "$BUILD/build.log" >&2; echo "fuzz: build failed (log: $BUILD/build.log)" >&2; exit 1; }
flock -u 9

# ---- seeds ----
LLAMA=$(scripts/fetch-ggml.sh)
SHARED=${TOY_SHARED_DIR:-$ROOT/../shared}
SEEDS=$BUILD/seeds/$$
trap 'rm -rf "$SEEDS"' EXIT
rm -rf "$SEEDS" && mkdir -p "$SEEDS"
"$BUILD/make_seeds" "$SEEDS"  # tiny models, checkpoints, adapters
for d in fuzz/seeds/*/; do mkdir -p "$SEEDS/$(basename "$d")" && cp "$d"* "$SEEDS/$(basename "$d")/"; done
# tokenizer: llama.cpp's tokenizer test texts (models/vocab/*.inp), for each
# vocabulary of fuzz_tokenizer.cpp's list (its first byte), plain and special
mkdir -p "$SEEDS/fuzz_tokenizer"
vocabs=(llama-spm phi-3 baichuan gpt-2 deepseek-coder deepseek-llm falcon mpt refact starcoder gpt-neox)
for i in "${!vocabs[@]}"; do
  inp=$SHARED/models/vocab/ggml-vocab-${vocabs[$i]}.gguf.inp
  [ -f "$inp" ] || inp=$SHARED/models/vocab/ggml-vocab-gpt-2.gguf.inp
  python3 - "$inp" "$SEEDS/fuzz_tokenizer" "$i" <<'EOF'
import sys
inp, out, i = sys.argv[1], sys.argv[2], int(sys.argv[3])
texts = open(inp, 'rb').read().split(b'\n__ggml_vocab_test__\n')
for k, t in enumerate(texts[:24]):
    for mode in (0, 3):
        open(f'{out}/v{i}-{k}-{mode}', 'wb').write(bytes([i, mode]) + t)
EOF
done
# grammar: the bundle's example grammars (option byte, grammar, '\0', no text)
mkdir -p "$SEEDS/fuzz_grammar"
for g in "$LLAMA"/grammars/*.gbnf; do
  { printf '\004'; cat "$g"; printf '\000'; } > "$SEEDS/fuzz_grammar/$(basename "$g" .gbnf)"
done
# chat templates: the bundle's, as the input's own template (byte 16: after
# fuzz_chat_template.cpp's 16 fixed ones), source and '\0' before a message
mkdir -p "$SEEDS/fuzz_chat_template"
for t in "$LLAMA"/models/templates/*.jinja; do
  { printf '\020\002'; cat "$t"; printf '\000\001Hello\000\002Hi there\000\001How are you?'; } \
    > "$SEEDS/fuzz_chat_template/own-$(basename "$t" .jinja)"
done
# convert: each file of the tiny llama checkpoint, behind the byte that picks it
mkdir -p "$SEEDS/fuzz_convert"
files=(model.safetensors tokenizer.json tokenizer.model config.json)
for i in 0 2 3; do
  { printf "\\$(printf %03o $i)"; cat "tests/data/convert/hf/llama/${files[$i]}"; } > "$SEEDS/fuzz_convert/llama-${files[$i]}"
done
{ printf '\001'; cat "$SHARED/models/TinyStories-656K/tokenizer.json"; } > "$SEEDS/fuzz_convert/tinystories-tokenizer.json"
# the other targets start from the hand-written seeds in fuzz/seeds/<target>/

# ---- run ----
mkdir -p "$BUILD/logs"
max_len() {
  case $1 in
    fuzz_gguf|fuzz_checkpoint|fuzz_adapter|fuzz_convert) echo 131072 ;;
    fuzz_chat_template) echo 32768 ;;  # (a template's source: the bundle's are up to 17 KB)
    *) echo 8192 ;;
  esac
}
printf '%-20s %12s %9s %7s %8s %8s %9s\n' target executions exec/s cov ft corpus findings
status=0
for t in "${TARGETS[@]}"; do
  corpus=$BUILD/corpus/$t crashes=$BUILD/crashes/$t log=$BUILD/logs/$t.log
  mkdir -p "$corpus" "$crashes" "$SEEDS/$t"
  before=$(find "$crashes" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  : >"$log.start"; : >"$log.notes"; unconfirmed=0
  if [ -n "${FUZZ_RUNS:-}" ]; then limit=(-runs="$FUZZ_RUNS"); else limit=(-max_total_time="$SECONDS_PER_TARGET"); fi
  # job 1 writes $log, job k > 1 $log with .k before .log
  logs=("$log"); for ((k = 2; k <= JOBS; k++)); do logs+=("${log%.log}.$k.log"); done
  pids=()
  for l in "${logs[@]}"; do
    # malloc_context_size: ASan records 8 frames of each allocation's stack
    # (30 by default); the unwinding took a third of the chat templates' time.
    # Running a reproducer by hand gives the whole stacks.
    ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(ls /usr/lib/llvm-$V/bin/llvm-symbolizer 2>/dev/null || true)} \
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0:malloc_context_size=8} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    OMP_NUM_THREADS=1 \
      "$BUILD/$t" "${limit[@]}" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout="${FUZZ_TIMEOUT:-10}" -print_final_stats=1 \
        -max_len="$(max_len "$t")" -artifact_prefix="$crashes/" "$corpus" "$SEEDS/$t" >"$l" 2>&1 &
    pids+=($!)
  done
  # the first job to stop on a finding (or an error) interrupts the others
  rc=0
  for _ in "${pids[@]}"; do
    r=0; wait -n || r=$?  # (the jobs are this shell's only children now)
    if [ $r -ne 0 ] && [ $rc -eq 0 ]; then rc=$r; kill -TERM "${pids[@]}" 2>/dev/null || true; fi
  done
  # libFuzzer's timeouts are wall-clock: on a loaded machine (a niced run
  # beside a build) a unit can be descheduled past -timeout. A timeout
  # reproducer that runs in time when tried again is set aside, not counted.
  for f in $(find "$crashes" -maxdepth 1 -type f -name 'timeout-*' -newer "$log.start"); do
    if "$BUILD/$t" -timeout=10 -rss_limit_mb=2048 "$f" >/dev/null 2>&1; then
      mkdir -p "$crashes/unconfirmed" && mv "$f" "$crashes/unconfirmed/" && unconfirmed=$((unconfirmed + 1))
      echo "    $(basename "$f"): did not time out when run again (machine load); moved to $crashes/unconfirmed/" >>"$log.notes"
    fi
  done
  after=$(find "$crashes" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  findings=$((after - before))
  if [ $rc -ne 0 ] && [ $findings -eq 0 ]; then
    if [ $unconfirmed -gt 0 ]; then findings="0 (stopped early by an unconfirmed timeout)"; else findings="rc=$rc"; fi
  fi
  [[ "$findings" != 0* ]] && status=1
  # executions and executions/s: the jobs' sum; cov and ft: the most any job reached
  stat() { for l in "${logs[@]}"; do sed -n "s/^stat::$1: *//p" "$l" | tail -n1; done | awk '{ n += $1 } END { if (NR) print n }'; }
  most() { for l in "${logs[@]}"; do grep -E '^#[0-9]+' "$l" | tail -n1 || true; done |
             sed -n "s/.* $1: \([0-9]*\).*/\1/p" | sort -n | tail -n1; }
  cov=$(most cov) ft=$(most ft)
  printf '%-20s %12s %9s %7s %8s %8s %9s\n' "$t" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
    "${cov:-?}" "${ft:-?}" "$(find "$corpus" -type f | wc -l)" "$findings"
  cat "$log.notes"
  if [[ "$findings" != 0* ]]; then
    cat "${logs[@]}" | grep -E 'ERROR: |runtime error|SUMMARY|fuzz_[a-z_]+: |Test unit written' | head -n 5 | sed 's/^/    /'
  fi
done
exit $status
