"""Hugging Face `tokenizers`' BPE, for the byte-fallback tokenizer.json of
TinyStories-656K (normalizer: prepend U+2581, spaces to U+2581; no
pre-tokenizer; byte fallback; special added tokens split out first). The
ground truth toy's converted tokenizer is checked against; Debian has no
python3-tokenizers.

usage: hf_bpe.py TOKENIZER_JSON TEXTS_JSON  -> JSON list of id lists
"""
import json
import sys


def main():
    tj = json.load(open(sys.argv[1], encoding="utf-8"))
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in tj["model"]["merges"]]
    rank = {tuple(m): i for i, m in enumerate(merges)}
    specials = sorted((a["content"] for a in tj["added_tokens"]), key=len, reverse=True)

    def bpe(word):
        syms = list(word)
        while len(syms) > 1:
            best = min(range(len(syms) - 1), key=lambda i: rank.get((syms[i], syms[i + 1]), 1 << 60))
            if (syms[best], syms[best + 1]) not in rank:
                break
            syms[best:best + 2] = [syms[best] + syms[best + 1]]
        ids = []
        unk = vocab[tj["model"]["unk_token"]]
        for s in syms:
            if s in vocab:
                ids.append(vocab[s])
                continue
            byte_ids = [vocab.get(f"<0x{b:02X}>") for b in s.encode("utf-8")]
            if all(b is not None for b in byte_ids):
                ids += byte_ids
            elif not (tj["model"].get("fuse_unk") and ids and ids[-1] == unk):
                ids.append(unk)  # no byte token for it: <unk> (consecutive ones fused)
        return ids

    def encode(text):
        # split out special tokens, then normalize and merge each piece
        pieces, i = [], 0
        while i < len(text):
            for s in specials:
                if text.startswith(s, i):
                    pieces.append((True, s))
                    i += len(s)
                    break
            else:
                if pieces and not pieces[-1][0]:
                    pieces[-1] = (False, pieces[-1][1] + text[i])
                else:
                    pieces.append((False, text[i]))
                i += 1
        ids, first = [], True
        for special, p in pieces:
            if special:
                ids.append(vocab.get(p, next(a["id"] for a in tj["added_tokens"] if a["content"] == p)))
            else:
                norm = ("\u2581" if first else "") + p.replace(" ", "\u2581")
                ids += bpe(norm)
            first = False
        return ids

    json.dump([encode(t) for t in texts], sys.stdout)
    print()


main()
