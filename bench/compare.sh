#!/usr/bin/env bash
# Side-by-side speed comparison of toy and llama.cpp (built from the same
# pinned ggml) on random-weight models of real shapes. Prints a markdown table
# of toy/llama.cpp ratios; raw JSON and logs stay in $RESULTS_DIR.
#
#   bench/compare.sh            # full: -p 512 -n 128, 5 repetitions x 2 rounds
#   QUICK=1 bench/compare.sh    # quick: -p 128 -n 32, 2 repetitions x 1 round
#
# Environment (defaults in brackets):
#   THREADS [nproc]  PP [512]  TG [128]  REPS [5]  ROUNDS [2]  QUICK [0]
#   DEPTH [0]: tokens already in the cache when each test starts (toy bench and
#     llama-bench -d; ik_llama.cpp's llama-bench has no -d: it decodes with `-gp DEPTH,TG`,
#     and its llama-sweep-bench (built on first use) gives the prompt rows, one sample per
#     sweep over the windows of PP tokens up to DEPTH, so DEPTH must be a multiple of PP)
#   MODELS ["smollm2-135m:f16 smollm2-135m:q8_0 qwen2.5-0.5b:q8_0 llama-3.2-1b:q4_k_m"]: missing
#     files are made by `toy init` (its types), or for other llama.cpp file types (q3_k_m,
#     q2_k, iq4_xs, ...) by `toy quantize` from the preset's F16 file
#   BUILD_DIR [<repo>/build]   MODEL_DIR [~/.cache/toy/bench-models]
#   REF_DIR [~/.cache/toy-reference]   RESULTS_DIR [a new temporary directory]
#   ROOFLINE [1]: also probe memory bandwidth (toy bench --roofline)
#   ONESHOTS [3]: one-shot runs per engine per round (load time and RSS)
#   TOY_FLAGS [""]: extra flags for toy bench and toy run (e.g. "--hugepages on", or
#     "--pack-cache DIR": the first bench run writes the cache, the one-shots map it)
#   NGL [""]: -ngl N for both engines (a GPU build of each: toy's `make build-cuda`,
#     llama.cpp's tools linked against the same ggml); sets ROOFLINE's default to 0
#     (the probe measures the CPU's memory)
#   BUILD_TOY [1]: 0 uses $BUILD_DIR/toy as it is (a build made elsewhere)
#   TOY_ALT [""], TOY_ALT_ENV [""]: a second configuration of toy measured as one more engine
#     in the same rounds: its flags (e.g. "--weight-type bf16", against ik_llama.cpp's -rtr 1
#     on F16) and environment (e.g. "TOY_PREFETCH=1024,4096", another prefetch plan); either
#     set adds it ("toy alt" in the tables)
#   TOY_AMX [on]: off runs toy with the shim of LLAMA's "off" (below): its AMX tiles and
#     ggml's AMX buffer both unavailable, so an AMX CPU stands in for an AVX-512 one
#     (toy's AVX-512 set takes every type it packs, as on Zen 4)
#   LLAMA [AMX CPUs: "off fixed"; others: "on"]: which llama.cpp builds to compare with, any of
#     off    the reference build with its AMX weight buffers disabled (below)
#     on     the reference build as it is (on AMX CPUs its quantized prompts
#            crash; the script then keeps tg only)
#     fixed  the same llama.cpp source built with toy's AMX compiler fix
#            (cmake/amx_tile_config.h) into $FIXED_DIR [~/.cache/toy-reference-amxfix]:
#            llama.cpp at its best on this CPU
#   IK ["ik ik-rtr" when $IK_DIR/build/bin/llama-bench exists, else ""]: ik_llama.cpp
#     (the CPU-tuned fork; ../shared/tools/build-ik-llama-reference.sh builds it into
#     IK_DIR [~/.cache/ik-llama-reference]) as a third engine, speed only (it has no
#     llama-completion for the one-shot runs): "ik" as it is, "ik-rtr" with -rtr 1
#     (its run-time repacking of the weights)
#
# Method (see BENCHMARKS.md):
# - speed: each round runs `toy bench` and `llama-bench` with the same -t -p -n
#   -r, both as JSON; rounds alternate the order (toy first, then llama.cpp
#   first, ...) so a drifting machine load hits both alike. Both tools do one
#   warmup run per test, then REPS timed runs from an empty cache; the table
#   pools the samples of all rounds (mean ± sample stddev of tokens/s, marked
#   "(noisy)" above 10% spread) and gives the ratio of means and of medians
#   (the median shrugs off a few samples hit by another process).
# - load time and peak RSS: llama-bench reports neither, so both engines do the
#   same one-shot run under /usr/bin/time -v, ONESHOTS x ROUNDS times, alternating:
#   `llama-completion -m M -c 512 -p PROMPT -n 1 -no-cnv --no-warmup` and
#   `toy run -m M -c 512 -p PROMPT -n 1`. "load" is the median wall time of
#   that whole process (start, load, tokenize, prompt eval, one token, exit);
#   RSS is /usr/bin/time's maximum resident set size (mapped weights count
#   once touched, for both).
# - AMX: on CPUs with AMX, llama.cpp moves F16/Q8_0/Q4_K/Q6_K weights into
#   ggml's AMX buffer type, whose batched int8 tile path GCC 12 miscompiles in
#   the pinned ggml (ldtilecfg reads a half-written tile config): SIGSEGV on any
#   quantized prompt. "off" LD_PRELOADs a tiny shim that makes ggml's AMX
#   permission request (arch_prctl ARCH_REQ_XCOMP_PERM) fail, so llama.cpp runs
#   as on a CPU without AMX (CPU_REPACK stays on). "fixed" compiles llama.cpp
#   with the header toy uses to correct the instruction's operand, so its AMX
#   path runs. CPUs without AMX: all three are the same.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  : "${PP:=128}" "${TG:=32}" "${REPS:=2}" "${ROUNDS:=1}"
fi
THREADS=${THREADS:-$(nproc)}
PP=${PP:-512}
TG=${TG:-128}
DEPTH=${DEPTH:-0}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-2}
NGL=${NGL:-}
if [ -n "$NGL" ]; then ROOFLINE=${ROOFLINE:-0}; else ROOFLINE=${ROOFLINE:-1}; fi
BUILD_TOY=${BUILD_TOY:-1}
TOY_AMX=${TOY_AMX:-on}
read -r -a TOY_ALT_FLAGS <<< "${TOY_ALT:-}"
read -r -a TOY_ALT_VARS <<< "${TOY_ALT_ENV:-}"
ALT=""
[ -n "${TOY_ALT:-}${TOY_ALT_ENV:-}" ] && ALT=alt
case $TOY_AMX in on | off) ;; *) echo "compare: TOY_AMX: expected on or off, got '$TOY_AMX'" >&2; exit 1 ;; esac
ONESHOTS=${ONESHOTS:-3}
read -r -a TOY_EXTRA <<< "${TOY_FLAGS:-}"
# flags both engines take the same way (the GPU offload)
OFFLOAD=()
[ -n "$NGL" ] && OFFLOAD=(-ngl "$NGL")
GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
# The CPU kind decides which llama.cpp builds differ (only AMX CPUs need "off"/"fixed").
CPU_NAME=$(cpu_name)
CPU_KIND=$(cpu_kind)
if [ "$CPU_KIND" = AMX ]; then CPU_AMX=yes; else CPU_AMX=no; fi
CPU_FLAGS=$(grep -m1 -o -w -E 'avx512f|avx512_vnni|avx512_bf16|avx512_fp16|avx2|amx_tile|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')
if [ "$CPU_AMX" = yes ]; then LLAMA=${LLAMA:-"off fixed"}; else LLAMA=${LLAMA:-"on"}; fi
IK_DIR=${IK_DIR:-$HOME/.cache/ik-llama-reference}
if [ -x "$IK_DIR/build/bin/llama-bench" ]; then IK=${IK-"ik ik-rtr"}; else IK=${IK:-}; fi
FIXED_DIR=${FIXED_DIR:-$HOME/.cache/toy-reference-amxfix}
MODELS=${MODELS:-"smollm2-135m:f16 smollm2-135m:q8_0 qwen2.5-0.5b:q8_0 llama-3.2-1b:q4_k_m"}
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
MODEL_DIR=${MODEL_DIR:-$HOME/.cache/toy/bench-models}
REF_DIR=${REF_DIR:-$HOME/.cache/toy-reference}
SHARED_DIR=${TOY_SHARED_DIR:-$ROOT/../shared}
RESULTS_DIR=${RESULTS_DIR:-$(mktemp -d /tmp/toy-compare.XXXXXX)}
PROMPT="The quick brown fox jumps over the lazy dog."

log() { echo "compare: $*" >&2; }

# ---- tools ----
[ -x /usr/bin/time ] || { echo "compare: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "compare: python3 is missing" >&2; exit 1; }
if [ "$BUILD_TOY" = 1 ]; then
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    log "configuring toy in $BUILD_DIR"
    cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >&2
  fi
  log "building toy (incremental)"
  cmake --build "$BUILD_DIR" --target toy -j"$(nproc)" >&2
fi
TOY=$BUILD_DIR/toy
if [ ! -x "$REF_DIR/bin/llama-bench" ] || { [ "$ONESHOTS" != 0 ] && [ ! -x "$REF_DIR/bin/llama-completion" ]; }; then
  log "building the llama.cpp reference tools into $REF_DIR (about 10 minutes)"
  bash "$SHARED_DIR/tools/build-llama-reference.sh" "$REF_DIR" >&2
fi
for cfg in $LLAMA; do
  case $cfg in off | on | fixed) ;; *) echo "compare: LLAMA: unknown build '$cfg' (expected off, on or fixed)" >&2; exit 1 ;; esac
done
for cfg in $IK; do
  case $cfg in ik | ik-rtr) ;; *) echo "compare: IK: unknown engine '$cfg' (expected ik or ik-rtr)" >&2; exit 1 ;; esac
  [ -x "$IK_DIR/build/bin/llama-bench" ] ||
    { echo "compare: IK=$IK but $IK_DIR/build/bin/llama-bench is missing (../shared/tools/build-ik-llama-reference.sh)" >&2; exit 1; }
done
log "CPU: $CPU_NAME; $CPU_KIND;${GPU_NAME:+ GPU: $GPU_NAME;}${NGL:+ -ngl $NGL;} engines: toy (AMX $TOY_AMX)${ALT:+, toy alt (${TOY_ALT_ENV:-} ${TOY_ALT:-})}, llama.cpp ($LLAMA)${IK:+, ik_llama.cpp ($IK)}"
mkdir -p "$RESULTS_DIR"
if [[ " $LLAMA " == *" off "* ]] || [ "$TOY_AMX" = off ]; then
  cat > "$RESULTS_DIR/no_amx.c" <<'C'
/* Fails ggml's AMX permission request; every other syscall() passes through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
long syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_arch_prctl && a[0] == 0x1023 /* ARCH_REQ_XCOMP_PERM */) { errno = EPERM; return -1; }
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
C
  cc -O2 -shared -fPIC "$RESULTS_DIR/no_amx.c" -o "$RESULTS_DIR/no_amx.so" -ldl
fi
if [[ " $LLAMA " == *" fixed "* ]] &&
   { [ ! -x "$FIXED_DIR/build/bin/llama-bench" ] || { [ "$ONESHOTS" != 0 ] && [ ! -x "$FIXED_DIR/build/bin/llama-completion" ]; }; }; then
  log "building llama.cpp with the AMX compiler fix into $FIXED_DIR (about 10 minutes)"
  llama_fixed_options "$ROOT"
  cmake -S "$REF_DIR/llama.cpp" -B "$FIXED_DIR/build" "${LLAMA_FIXED_OPTIONS[@]}" >&2
  cmake --build "$FIXED_DIR/build" --target llama-bench llama-completion -j"$(nproc)" >&2
fi
# ik_llama.cpp's prompts at depth come from its llama-sweep-bench (IK_SWEEP_ON=1 when it runs)
IK_SWEEP=$IK_DIR/build/bin/llama-sweep-bench
IK_SWEEP_ON=0
if [ -n "$IK" ] && [ "$DEPTH" != 0 ] && [ "$PP" != 0 ]; then
  if ((DEPTH % PP != 0)); then
    log "ik_llama.cpp's prompt rows at depth need DEPTH ($DEPTH) to be a multiple of PP ($PP): n/a"
  else
    if [ ! -x "$IK_SWEEP" ]; then
      log "building ik_llama.cpp's llama-sweep-bench (its prompts at depth) in $IK_DIR/build"
      cmake --build "$IK_DIR/build" --target llama-sweep-bench -j"$(nproc)" >&2 || log "could not build it: ik_llama.cpp's prompt rows n/a"
    fi
    [ -x "$IK_SWEEP" ] && IK_SWEEP_ON=1
  fi
fi
# toy as compare runs it (TOY_AMX=off: with the shim)
TOY_CMD=("$TOY")
[ "$TOY_AMX" = off ] && TOY_CMD=(env "LD_PRELOAD=$RESULTS_DIR/no_amx.so" "$TOY")
# llama_cmd CFG TOOL: the command line prefix that runs TOOL of build CFG
llama_cmd() {
  case $1 in
    off) echo env "LD_PRELOAD=$RESULTS_DIR/no_amx.so" "$REF_DIR/bin/$2" ;;
    on) echo "$REF_DIR/bin/$2" ;;
    fixed) echo "$FIXED_DIR/build/bin/$2" ;;
    ik) echo "$IK_DIR/build/bin/$2" ;;
    ik-rtr) echo "$IK_DIR/build/bin/$2" -rtr 1 ;;
  esac
}

# ---- models ----
mkdir -p "$MODEL_DIR" "$RESULTS_DIR"
model_path() { echo "$MODEL_DIR/${1%%:*}.${1##*:}.gguf"; }
for spec in $MODELS; do
  path=$(model_path "$spec")
  if [ ! -f "$path" ]; then
    log "making $path"
    type=${spec##*:}
    if "$TOY" init --help | grep -qE -- "--type [^ ]* +([^ ]*[|])?$type([|]| )"; then
      "$TOY" init --preset "${spec%%:*}" --type "$type" --seed 1 -o "$path" >&2
    else
      # a file type `toy init` does not write (q3_k_m, q2_k, iq4_xs, ...): the F16 model quantized
      f16=$(model_path "${spec%%:*}:f16")
      [ -f "$f16" ] || "$TOY" init --preset "${spec%%:*}" --type f16 --seed 1 -o "$f16" >&2
      "$TOY" -q quantize "$f16" "$path" "${type^^}" >&2
    fi
  fi
done

log "results in $RESULTS_DIR (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
if awk '{exit !($1 > 0.5)}' /proc/loadavg; then
  log "warning: the machine is busy (load average above 0.5); timings will be noisy"
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "cpu: $CPU_NAME, $(nproc) cpus, AMX: $CPU_AMX, flags: $CPU_FLAGS"
  [ -n "$GPU_NAME" ] && echo "gpu: $GPU_NAME"
  echo "settings: THREADS=$THREADS PP=$PP TG=$TG DEPTH=$DEPTH REPS=$REPS ROUNDS=$ROUNDS ONESHOTS=$ONESHOTS LLAMA=\"$LLAMA\" TOY_AMX=$TOY_AMX TOY_ALT=\"${TOY_ALT:-}\" TOY_ALT_ENV=\"${TOY_ALT_ENV:-}\" IK=\"$IK\" NGL=\"$NGL\" TOY_FLAGS=\"${TOY_FLAGS:-}\""
  echo "toy: $("$TOY" --version), AMX: $TOY_AMX ($("${TOY_CMD[@]}" devices 2>/dev/null | grep -o 'toy kernels: [a-z0-9]*' | head -1))"
  echo "load average at start: $(cat /proc/loadavg)"
} > "$RESULTS_DIR/settings.txt"

# ---- runs ----
DEPTH_ARGS=()
[ "$DEPTH" != 0 ] && DEPTH_ARGS=(-d "$DEPTH")
run_toy_bench() {  # model out [alt]
  local extra=() vars=()
  [ "$ROOFLINE" = 1 ] && extra+=(--roofline)
  [ "${3:-}" = alt ] && extra+=("${TOY_ALT_FLAGS[@]}") && vars=("${TOY_ALT_VARS[@]}")
  env "${vars[@]}" "${TOY_CMD[@]}" bench -m "$1" -t "$THREADS" -p "$PP" -n "$TG" "${DEPTH_ARGS[@]}" -r "$REPS" --json "${extra[@]}" "${OFFLOAD[@]}" "${TOY_EXTRA[@]}" \
    > "$2" 2> "$2.log" || { log "toy bench failed on $1 (see $2.log)"; rm -f "$2"; }
}
run_llama_bench() {  # cfg model out
  local cmd tests=(-p "$PP" -n "$TG" "${DEPTH_ARGS[@]}")
  read -r -a cmd <<< "$(llama_cmd "$1" llama-bench)"
  if [[ $1 == ik* && $DEPTH != 0 ]]; then
    [ "$TG" = 0 ] && return  # prompts only: run_ik_sweep
    tests=(-p 0 -n 0 -gp "$DEPTH,$TG")
  fi
  "${cmd[@]}" -m "$2" -t "$THREADS" "${tests[@]}" -r "$REPS" "${OFFLOAD[@]}" -o json > "$3" 2> "$3.log" && return
  log "llama-bench ($1) failed on $2 (see $3.log)"
  rm -f "$3"
  # the reference build as it is crashes on quantized prompts on AMX CPUs; keep at least tg
  if [ "$PP" != 0 ] && [ "$TG" != 0 ]; then
    log "retrying llama-bench ($1) on $2 with -p 0 (tg only)"
    "${cmd[@]}" -m "$2" -t "$THREADS" -p 0 -n "$TG" "${DEPTH_ARGS[@]}" -r "$REPS" "${OFFLOAD[@]}" -o json > "$3" 2>> "$3.log" ||
      { log "llama-bench ($1) -p 0 failed on $2 too"; rm -f "$3"; }
  fi
}
# ik_llama.cpp's prompts of PP tokens after DEPTH: REPS sweeps of llama-sweep-bench (windows of PP
# tokens, one decoded token each), the window at DEPTH of each as one sample, written as llama-bench's
# JSON (the sweeps print their rows with the log, on stderr; they run in RESULTS_DIR, where they also
# leave a llama.log)
run_ik_sweep() {  # cfg model out
  local rtr=() i model
  [ "$1" = ik-rtr ] && rtr=(-rtr)  # a flag here, not llama-bench's `-rtr 1`
  model=$(realpath "$2")
  : > "$3.log"
  for ((i = 0; i < REPS; i++)); do
    (cd "$RESULTS_DIR" && "$IK_SWEEP" -m "$model" -t "$THREADS" -c $((DEPTH + PP)) -ub "$PP" -b "$PP" -n 1 -fa 1 "${rtr[@]}" \
      "${OFFLOAD[@]}" --output-format jsonl) >> "$3.log" 2>&1 || { log "llama-sweep-bench ($1) failed on $2 (see $3.log)"; break; }
  done
  python3 - "$PP" "$DEPTH" "$3.log" > "$3" <<'PY'
import json, sys
pp, depth = int(sys.argv[1]), int(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[3], errors="replace") if l.startswith('{"n_kv_max"')]
ts = [r["speed_pp"] for r in rows if r.get("n_kv") == depth and r.get("pp") == pp]
print(json.dumps([{"n_prompt": pp, "n_gen": 0, "n_depth": depth, "samples_ts": ts}] if ts else []))
PY
}
oneshot_toy() {  # model out [alt]
  local extra=() vars=()
  [ "${3:-}" = alt ] && extra+=("${TOY_ALT_FLAGS[@]}") && vars=("${TOY_ALT_VARS[@]}")
  /usr/bin/time -v -o "$2.time" env "${vars[@]}" "${TOY_CMD[@]}" run -m "$1" -t "$THREADS" -c 512 -p "$PROMPT" -n 1 --json \
    "${OFFLOAD[@]}" "${TOY_EXTRA[@]}" "${extra[@]}" > "$2" 2> "$2.log" ||
    { log "toy run failed on $1 (see $2.log)"; rm -f "$2.time"; }
}
oneshot_llama() {  # cfg model out
  local cmd
  read -r -a cmd <<< "$(llama_cmd "$1" llama-completion)"
  /usr/bin/time -v -o "$3.time" "${cmd[@]}" -m "$2" -t "$THREADS" -c 512 -p "$PROMPT" -n 1 -no-cnv --no-warmup "${OFFLOAD[@]}" \
    > "$3" 2> "$3.log" < /dev/null || { log "llama-completion ($1) failed on $2 (see $3.log)"; rm -f "$3.time"; }
}
# one round: toy and every llama.cpp build, in the given order of engines
round_of() {  # path tag round engine...
  local path=$1 tag=$2 round=$3 e
  shift 3
  for e in "$@"; do
    if [ "$e" = toy ]; then run_toy_bench "$path" "$RESULTS_DIR/$tag.toy.$round.json"
    elif [ "$e" = alt ]; then run_toy_bench "$path" "$RESULTS_DIR/$tag.toy-alt.$round.json" alt
    else
      run_llama_bench "$e" "$path" "$RESULTS_DIR/$tag.llama-$e.$round.json"
      [[ $e == ik* && $IK_SWEEP_ON == 1 ]] && run_ik_sweep "$e" "$path" "$RESULTS_DIR/$tag.llama-$e.$round.sweep.json"
    fi
  done
  local k
  for ((k = 1; k <= ONESHOTS; k++)); do
    for e in "$@"; do
      if [ "$e" = toy ]; then oneshot_toy "$path" "$RESULTS_DIR/$tag.toy-oneshot.$round.$k"
      elif [ "$e" = alt ]; then oneshot_toy "$path" "$RESULTS_DIR/$tag.toy-alt-oneshot.$round.$k" alt
      elif [[ $e != ik* ]]; then oneshot_llama "$e" "$path" "$RESULTS_DIR/$tag.llama-$e-oneshot.$round.$k"; fi
    done
  done
}

engines=(toy $ALT $LLAMA $IK)
reversed=()
for ((i = ${#engines[@]} - 1; i >= 0; i--)); do reversed+=("${engines[i]}"); done
for spec in $MODELS; do
  path=$(model_path "$spec")
  tag=${spec/:/.}
  for ((round = 1; round <= ROUNDS; round++)); do
    log "$spec: round $round/$ROUNDS"
    if ((round % 2 == 1)); then round_of "$path" "$tag" "$round" "${engines[@]}"
    else round_of "$path" "$tag" "$round" "${reversed[@]}"; fi
  done
done
echo "load average at end: $(cat /proc/loadavg)" >> "$RESULTS_DIR/settings.txt"

# ---- table ----
python3 - "$RESULTS_DIR" "$MODELS" "$ALT $LLAMA $IK" "$CPU_NAME" "$CPU_KIND" "$GPU_NAME" "$NGL" "$TOY_AMX" "${TOY_ALT_ENV:-} ${TOY_ALT:-}" "$ONESHOTS" <<'PY'
import glob, json, re, statistics, sys

res_dir, models, builds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
LABEL = {"off": "llama.cpp AMX off", "on": "llama.cpp", "fixed": "llama.cpp AMX fixed",
         "ik": "ik_llama.cpp", "ik-rtr": "ik_llama.cpp -rtr 1", "alt": f"toy {sys.argv[9].strip()}"}
# where each engine's results are (toy alt: beside toy's)
TOOL = lambda b: "toy-alt" if b == "alt" else f"llama-{b}"
print(f"CPU: {sys.argv[4]}; {sys.argv[5]}" + (f"; GPU: {sys.argv[6]}" if sys.argv[6] else "") +
      (f"; -ngl {sys.argv[7]} for both engines" if sys.argv[7] else "") +
      ("; toy with AMX off (its AVX-512 set, as on a CPU without AMX)" if sys.argv[8] == "off" else ""))
print()

def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def pooled(tag, tool):
    """test name -> list of tokens/s samples over all rounds (plus toy's roofline fields)."""
    out, roof = {}, {}
    for path in sorted(glob.glob(f"{res_dir}/{tag}.{tool}.*.json")):
        for t in load_json(path) or []:
            if "@pp" in t.get("test", ""):  # ik_llama.cpp's -gp: decoding after n_prompt tokens
                name = f"tg{t['n_gen']} @ d{t['n_prompt']}"
            elif t.get("n_gen", 0) == 0:
                name = f"pp{t['n_prompt']}"
            elif t.get("n_prompt", 0) == 0:
                name = f"tg{t['n_gen']}"
            else:
                name = f"pp{t['n_prompt']}+tg{t['n_gen']}"
            if t.get("n_depth", 0) and "@" not in name:
                name += f" @ d{t['n_depth']}"
            out.setdefault(name, []).extend(t.get("samples_ts", []))
            if "ceiling_ts" in t:
                r = roof.setdefault(name, {"bw": 0.0, "bytes": t["bytes_per_token"]})
                r["bw"] = max(r["bw"], t["bandwidth_gbs"])
    return out, roof

def mean(v):
    return statistics.mean(v) if v else None

def fmt_ts(v):
    if not v:
        return "n/a"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    m = statistics.mean(v)
    # a spread this wide means something else ran on the machine: see the medians
    return f"{m:.2f} ± {sd:.2f}" + (" (noisy)" if sd > 0.1 * m else "")

def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "n/a"

def oneshot(tag, tool):
    walls, rss = [], []
    for path in sorted(glob.glob(f"{res_dir}/{tag}.{tool}-oneshot.*.time")):
        text = open(path).read()
        m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
        if m:
            h = int(m.group(1) or 0)
            walls.append(1000 * (h * 3600 + int(m.group(2)) * 60 + float(m.group(3))))
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        if m:
            rss.append(int(m.group(1)) * 1024)
    return (statistics.median(walls) if walls else None, max(rss) if rss else None)

def row(cells):
    print("| " + " | ".join(cells) + " |")

# speed: toy, then each llama.cpp build with the ratio toy/that build (means; medians in brackets)
head = ["model", "test", "toy t/s"]
for b in builds:
    head += [f"{LABEL[b]} t/s", f"toy / {LABEL[b]}"]
head.append("toy % of ceiling")
row(head)
row(["---", "---"] + ["---:"] * (len(head) - 2))
roof_lines = []
for spec in models:
    tag = spec.replace(":", ".")
    toy, roof = pooled(tag, "toy")
    refs = {b: pooled(tag, TOOL(b))[0] for b in builds}
    names = set(toy)
    for r in refs.values():
        names |= set(r)
    for name in sorted(names, key=lambda n: (not n.startswith("pp"), n)):
        a = toy.get(name, [])
        cells = [spec, name, fmt_ts(a)]
        for b in builds:
            v = refs[b].get(name, [])
            med = ratio(statistics.median(a) if a else None, statistics.median(v) if v else None)
            cells += [fmt_ts(v), f"{ratio(mean(a), mean(v))} ({med})"]
        ceil = ""
        if name in roof and a:
            r = roof[name]
            c = r["bw"] * 1e9 / r["bytes"]
            ceil = f"{100 * mean(a) / c:.0f}%"
            line = [spec, name, f"{r['bytes'] / 1e6:.1f}", f"{r['bw']:.2f}", f"{c:.1f}", f"{mean(a):.2f} ({ceil})"]
            for b in builds:
                v = refs[b].get(name, [])
                line.append(f"{mean(v):.2f} ({100 * mean(v) / c:.0f}%)" if v else "n/a")
            roof_lines.append(line)
        cells.append(ceil)
        row(cells)

once = [b for b in builds if not b.startswith("ik")]  # ik_llama.cpp: speed only, no one-shot runs
if sys.argv[10] != "0":
    print()
    head = ["model", "toy one-shot ms"] + [f"{LABEL[b]} ms" for b in once] + [f"toy / {LABEL[b]}" for b in once]
    head += ["toy peak RSS MiB"] + [f"{LABEL[b]} MiB" for b in once] + [f"toy / {LABEL[b]}" for b in once]
    row(head)
    row(["---"] + ["---:"] * (len(head) - 1))
    f = lambda v, s=1.0: f"{v / s:.0f}" if v else "n/a"
    for spec in models:
        tag = spec.replace(":", ".")
        tw, tr = oneshot(tag, "toy")
        ref = {b: oneshot(tag, TOOL(b)) for b in once}
        cells = [spec, f(tw)] + [f(ref[b][0]) for b in once] + [ratio(tw, ref[b][0]) for b in once]
        cells += [f(tr, 2**20)] + [f(ref[b][1], 2**20) for b in once] + [ratio(tr, ref[b][1]) for b in once]
        row(cells)

if roof_lines:
    print()
    row(["model", "test", "MB read / token", "bandwidth GB/s", "ceiling t/s", "toy t/s (% ceiling)"] +
        [f"{LABEL[b]} t/s (% ceiling)" for b in builds])
    row(["---", "---"] + ["---:"] * (4 + len(builds)))
    for l in roof_lines:
        row(l)
PY
echo
echo "settings: THREADS=$THREADS PP=$PP TG=$TG DEPTH=$DEPTH REPS=$REPS ROUNDS=$ROUNDS ONESHOTS=$ONESHOTS LLAMA=\"$LLAMA\" TOY_AMX=$TOY_AMX TOY_ALT=\"${TOY_ALT:-}\" TOY_ALT_ENV=\"${TOY_ALT_ENV:-}\" IK=\"$IK\" NGL=\"$NGL\"; raw results in $RESULTS_DIR"
