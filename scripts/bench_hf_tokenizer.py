#!/usr/bin/env python3
"""Reference for `mnemo tokenizer encode SPEC --file F --bench`: the Hugging Face `tokenizers` library encoding the
same file the same way, on one thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false): lines split at \\n
(without it), no special tokens added. Prints one JSON line with the fields mnemo prints, for each of
encode_batch(lines) and encode(line) per line; the best of `--repeats` passes (each pass starts from a fresh
tokenizer, so its word cache is cold as in a fresh mnemo process).

usage: /tmp/tokvenv/bin/python scripts/bench_hf_tokenizer.py tests/data/tokenizers/gpt2/tokenizer.json FILE
(the venv: python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers)
"""
import argparse
import json
import os
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402  (after the thread settings)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer", help="a tokenizer.json")
    ap.add_argument("file", help="text file, encoded line by line")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with open(args.file, "rb") as f:
        data = f.read()
    lines = data.decode("utf-8").split("\n")
    for mode in ("encode_batch", "encode"):
        best, tokens = None, 0
        for _ in range(args.repeats):
            tok = tokenizers.Tokenizer.from_file(args.tokenizer)
            start = time.perf_counter()
            if mode == "encode_batch":
                tokens = sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))
            else:
                tokens = sum(len(tok.encode(line, add_special_tokens=False).ids) for line in lines)
            seconds = time.perf_counter() - start
            best = seconds if best is None else min(best, seconds)
        print(json.dumps({"library": f"tokenizers {tokenizers.__version__}", "mode": mode, "file": args.file,
                          "bytes": len(data), "lines": len(lines), "tokens": tokens, "seconds": best,
                          "mb_per_s": len(data) / 1e6 / best, "tokens_per_s": tokens / best, "threads": 1}))


if __name__ == "__main__":
    main()
