#!/usr/bin/env python3
"""Loads folders written by `mnemo export --format hf` with flash-linear-attention's own code
(`import fla; AutoModelForCausalLM.from_pretrained`), requires that every parameter was found under its name (no
missing or unexpected keys), and compares fla's logits with expected logits: an expected.json ({"ids", "logits",
"logits_shape"}, as scripts/make_fla_models.py writes). Prints one line per folder; exits 1 on any difference
above --rtol (relative to max |logit|).

    /tmp/fla/bin/python scripts/check_fla_export.py --export out/hf/gla --expected tests/data/fla_models/gla/expected.json

fla's kernels run on a CPU under Triton's interpreter, with the patches of scripts/make_fla_models.py.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fla_models  # noqa: E402,F401  (TRITON_INTERPRET, the interpreter patches, the flash-attn stand-in)
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def check(export_dir, expected_path, rtol):
    model, info = AutoModelForCausalLM.from_pretrained(export_dir, output_loading_info=True)
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    with open(expected_path) as f:
        expected = json.load(f)
    ids = torch.tensor(expected["ids"])
    with torch.no_grad():
        logits = model(ids).logits.float()
    want = torch.tensor(expected["logits"]).view(expected["logits_shape"])
    diff = float((logits - want).abs().max())
    scale = float(want.abs().max())
    ok = not problems and diff <= rtol * scale
    print(f"{export_dir}: {type(model).__name__}, max |fla - expected| = {diff:.3g} (max |logit| {scale:.3g})"
          + (f", loading: {problems}" if problems else "") + ("" if ok else "  FAILED"))
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--export", nargs="+", required=True, help="folders written by mnemo export --format hf")
    p.add_argument("--expected", nargs="+", required=True, help="an expected.json per folder, in the same order")
    p.add_argument("--rtol", type=float, default=1e-4)
    a = p.parse_args()
    if len(a.export) != len(a.expected):
        sys.exit("check_fla_export: give one --expected file per --export folder")
    results = [check(d, e, a.rtol) for d, e in zip(a.export, a.expected)]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
