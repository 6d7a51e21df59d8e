#!/usr/bin/env python3
"""Oracle fixtures for the kernel ops whose reference code is flash-linear-attention's (fla) PyTorch reference
functions, in the fixture format of `mnemo check-kernel` (docs/cli.md#check-kernel): float64 inputs, outputs computed
by fla's own function with its internal float32 casts widened to float64 (nothing else changed), a float32 run of the
unchanged function for the float32 tolerance, and cross-checks against fla's other reference forms.

    python3 -m venv /tmp/fla && /tmp/fla/bin/pip install flash-linear-attention einops
    /tmp/fla/bin/python scripts/make_fla_fixtures.py --out tests/data/kernels

The generated files are committed; fla itself is not (it is installed only to make them).
"""
import argparse
import importlib
import inspect
import json
import math
import os
import re
import sys
import types

import torch
import torch.nn.functional as F

CASES = [  # (name, seed, B, T, H, K, V, initial state, scale)
    ("seed1__T16", 1, 2, 16, 2, 16, 32, True, None),
    ("seed2__T64", 2, 2, 64, 2, 16, 32, False, 0.4),
    ("seed3__T100", 3, 2, 100, 2, 16, 16, True, 0.4),
]


def fla_version():
    import importlib.metadata as md
    return "flash-linear-attention " + md.version("flash-linear-attention")


def widened(module_name):
    """fla's module `module_name` re-executed with its float32 casts widened to float64."""
    mod = importlib.import_module(module_name)
    src = inspect.getsource(mod)
    for pattern, repl in [(r"\.to\(torch\.float\)", ".to(torch.float64)"), (r"torch\.float32", "torch.float64"),
                          (r"dtype=torch\.float([,)])", r"dtype=torch.float64\1"), (r"\.float\(\)", ".double()")]:
        src = re.sub(pattern, repl, src)
    wide = types.ModuleType(module_name + "_float64")
    exec(compile(src, mod.__file__ + " (float64)", "exec"), wide.__dict__)
    return mod, wide


def tensor_json(t):
    t = t.detach().to(torch.float64).contiguous()
    return {"shape": list(t.shape), "dtype": "float64", "data": [float(x) for x in t.flatten().tolist()]}


def tolerance(expected, fp32_err):
    m = float(expected.abs().max()) if expected.numel() else 0.0
    return {"compare": "|actual - expected| <= atol + rtol * |expected|, elementwise",
            "float64": {"rtol": 1e-9, "atol": max(1e-12, 1e-10 * m)},
            "float32": {"rtol": 1e-3, "atol": max(1e-5, 20 * fp32_err, 2e-5 * m)},
            "max_abs_expected": m, "float32_reference_max_abs_err": fp32_err}


def max_abs(a, b):
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())


def write(out_dir, op, case, seed, reference, call, layout, dims, shapes, params, inputs, outputs, fp32_outputs,
          crosscheck, notes):
    doc = {"op": op, "case": case, "seed": seed, "reference": reference, "call": call, "layout": layout,
           "dims": dims, "shapes": shapes, "params": params,
           "precision": "float64 inputs; outputs computed in float64 arithmetic by the reference function (its "
                        "internal float32 casts widened to float64, nothing else changed)",
           "inputs": {k: tensor_json(v) for k, v in inputs.items() if v is not None},
           "outputs": {k: tensor_json(v) for k, v in outputs.items()},
           "crosscheck": crosscheck,
           "tolerance_hint": {k: tolerance(v, max_abs(fp32_outputs[k], v)) for k, v in outputs.items()},
           "notes": notes}
    path = os.path.join(out_dir, f"{op}__{case}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)
    print("wrote", path)


def l2(x):
    return x / x.norm(dim=-1, keepdim=True)


def make_kda(out_dir):
    mod, wide = widened("fla.ops.kda.naive")
    ref = f"{fla_version()} fla/ops/kda/naive.py naive_recurrent_kda"
    for case, seed, B, T, H, K, V, with_state, scale in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        q, k, v = l2(rn(B, T, H, K)), l2(rn(B, T, H, K)), rn(B, T, H, V)
        g = F.logsigmoid(rn(B, T, H, K) + 2.0)  # per-channel log decay <= 0
        beta = torch.sigmoid(rn(B, T, H))
        h0 = rn(B, H, K, V) if with_state else None
        s = scale if scale is not None else K ** -0.5
        o, S = wide.naive_recurrent_kda(q, k, v, g, beta, scale=s, initial_state=h0, output_final_state=True)
        f32 = lambda x: None if x is None else x.float()
        o32, S32 = mod.naive_recurrent_kda(f32(q), f32(k), f32(v), f32(g), f32(beta), scale=s,
                                           initial_state=f32(h0), output_final_state=True)
        chunk = 16 if T % 16 == 0 else 20
        oc, Sc = wide.naive_chunk_kda(q, k, v, g, beta, scale=s, initial_state=h0, output_final_state=True,
                                      chunk_size=chunk)
        write(out_dir, "kda", case, seed, ref,
              "naive_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state, "
              "output_final_state=True)", "B,T,H,D", {"B": B, "T": T, "H": H, "K": K, "V": V},
              {"q": "[B,T,H,K]", "k": "[B,T,H,K]", "v": "[B,T,H,V]", "g": "[B,T,H,K]", "beta": "[B,T,H]",
               "initial_state": "[B,H,K,V]", "o": "[B,T,H,V]", "final_state": "[B,H,K,V]"},
              {"scale": s, "scale_is_default": scale is None, "qk_l2_normalized_before_call": True,
               "g_convention": "log decay per key channel, logsigmoid(N(0,1) + 2)", "beta_range": "(0, 1)"},
              {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": h0}, {"o": o, "final_state": S},
              {"o": o32, "final_state": S32},
              [{"reference": f"{fla_version()} fla/ops/kda/naive.py naive_chunk_kda", "how": f"chunk_size={chunk}",
                "max_abs_diff": {"o": max_abs(oc, o), "final_state": max_abs(Sc, S)}}], [])


def make_gated_delta_product(out_dir):
    mod, wide = widened("fla.ops.gated_delta_product.naive")
    _, gdr = widened("fla.ops.gated_delta_rule.naive")
    ref = f"{fla_version()} fla/ops/gated_delta_product/naive.py naive_recurrent_gated_delta_product"
    n = 2
    for case, seed, B, T, H, K, V, with_state, scale in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        q, k, v = l2(rn(B, T, H, K)), l2(rn(B, T * n, H, K)), rn(B, T * n, H, V)
        g = F.logsigmoid(rn(B, T, H) + 2.0)
        beta = 2.0 * torch.sigmoid(rn(B, T * n, H))  # allow_neg_eigval: (0, 2)
        h0 = rn(B, H, K, V) if with_state else None
        s = scale if scale is not None else K ** -0.5
        o, S = wide.naive_recurrent_gated_delta_product(q, k, v, g, beta, scale=s, initial_state=h0,
                                                        output_final_state=True, num_householder=n)
        f32 = lambda x: None if x is None else x.float()
        o32, S32 = mod.naive_recurrent_gated_delta_product(f32(q), f32(k), f32(v), f32(g), f32(beta), scale=s,
                                                           initial_state=f32(h0), output_final_state=True,
                                                           num_householder=n)
        # Cross-check: fla's gated delta rule over the T·n rows (decay on each token's first row, query on its last).
        q_rows = torch.zeros(B, T, n, H, K, dtype=torch.float64)
        q_rows[:, :, -1] = q
        g_rows = torch.zeros(B, T, n, H, dtype=torch.float64)
        g_rows[:, :, 0] = g
        orow, Srow = gdr.naive_recurrent_gated_delta_rule(q_rows.flatten(1, 2), k, v, beta, g_rows.flatten(1, 2),
                                                          scale=s, initial_state=h0, output_final_state=True)
        orow = orow.view(B, T, n, H, V)[:, :, -1]
        write(out_dir, "gated_delta_product", case, seed, ref,
              "naive_recurrent_gated_delta_product(q, k, v, g, beta, scale=scale, initial_state=initial_state, "
              "output_final_state=True, num_householder=2)", "B,T,H,D",
              {"B": B, "T": T, "H": H, "K": K, "V": V},
              {"q": "[B,T,H,K]", "k": "[B,T*n,H,K]", "v": "[B,T*n,H,V]", "g": "[B,T,H]", "beta": "[B,T*n,H]",
               "initial_state": "[B,H,K,V]", "o": "[B,T,H,V]", "final_state": "[B,H,K,V]"},
              {"scale": s, "scale_is_default": scale is None, "num_householder": n,
               "qk_l2_normalized_before_call": True, "g_convention": "log decay per token, logsigmoid(N(0,1) + 2)",
               "beta_range": "(0, 2) (allow_neg_eigval)"},
              {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": h0}, {"o": o, "final_state": S},
              {"o": o32, "final_state": S32},
              [{"reference": f"{fla_version()} fla/ops/gated_delta_rule/naive.py naive_recurrent_gated_delta_rule",
                "how": "over the T*n rows: g on each token's first row, q on its last, outputs of the last rows",
                "max_abs_diff": {"o": max_abs(orow, o), "final_state": max_abs(Srow, S)}}],
              ["row t*n + j of k, v, beta is step j of token t (fla's layout)"])


def make_forgetting_attn(out_dir):
    mod, wide = widened("fla.ops.forgetting_attn.naive")
    ref = f"{fla_version()} fla/ops/forgetting_attn/naive.py naive_forgetting_attn"
    for case, seed, B, T, H, K, V, with_state, scale in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        q, k, v = rn(B, T, H, K), rn(B, T, H, K), rn(B, T, H, K)
        g = F.logsigmoid(rn(B, T, H) + 2.0)  # log forget gates <= 0
        s = scale if scale is not None else K ** -0.5
        o = wide.naive_forgetting_attn(q, k, v, g, scale=s)
        o32 = mod.naive_forgetting_attn(q.float(), k.float(), v.float(), g.float(), scale=s)
        # Cross-check: plain softmax attention with the bias written out, in float64.
        c = g.cumsum(1)
        logits = torch.einsum("bqhd,bkhd->bhqk", q * s, k) + c.transpose(1, 2)[..., :, None] - c.transpose(1, 2)[..., None, :]
        logits = logits.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        o_sdpa = torch.einsum("bhqk,bkhd->bqhd", logits.softmax(-1), v)
        write(out_dir, "forgetting_attn", case, seed, ref, "naive_forgetting_attn(q, k, v, g, scale=scale)",
              "B,T,H,D", {"B": B, "T": T, "H": H, "K": K, "V": K},
              {"q": "[B,T,H,K]", "k": "[B,T,H,K]", "v": "[B,T,H,K]", "g": "[B,T,H]", "o": "[B,T,H,K]"},
              {"scale": s, "scale_is_default": scale is None,
               "g_convention": "log forget gate per token and head, logsigmoid(N(0,1) + 2)"},
              {"q": q, "k": k, "v": v, "g": g}, {"o": o}, {"o": o32},
              [{"reference": "softmax(scale q k^T + c_i - c_j, causal) v written out in float64 (torch.einsum)",
                "how": "c = cumsum(g) over time", "max_abs_diff": {"o": max_abs(o_sdpa, o)}}],
              ["no state: forgetting attention keeps every key (a KV cache)", "V = K in these cases"])


OPS = {"kda": make_kda, "gated_delta_product": make_gated_delta_product, "forgetting_attn": make_forgetting_attn}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the <op>__<case>.json files")
    p.add_argument("--ops", nargs="*", default=sorted(OPS), help="ops to make (default: all)")
    a = p.parse_args()
    unknown = [o for o in a.ops if o not in OPS]
    if unknown:
        sys.exit(f"make_fla_fixtures: unknown op(s) {unknown}; known: {sorted(OPS)}")
    os.makedirs(a.out, exist_ok=True)
    for op in a.ops:
        OPS[op](a.out)


if __name__ == "__main__":
    main()
