"""A stand-in for the parts of Hugging Face `transformers` that llama.cpp's
converter touches when it converts the checkpoints of toy's tests.

Debian has no python3-transformers and this machine reaches no PyPI, so the
reference GGUFs of tests/data/convert are made with the pinned bundle's own
convert_hf_to_gguf.py, torch and numpy from Debian, and this module:

- AutoConfig.from_pretrained raises, so the converter reads config.json
  itself (its own fallback path);
- AutoTokenizer.from_pretrained reads tokenizer.json, tokenizer_config.json
  and special_tokens_map.json and answers what gguf-py's LlamaHfVocab asks
  (vocab, added tokens, special tokens). It does not tokenize.
"""
import json
from pathlib import Path


class AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise OSError("transformers stand-in: read config.json instead")


class _Tokenizer:
    is_fast = True

    def __init__(self, path: Path):
        tj = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
        self._base = dict(tj["model"]["vocab"])
        self._added = {a["content"]: a["id"] for a in tj.get("added_tokens", [])}
        self.vocab_size = len(self._base)
        specials = []
        for f in ("special_tokens_map.json", "tokenizer_config.json"):
            p = path / f
            if not p.is_file():
                continue
            cfg = json.loads(p.read_text(encoding="utf-8"))
            for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
                v = cfg.get(key)
                if isinstance(v, dict):
                    v = v.get("content")
                if isinstance(v, str) and v not in specials:
                    specials.append(v)
            for v in cfg.get("additional_special_tokens", []) or []:
                v = v.get("content") if isinstance(v, dict) else v
                if isinstance(v, str) and v not in specials:
                    specials.append(v)
        self.all_special_tokens = specials
        vocab = self.get_vocab()
        self.all_special_ids = [vocab[t] for t in specials if t in vocab]

    def get_vocab(self):
        v = dict(self._base)
        v.update(self._added)
        return v

    @property
    def vocab(self):
        return self.get_vocab()

    def get_added_vocab(self):
        return dict(self._added)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, *args, **kwargs):
        return _Tokenizer(Path(path))
