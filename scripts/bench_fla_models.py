#!/usr/bin/env python3
"""flash-linear-attention's side of the whole-model training benchmark: one training step (forward with labels,
fla's loss, backward, AdamW) of fla's own model classes, timed the way `mnemo bench --mode fwdbwd` times mnemo's
(warm-up steps, then the median of the timed ones; tokens/s = B*T / median), with the peak of torch's CUDA
allocator. Precision as mnemo's `--precision bf16`: fp32 parameters, gradients and AdamW state, the forward under
torch.autocast(bfloat16). fla's own fast paths stay on (fused RMSNorm, fused SwiGLU, fused cross-entropy), as a
researcher training with fla gets them.

The configurations are mnemo's defaults at the size asked for, written as fla's config fields (the same mapping
`mnemo import-fla` reads back, docs/models.md):
  gated_deltanet  d >= 1024: heads of d_k 256, H = floor(0.75 d / 256), expand_v 2, short conv 4, output gate
  deltanet        H heads, d_k = d / H, expand_v 1, short conv 4, no output gate
  gla             H heads, expand_k 0.5, expand_v 1, gate rank 16, normalizer 16
  retnet          H heads, expand_k 1, expand_v 2
(--models takes mnemo's family names, each with its H: family:H.)
MLP: SwiGLU of ratio 4, RMSNorm eps 1e-6, embeddings tied to the LM head.

usage (GPU machine, fla installed):
  python3 scripts/bench_fla_models.py --models gated_deltanet:16,gla:4 --d-model 1024 --layers 24 \
      --vocab 32000 --seq-len 4096 --batch 2 --warmup 1 --repeats 3 --json out/fla-models.json
"""
import argparse
import json
import statistics
import sys
import time


def fla_config(fm, family, d, layers, heads, vocab):
    common = dict(hidden_size=d, num_hidden_layers=layers, vocab_size=vocab, norm_eps=1e-6, hidden_ratio=4,
                  tie_word_embeddings=True)
    if family == "gated_deltanet":
        if d >= 1024:
            head_dim, h = 256, max(1, (3 * d // 4) // 256)
        else:
            head_dim, h = d // heads, heads
        return fm.GatedDeltaNetConfig(**common, num_heads=h, head_dim=head_dim, expand_v=2.0, use_gate=True,
                                      use_short_conv=True, conv_size=4), fm.GatedDeltaNetForCausalLM
    if family == "deltanet":
        return fm.DeltaNetConfig(**common, num_heads=heads, expand_k=1.0, expand_v=1.0, use_gate=False,
                                 use_short_conv=True, conv_size=4), fm.DeltaNetForCausalLM
    if family == "gla":
        return fm.GLAConfig(**common, num_heads=heads, expand_k=0.5, expand_v=1.0), fm.GLAForCausalLM
    if family == "retnet":
        return fm.RetNetConfig(**common, num_heads=heads, expand_k=1.0, expand_v=2.0), fm.RetNetForCausalLM
    sys.exit(f"bench_fla_models: unknown family {family} (gated_deltanet, deltanet, gla, retnet)")


def bench(fm, torch, family, heads, a):
    cfg, cls = fla_config(fm, family, a.d_model, a.layers, heads, a.vocab)
    torch.manual_seed(0)
    model = cls(cfg).cuda().train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq_len), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    row = dict(family=family, params=params, seq_len=a.seq_len, batch=a.batch, median_ms=med * 1e3,
               tokens_per_s=a.batch * a.seq_len / med, peak_mb=torch.cuda.max_memory_allocated() / 2**20,
               loss=float(loss), config={k: v for k, v in cfg.to_dict().items()
                                         if k in ("num_heads", "head_dim", "expand_k", "expand_v", "use_gate",
                                                  "fuse_norm", "fuse_swiglu", "fuse_cross_entropy")})
    print(f"fla {family:16s} params {params / 1e6:7.1f}M  T {a.seq_len} B {a.batch}  median {med * 1e3:9.2f} ms  "
          f"{row['tokens_per_s']:10.0f} tokens/s  peak {row['peak_mb']:8.0f} MB (CUDA allocator)", flush=True)
    del model, opt
    torch.cuda.empty_cache()
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gated_deltanet:16,gla:4", help="family:heads,...")
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", required=True)
    a = p.parse_args()
    import torch
    import fla.models as fm
    from bench_fla_kernels import allow_gated_backward_timing  # scripts/: the gated backward guard, lifted for timing
    note = allow_gated_backward_timing()
    if note:
        print("fla: " + note, flush=True)
    rows = []
    for item in a.models.split(","):
        family, _, heads = item.partition(":")
        try:
            rows.append(bench(fm, torch, family, int(heads or 16), a))
        except Exception as e:  # one family's failure leaves the others' rows
            print(f"fla {family}: failed: {type(e).__name__}: {e}", flush=True)
            rows.append(dict(family=family, error=f"{type(e).__name__}: {e}"))
    with open(a.json, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, note=note, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
