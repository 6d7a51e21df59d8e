#!/usr/bin/env python3
"""Reference fixtures for mnemo's tokenizer.json reader (tasks/hf_tokenizer_reader.cpp and _encoder.cpp, tests/test_hf_tokenizer.cpp).

Trains five small tokenizers with the Hugging Face `tokenizers` library itself (no network, no hub download), in
the shapes published checkpoints ship, and records that library's own encodings and decodings:

  gpt2        byte-level BPE: ByteLevel pre-tokenizer (GPT-2 regex) + ByteLevel decoder; merges as "a b" strings;
              <|endoftext|> special, a non-special added token and an lstrip/rstrip special token
  llama3      byte-level BPE: Split(Llama-3 regex, isolated) + ByteLevel(use_regex=false), ignore_merges=true,
              Llama-3's special-token names, TemplateProcessing adding <|begin_of_text|>
  qwen2       byte-level BPE: NFC normalizer + Split(Qwen2 regex: single digits) + ByteLevel(use_regex=false)
  llama2      SentencePiece-style BPE: normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer,
              byte_fallback with <0xNN> tokens, decoder Sequence[Replace, ByteFallback, Fuse, Strip]
  mistral     the same model behind a Metaspace(prepend_scheme="first", split=false) pre-tokenizer and no
              normalizer (the layout of non-legacy Llama/Mistral conversions)

Texts: a deterministic sample of every data file under the data directory (2 excerpts per file, at most 400
characters each) plus hand-written edge cases; ids are `encode(text, add_special_tokens=False)`, the decoding
`decode(ids, skip_special_tokens=True)`. Random id lists (special ids included) check decoding alone.

Rerun (writes tests/data/tokenizers/; the files are deterministic for one library version):
    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.23.3
    /tmp/tokvenv/bin/python scripts/make_tokenizer_fixtures.py [--data-dir ../shared/data]
Made with tokenizers 0.23.3.
"""
import argparse
import hashlib
import json
import os
import random
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

EDGE_CASES = [
    "", " ", "  ", "\t", "\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n ", "    \n   \n", "   leading spaces",
    "trailing spaces   ", "a  b   c    d", "Hello world", "hello\n\nworld\n", "tab\tseparated\tvalues\t",
    "日本語のテキストです。", "中文分词测试，标点符号！", "한국어 문장", "русский текст", "ελληνικά", "عربى نص",
    "😀👍🏽 family: 👨\u200d👩\u200d👧 flags 🇫🇷", "e\u0301 cafe\u0301 vs café", "A\u030a vs \u00c5 vs \u212b",
    "ﬁ ligature ｆｕｌｌ ｗｉｄｔｈ ①②", "12345678901234567890", "3.14159 1,000,000 2024-01-31 0x1F",
    "I'm you're they've she'll he'd it's DON'T WE'LL I'M", "'s at the start", "a'b'c's",
    "<|endoftext|>", "text <|endoftext|> in the middle<|endoftext|>end", "<|endoftext|><|endoftext|>",
    "partial <|endof and <|endoftext", "<s>text</s>", "</s><s>", "<s> spaced </s> out", "x<unk>y",
    "<|begin_of_text|>Hi<|eot_id|>", "<|im_start|>user\nhello<|im_end|>", "<|user|> asks <mask> here",
    "\u00a0nbsp\u2003em space\u3000ideographic", "zero\u200bwidth\u200cjoiners\u200d", "\ufffd replacement char",
    "control \x00\x01\x1f\x7f chars", "<0x41> literal byte-token text", "▁ literal metaspace ▁▁", "Ġ literal Ġ",
    "    four spaces indent\n        code();\n", "!!!???...---", "http://example.com/path?q=1&r=2#frag",
    "a" * 300, "ab" * 150, " " * 40, "\n" * 20, "The quick brown fox jumps over the lazy dog.",
    "MiXeD CaSe WoRdS", "naïve résumé coöperate", "\U0001d400\U0001d401 math bold", "\u0000",
    "\\xff\\xfe escaped-looking bytes", "tabs\t\t\tand   spaces \t \n mixed",
]


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.decode("utf-8", errors="replace")


def sample_texts(data_dir):
    """Two excerpts of every data file, chosen by a random generator seeded with the file's relative path."""
    texts = []
    for root, dirs, files in os.walk(data_dir):
        dirs.sort()
        for name in sorted(files):
            if name in ("SHA256SUMS",) or name.endswith(".zip") or name.endswith(".gz"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, data_dir)
            text = read_text(path)
            if not text:
                continue
            rng = random.Random(hashlib.sha256(rel.encode()).hexdigest())
            lines = text.splitlines(keepends=True)
            # one line, and a window of up to 4 consecutive lines (newlines and CRLF kept)
            i = rng.randrange(len(lines))
            j = rng.randrange(len(lines))
            for excerpt in (lines[i].rstrip("\r\n"), "".join(lines[j:j + 4])):
                if len(excerpt) > 400:
                    start = rng.randrange(len(excerpt) - 400)
                    excerpt = excerpt[start:start + 400]
                texts.append({"source": rel, "text": excerpt})
    return texts


def training_files(data_dir):
    gutenberg = os.path.join(data_dir, "corpus", "gutenberg")
    books = sorted(f for f in os.listdir(gutenberg) if f.startswith("pg"))[:6]
    return ([os.path.join(data_dir, "corpus", "tinyshakespeare.txt")] +
            [os.path.join(gutenberg, b) for b in books] +
            [os.path.join(data_dir, "eval", "wikitext-2-raw", "wiki.test.raw.lf"),
             os.path.join(data_dir, "eval", "piqa", "valid.jsonl")])


def byte_level_bpe(files, vocab_size, specials, pre_tokenizer, normalizer=None):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    return tok


def make_gpt2(files):
    tok = byte_level_bpe(files, 2000, ["<|endoftext|>"],
                         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.add_tokens([tokenizers.AddedToken("<|user|>", special=False)])
    tok.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    spec = json.loads(tok.to_str())
    # GPT-2's own file writes merges as "a b" strings (the library now writes [a, b] pairs)
    spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    return spec


def make_llama3(files):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = byte_level_bpe(files, 2500, specials, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", 0)])])
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True
    return spec


def make_qwen2(files):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = byte_level_bpe(files, 1800, specials, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        normalizer=normalizers.NFC())
    return json.loads(tok.to_str())


def make_sentencepiece_bpe(files, vocab_size):
    """A BPE trained on metaspace words, then laid out like a converted SentencePiece model: <unk> <s> </s>,
    the 256 <0xNN> byte tokens, then the trained pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False, limit_alphabet=300)
    tok.train(files, trainer)
    spec = json.loads(tok.to_str())
    trained = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces += [t for t, _ in trained if t not in ("<unk>", "<s>", "</s>")]
    spec["model"]["vocab"] = {t: i for i, t in enumerate(pieces)}
    spec["model"].update(byte_fallback=True, fuse_unk=True, unk_token="<unk>")
    spec["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])]
    spec["decoder"] = json.loads(decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]).__getstate__())
    spec["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]).__getstate__())
    return spec


def make_llama2(files):
    spec = make_sentencepiece_bpe(files, 2300)
    spec["normalizer"] = json.loads(normalizers.Sequence([
        normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]).__getstate__())
    spec["pre_tokenizer"] = None
    return spec


def make_mistral(files):
    spec = make_sentencepiece_bpe(files, 2300)
    spec["normalizer"] = None
    spec["pre_tokenizer"] = json.loads(pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first", split=False).__getstate__())
    return spec


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.path.join(here, "..", "..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "tokenizers"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    texts = sample_texts(args.data_dir) + [{"source": "edge", "text": t} for t in EDGE_CASES]
    with open(os.path.join(args.out, "texts.jsonl"), "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")

    files = training_files(args.data_dir)
    makers = {"gpt2": make_gpt2, "llama3": make_llama3, "qwen2": make_qwen2, "llama2": make_llama2,
              "mistral": make_mistral}
    for name, make in makers.items():
        spec = make(files)
        text = json.dumps(spec, ensure_ascii=False, indent=1)
        tok = Tokenizer.from_str(text)  # what the library itself reads back from the file
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)
        rng = random.Random(name)
        vocab = tok.get_vocab_size(with_added_tokens=True)
        with open(os.path.join(folder, "expected.jsonl"), "w", encoding="utf-8") as f:
            for i, t in enumerate(texts):
                ids = tok.encode(t["text"], add_special_tokens=False).ids
                record = {"i": i, "ids": ids}
                decoded = tok.decode(ids, skip_special_tokens=True)
                if decoded != t["text"]:
                    record["decoded"] = decoded
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            for _ in range(60):  # decoding alone: any ids, split UTF-8 sequences and special ids included
                ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
                f.write(json.dumps({"decode_ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)},
                                   ensure_ascii=False) + "\n")
        print(f"{name}: vocab {vocab}, {os.path.getsize(os.path.join(folder, 'tokenizer.json'))} B tokenizer.json, "
              f"{os.path.getsize(os.path.join(folder, 'expected.jsonl'))} B expected.jsonl", file=sys.stderr)
    print(f"texts: {len(texts)} ({os.path.getsize(os.path.join(args.out, 'texts.jsonl'))} B)", file=sys.stderr)


if __name__ == "__main__":
    main()
