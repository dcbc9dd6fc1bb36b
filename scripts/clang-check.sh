#!/usr/bin/env bash
# The clang compile check of `make test`: every source file of toy's own
# (src/, fuzz/) parsed and type-checked by clang (-fsyntax-only: templates
# instantiated, intrinsics' target attributes checked, no code generated),
# with the flags the GCC build in BUILD_DIR used (its compile_commands.json).
# CI builds with GCC only, while the fuzz builds (clang), macOS (Apple clang,
# the Metal backend) and users' own choice build with clang; what one
# compiler accepts and the other refuses (a template call split by a macro's
# comma, a lambda capturing a structured binding) has broken `make fuzz`
# twice. About a minute on 2 cores.
#
#   scripts/clang-check.sh [BUILD_DIR]      (default: build)
#
# Uses the newest clang++ installed; installs Debian's `clang` as root when
# there is none, and says why it skipped otherwise. Errors fail the check;
# warnings are printed (clang's set of warnings changes between versions).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${1:-build}
DB=$BUILD/compile_commands.json
[ -f "$DB" ] || { echo "clang-check: no $DB (run cmake with CMAKE_EXPORT_COMPILE_COMMANDS first)" >&2; exit 1; }

find_clang() {
  for c in clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14 clang++; do
    command -v "$c" >/dev/null && { echo "$c"; return 0; }
  done
  return 1
}
if ! CXX=$(find_clang); then
  if [ "$(id -u)" -eq 0 ]; then
    echo "clang-check: installing clang" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y --no-install-recommends -qq clang >/dev/null
    CXX=$(find_clang)
  else
    echo "clang-check: skipped: no clang++ here; to run it: sudo apt-get install -y --no-install-recommends clang"
    exit 0
  fi
fi

# One line per toy source: the GCC build's command with clang++ in front and
# -fsyntax-only in place of "-o OBJECT -c". fuzz/ is not part of this build:
# its files take toylib's command with the file swapped, fuzz/ included and
# the paths its CMakeLists.txt defines given as empty strings.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed -n 's/^ *"command": "\(.*\)",$/\1/p' "$DB" | sed 's/\\"/"/g; s/\\\\/\\/g' |
  grep -F " -c $ROOT/src/" |
  sed "s#^[^ ]*#$CXX#; s# -o [^ ]* -c # -fsyntax-only #" >"$work/cmds"
[ -s "$work/cmds" ] || { echo "clang-check: no command for $ROOT/src in $DB" >&2; exit 1; }
lib=$(grep -m1 -F "$ROOT/src/core/" "$work/cmds")
for f in "$ROOT"/fuzz/*.cpp; do
  echo "${lib% *} -I$ROOT/fuzz -DTOY_SHARED_DIR='\"\"' -DTOY_LLAMA_SOURCE_DIR='\"\"' -DTOY_SOURCE_DIR='\"\"' $f" >>"$work/cmds"
done

n=$(wc -l <"$work/cmds")
rc=0
xargs -d '\n' -P "$(nproc)" -I{} bash -c '{}' <"$work/cmds" 2>"$work/log" || rc=$?
if [ $rc -ne 0 ] || grep -q ' error: ' "$work/log"; then
  cat "$work/log" >&2
  echo "clang-check: FAILED: $(grep -c ' error: ' "$work/log") errors in toy's sources under $($CXX --version | head -1)" >&2
  exit 1
fi
warnings=$(grep -c ' warning: ' "$work/log" || true)
[ "$warnings" -eq 0 ] || cat "$work/log"
echo "clang-check: $n files of toy's own parse and type-check with $($CXX --version | head -1) ($warnings warnings)"
