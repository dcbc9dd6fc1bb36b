#!/usr/bin/env bash
# Interleaved A/B(/C...) timing for a noisy machine: runs each command once per
# round, rotating which goes first, and prints every command's numbers and
# their median. Each command must print its number on its last line of
# standard output. Compare builds or settings measured in the same rounds
# only: on the 2-vCPU VMs the same binary drifts by 20% within minutes, so a
# change shows as a median that moves and a lead held in most rounds.
#
#   bench/ab.sh ROUNDS 'COMMAND A' 'COMMAND B' [...]
#
# e.g. two builds' decoding speed, or a kernel on two cores at once:
#   tg() { echo "$1 bench -m MODEL.gguf -p 0 -n 64 -r 3 | awk -F'|' '/tg64/ {print \$8}' | awk '{print \$1}'"; }
#   bench/ab.sh 5 "$(tg /tmp/toy_before)" "$(tg build/toy)"
#   bench/ab.sh 5 "(build/toy_tile_bench q4_k 2048 8192 & build/toy_tile_bench q4_k 2048 8192; wait) | awk '{s += \$(NF-3)} END {print s}'" ...
set -euo pipefail
[ $# -ge 3 ] && [[ $1 =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/ab.sh ROUNDS 'COMMAND A' 'COMMAND B' [...]" >&2; exit 1; }
rounds=$1
shift
cmds=("$@")
n=${#cmds[@]}
declare -a results
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < n; i++)); do
    j=$(((i + r) % n))
    v=$(bash -c "${cmds[$j]}" 2>/dev/null | tail -n 1) || v="failed"
    results[j]="${results[j]:-} ${v:-none}"
  done
done
for ((i = 0; i < n; i++)); do
  median=$(tr ' ' '\n' <<<"${results[i]}" | awk '/^[0-9.]+$/ {print}' | sort -g | awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : "n/a"}')
  echo "${cmds[i]}"
  echo "   ${results[i]# } :: median $median"
done
