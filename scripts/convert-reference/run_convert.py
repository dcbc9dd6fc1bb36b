"""Runs the pinned bundle's convert_hf_to_gguf.py under Debian's torch 1.13,
which predates the float8 and unsigned dtypes the converter names in its
tables: they get placeholder objects (no tensor of toy's tests has them).

usage: run_convert.py LLAMA_CPP_DIR ARGS...
"""
import runpy
import sys

import torch

for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32", "uint64"):
    if not hasattr(torch, name):
        setattr(torch, name, type(name, (), {})())

llama = sys.argv[1]
sys.path[:0] = [llama, llama + "/gguf-py"]

# The test checkpoints all bring a SentencePiece tokenizer.model; the
# architectures whose converter would read a byte-level BPE through
# transformers (GPT-2, OLMoE) take it as Qwen2's converter does.
from conversion.base import TextModel  # noqa: E402

TextModel._set_vocab_gpt2 = TextModel._set_vocab_sentencepiece

sys.argv = [llama + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
