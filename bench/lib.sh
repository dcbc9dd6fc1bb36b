# Helpers the benchmark scripts share (sourced, not run).

# "CPU: <model>; AMX: yes|no": which machine a table comes from.
cpu_line() {
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); AMX: $(grep -q amx_tile /proc/cpuinfo && echo yes || echo no)"
}

# random_words FILE N: one line of N words drawn (seed 0) from a small
# vocabulary, a training text every engine tokenizes alike.
random_words() {
  python3 - "$1" "$2" <<'PY'
import random, sys
random.seed(0)
w = "the a cat dog ran sat on mat and happy little big house tree saw went to Once upon time".split()
open(sys.argv[1], "w").write(" ".join(random.choice(w) for _ in range(int(sys.argv[2]))) + "\n")
PY
}
