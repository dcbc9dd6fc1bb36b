"""A GGUF file as JSON for toy's converter tests: every metadata key but
general.* (values; arrays longer than 16 as their length and a sha256 of
their elements) and every tensor (type name, shape in ggml order, sha256 of
its bytes). tests/test_convert.cpp computes the same description of toy's
output and compares.

usage: describe_gguf.py LLAMA_CPP_DIR FILE.gguf > FILE.json
"""
import hashlib
import json
import sys

sys.path.insert(0, sys.argv[1] + "/gguf-py")
import gguf  # noqa: E402


def element_bytes(v):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bool):
        return bytes([int(v)])
    if isinstance(v, float):
        return repr(float(v)).encode()
    return str(int(v)).encode()


def main():
    r = gguf.GGUFReader(sys.argv[2])
    meta = {}
    for f in r.fields.values():
        if f.name.startswith("general.") or f.name.startswith("GGUF."):
            continue
        v = f.contents()
        if isinstance(v, list) and len(v) > 16:
            h = hashlib.sha256()
            for e in v:
                b = element_bytes(e)
                h.update(len(b).to_bytes(8, "little") + b)
            v = {"n": len(v), "sha256": h.hexdigest()}
        meta[f.name] = v
    tensors = {}
    for t in r.tensors:
        tensors[t.name] = [t.tensor_type.name, [int(x) for x in t.shape], hashlib.sha256(t.data.tobytes()).hexdigest()]
    json.dump({"metadata": meta, "tensors": tensors}, sys.stdout, indent=1, sort_keys=True)
    print()


main()
