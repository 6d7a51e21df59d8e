#!/usr/bin/env python3
"""Tiny flash-linear-attention (fla) checkpoints with fla's own logits, for `mnemo import-fla`'s tests
(tests/test_export.cpp, "import-fla: fla's own model code ..."): for each fla model_type, a random model of fla's own
class (seed 0, fp32) saved by save_pretrained (config.json + model.safetensors), and the logits of fla's forward on a
fixed sequence in expected.json.

fla's kernels are Triton; this machine has no GPU, so they run under Triton's interpreter (TRITON_INTERPRET=1) with
two patches to the interpreter's host side (below), which do not change the kernels' arithmetic:
  1. autotuning benchmarks its configs through the active GPU driver, which a machine without a GPU does not have:
     every config scores the same, so the first one runs;
  2. compiled Triton gives a `for i in range(n)` loop a tensor index (fla's kernels call i.to(tl.int64)); the
     interpreter gives a Python int: the index is made a tensor, as the interpreter already does for assignments.
fla's softmax attention (model_type transformer) calls flash-attn's flash_attn_func, a CUDA-only package: on a CPU
it is replaced by `causal_attention` below, the same function written out (softmax(q k^T / sqrt(d)) v over the causal
window, grouped key/value heads), so the transformer fixture checks fla's wiring (projections, RoPE, norms, MLP).
The forward runs in eval mode without gradients: for these 16 tokens fla takes its fused_recurrent kernels.
fla's MesaNet layer calls its chunk kernel, which casts q and k to float16: it is replaced by `mesa_net_reference`
below, fla's own float32 reference of the same op (naive_mesa_net_CG), so the mesa_net fixture checks fla's wiring.
fla's PaTH attention layer calls parallel_path_attn, whose Triton kernels size their blocks by the GPU's shared memory:
it is replaced by `path_attn_reference` below, fla's own float32 reference of the same op (naive_path_attn).
fla's RWKV7 model (model_type rwkv7) runs its own Triton kernels under the interpreter like the others: with 16
tokens and no gradients its layer takes fused_mul_recurrent_rwkv7; three layers, so that two read layer 0's values.
fla's LogLinearMamba2 layer refuses a CPU device in its forward: it is replaced by `log_linear_mamba2_forward` (the
same call of its cuda_kernels_forward without the check), whose Triton conv runs under the interpreter, and its
chunk_log_linear_attn (whose kernel stops under the interpreter) by `log_linear_attn_reference`, fla's own float32
reference of the same op (naive_log_linear_attn); in_proj / out_proj biases are on (use_bias) so that the fixture
checks their names too.
fla's Mamba3 layer runs only mamba_ssm's CUDA kernels and refuses a CPU device: its forward is replaced by
`mamba3_forward` below (the same call of its cuda_kernels_forward without the device check) and the SISO kernel by
`mamba3_siso_reference`, the token-by-token recurrence of scripts/make_fla_fixtures.py, so the mamba3 fixture checks
fla's wiring (in_proj split, dt / A / trapezoid / angle activations, B/C norms and biases, D, gate, block, names).
Its MIMO variant (folder mamba3_mimo: is_mimo, mimo_rank 2) replaces mamba_ssm's TileLang mamba3_mimo by
`mamba3_mimo_reference`: mamba_ssm's own PyTorch references of its MIMO decode step taken token by token
(scripts/make_fla_fixtures.py mamba3_mimo_steps; needs MAMBA_SSM_SRC, an unpacked mamba-ssm 2.3.2.post1 sdist).

    python3 -m venv /tmp/fla && /tmp/fla/bin/pip install flash-linear-attention einops safetensors
    /tmp/fla/bin/python scripts/make_fla_models.py --out tests/data/fla_models
"""
import argparse
import ast
import importlib.metadata as md
import json
import os
import shutil
import sys

os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402
from triton.runtime import autotuner, interpreter  # noqa: E402

autotuner.Autotuner.do_bench = property(
    lambda self: self._do_bench if self._do_bench is not None
    else (lambda kernel_call, quantiles=None, **kw: [0.0, 0.0, 0.0] if quantiles else 0.0))


def _tensor_loop_index(self, node):
    node = self.generic_visit(node)
    it = node.iter
    ranged = isinstance(it, ast.Call) and (
        (isinstance(it.func, ast.Name) and it.func.id == "range") or
        (isinstance(it.func, ast.Attribute) and it.func.attr == "range"))
    if isinstance(node.target, ast.Name) and ranged:
        name = node.target.id
        convert = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                             value=ast.Call(func=ast.Attribute(value=ast.Name(id="interpreter_semantic", ctx=ast.Load()),
                                                               attr="to_tensor", ctx=ast.Load()),
                                            args=[ast.Name(id=name, ctx=ast.Load()), ast.Constant(value=False)],
                                            keywords=[]))
        ast.copy_location(convert, node)
        node.body.insert(0, convert)
    return node


interpreter.ASTTransformer.visit_For = _tensor_loop_index

import fla.layers.attn as fla_attn  # noqa: E402
import fla.models as fm  # noqa: E402


def causal_attention(q, k, v, causal=True, window_size=(-1, -1)):
    """flash_attn_func's result: q [B, T, H, D], k/v [B, T, H_kv, D]; window (w-1, 0) keeps the last w keys."""
    assert causal
    groups = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(groups, dim=2), v.repeat_interleave(groups, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / q.shape[-1] ** 0.5
    t = q.shape[1]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    allowed = j <= i
    if window_size[0] >= 0:
        allowed &= j >= i - window_size[0]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v.float()).to(q.dtype)


if fla_attn.flash_attn_func is None:
    fla_attn.flash_attn_func = causal_attention


def mesa_net_reference(q, k, v, g, beta, lamb, h_kk_init=None, h_kv_init=None, output_final_state=False,
                       max_CG_iteration=30, use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """chunk_mesa_net's result in float32 from fla's own reference (fla/ops/mesa_net/naive.py naive_mesa_net_CG, the
    same CG from x = 0 with the same step count): fla's Triton kernel casts the l2-normalised q and k to float16
    (logits 0.1 off float32 here), which no float32 implementation can match to the test's 1e-4."""
    assert cu_seqlens is None
    if use_qk_l2norm_in_kernel:
        q, k = fla_l2_norm(q.float()), fla_l2_norm(k.float())
    T = q.shape[1]
    chunk = next(c for c in (16, 8, 4, 2, 1) if T % c == 0)
    o, h_kk, h_kv = fla_mesa_naive.naive_mesa_net_CG(q, k, v, g, lamb, beta, chunk, max_CG_iteration, h_kk_init,
                                                     h_kv_init)
    return o.to(v.dtype), h_kk, h_kv


import fla.layers.mesa_net as fla_mesa_layer  # noqa: E402
import fla.ops.mesa_net.naive as fla_mesa_naive  # noqa: E402
from fla.modules.l2norm import l2_norm as fla_l2_norm  # noqa: E402

fla_mesa_layer.chunk_mesa_net = mesa_net_reference


def mamba3_siso_reference(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, chunk_size=64,
                          Input_States=None, return_final_states=False, cu_seqlens=None):
    """mamba_ssm's mamba3_siso_combined (CUDA only) as the token-by-token recurrence of scripts/make_fla_fixtures.py
    (the kernel fixtures' oracle), in float32: Q/K [B, T, G, N] shared by H/G consecutive heads, ADT/DT/Trap [B, H, T]."""
    assert Input_States is None and not return_final_states and cu_seqlens is None
    heads = V.shape[2]
    Q, K = (x.repeat_interleave(heads // x.shape[2], dim=2) for x in (Q, K))
    per_token = lambda x: x.transpose(1, 2).float()
    y = mamba3_siso_steps(Q.float(), K.float(), V.float(), per_token(ADT), per_token(DT), per_token(Trap),
                          Q_bias.float(), K_bias.float(), Angles.float(), D.float(), Z.float())[0]
    return y.to(V.dtype)


def mamba3_forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False, **kwargs):
    """fla's Mamba3.forward without its CUDA device check, for one full sequence without padding mask (the cache,
    which only decoding reads, is left empty)."""
    assert attention_mask is None
    output, _ = self.cuda_kernels_forward(hidden_states, None, use_cache=False)
    return output, None, past_key_values


import fla.layers.mamba3 as fla_mamba3_layer  # noqa: E402
from make_fla_fixtures import mamba3_mimo_steps, mamba3_siso_steps  # noqa: E402

fla_mamba3_layer.mamba3_siso_combined = mamba3_siso_reference
fla_mamba3_layer.Mamba3.forward = mamba3_forward


def mamba3_mimo_reference(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D, Z, chunk_size,
                          rotary_dim_divisor, dtype, return_state=False, cu_seqlens=None):
    """mamba_ssm's mamba3_mimo (TileLang, CUDA only) as its own decode step taken token by token in float32
    (scripts/make_fla_fixtures.py mamba3_mimo_steps: mamba_ssm's PyTorch references of the step, as fla's Mamba3.step
    calls them). Q, K [B, T, R, G, N] shared by H/G consecutive heads; V, Z [B, T, H, P]; ADT, DT, Trap [B, H, T];
    Angles [B, T, H, A] before tanh."""
    assert not return_state and cu_seqlens is None
    H = V.shape[2]
    Q, K = (x.float().repeat_interleave(H // x.shape[3], dim=3) for x in (Q, K))
    per_token = lambda x: x.transpose(1, 2).float()
    y = mamba3_mimo_steps(Q, K, V.float(), per_token(ADT), per_token(DT), per_token(Trap), Q_bias.float(),
                          K_bias.float(), Angles.float(), MIMO_V.float(), MIMO_Z.float(),
                          None if MIMO_Out is None else MIMO_Out.float(), D.float(), None if Z is None else Z.float())[0]
    return y.to(dtype)


fla_mamba3_layer.mamba3_mimo_combined = mamba3_mimo_reference


def path_attn_reference(q, k, v, w, beta, g=None, scale=None, cu_seqlens=None, use_cache=False):
    """fla's parallel_path_attn (Triton kernels that need a GPU's shared memory) as fla's own float32 reference of the
    same op (fla/ops/path_attn/naive.py naive_path_attn; no gate is a zero log gate), for full sequences."""
    assert cu_seqlens is None and not use_cache
    if g is None:
        g = torch.zeros(q.shape[:3], dtype=torch.float32)
    if scale is None:
        scale = k.shape[-1] ** -0.5
    return fla_path_naive.naive_path_attn(q, k, v, w, beta, g, scale), None


def log_linear_mamba2_forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False,
                              **kwargs):
    """fla's LogLinearMamba2.forward without its CUDA device check (it raises NotImplementedError off CUDA), for one
    full sequence without padding mask: its cuda_kernels_forward, whose conv and chunk_log_linear_attn are Triton
    kernels that run under the interpreter like the others."""
    assert attention_mask is None
    output, _, _ = self.cuda_kernels_forward(hidden_states, None, False, None)
    return output, None, past_key_values


def log_linear_attn_reference(q, k, v, g, level_scales, initial_state=None, output_final_state=False,
                              cu_seqlens=None, scale=None):
    """chunk_log_linear_attn's output from fla's own reference (fla/ops/log_linear_attn/naive.py
    naive_log_linear_attn; its chunk kernel stops under Triton's interpreter), in float32, for one sequence from an
    empty state (no final state: only decoding reads it)."""
    assert initial_state is None and cu_seqlens is None
    y = fla_log_linear_naive.naive_log_linear_attn(q.float(), k.float(), v.float(), g.float(), level_scales.float(),
                                                   scale=scale)
    return y.to(v.dtype), None


import fla.layers.log_linear_mamba2 as fla_log_linear_mamba2_layer  # noqa: E402
import fla.ops.log_linear_attn.naive as fla_log_linear_naive  # noqa: E402

fla_log_linear_mamba2_layer.LogLinearMamba2.forward = log_linear_mamba2_forward
fla_log_linear_mamba2_layer.chunk_log_linear_attn = log_linear_attn_reference

import fla.layers.path_attn as fla_path_layer  # noqa: E402
import fla.ops.path_attn.naive as fla_path_naive  # noqa: E402

fla_path_layer.parallel_path_attn = path_attn_reference

COMMON = dict(hidden_size=32, num_hidden_layers=2, vocab_size=64, norm_eps=1e-6,
              fuse_norm=False, fuse_swiglu=False, fuse_cross_entropy=False)
MODELS = {  # model_type: (config class, model class, the mixer's fields)
    "kda": ("KDAConfig", "KDAForCausalLM", dict(num_heads=2, head_dim=16, expand_v=1.0)),
    "mesa_net": ("MesaNetConfig", "MesaNetForCausalLM", dict(num_heads=2, head_dim=16, max_cg_step_training=30)),
    "gated_deltaproduct": ("GatedDeltaProductConfig", "GatedDeltaProductForCausalLM",
                           dict(num_heads=2, head_dim=16, expand_v=2.0, num_householder=2, use_forget_gate=True,
                                allow_neg_eigval=True)),
    "forgetting_transformer": ("ForgettingTransformerConfig", "ForgettingTransformerForCausalLM",
                               dict(num_heads=4, use_output_gate=True, qk_norm=True)),
    "gated_deltanet": ("GatedDeltaNetConfig", "GatedDeltaNetForCausalLM", dict(num_heads=2, head_dim=16, expand_v=2.0)),
    "transformer": ("TransformerConfig", "TransformerForCausalLM", dict(num_heads=4, num_kv_heads=2)),
    "gla": ("GLAConfig", "GLAForCausalLM", dict(num_heads=2, expand_k=0.5, expand_v=1.0)),
    "retnet": ("RetNetConfig", "RetNetForCausalLM", dict(num_heads=2, expand_k=1.0, expand_v=2.0)),
    "delta_net": ("DeltaNetConfig", "DeltaNetForCausalLM", dict(num_heads=2)),
    # three layers, so that two read the model's lower bounds; short convs on, so that their names are checked
    "hgrn2": ("HGRN2Config", "HGRN2ForCausalLM",
              dict(num_hidden_layers=3, expand_ratio=16, use_short_conv=True, use_lower_bound=True)),
    "mamba3": ("Mamba3Config", "Mamba3ForCausalLM",
               dict(state_size=16, head_dim=16, expand=2, n_groups=2, rope_fraction=0.5, norm_eps=1e-5)),
    "path_attn": ("PaTHAttentionConfig", "PaTHAttentionForCausalLM",
                  dict(num_heads=2, use_forget_gate=True, use_low_rank_w=True, use_w_shortconv=True, use_cache=False)),
    "rwkv7": ("RWKV7Config", "RWKV7ForCausalLM",
              dict(num_hidden_layers=3, head_dim=16, decay_low_rank_dim=8, a_low_rank_dim=8, gate_low_rank_dim=16,
                   v_low_rank_dim=8, norm_eps=1e-5)),
    "log_linear_mamba2": ("LogLinearMamba2Config", "LogLinearMamba2ForCausalLM",
                          dict(state_size=64, head_dim=16, expand=2, n_groups=1, chunk_size=64, norm_eps=1e-5,
                               use_bias=True)),  # fla's kernel needs a state size divisible by 64
    "gsa": ("GSAConfig", "GSAForCausalLM", dict(num_heads=2, num_slots=8, use_short_conv=True)),
    "mamba": ("MambaConfig", "MambaForCausalLM", dict(state_size=8, expand=2, dt_rank=4, norm_eps=1e-5)),
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM",
               dict(state_size=16, head_dim=16, num_heads=4, expand=2, n_groups=1, chunk_size=16, norm_eps=1e-5)),
}
# A model folder as the Hub serves one: weights, config and a tokenizer (the reduced Llama-2 tokenizer of
# tests/data/tokenizers/llama2, as fla-hub's models use Llama-2's), for the end-to-end tests of
# `mnemo eval --checkpoint DIR|hf:OWNER/NAME` and `mnemo export --format hf`.
WITH_TOKENIZER = {
    "gla_llama2_tokenizer": ("gla", "llama2"),
}
# Another configuration of a model type: folder -> (model_type, fields over MODELS' own).
VARIANTS = {
    "mamba3_mimo": ("mamba3", dict(is_mimo=True, mimo_rank=2)),  # mamba_ssm's MIMO of rank 2
}


def make(folder, out_dir):
    model_type, tokenizer = WITH_TOKENIZER.get(folder, (folder, None))
    model_type, variant = VARIANTS.get(folder, (model_type, {}))
    cfg_cls, model_cls, fields = MODELS[model_type]
    fields = {**fields, **variant}
    common = dict(COMMON)
    if tokenizer:
        tok_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizers", tokenizer)
        with open(os.path.join(tok_dir, "tokenizer.json")) as f:
            tok = json.load(f)
        common["vocab_size"] = max([*tok["model"]["vocab"].values(), *(t["id"] for t in tok["added_tokens"])]) + 1
    torch.manual_seed(0)
    config = getattr(fm, cfg_cls)(**{**common, **fields})
    model = getattr(fm, model_cls)(config).eval()
    with torch.no_grad():  # random weights of the right scale everywhere (fla's init zeroes some, e.g. biases)
        for name, p in model.named_parameters():
            if "A_log" in name or "dt_bias" in name:
                continue
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if name.endswith("norm.weight") else 0.0))
    shape = (1, 8) if tokenizer else (2, 16)  # a large vocabulary: fewer positions keep expected.json small
    ids = torch.randint(0, config.vocab_size, shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits.float()
    if not torch.isfinite(logits).all():
        sys.exit(f"make_fla_models: {model_type}: non-finite logits")
    target = os.path.join(out_dir, folder)
    tmp = target + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(tmp, extra)):
            os.remove(os.path.join(tmp, extra))
    if tokenizer:
        shutil.copy(os.path.join(tok_dir, "tokenizer.json"), os.path.join(tmp, "tokenizer.json"))
    with open(os.path.join(tmp, "expected.json"), "w") as f:
        json.dump({"reference": f"flash-linear-attention {md.version('flash-linear-attention')} "
                                f"fla.models.{model_cls}, eval, no grad, float32, Triton interpreter",
                   "ids": ids.tolist(), "logits_shape": list(logits.shape),
                   "logits": [float(x) for x in logits.flatten().tolist()]}, f)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    print("wrote", target, "max |logit|", float(logits.abs().max()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--types", nargs="*", default=sorted(MODELS) + sorted(WITH_TOKENIZER) + sorted(VARIANTS))
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for t in a.types:
        if t not in MODELS and t not in WITH_TOKENIZER and t not in VARIANTS:
            sys.exit(f"make_fla_models: unknown model {t}; known: "
                     f"{sorted(MODELS) + sorted(WITH_TOKENIZER) + sorted(VARIANTS)}")
        make(t, a.out)


if __name__ == "__main__":
    main()
