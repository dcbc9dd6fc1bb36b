"""A GGUF file as JSON for toy's converter tests: every metadata key but
general.* (scalars as values; arrays of up to 16 elements as lists, longer
ones as their length and an FNV-1a 64 hash of the raw little-endian
elements, strings as an 8-byte length and their bytes) and every tensor
(type name, shape in ggml order, FNV-1a 64 of its bytes).
tests/test_convert.cpp describes toy's output the same way and compares.

usage: describe_gguf.py LLAMA_CPP_DIR FILE.gguf > FILE.json
"""
import json
import sys

import numpy as np

sys.path.insert(0, sys.argv[1] + "/gguf-py")
import gguf  # noqa: E402

FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv1a64(chunks):
    h = FNV_OFFSET
    for b in chunks:
        # vectorised over the bytes would need 64-bit wraparound in numpy; the
        # files are small, a plain loop is fast enough
        for x in b:
            h = ((h ^ x) * FNV_PRIME) & MASK
    return f"{h:016x}"


def main():
    r = gguf.GGUFReader(sys.argv[2])
    meta = {}
    for f in r.fields.values():
        if f.name.startswith("general.") or f.name.startswith("GGUF."):
            continue
        v = f.contents()
        if isinstance(v, list) and len(v) > 16:
            parts = []
            for idx in f.data:
                raw = bytes(np.asarray(f.parts[idx]).tobytes())
                if f.types[-1] == gguf.GGUFValueType.STRING:
                    parts.append(len(raw).to_bytes(8, "little") + raw)
                else:
                    parts.append(raw)
            v = {"n": len(v), "fnv1a64": fnv1a64(parts)}
        meta[f.name] = v
    tensors = {}
    for t in r.tensors:
        tensors[t.name] = [t.tensor_type.name, [int(x) for x in t.shape], fnv1a64([t.data.tobytes()])]
    json.dump({"metadata": meta, "tensors": tensors}, sys.stdout, indent=1, sort_keys=True)
    print()


main()
