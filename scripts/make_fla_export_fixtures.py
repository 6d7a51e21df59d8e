#!/usr/bin/env python3
"""Fixtures for `mnemo export --format hf` (tests/test_export.cpp, "export --format hf: mnemo's own models ..."):
for each family mnemo shares with flash-linear-attention, a tiny model trained by mnemo for a few steps, kept in
mnemo's own export format (mnemo.safetensors + mnemo.json), its `--format hf` folder loaded by fla's own code
(`import fla; AutoModelForCausalLM.from_pretrained`, no missing or unexpected keys), and fla's logits on fixed ids
with the sha256 of the folder's model.safetensors and its config.json in expected.json. The test exports the same
model again, requires the same bytes and config, and compares mnemo's logits with fla's.

fla runs on a CPU under Triton's interpreter, with the patches described in scripts/make_fla_models.py.

    /tmp/fla/bin/python scripts/make_fla_export_fixtures.py --mnemo build/mnemo --out tests/data/fla_export
"""
import argparse
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fla_models  # noqa: E402,F401  (TRITON_INTERPRET, the interpreter patches, the flash-attn stand-in)
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

TINY = ["--task", "mqar", "--set", "vocab_size=64", "--set", "seq_len=32", "--set", "steps=3", "--set", "d_model=32",
        "--set", "batch_size=2", "--set", "seed=3", "--quiet"]
FAMILIES = {  # mnemo family: extra --set keys
    "transformer": [],
    "swa": ["--set", "window=8"],
    "gla": [],
    "retnet": [],
    "deltanet": ["--set", "beta_bias=false"],
    "gated_deltanet": ["--set", "beta_bias=false"],
    "kda": [],
    "gated_deltaproduct": [],
    "fox": [],
    "mamba2": ["--set", "block_mlp=false", "--set", "mamba_head_dim=16", "--set", "mamba_d_state=16"],
    "rwkv7": ["--set", "n_heads=2", "--set", "n_layers=3"],
    "hgrn2": ["--set", "n_heads=2", "--set", "n_layers=3", "--set", "use_short_conv=true"],
    "mamba": ["--set", "block_mlp=false", "--set", "mamba_d_state=8"],
    "gsa": ["--set", "n_heads=2", "--set", "num_slots=8"],
}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"make_fla_export_fixtures: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def make(mnemo, family, out_dir, work):
    run_dir = os.path.join(work, family)
    run([mnemo, "train", "--model", family, *TINY, *FAMILIES[family], "--out", run_dir, "--db",
         os.path.join(work, "db.sqlite")])
    target = os.path.join(out_dir, family)
    tmp = target + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    run([mnemo, "export", "--checkpoint", run_dir, "--format", "safetensors", "--out", os.path.join(tmp, "mnemo")])
    hf = os.path.join(work, family + "_hf")
    run([mnemo, "export", "--checkpoint", os.path.join(tmp, "mnemo.safetensors"), "--format", "hf", "--out", hf])
    model, info = AutoModelForCausalLM.from_pretrained(hf, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"make_fla_export_fixtures: {family}: fla's loader reports {problems}")
    model.eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits.float()
    with open(os.path.join(hf, "model.safetensors"), "rb") as f:
        weights_sha = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(hf, "config.json")) as f:
        hf_config = json.load(f)
    with open(os.path.join(tmp, "expected.json"), "w") as f:
        json.dump({"reference": f"flash-linear-attention {md.version('flash-linear-attention')} "
                                f"{type(model).__name__}.from_pretrained of mnemo's export, eval, no grad, float32, "
                                "Triton interpreter",
                   "hf_model_sha256": weights_sha, "hf_config": hf_config,
                   "ids": ids.tolist(), "logits_shape": list(logits.shape),
                   "logits": [float(x) for x in logits.flatten().tolist()]}, f)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    print("wrote", target, type(model).__name__, "max |logit|", float(logits.abs().max()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mnemo", required=True, help="the mnemo binary")
    p.add_argument("--out", required=True)
    p.add_argument("--families", nargs="*", default=list(FAMILIES))
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for family in a.families:
            if family not in FAMILIES:
                sys.exit(f"make_fla_export_fixtures: unknown family {family}; known: {list(FAMILIES)}")
            make(os.path.abspath(a.mnemo), family, a.out, work)


if __name__ == "__main__":
    main()
