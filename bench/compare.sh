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
#   MODELS ["smollm2-135m:f16 smollm2-135m:q8_0 qwen2.5-0.5b:q8_0 llama-3.2-1b:q4_k_m"]
#   BUILD_DIR [<repo>/build]   MODEL_DIR [~/.cache/toy/bench-models]
#   REF_DIR [~/.cache/toy-reference]   RESULTS_DIR [a new temporary directory]
#   ROOFLINE [1]: also probe memory bandwidth (toy bench --roofline)
#   LLAMA_AMX [0]: 0 runs llama.cpp with its AMX weight buffers disabled (see
#     below); 1 runs it as built (crashes on quantized prompts on AMX CPUs)
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
#   same one-shot run under /usr/bin/time -v, ROUNDS times, alternating:
#   `llama-completion -m M -c 512 -p PROMPT -n 1 -no-cnv --no-warmup` and
#   `toy run -m M -c 512 -p PROMPT -n 1`. "load" is the median wall time of
#   that whole process (start, load, tokenize, prompt eval, one token, exit);
#   RSS is /usr/bin/time's maximum resident set size (mapped weights count
#   once touched, for both).
# - AMX: on CPUs with AMX, llama.cpp moves F16/Q8_0/Q4_K/Q6_K weights into
#   ggml's AMX buffer type, whose batched int8 tile path in the pinned ggml
#   loads an uninitialized tile config and dies with SIGSEGV (ldtilecfg) on any
#   quantized prompt. With LLAMA_AMX=0 (default) a tiny LD_PRELOAD shim makes
#   ggml's AMX permission request (arch_prctl ARCH_REQ_XCOMP_PERM) fail, so
#   ggml prints "AMX is not ready to be used!" and llama.cpp runs as on a CPU
#   without AMX (its CPU_REPACK buffers stay on). CPUs without AMX: no effect.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  : "${PP:=128}" "${TG:=32}" "${REPS:=2}" "${ROUNDS:=1}"
fi
THREADS=${THREADS:-$(nproc)}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-2}
ROOFLINE=${ROOFLINE:-1}
LLAMA_AMX=${LLAMA_AMX:-0}
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
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  log "configuring toy in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >&2
fi
log "building toy (incremental)"
cmake --build "$BUILD_DIR" --target toy -j"$(nproc)" >&2
TOY=$BUILD_DIR/toy
if [ ! -x "$REF_DIR/bin/llama-bench" ] || [ ! -x "$REF_DIR/bin/llama-completion" ]; then
  log "building the llama.cpp reference tools into $REF_DIR (about 10 minutes)"
  bash "$SHARED_DIR/tools/build-llama-reference.sh" "$REF_DIR" >&2
fi
LLAMA_BENCH=$REF_DIR/bin/llama-bench
LLAMA_COMPLETION=$REF_DIR/bin/llama-completion
LLAMA_ENV=()
if [ "$LLAMA_AMX" = 0 ]; then
  mkdir -p "$RESULTS_DIR"
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
  LLAMA_ENV=(env "LD_PRELOAD=$RESULTS_DIR/no_amx.so")
fi

# ---- models ----
mkdir -p "$MODEL_DIR" "$RESULTS_DIR"
model_path() { echo "$MODEL_DIR/${1%%:*}.${1##*:}.gguf"; }
for spec in $MODELS; do
  path=$(model_path "$spec")
  if [ ! -f "$path" ]; then
    log "making $path"
    "$TOY" init --preset "${spec%%:*}" --type "${spec##*:}" --seed 1 -o "$path" >&2
  fi
done

log "results in $RESULTS_DIR (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
if awk '{exit !($1 > 0.5)}' /proc/loadavg; then
  log "warning: the machine is busy (load average above 0.5); timings will be noisy"
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus"
  echo "settings: THREADS=$THREADS PP=$PP TG=$TG REPS=$REPS ROUNDS=$ROUNDS LLAMA_AMX=$LLAMA_AMX"
  echo "toy: $("$TOY" --version)"
  echo "load average at start: $(cat /proc/loadavg)"
} > "$RESULTS_DIR/settings.txt"

# ---- runs ----
run_toy_bench() {  # model out
  local extra=()
  [ "$ROOFLINE" = 1 ] && extra+=(--roofline)
  "$TOY" bench -m "$1" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" --json "${extra[@]}" > "$2" 2> "$2.log" ||
    { log "toy bench failed on $1 (see $2.log)"; rm -f "$2"; }
}
run_llama_bench() {  # model out
  "${LLAMA_ENV[@]}" "$LLAMA_BENCH" -m "$1" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o json > "$2" 2> "$2.log" && return
  log "llama-bench failed on $1 (see $2.log)"
  rm -f "$2"
  # with LLAMA_AMX=1 the quantized prompt test crashes; keep at least tg
  if [ "$PP" != 0 ] && [ "$TG" != 0 ]; then
    log "retrying llama-bench on $1 with -p 0 (tg only)"
    "${LLAMA_ENV[@]}" "$LLAMA_BENCH" -m "$1" -t "$THREADS" -p 0 -n "$TG" -r "$REPS" -o json > "$2" 2>> "$2.log" ||
      { log "llama-bench -p 0 failed on $1 too"; rm -f "$2"; }
  fi
}
oneshot_toy() {  # model out
  /usr/bin/time -v -o "$2.time" "$TOY" run -m "$1" -t "$THREADS" -c 512 -p "$PROMPT" -n 1 --json > "$2" 2> "$2.log" ||
    { log "toy run failed on $1 (see $2.log)"; rm -f "$2.time"; }
}
oneshot_llama() {  # model out
  /usr/bin/time -v -o "$2.time" "${LLAMA_ENV[@]}" "$LLAMA_COMPLETION" -m "$1" -t "$THREADS" -c 512 -p "$PROMPT" -n 1 -no-cnv --no-warmup \
    > "$2" 2> "$2.log" < /dev/null || { log "llama-completion failed on $1 (see $2.log)"; rm -f "$2.time"; }
}

for spec in $MODELS; do
  path=$(model_path "$spec")
  tag=${spec/:/.}
  for ((round = 1; round <= ROUNDS; round++)); do
    log "$spec: round $round/$ROUNDS"
    if ((round % 2 == 1)); then
      run_toy_bench "$path" "$RESULTS_DIR/$tag.toy.$round.json"
      run_llama_bench "$path" "$RESULTS_DIR/$tag.llama.$round.json"
      oneshot_toy "$path" "$RESULTS_DIR/$tag.toy-oneshot.$round"
      oneshot_llama "$path" "$RESULTS_DIR/$tag.llama-oneshot.$round"
    else
      run_llama_bench "$path" "$RESULTS_DIR/$tag.llama.$round.json"
      run_toy_bench "$path" "$RESULTS_DIR/$tag.toy.$round.json"
      oneshot_llama "$path" "$RESULTS_DIR/$tag.llama-oneshot.$round"
      oneshot_toy "$path" "$RESULTS_DIR/$tag.toy-oneshot.$round"
    fi
  done
done
echo "load average at end: $(cat /proc/loadavg)" >> "$RESULTS_DIR/settings.txt"

# ---- table ----
python3 - "$RESULTS_DIR" "$MODELS" "$LLAMA_AMX" <<'PY'
import glob, json, os, re, statistics, sys

res_dir, models = sys.argv[1], sys.argv[2].split()
llama = "llama.cpp" if sys.argv[3] == "1" else "llama.cpp (AMX off)"

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
            if t.get("n_gen", 0) == 0:
                name = f"pp{t['n_prompt']}"
            elif t.get("n_prompt", 0) == 0:
                name = f"tg{t['n_gen']}"
            else:
                name = f"pp{t['n_prompt']}+tg{t['n_gen']}"
            out.setdefault(name, []).extend(t.get("samples_ts", []))
            if "ceiling_ts" in t:
                r = roof.setdefault(name, {"bw": 0.0, "bytes": t["bytes_per_token"]})
                r["bw"] = max(r["bw"], t["bandwidth_gbs"])
    return out, roof

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

print(f"| model | test | toy t/s | {llama} t/s | ratio (toy/llama) | ratio of medians | toy % of ceiling |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
roof_lines = []
for spec in models:
    tag = spec.replace(":", ".")
    toy, roof = pooled(tag, "toy")
    ref, _ = pooled(tag, "llama")
    for name in sorted(set(toy) | set(ref), key=lambda n: (not n.startswith("pp"), n)):
        a, b = toy.get(name, []), ref.get(name, [])
        ma = statistics.mean(a) if a else None
        mb = statistics.mean(b) if b else None
        ceil = ""
        if name in roof and ma:
            r = roof[name]
            c = r["bw"] * 1e9 / r["bytes"]
            ceil = f"{100 * ma / c:.0f}%"
            roof_lines.append(f"| {spec} | {name} | {r['bytes'] / 1e6:.1f} | {r['bw']:.2f} | {c:.1f} | "
                              f"{ma:.2f} ({100 * ma / c:.0f}%) | {mb:.2f} ({100 * mb / c:.0f}%) |" if mb else
                              f"| {spec} | {name} | {r['bytes'] / 1e6:.1f} | {r['bw']:.2f} | {c:.1f} | {ma:.2f} | n/a |")
        med = ratio(statistics.median(a) if a else None, statistics.median(b) if b else None)
        print(f"| {spec} | {name} | {fmt_ts(a)} | {fmt_ts(b)} | {ratio(ma, mb)} | {med} | {ceil} |")

print()
print(f"| model | toy one-shot ms | {llama} one-shot ms | ratio | toy peak RSS MiB | {llama} peak RSS MiB | ratio |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for spec in models:
    tag = spec.replace(":", ".")
    tw, tr = oneshot(tag, "toy")
    lw, lr = oneshot(tag, "llama")
    f = lambda v, s=1.0: f"{v / s:.0f}" if v else "n/a"
    print(f"| {spec} | {f(tw)} | {f(lw)} | {ratio(tw, lw)} | {f(tr, 2**20)} | {f(lr, 2**20)} | {ratio(tr, lr)} |")

if roof_lines:
    print()
    print(f"| model | test | MB read / token | bandwidth GB/s | ceiling t/s | toy t/s (% ceiling) | {llama} t/s (% ceiling) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for l in roof_lines:
        print(l)
PY
echo
echo "settings: THREADS=$THREADS PP=$PP TG=$TG REPS=$REPS ROUNDS=$ROUNDS LLAMA_AMX=$LLAMA_AMX; raw results in $RESULTS_DIR"
