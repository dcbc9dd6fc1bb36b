#!/usr/bin/env bash
# make-quantize-reference.sh: record what llama-quantize (built from the same
# pinned package as toy's ggml) writes for each quantization type, so that
# tests/test_quantize.cpp can check `toy quantize` tensor for tensor without
# llama.cpp.
#
#   scripts/make-quantize-reference.sh
#
# Inputs: a few fixtures of ../shared/fixtures (tiny: most rows are not a
# multiple of 256, so the block-size fallbacks apply) and models made by
# `toy init` (deterministic: the test makes them again and checks their
# digest): a GQA llama with 8 layers (per-layer rules) and an 8-expert MoE.
# For every model and every type llama-quantize runs once without an
# importance matrix; for the llama model every type runs again with a
# deterministic imatrix written here (tests/data/quantize/llama8.imatrix.gguf),
# and one fixture with a legacy .dat imatrix.
#
# Output: tests/data/quantize/<model>.txt, one line per fact:
#   input <sha256 of the input file>
#   <TYPE>[+imatrix] meta <key> <value>          general.file_type, general.quantization_version, quantize.imatrix.*
#   <TYPE>[+imatrix] tensor <name> <ggml type> <first 16 hex digits of the data's sha256>
#   <TYPE>[+imatrix] error                       llama-quantize refused (e.g. the type needs an imatrix)
# and, in llama8-flags.txt and q8-requantize.txt, runs with llama-quantize's flags
# labelled TYPE@flag,flag,... (--pure, --output-tensor-type, --include-weights, ...).
#
# Environment:
#   TOY            toy executable (default: build/toy)
#   TOY_REFERENCE  directory with llama-quantize (default ~/.cache/toy-reference/bin,
#                  see ../shared/tools/build-llama-reference.sh)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOY=${TOY:-$ROOT/build/toy}
REF=${TOY_REFERENCE:-$HOME/.cache/toy-reference/bin}
FIX=$ROOT/../shared/fixtures
OUT=$ROOT/tests/data/quantize
[ -x "$TOY" ] || { echo "no toy executable at $TOY (set TOY)" >&2; exit 2; }
[ -x "$REF/llama-quantize" ] || { echo "no llama-quantize in $REF (run ../shared/tools/build-llama-reference.sh)" >&2; exit 2; }
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The toy init models. tests/test_quantize.cpp makes the same ones: keep both in step.
"$TOY" -q init --arch llama --n-embd 256 --n-layer 8 --n-head 4 --n-head-kv 1 --n-ff 256 --n-vocab 260 \
  --untied --type f16 --seed 7 -o "$TMP/llama8.gguf" 2>/dev/null
"$TOY" -q init --arch qwen3moe --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 4 --n-ff 256 --n-expert 8 \
  --n-expert-used 2 --n-ff-exp 256 --n-vocab 320 --type f32 --seed 11 -o "$TMP/moe8.gguf" 2>/dev/null

TYPES="Q1_0 Q2_0 Q4_0 Q4_1 MXFP4_MOE Q5_0 Q5_1 IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ1_S IQ1_M TQ1_0 TQ2_0 Q2_K Q2_K_S
IQ3_XXS IQ3_S IQ3_M IQ3_XS Q3_K_S Q3_K_M Q3_K_L IQ4_NL IQ4_XS Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q8_0 F16 BF16 F32 COPY"

# python: GGUF digests and imatrix files (standard library only)
cat > "$TMP/gguf_tool.py" <<'EOF'
import hashlib, struct, sys, random

# ggml type id -> (name, block size, bytes per block), as the pinned ggml defines them
TYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22),
         7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110),
         12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 16: ("iq2_xxs", 256, 66),
         17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98), 19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18),
         21: ("iq3_s", 256, 110), 22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 29: ("iq1_m", 256, 56),
         30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66), 39: ("mxfp4", 32, 17),
         41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18)}
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0
    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos); pos += struct.calcsize("<" + fmt); return v[0]
    def string():
        nonlocal pos
        n = take("Q"); s = data[pos:pos + n].decode("utf-8", "replace"); pos += n; return s
    def value(t):
        if t == 8: return string()
        if t == 9:
            et, n = take("I"), take("Q"); return [value(et) for _ in range(n)]
        return take(SCALAR[t])
    assert data[:4] == b"GGUF"; pos = 4
    take("I"); n_tensors, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string(); kv[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string(); nd = take("I"); ne = [take("Q") for _ in range(nd)]; t = take("I"); off = take("Q")
        infos.append((name, ne, t, off))
    align = kv.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    tensors = []
    for name, ne, t, off in infos:
        tname, blck, size = TYPES[t]
        n = 1
        for d in ne: n *= d
        nbytes = n // blck * size
        tensors.append((name, tname, hashlib.sha256(data[base + off:base + off + nbytes]).hexdigest()[:16]))
    return kv, tensors

def digest(path, label):
    kv, tensors = read_gguf(path)
    for k in sorted(kv):
        if k in ("general.file_type", "general.quantization_version") or k.startswith("quantize.imatrix."):
            print(f"{label} meta {k} {kv[k]}")
    for name, tname, h in sorted(tensors):
        print(f"{label} tensor {name} {tname} {h}")

def quantizable_weights(path):
    # every 2-D/3-D "*.weight" but norms and routers, with (n_per_row, n_mat)
    kv, _ = read_gguf(path)
    data = open(path, "rb").read()
    out = []
    # re-read the tensor infos for shapes
    pos = 24
    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos); pos += struct.calcsize("<" + fmt); return v[0]
    def skip_value(t):
        nonlocal pos
        if t == 8: n = take("Q"); pos += n
        elif t == 9:
            et, n = take("I"), take("Q")
            for _ in range(n): skip_value(et)
        else: pos += struct.calcsize("<" + SCALAR[t])
    n_tensors = struct.unpack_from("<Q", data, 8)[0]; n_kv = struct.unpack_from("<Q", data, 16)[0]
    for _ in range(n_kv):
        n = take("Q"); pos += n; skip_value(take("I"))
    for _ in range(n_tensors):
        n = take("Q"); name = data[pos:pos + n].decode(); pos += n
        nd = take("I"); ne = [take("Q") for _ in range(nd)]; take("I"); take("Q")
        if nd >= 2 and name.endswith(".weight") and "_norm" not in name and "ffn_gate_inp" not in name:
            out.append((name, ne[0], ne[2] if nd > 2 else 1))
    return out

def importance_values(name, n):
    # deterministic, positive, varied across columns: a column's weight in 0.05 .. 20
    rng = random.Random(name)
    return [round(0.05 + 20.0 * rng.random() ** 3, 4) for _ in range(n)]

def write_imatrix_gguf(model, path):
    # llama-imatrix's layout: <w>.in_sum2 [n_per_row, n_mat], <w>.counts [1, n_mat], sorted by name
    entries = sorted(quantizable_weights(model))
    entries = [e for e in entries if e[0] not in ("token_embd.weight",)]  # llama-imatrix never sees the embedding
    tensors = []
    for name, n_per_row, n_mat in entries:
        counts = [float(64 + 32 * j) for j in range(n_mat)]
        sums = []
        for j in range(n_mat):
            sums += [v * counts[j] for v in importance_values(f"{name}/{j}", n_per_row)]
        nd = 2 if n_mat > 1 else 1
        tensors.append((name + ".in_sum2", [n_per_row, n_mat][:nd], struct.pack(f"<{len(sums)}f", *sums)))
        tensors.append((name + ".counts", [1, n_mat][:nd], struct.pack(f"<{len(counts)}f", *counts)))
    def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
    kvs = s("general.type") + struct.pack("<I", 8) + s("imatrix")
    kvs += s("imatrix.datasets") + struct.pack("<IIQ", 9, 8, 1) + s("calibration.txt")
    kvs += s("imatrix.chunk_count") + struct.pack("<II", 4, 10)
    kvs += s("imatrix.chunk_size") + struct.pack("<II", 4, 512)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 4) + kvs
    off = 0; infos = b""; blobs = b""
    for name, ne, blob in tensors:
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", 0, off)
        pad = (len(blob) + 31) // 32 * 32 - len(blob)
        blobs += blob + b"\0" * pad; off += len(blob) + pad
    head += infos
    head += b"\0" * ((len(head) + 31) // 32 * 32 - len(head))
    open(path, "wb").write(head + blobs)

def write_imatrix_dat(model, path):
    # the legacy layout: values are mean squares times the call count
    entries = [e for e in sorted(quantizable_weights(model)) if e[0] != "token_embd.weight"]
    out = struct.pack("<i", len(entries))
    for name, n_per_row, n_mat in entries:
        vals = importance_values(name, n_per_row * n_mat)
        ncall = 3
        b = name.encode()
        out += struct.pack("<i", len(b)) + b + struct.pack("<ii", ncall, len(vals))
        out += struct.pack(f"<{len(vals)}f", *[v * ncall for v in vals])
    ds = b"legacy.txt"
    out += struct.pack("<ii", 3, len(ds)) + ds
    open(path, "wb").write(out)

cmd = sys.argv[1]
if cmd == "digest": digest(sys.argv[2], sys.argv[3])
elif cmd == "sha": print(hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest())
elif cmd == "imatrix": write_imatrix_gguf(sys.argv[2], sys.argv[3])
elif cmd == "imatrix-dat": write_imatrix_dat(sys.argv[2], sys.argv[3])
EOF
PY="python3 $TMP/gguf_tool.py"

python3 "$TMP/gguf_tool.py" imatrix "$TMP/llama8.gguf" "$OUT/llama8.imatrix.gguf"
python3 "$TMP/gguf_tool.py" imatrix-dat "$FIX/llama-untied.f16.gguf" "$OUT/llama-untied.imatrix.dat"

# quantize_once DEST LABEL TYPE INPUT [FLAGS...]: one llama-quantize run, its
# digest (or "LABEL error" when llama-quantize refuses) appended to DEST
quantize_once() {
  local dest=$1 label=$2 t=$3 input=$4
  shift 4
  if "$REF/llama-quantize" "$@" "$input" "$TMP/out.gguf" "$t" 2 > "$TMP/log.txt" 2>&1; then
    $PY digest "$TMP/out.gguf" "$label" >> "$dest"
  else
    echo "$label error" >> "$dest"
  fi
  rm -f "$TMP/out.gguf"
}

# reference NAME INPUT [IMATRIX]: every type, into $OUT/NAME.txt (or append +imatrix runs)
reference() {
  local name=$1 input=$2 imatrix=${3:-} suffix="" dest="$OUT/$1.txt"
  if [ -n "$imatrix" ]; then suffix="+imatrix"; else echo "input $($PY sha "$input")" > "$dest"; fi
  for t in $TYPES; do
    local args=()
    [ -n "$imatrix" ] && args=(--imatrix "$imatrix")
    quantize_once "$dest" "$t$suffix" "$t" "$input" "${args[@]}"
    echo "$name $t$suffix" >&2
  done
}

# reference_flags NAME INPUT SPEC...: llama-quantize's flags, one run per SPEC
# ("TYPE@flag,flag,..."; an --imatrix file is named relative to $OUT), into $OUT/NAME.txt
reference_flags() {
  local name=$1 input=$2 dest="$OUT/$1.txt"
  shift 2
  echo "input $($PY sha "$input")" > "$dest"
  for spec in "$@"; do
    local t=${spec%%@*} args=()
    IFS=, read -r -a args <<< "${spec#*@}"
    for i in "${!args[@]}"; do [ "${args[$i]}" = "--imatrix" ] && args[$((i+1))]="$OUT/${args[$((i+1))]}"; done
    quantize_once "$dest" "$spec" "$t" "$input" "${args[@]}"
    echo "$name $spec" >&2
  done
}

reference llama-untied "$FIX/llama-untied.f16.gguf"
reference llama-untied "$FIX/llama-untied.f16.gguf" "$OUT/llama-untied.imatrix.dat"
reference mixtral "$FIX/mixtral.f32.gguf"
reference gpt2 "$FIX/gpt2.f32.gguf"
reference llama8 "$TMP/llama8.gguf"
reference llama8 "$TMP/llama8.gguf" "$OUT/llama8.imatrix.gguf"
reference moe8 "$TMP/moe8.gguf"
reference_flags llama8-flags "$TMP/llama8.gguf" \
  "Q3_K_M@--pure,--output-tensor-type,q8_0,--token-embedding-type,q4_1" \
  "Q5_K_M@--leave-output-tensor" \
  "Q4_0@--output-tensor-type,f16" \
  "IQ4_XS@--imatrix,llama8.imatrix.gguf,--include-weights,ffn_down,--include-weights,attn_v" \
  "Q4_K_M@--imatrix,llama8.imatrix.gguf,--exclude-weights,ffn_down" \
  "IQ2_XXS@--imatrix,llama8.imatrix.gguf,--exclude-weights,blk.3." \
  "Q2_K@--token-embedding-type,q2_K"
reference_flags q8-requantize "$FIX/llama-256.q8_0.gguf" "Q4_K_M@" "Q4_K_M@--allow-requantize" "Q8_0@" "COPY@"
echo "reference data in $OUT" >&2
