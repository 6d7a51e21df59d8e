#!/usr/bin/env python3
"""Oracle fixtures for the kernel ops whose reference code is flash-linear-attention's (fla) PyTorch reference
functions, in the fixture format of `mnemo check-kernel` (docs/cli.md#check-kernel): float64 inputs, outputs computed
by fla's own function with its internal float32 casts widened to float64 (nothing else changed), a float32 run of the
unchanged function for the float32 tolerance, and cross-checks against fla's other reference forms.

    python3 -m venv /tmp/fla && /tmp/fla/bin/pip install flash-linear-attention einops
    /tmp/fla/bin/python scripts/make_fla_fixtures.py --out tests/data/kernels

The generated files are committed; fla itself is not (it is installed only to make them). The op log_linear_gdn has
no fla reference: its fixtures come from the Log-Linear Attention paper's reference code (arXiv 2506.04761,
github.com/HanGuo97/log-linear-attention), read from a checkout given as --hattention DIR. The op mamba3_mimo has no fla
reference either (fla's layer calls state-spaces/mamba's TileLang kernel): its oracle is mamba_ssm's own PyTorch
reference of the MIMO decode step, read from an unpacked mamba-ssm sdist named by $MAMBA_SSM_SRC.
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


PATH_CASES = [  # (name, seed, B, T, HQ, H, K, V, scale, chunk of the reference's blocked form)
    ("seed1__T16", 1, 2, 16, 4, 2, 16, 32, None, 8),
    ("seed2__T64", 2, 2, 64, 2, 2, 16, 16, 0.4, 16),
    ("seed3__T100", 3, 2, 100, 4, 2, 16, 16, 0.4, 32),
]


def make_path_attn(out_dir):
    mod, wide = widened("fla.ops.path_attn.naive")
    ref = f"{fla_version()} fla/ops/path_attn/naive.py naive_path_attn"
    for case, seed, B, T, HQ, H, K, V, scale, chunk in PATH_CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        q, k, v = rn(B, T, HQ, K), rn(B, T, H, K), rn(B, T, H, V)
        w = l2(rn(B, T, H, K))
        beta = 2.0 * torch.sigmoid(rn(B, T, H))  # in (0, 2), as the layer makes it
        g = F.logsigmoid(rn(B, T, HQ) + 2.0)  # log forget gates <= 0
        s = scale if scale is not None else K ** -0.5
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # the reference allocates its logits with the default dtype
        try:
            o = wide.naive_path_attn(q, k, v, w, beta, g, scale=s, chunk_size=chunk)
        finally:
            torch.set_default_dtype(default)
        o32 = mod.naive_path_attn(q.float(), k.float(), v.float(), w.float(), beta.float(), g.float(), scale=s,
                                  chunk_size=chunk)
        # Cross-check: the Householder products multiplied out one position at a time, in float64.
        G = HQ // H
        c = g.cumsum(1)
        o_loop = torch.zeros(B, T, HQ, V, dtype=torch.float64)
        for b in range(B):
            for hq in range(HQ):
                h = hq // G
                for i in range(T):
                    x = q[b, i, hq].clone()  # q_i^T H_i ... H_{j+1}, built up from j = i downwards
                    logits = torch.empty(i + 1, dtype=torch.float64)
                    for j in range(i, -1, -1):
                        logits[j] = x @ k[b, j, h] + c[b, i, hq] - c[b, j, hq]
                        x = x - beta[b, j, h] * (x @ w[b, j, h]) * w[b, j, h]
                    o_loop[b, i, hq] = (logits * s).softmax(0) @ v[b, :i + 1, h]
        write(out_dir, "path_attn", case, seed, ref,
              f"naive_path_attn(q, k, v, w, beta, g, scale=scale, chunk_size={chunk})",
              "B,T,H,D", {"B": B, "T": T, "HQ": HQ, "H": H, "K": K, "V": V},
              {"q": "[B,T,HQ,K]", "k": "[B,T,H,K]", "v": "[B,T,H,V]", "w": "[B,T,H,K]", "beta": "[B,T,H]",
               "g": "[B,T,HQ]", "o": "[B,T,HQ,V]"},
              {"scale": s, "scale_is_default": scale is None,
               "g_convention": "log forget gate per token and query head, logsigmoid(N(0,1) + 2); the scale "
                               "multiplies the gate term too",
               "w_convention": "l2-normalised rows; beta = 2 sigmoid(N(0,1))"},
              {"q": q, "k": k, "v": v, "w": w, "beta": beta, "g": g}, {"o": o}, {"o": o32},
              [{"reference": "softmax(scale (q_i^T H_i ... H_{j+1} k_j + c_i - c_j), causal) v with "
                             "H_t = I - beta_t w_t w_t^T applied one position at a time in float64",
                "how": "c = cumsum(g) over time; query head h uses key head h // (HQ / H)",
                "max_abs_diff": {"o": max_abs(o_loop, o)}}],
              ["no state: PaTH attention keeps every (transformed) key, a KV cache",
               "grouped queries: HQ query heads share H key/value heads"])


MESA_CASES = [  # (name, seed, B, T, H, K, initial states, chunk of the reference's chunked CG); V = K
    ("seed1__T16", 1, 2, 16, 2, 16, True, 16),
    ("seed2__T64", 2, 2, 64, 2, 16, False, 16),
    ("seed3__T100", 3, 2, 100, 2, 16, True, 20),
]


def make_mesa_net(out_dir):
    mod, wide = widened("fla.ops.mesa_net.naive")
    ref = f"{fla_version()} fla/ops/mesa_net/naive.py naive_mesa_net_CG"
    steps = 30
    for case, seed, B, T, H, K, with_state, chunk in MESA_CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        q, k, v = l2(rn(B, T, H, K)), l2(rn(B, T, H, K)), rn(B, T, H, K)
        g = F.logsigmoid(rn(B, T, H) + 2.0)
        beta = torch.sigmoid(rn(B, T, H))
        lamb = F.softplus(rn(H, K)) + 0.25
        h_kk = h_kv = None
        if with_state:  # a positive semi-definite H_0 (a sum of outer products of unit keys), a normal G_0
            keys = l2(rn(B, H, 3 * K, K))
            h_kk, h_kv = keys.transpose(-1, -2) @ keys, rn(B, H, K, K)
        # The reference allocates its states with torch.zeros at the default dtype: float64 for the widened run.
        torch.set_default_dtype(torch.float64)
        try:
            o, Hk, Gv = wide.naive_mesa_net_CG(q, k, v, g, lamb, beta, chunk, max_CG_iteration=steps,
                                               h_kk_init=h_kk, h_kv_init=h_kv)
            o_exact, _, _ = wide.naive_mesa_net_exact(q, k, v, g, lamb, beta, h_kk_init=h_kk, h_kv_init=h_kv)
        finally:
            torch.set_default_dtype(torch.float32)
        f32 = lambda x: None if x is None else x.float()
        o32, Hk32, Gv32 = mod.naive_mesa_net_CG(f32(q), f32(k), f32(v), f32(g), f32(lamb), f32(beta), chunk,
                                                max_CG_iteration=steps, h_kk_init=f32(h_kk), h_kv_init=f32(h_kv))
        write(out_dir, "mesa_net", case, seed, ref,
              f"naive_mesa_net_CG(q, k, v, g, lamb, beta, chunk_size={chunk}, max_CG_iteration=max_cg_steps, "
              "h_kk_init=h_kk_init, h_kv_init=h_kv_init)", "B,T,H,D", {"B": B, "T": T, "H": H, "K": K, "V": K},
              {"q": "[B,T,H,K]", "k": "[B,T,H,K]", "v": "[B,T,H,V]", "g": "[B,T,H]", "beta": "[B,T,H]",
               "lamb": "[H,K]", "h_kk_init": "[B,H,K,K]", "h_kv_init": "[B,H,K,V]", "o": "[B,T,H,V]",
               "h_kk": "[B,H,K,K]", "h_kv": "[B,H,K,V]"},
              {"max_cg_steps": steps, "qk_l2_normalized_before_call": True,
               "g_convention": "scalar log decay per head, logsigmoid(N(0,1) + 2)", "beta_range": "(0, 1)",
               "lamb": "softplus(N(0,1)) + 0.25 per head and key channel"},
              {"q": q, "k": k, "v": v, "g": g, "beta": beta, "lamb": lamb, "h_kk_init": h_kk, "h_kv_init": h_kv},
              {"o": o, "h_kk": Hk, "h_kv": Gv}, {"o": o32, "h_kk": Hk32, "h_kv": Gv32},
              [{"reference": f"{fla_version()} fla/ops/mesa_net/naive.py naive_mesa_net_exact",
                "how": "the exact solve (torch.linalg.solve) instead of CG; differs by the CG's 1e-5 "
                       "denominator terms, which stall it near a residual of 1e-5",
                "max_abs_diff": {"o": max_abs(o_exact, o)}}],
              ["the CG starts from x = 0 for every token, as the training kernel does (fla's decoding step starts "
               "from q / (diag(H) + lamb) instead)", "V = K: the reference allocates [K, K] value states"])

def make_rwkv7(out_dir):
    mod, wide = widened("fla.ops.generalized_delta_rule.dplr.naive")
    ref = f"{fla_version()} fla/ops/generalized_delta_rule/dplr/naive.py dplr_recurrence"
    for case, seed, B, T, H, K, V, with_state, _ in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        # RWKV-7's layer: a = -kappa, b = kappa * a_in (kappa unit per head), log decay w = -e^{-1/2} sigmoid(.)
        r, k, v = rn(B, T, H, K), 0.5 * rn(B, T, H, K), rn(B, T, H, V)
        w = -math.exp(-0.5) * torch.sigmoid(rn(B, T, H, K))
        kappa = l2(rn(B, T, H, K))
        a, b = -kappa, kappa * torch.sigmoid(rn(B, T, H, K))
        h0 = rn(B, H, K, V) if with_state else None
        heads_first = lambda x: x.transpose(1, 2).contiguous()
        args = [heads_first(x) for x in (r, k, v, a, b, w)]
        o, S = wide.dplr_recurrence(*args, initial_state=h0, output_final_state=True)
        f32 = lambda x: None if x is None else x.float()
        o32, S32 = mod.dplr_recurrence(*[f32(x) for x in args], initial_state=f32(h0), output_final_state=True)
        chunk = 16 if T % 16 == 0 else 20
        torch.set_default_dtype(torch.float64)  # the chunked reference allocates its matrices at the default dtype
        try:
            oc, Sc = wide.dplr_chunkwise(*args, initial_state=h0, output_final_state=True, chunk_size=chunk)
        finally:
            torch.set_default_dtype(torch.float32)
        o, o32, oc = (x.transpose(1, 2) for x in (o, o32, oc))
        write(out_dir, "rwkv7", case, seed, ref,
              "dplr_recurrence(q=r, k=k, v=v, alpha=a, beta=b, gk=w, initial_state=initial_state, "
              "output_final_state=True) with every [B,T,H,D] tensor transposed to fla's [B,H,T,D]", "B,T,H,D",
              {"B": B, "T": T, "H": H, "K": K, "V": V},
              {"r": "[B,T,H,K]", "w": "[B,T,H,K]", "k": "[B,T,H,K]", "v": "[B,T,H,V]", "a": "[B,T,H,K]",
               "b": "[B,T,H,K]", "initial_state": "[B,H,K,V]", "o": "[B,T,H,V]", "final_state": "[B,H,K,V]"},
              {"scale": K ** -0.5, "scale_is_default": True,
               "w_convention": "log decay per key channel, -exp(-1/2) sigmoid(N(0,1))",
               "a_b_convention": "a = -kappa, b = kappa * sigmoid(N(0,1)), kappa l2-normalised per head"},
              {"r": r, "w": w, "k": k, "v": v, "a": a, "b": b, "initial_state": h0}, {"o": o, "final_state": S},
              {"o": o32, "final_state": S32},
              [{"reference": f"{fla_version()} fla/ops/generalized_delta_rule/dplr/naive.py dplr_chunkwise",
                "how": f"chunk_size={chunk}", "max_abs_diff": {"o": max_abs(oc, o), "final_state": max_abs(Sc, S)}}],
              ["the reference's scale is fixed at K^-1/2"])


def mamba3_siso_steps(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D=None, z=None, state=None):
    """The Mamba-3 SISO recurrence (arXiv 2603.15569 §3) one token at a time, in the inputs' dtype:
    phi_t = phi_{t-1} + pi tanh(angles_t) dt_t (mod 2 pi); q~, k~ = the biased q, k with channel pairs (2i, 2i+1),
    i < R, turned by phi_t; h_t = e^{adt_t} h_{t-1} + e^{adt_t} (1 - lam_t) dt_t v_{t-1} k~_{t-1}^T
    + lam_t dt_t v_t k~_t^T with lam = sigmoid(trap); y_t = (h_t q~_t + D v_t) silu(z_t)."""
    B, T, H, N = q.shape
    P, R = v.shape[-1], angles.shape[-1]
    lam, theta = torch.sigmoid(trap), math.pi * torch.tanh(angles)
    qb, kb = q + q_bias, k + k_bias
    if state is None:
        h, kp, vp, phi = (torch.zeros(s, dtype=q.dtype) for s in ((B, H, P, N), (B, H, N), (B, H, P), (B, H, R)))
    else:
        h, kp, vp, phi = state

    def turn(x, c, s):
        x = x.clone()
        x0, x1 = x[..., 0:2 * R:2].clone(), x[..., 1:2 * R:2].clone()
        x[..., 0:2 * R:2], x[..., 1:2 * R:2] = x0 * c - x1 * s, x0 * s + x1 * c
        return x

    ys = []
    for t in range(T):
        phi = phi + theta[:, t] * dt[:, t, :, None]
        phi = phi - 2 * math.pi * torch.floor(phi / (2 * math.pi))
        c, s = torch.cos(phi), torch.sin(phi)
        qt, kt = turn(qb[:, t], c, s), turn(kb[:, t], c, s)
        alpha = torch.exp(adt[:, t])[..., None, None]
        beta = alpha * ((1 - lam[:, t]) * dt[:, t])[..., None, None]
        gamma = (lam[:, t] * dt[:, t])[..., None, None]
        h = alpha * h + beta * vp[..., :, None] * kp[..., None, :] + gamma * v[:, t, :, :, None] * kt[..., None, :]
        y = torch.einsum("bhpn,bhn->bhp", h, qt)
        if D is not None:
            y = y + D[:, None] * v[:, t]
        if z is not None:
            y = y * F.silu(z[:, t])
        ys.append(y)
        kp, vp = kt, v[:, t]
    return torch.stack(ys, 1), h, kp, vp, phi


def mamba3_siso_quadratic(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, state):
    """The same map as one T x T matrix per head: y_t = sum_{s<=t} e^{adt_{s+1} + .. + adt_t} (q~_t . k~_s)
    (lam_s dt_s + [s < t] (1 - lam_{s+1}) dt_{s+1}) v_s + e^{adt_0 + .. + adt_t} (h_0 + (1 - lam_0) dt_0 v_-1 k~_-1^T) q~_t."""
    B, T, H, N = q.shape
    R = angles.shape[-1]
    lam, theta = torch.sigmoid(trap), math.pi * torch.tanh(angles)
    phi = torch.cumsum(theta * dt[..., None], 1) + (state[3][:, None] if state is not None else 0)
    c, s = torch.cos(phi), torch.sin(phi)

    def turn(x):
        x = x.clone()
        x0, x1 = x[..., 0:2 * R:2].clone(), x[..., 1:2 * R:2].clone()
        x[..., 0:2 * R:2], x[..., 1:2 * R:2] = x0 * c - x1 * s, x0 * s + x1 * c
        return x

    qt, kt = turn(q + q_bias), turn(k + k_bias)
    b = (1 - lam) * dt
    b_next = torch.cat([b[:, 1:], torch.zeros_like(b[:, :1])], 1)
    cum = torch.cumsum(adt, 1)  # [B, T, H]
    decay = torch.exp(cum[:, :, None] - cum[:, None, :])  # [B, t, s, H]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, :, :, None]
    weight = torch.where(causal, decay, torch.zeros_like(decay))
    eye = torch.eye(T, dtype=q.dtype)[None, :, :, None]
    w_s = (lam * dt + b_next)[:, None, :, :] - eye * b_next[:, None, :, :]
    scores = torch.einsum("bthn,bshn->btsh", qt, kt) * weight * w_s
    y = torch.einsum("btsh,bshp->bthp", scores, v)
    if state is not None:
        h0 = state[0] + b[:, 0, :, None, None] * state[2][..., :, None] * state[1][..., None, :]
        y = y + torch.exp(cum)[..., None] * torch.einsum("bhpn,bthn->bthp", h0, qt)
    return (y + D[:, None] * v) * F.silu(z)


def mamba_ssm_step_references():
    """mamba_ssm's own PyTorch references of its Mamba-3 MIMO decode step, read from the package's source (its
    TileLang / CuTe modules import only on a GPU machine): apply_rotary_qk_inference_reference
    (ops/triton/mamba3/mamba3_mimo_rotary_step.py) and selective_state_update_fused_ref_v2
    (ops/cute/mamba3/mamba3_step_fn.py). $MAMBA_SSM_SRC names an unpacked sdist:
        pip download --no-deps --no-binary :all: --no-build-isolation mamba-ssm==2.3.2.post1 && tar xzf mamba_ssm-*.tar.gz"""
    import ast
    import typing
    src = os.environ.get("MAMBA_SSM_SRC")
    if not src:
        sys.exit("make_fla_fixtures: the Mamba-3 MIMO oracle needs MAMBA_SSM_SRC (an unpacked mamba-ssm 2.3.2.post1 sdist)")
    ns = {"torch": torch, "math": math, "Optional": typing.Optional}
    for rel, name in (("mamba_ssm/ops/triton/mamba3/mamba3_mimo_rotary_step.py", "apply_rotary_qk_inference_reference"),
                      ("mamba_ssm/ops/cute/mamba3/mamba3_step_fn.py", "selective_state_update_fused_ref_v2")):
        with open(os.path.join(src, rel)) as f:
            tree = ast.parse(f.read())
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        exec(compile(ast.Module(body=[fn], type_ignores=[]), rel, "exec"), ns)
    return ns["apply_rotary_qk_inference_reference"], ns["selective_state_update_fused_ref_v2"]


def mamba3_mimo_steps(q, k, v, adt, dt, trap, q_bias, k_bias, angles, mimo_x, mimo_z, mimo_o, D, z, state=None):
    """The Mamba-3 MIMO layer core as mamba_ssm decodes it, one token at a time, in the inputs' dtype: its
    apply_rotary_qk_inference_reference (the biased q and k turned with rotate_pairwise=False, the channel pairs
    (i, i + N/2) of its MIMO kernels) then its selective_state_update_fused_ref_v2 (state update, per-rank read, D skip,
    gate, down projection), as fla's Mamba3.step calls them. q, k [B, T, R, H, N] before the bias; v, z [B, T, H, P];
    adt, dt, trap [B, T, H] (trap before the sigmoid); angles [B, T, H, A] before tanh; q_bias, k_bias [H, R, N];
    mimo_x, mimo_z, mimo_o [H, R, P] (mimo_o None: the per-rank outputs [B, T, R, H, P]); state = (h [B, H, P, N],
    k [B, R, H, N] (the last rotated key), x [B, H, P] (the last input), angle [B, H, A]).
    Returns y, h, k, x, angle."""
    rotary, step = mamba_ssm_step_references()
    B, T, R, H, N = q.shape
    P, A = v.shape[-1], angles.shape[-1]
    if state is None:
        h, kp, xp, phi = (torch.zeros(s, dtype=q.dtype) for s in ((B, H, P, N), (B, R, H, N), (B, H, P), (B, H, A)))
    else:
        h, kp, xp, phi = state
    bias_q, bias_k = q_bias.permute(1, 0, 2), k_bias.permute(1, 0, 2)  # [R, H, N]
    xpj, zpj = mimo_x.permute(1, 0, 2), mimo_z.permute(1, 0, 2)
    opj = None if mimo_o is None else mimo_o.permute(1, 0, 2)
    ys = []
    for t in range(T):
        qt, kt, phi = rotary(q[:, t], k[:, t], phi, angles[:, t], dt[:, t], bias_q, bias_k, conjugate=False,
                             rotate_pairwise=False)
        y, h = step(h, adt[:, t] / dt[:, t], kt, qt, xpj, v[:, t], zpj, None if z is None else z[:, t], dt[:, t],
                    kp, xp, torch.sigmoid(trap[:, t]), D, opj, compute_dtype=q.dtype)
        kp, xp = kt, v[:, t]
        ys.append(y)
    return torch.stack(ys, 1), h, kp, xp, phi


def make_mamba3_mimo(out_dir):
    ref = "mamba-ssm 2.3.2.post1's own PyTorch references of its Mamba-3 MIMO decode step " \
          "(apply_rotary_qk_inference_reference, rotate_pairwise=False; selective_state_update_fused_ref_v2) taken " \
          "token by token in float64: scripts/make_fla_fixtures.py mamba3_mimo_steps"
    for case, seed, B, T, H, K, V, with_state, _ in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        R, A = 2, K // 4  # rank 2; fla's default rope_fraction 0.5: K/4 angles
        rms = lambda x: x / x.square().mean(-1, keepdim=True).add(1e-5).sqrt()
        q, k, v = rms(rn(B, T, R, H, K)), rms(rn(B, T, R, H, K)), rn(B, T, H, V)
        dt = F.softplus(rn(B, T, H) - 1.0)
        adt = -F.softplus(rn(B, T, H)).clamp(min=1e-4) * dt
        trap, angles = rn(B, T, H), rn(B, T, H, A)
        q_bias, k_bias = 1 + 0.2 * rn(H, R, K), 1 + 0.2 * rn(H, R, K)
        mimo_x, mimo_z, mimo_o = 0.5 + 0.2 * rn(H, R, V), 1 + 0.2 * rn(H, R, V), 0.5 + 0.2 * rn(H, R, V)
        D, z = rn(H), rn(B, T, H, V)
        state = (rn(B, H, V, K), rn(B, R, H, K), rn(B, H, V), 2 * math.pi * torch.rand(B, H, A, generator=g_,
                 dtype=torch.float64)) if with_state else None
        inputs = {"q": q, "k": k, "v": v, "adt": adt, "dt": dt, "trap": trap, "q_bias": q_bias, "k_bias": k_bias,
                  "angles": angles, "mimo_x": mimo_x, "mimo_z": mimo_z, "mimo_o": mimo_o, "D": D, "z": z}
        if with_state:
            inputs.update(initial_h=state[0], initial_k=state[1], initial_v=state[2], initial_angle=state[3])
        names = ["o", "final_state", "final_k", "final_v", "final_angle"]
        args = (q, k, v, adt, dt, trap, q_bias, k_bias, angles, mimo_x, mimo_z, mimo_o, D, z)
        outs = dict(zip(names, mamba3_mimo_steps(*args, state=state)))
        f32 = lambda x: x.float()
        outs32 = dict(zip(names, mamba3_mimo_steps(*[f32(x) for x in args],
                                                   state=None if state is None else tuple(f32(x) for x in state))))
        # The final angle as the sum of the turns, wrapped into [0, 2 pi) as mnemo keeps it (the reference leaves it
        # unwrapped; cos and sin are the same).
        for o in (outs, outs32):
            o["final_angle"] = o["final_angle"] - 2 * math.pi * torch.floor(o["final_angle"] / (2 * math.pi))
        write(out_dir, "mamba3_mimo", case, seed, ref,
              "mamba3_mimo_steps(q, k, v, adt, dt, trap, q_bias, k_bias, angles, mimo_x, mimo_z, mimo_o, D, z, "
              "state=(initial_h, initial_k, initial_v, initial_angle))", "B,T,R,H,D",
              {"B": B, "T": T, "R": R, "H": H, "K": K, "V": V, "A": A},
              {"q": "[B,T,R,H,K]", "k": "[B,T,R,H,K]", "v": "[B,T,H,V]", "adt": "[B,T,H]", "dt": "[B,T,H]",
               "trap": "[B,T,H]", "q_bias": "[H,R,K]", "k_bias": "[H,R,K]", "angles": "[B,T,H,A]",
               "mimo_x": "[H,R,V]", "mimo_z": "[H,R,V]", "mimo_o": "[H,R,V]", "D": "[H]", "z": "[B,T,H,V]",
               "initial_h": "[B,H,V,K]", "initial_k": "[B,R,H,K]", "initial_v": "[B,H,V]", "initial_angle": "[B,H,A]",
               "o": "[B,T,H,V]", "final_state": "[B,H,V,K]", "final_k": "[B,R,H,K]", "final_v": "[B,H,V]",
               "final_angle": "[B,H,A]"},
              {"trap": "pre-sigmoid (lambda = sigmoid(trap))", "angles": "pre-tanh (theta = pi tanh(angles))",
               "adt": "A dt with A = -softplus(N(0,1)) clamped <= -1e-4", "dt": "softplus(N(0,1) - 1)",
               "qk_rms_normalized_before_call": True, "rotation": "channel pairs (i, i + K/2), i < A"},
              inputs, outs, outs32, [],
              ["fla's Mamba3 layer with is_mimo runs only mamba_ssm's TileLang kernels: the oracle is mamba_ssm's "
               "own PyTorch reference of its decode step (the kernels' tests compare against it)",
               "final_v is the last token's input x (mamba_ssm's x_state), final_k its rotated keys"])


def make_mamba3(out_dir):
    # fla 0.6.0's Mamba3 layer (fla/layers/mamba3.py) runs only mamba_ssm's CUDA kernels and has no PyTorch reference
    # path, so the oracle is the recurrence written out above, cross-checked against its quadratic form.
    ref = "the Mamba-3 SISO recurrence (arXiv 2603.15569 §3) in float64, scripts/make_fla_fixtures.py " \
          "mamba3_siso_steps (the layer core of fla's Mamba3 / mamba_ssm's mamba3_siso_combined)"
    for case, seed, B, T, H, K, V, with_state, _ in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        R = K // 4  # fla's default rope_fraction 0.5: K/2 rotated channels, K/4 pairs
        rms = lambda x: x / x.square().mean(-1, keepdim=True).add(1e-5).sqrt()
        q, k, v = rms(rn(B, T, H, K)), rms(rn(B, T, H, K)), rn(B, T, H, V)
        dt = F.softplus(rn(B, T, H) - 1.0)
        adt = -F.softplus(rn(B, T, H)).clamp(min=1e-4) * dt
        trap, angles = rn(B, T, H), rn(B, T, H, R)
        q_bias, k_bias = 1 + 0.2 * rn(H, K), 1 + 0.2 * rn(H, K)
        D, z = rn(H), rn(B, T, H, V)
        state = (rn(B, H, V, K), rn(B, H, K), rn(B, H, V), 2 * math.pi * torch.rand(B, H, R, generator=g_,
                 dtype=torch.float64)) if with_state else None
        inputs = {"q": q, "k": k, "v": v, "adt": adt, "dt": dt, "trap": trap, "q_bias": q_bias, "k_bias": k_bias,
                  "angles": angles, "D": D, "z": z}
        if with_state:
            inputs.update(initial_h=state[0], initial_k=state[1], initial_v=state[2], initial_angle=state[3])
        names = ["o", "final_state", "final_k", "final_v", "final_angle"]
        outs = dict(zip(names, mamba3_siso_steps(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, state)))
        f32 = lambda x: x.float()
        outs32 = dict(zip(names, mamba3_siso_steps(*[f32(x) for x in (q, k, v, adt, dt, trap, q_bias, k_bias,
                                                                        angles, D, z)],
                                                   state=None if state is None else tuple(f32(x) for x in state))))
        quad = mamba3_siso_quadratic(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, state)
        write(out_dir, "mamba3_siso", case, seed, ref,
              "mamba3_siso_steps(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, state=(initial_h, "
              "initial_k, initial_v, initial_angle))", "B,T,H,D", {"B": B, "T": T, "H": H, "K": K, "V": V, "R": R},
              {"q": "[B,T,H,K]", "k": "[B,T,H,K]", "v": "[B,T,H,V]", "adt": "[B,T,H]", "dt": "[B,T,H]",
               "trap": "[B,T,H]", "q_bias": "[H,K]", "k_bias": "[H,K]", "angles": "[B,T,H,R]", "D": "[H]",
               "z": "[B,T,H,V]", "initial_h": "[B,H,V,K]", "initial_k": "[B,H,K]", "initial_v": "[B,H,V]",
               "initial_angle": "[B,H,R]", "o": "[B,T,H,V]", "final_state": "[B,H,V,K]", "final_k": "[B,H,K]",
               "final_v": "[B,H,V]", "final_angle": "[B,H,R]"},
              {"trap": "pre-sigmoid (lambda = sigmoid(trap))", "angles": "pre-tanh (theta = pi tanh(angles))",
               "adt": "A dt with A = -softplus(N(0,1)) clamped <= -1e-4", "dt": "softplus(N(0,1) - 1)",
               "qk_rms_normalized_before_call": True},
              inputs, outs, outs32,
              [{"reference": "the quadratic (one T x T matrix per head) form of the same map, "
                             "scripts/make_fla_fixtures.py mamba3_siso_quadratic",
                "how": "float64", "max_abs_diff": {"o": max_abs(quad, outs["o"])}}],
              ["fla's Mamba3 layer has no PyTorch reference path (it needs mamba_ssm's CUDA kernels): the oracle "
               "is this script's own token-by-token recurrence"])

def log_linear_levels(T):
    """Levels giving every (query, key) pair of T tokens its own weight: ceil(log2 T) + 1, fla's count."""
    return max(T - 1, 0).bit_length() + 1


def hattention_modules(root):
    """base.py and recurrent.py of a checkout of github.com/HanGuo97/log-linear-attention (the paper's reference
    code), imported without its package __init__ (which needs its CUDA kernels); jaxtyping, used there only for
    annotations, is stubbed when absent."""
    if root is None:
        return None
    if "hattention.recurrent" in sys.modules:
        return sys.modules["hattention.base"], sys.modules["hattention.recurrent"]
    try:
        import jaxtyping  # noqa: F401
    except ImportError:
        stub = types.ModuleType("jaxtyping")
        stub.Float = stub.Int = type("Annotated", (), {"__class_getitem__": classmethod(lambda cls, item: cls)})
        sys.modules["jaxtyping"] = stub
    pkg = types.ModuleType("hattention")
    pkg.__path__ = [os.path.join(root, "hattention")]
    sys.modules["hattention"] = pkg
    base = importlib.import_module("hattention.base")
    # make_levels_matrix slices a precomputed 16384-token table from the authors' file system by default; build the
    # table for the length asked instead (same function, cached_length=None).
    levels = base.make_levels_matrix.__wrapped__
    base.make_levels_matrix = lambda length, base, htype, dtype, device, **kw: levels(
        length=length, base=base, htype=htype, dtype=dtype, device=device, cached_length=None)
    return base, importlib.import_module("hattention.recurrent")


def make_log_linear_attn(out_dir, hattention_root=None):
    mod, wide = widened("fla.ops.log_linear_attn.naive")
    ref = f"{fla_version()} fla/ops/log_linear_attn/naive.py naive_log_linear_attn"
    hatt = hattention_modules(hattention_root)
    for case, seed, B, T, H, K, V, _, scale in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        NL = log_linear_levels(T)
        q, k, v = rn(B, T, H, K), rn(B, T, H, K), rn(B, T, H, V)
        g = F.logsigmoid(rn(B, T, H) + 3.0)
        lam = torch.sigmoid(rn(B, T, H, NL)) + 0.25
        s = 1.0 if scale is None else scale
        o = wide.naive_log_linear_attn(q, k, v, g, lam, scale=s)
        o32 = mod.naive_log_linear_attn(q.float(), k.float(), v.float(), g.float(), lam.float(), scale=s)
        cross = []
        if hatt is not None:
            base, _ = hatt
            oh, _ = base.hattention_materialized(s * q, k, v, g.exp(), lam, base=2, htype=base.HType.WEAK)
            cross.append({"reference": "github.com/HanGuo97/log-linear-attention hattention/base.py "
                                       "hattention_materialized (HType.WEAK, base 2)",
                          "how": "the paper's reference code: H materialised from get_level_index, q scaled by scale, "
                                 "A = exp(g)", "max_abs_diff": {"o": max_abs(oh, o)}})
        write(out_dir, "log_linear_attn", case, seed, ref,
              "naive_log_linear_attn(q, k, v, g, level_scales, scale=scale)", "B,T,H,D",
              {"B": B, "T": T, "H": H, "K": K, "V": V, "NL": NL},
              {"q": "[B,T,H,K]", "k": "[B,T,H,K]", "v": "[B,T,H,V]", "g": "[B,T,H]", "level_scales": "[B,T,H,NL]",
               "o": "[B,T,H,V]"},
              {"scale": s, "g_convention": "log decay per head, logsigmoid(N(0,1) + 3)",
               "level_scales": "sigmoid(N(0,1)) + 0.25, NL = ceil(log2 T) + 1 levels (level 0: the token itself)"},
              {"q": q, "k": k, "v": v, "g": g, "level_scales": lam}, {"o": o}, {"o": o32}, cross,
              ["no initial state: the reference takes none"])


def make_log_linear_gdn(out_dir, hattention_root=None):
    if hattention_root is None:
        print("log_linear_gdn: skipped (needs --hattention DIR, a checkout of github.com/HanGuo97/log-linear-attention)")
        return
    base, rec = hattention_modules(hattention_root)
    ref = "github.com/HanGuo97/log-linear-attention hattention/recurrent.py HState + step_state/step_output (GDELTA)"

    def recurrent(q, k, v, beta, g, lam):  # hattention_recurrent's loop, in the inputs' dtype
        B, T, H, K = q.shape
        S = rec.HState(base=2, htype=base.HType.WEAK, hstruct=base.HStruct.GDELTA,
                       shape=(B, H, K, v.shape[-1], lam.shape[-1]), dtype=q.dtype, device=q.device)
        ys = []
        for t in range(T):
            S = rec.step_state(S, k[:, t], v[:, t], g[:, t].exp(), beta[:, t])
            ys.append(rec.step_output(S, q[:, t], lam[:, t]))
        # The reference keeps the last token at level 0; the Fenwick carry to position T gives the state this
        # repository returns (the partition of the prefix for the next position).
        st = S.states.clone()
        NL = st.shape[-1]
        c = (T & -T).bit_length() - 1
        target = min(c + 1, NL - 1)
        for lvl in range(min(c, NL - 1) + 1):
            if lvl != target:
                st[..., target] += st[..., lvl]
                st[..., lvl] = 0
        return torch.stack(ys, 1), st.permute(0, 1, 4, 2, 3)

    for case, seed, B, T, H, K, V, _, scale in CASES:
        g_ = torch.Generator().manual_seed(seed)
        rn = lambda *s: torch.randn(*s, generator=g_, dtype=torch.float64)
        NL = log_linear_levels(T)
        q, k, v = l2(rn(B, T, H, K)), l2(rn(B, T, H, K)), rn(B, T, H, V)
        beta = torch.sigmoid(rn(B, T, H))
        g = F.logsigmoid(rn(B, T, H) + 3.0)
        lam = torch.sigmoid(rn(B, T, H, NL)) + 0.25
        s = scale if scale is not None else K ** -0.5
        o, S = recurrent(s * q, k, v, beta, g, lam)
        f32 = lambda x: x.float()
        o32, S32 = recurrent(f32(s * q), f32(k), f32(v), f32(beta), f32(g), f32(lam))
        oq = base.hattention_materialized_dplr(s * q, k, v, beta, g, lam, base=2, htype=base.HType.WEAK)
        write(out_dir, "log_linear_gdn", case, seed, ref,
              "HState(base=2, htype=WEAK, hstruct=GDELTA); per token step_state(S, k_t, v_t, exp(g_t), beta_t), "
              "o_t = step_output(S, scale * q_t, level_weights_t)", "B,T,H,D",
              {"B": B, "T": T, "H": H, "K": K, "V": V, "NL": NL},
              {"q": "[B,T,H,K]", "k": "[B,T,H,K]", "v": "[B,T,H,V]", "beta": "[B,T,H]", "g": "[B,T,H]",
               "level_weights": "[B,T,H,NL]", "o": "[B,T,H,V]", "final_state": "[B,H,NL,K,V]"},
              {"scale": s, "scale_is_default": scale is None, "qk_l2_normalized_before_call": True,
               "g_convention": "log decay per head, logsigmoid(N(0,1) + 3)", "beta_range": "(0, 1)",
               "level_weights": "sigmoid(N(0,1)) + 0.25, NL = ceil(log2 T) + 1 levels (level 0: the token itself)"},
              {"q": q, "k": k, "v": v, "beta": beta, "g": g, "level_weights": lam}, {"o": o, "final_state": S},
              {"o": o32, "final_state": S32},
              [{"reference": "github.com/HanGuo97/log-linear-attention hattention/base.py "
                             "hattention_materialized_dplr (HType.WEAK, base 2)",
                "how": "the quadratic form: H_ts = λ_t^(level) exp(G_t - G_s) Π (I - β k kᵀ) β_s, materialised",
                "max_abs_diff": {"o": max_abs(oq, o)}}],
              ["no initial state: the reference takes none",
               "final_state: the reference's level states after the Fenwick carry to position T (levels 0..c merged "
               "into min(c + 1, NL - 1), c = ctz(T)), as [B,H,NL,K,V]",
               "the reference functions run unchanged in the inputs' dtype (float64; float32 for the float32 run)"])


OPS = {"kda": make_kda, "mesa_net": make_mesa_net, "gated_delta_product": make_gated_delta_product, "forgetting_attn": make_forgetting_attn, "mamba3_siso": make_mamba3, "mamba3_mimo": make_mamba3_mimo, "rwkv7": make_rwkv7, "path_attn": make_path_attn,
       "log_linear_attn": make_log_linear_attn, "log_linear_gdn": make_log_linear_gdn}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the <op>__<case>.json files")
    p.add_argument("--ops", nargs="*", default=sorted(OPS), help="ops to make (default: all)")
    p.add_argument("--hattention", default=None,
                   help="a checkout of github.com/HanGuo97/log-linear-attention (the log-linear ops' reference code)")
    a = p.parse_args()
    unknown = [o for o in a.ops if o not in OPS]
    if unknown:
        sys.exit(f"make_fla_fixtures: unknown op(s) {unknown}; known: {sorted(OPS)}")
    os.makedirs(a.out, exist_ok=True)
    for op in a.ops:
        if op.startswith("log_linear"):
            OPS[op](a.out, a.hattention)
        else:
            OPS[op](a.out)


if __name__ == "__main__":
    main()
