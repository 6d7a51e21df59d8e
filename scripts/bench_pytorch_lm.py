#!/usr/bin/python3
"""PyTorch-eager reference for `mnemo bench --mode fwdbwd`: the same Transformer++ as mnemo's
`transformer` family (runtime/model.cpp, runtime/attention): token embedding tied to the LM head, per block
pre-RMSNorm -> causal softmax attention with non-interleaved RoPE (theta 10000; q/k/v/o projections without bias)
-> residual, pre-RMSNorm -> SwiGLU down(silu(gate x) * up x), hidden 256*ceil(floor(d*r*2/3)/256) -> residual;
final RMSNorm (eps 1e-6). One timed step = forward, cross-entropy over every position, backward, AdamW step
(weight decay on 2-D weights), the work `mnemo bench --mode fwdbwd` times. Random tokens, fp32.

usage: OMP_NUM_THREADS=1 /usr/bin/python3 scripts/bench_pytorch_lm.py --d-model 128 --n-layers 2 --n-heads 4 \
         --seq-len 256 --batch 16 --vocab 258 --threads 1 --warmup 2 --repeats 10
prints the median step time and tokens/s (same conventions as mnemo bench: median of `repeats` after `warmup`).
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, theta=10000.0):  # x [B, H, T, D], non-interleaved halves
    B, H, T, D = x.shape
    half = D // 2
    inv = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float32) / half))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.dh = h, d // h
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (p(x).view(B, T, self.h, self.dh).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rope(q), rope(k)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf")).softmax(-1)
        return self.o_proj((s @ v).transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    def __init__(self, d, ratio=4.0):
        super().__init__()
        hidden = 256 * math.ceil(math.floor(d * ratio * 2 / 3) / 256)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.mixer_norm, self.mixer = RMSNorm(d), Attention(d, h)
        self.mlp_norm, self.mlp = RMSNorm(d), SwiGLU(d)

    def forward(self, x):
        x = x + self.mixer(self.mixer_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class LM(nn.Module):
    def __init__(self, vocab, d, n_layers, h):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(n_layers)])
        self.final_norm = RMSNorm(d)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.final_norm(x) @ self.embed.weight.t()


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(d_model=128, n_layers=2, n_heads=4, seq_len=256, batch=16, vocab=258, threads=1, warmup=2,
                     repeats=10).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = LM(a.vocab, a.d_model, a.n_layers, a.n_heads)
    decay = [p for p in model.parameters() if p.dim() >= 2 and p is not model.embed.weight]
    rest = [p for p in model.parameters() if not (p.dim() >= 2 and p is not model.embed.weight)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    times = []
    for i in range(a.warmup + a.repeats):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    n = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__} eager, threads {a.threads}: params {n}, batch {a.batch} x {a.seq_len}, "
          f"median step {med * 1e3:.1f} ms over {a.repeats} (after {a.warmup} warm-up), "
          f"{a.batch * a.seq_len / med:.0f} tokens/s")


if __name__ == "__main__":
    main()
