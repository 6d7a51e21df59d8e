#!/usr/bin/env python3
"""Side-by-side kernel benchmark for scripts/gpu-check: flash-linear-attention's chunk kernels next to mnemo's.

  bench_fla_kernels.py probe --json FILE
      the device name, a bf16 matmul peak (TFLOP/s, 8192^3 torch.matmul) and a copy bandwidth (GB/s, 1 GiB clone)
  bench_fla_kernels.py fla --json FILE [--ops ...] [--shapes 4x2048,1x8192] [--heads 16] [--head-dims 64,128]
                           [--modes fwd,fwdbwd] [--warmup 2] [--repeats 5]
      fla.ops chunk_delta_rule, chunk_gated_delta_rule, chunk_gla, chunk_simple_gla (and the table's extra rows:
      with --ops kda, chunk_kda for Kimi Delta Attention, whose chunk pass mnemo runs on its state-pass kernel; with
      --ops log_linear_attn, chunk_log_linear_attn for log-linear Mamba-2, whose level states mnemo carries by
      state passes) on random bf16 inputs in
      fla's [B, T, H, D] layout, timed with torch.cuda.Event (median of the repeats; fwdbwd = forward + backward of
      (o^2).mean(), as mnemo bench times it)
  bench_fla_kernels.py report --probe FILE --fla FILE --mnemo-db FILE --md FILE --json FILE
      one row per (op, B, T, D, mode): mnemo (rows of `mnemo bench --kernel`, read from its SQLite db) and fla,
      milliseconds, the mnemo/fla ratio, MFU and bandwidth share of each

MFU counts the chunk form's matmul FLOPs at chunk C = 64 per head and token (D = K = V):
  GLA / simple GLA      4 C D + 4 D^2          (Q K^T, A V, Q S, K^T V)
  delta / gated delta  10 C D + 6 D^2          (+ K K^T, the WY products W = T K, U = T V, and W S)
  KDA                  10 C D + 6 D^2          (the gated delta rule's products, the decay per key channel)
  log-linear attention  4 C D + 4 D^2 (1 + log2(T / C))   (GLA's products, a state read and update per chunk level)
and fwdbwd as 3x the forward. The bandwidth share counts the bytes a fused kernel cannot avoid: reading q, k, v
(and the gates) and writing o once (fwd), and 3x that for fwdbwd. Both are models, stated in the table's notes.
"""
import argparse
import json
import os
import sqlite3
import statistics
import sys

OPS = ["delta_rule", "gated_delta_rule", "gla", "simple_gla"]
EXTRA_OPS = ["kda", "log_linear_attn"]  # timed when asked for (--ops); not in the default table
CHUNK = 64


def flops_fwd(op, B, T, H, D):
    if op == "log_linear_attn":
        levels = 1 + max(T // CHUNK - 1, 0).bit_length()  # 1 + ceil(log2(T / C)) chunk levels
        return B * T * H * (4 * CHUNK * D + 4 * D * D * levels)
    per_token = (10 * CHUNK * D + 6 * D * D) if "delta" in op or op == "kda" else (4 * CHUNK * D + 4 * D * D)
    return B * T * H * per_token


def bytes_fwd(op, B, T, H, D, elem=2):
    qkvo = 4 * B * T * H * D * elem
    gates = {"gla": B * T * H * D * elem, "simple_gla": B * T * H * 4, "delta_rule": B * T * H * elem,
             "gated_delta_rule": B * T * H * (elem + 4), "kda": B * T * H * (elem + 4 * D),
             "log_linear_attn": B * T * H * (4 + elem * log_linear_levels(T))}[op]
    return qkvo + gates


def log_linear_levels(T):
    """Level scales that give T tokens every level (mnemo's log_linear_num_levels): bit_length(T - 1) + 1."""
    return max(T - 1, 0).bit_length() + 1


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        b, t = item.lower().split("x")
        shapes.append((int(b), int(t)))
    return shapes


def probe(args):
    import torch

    dev = torch.device("cuda")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    tflops = 2 * 8192**3 / min(times) / 1e12
    x = torch.empty(1 << 29, device=dev, dtype=torch.bfloat16)  # 1 GiB
    x.clone()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        x.clone()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    gbs = 2 * x.numel() * 2 / min(times) / 1e9  # read + write
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "bf16_matmul_tflops": tflops, "copy_gb_s": gbs}
    print(json.dumps(out))
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


def fla_inputs(op, B, T, H, D, torch):
    dev, dt = torch.device("cuda"), torch.bfloat16
    q = torch.randn(B, T, H, D, device=dev, dtype=dt)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, device=dev, dtype=torch.float32), dim=-1).to(dt)
    v = torch.randn(B, T, H, D, device=dev, dtype=dt)
    if op == "gla":
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, D, device=dev, dtype=torch.float32)).to(dt) / 16
        return {"q": q, "k": k, "v": v, "g": g}
    if op == "simple_gla":
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32)) / 16
        return {"q": q, "k": k, "v": v, "g": g}
    if op == "log_linear_attn":  # log-linear Mamba-2: a decay per head (fp32 as the layer passes it), level scales
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32)) / 16
        lam = torch.rand(B, T, H, log_linear_levels(T), device=dev, dtype=dt)
        return {"q": q, "k": k, "v": v, "g": g, "level_scales": lam}
    beta = torch.rand(B, T, H, device=dev, dtype=dt)
    if op == "kda":  # a log decay per key channel, fp32 as the layer passes it
        g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, D, device=dev, dtype=torch.float32)) / 16
        return {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    if op == "delta_rule":
        return {"q": q, "k": k, "v": v, "beta": beta}
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32)) / 16
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta}


def fla_fn(op):
    if op == "gla":
        from fla.ops.gla import chunk_gla
        return lambda x: chunk_gla(x["q"], x["k"], x["v"], x["g"])[0]
    if op == "simple_gla":
        from fla.ops.simple_gla import chunk_simple_gla
        return lambda x: chunk_simple_gla(x["q"], x["k"], x["v"], g=x["g"])[0]
    if op == "kda":
        from fla.ops.kda import chunk_kda
        return lambda x: chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"])[0]
    if op == "log_linear_attn":
        from fla.ops.log_linear_attn import chunk_log_linear_attn
        return lambda x: chunk_log_linear_attn(x["q"], x["k"], x["v"], x["g"], x["level_scales"])[0]
    if op == "delta_rule":
        from fla.ops.delta_rule import chunk_delta_rule
        return lambda x: chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"])[0]
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    return lambda x: chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"])[0]


def time_call(fn, warmup, repeats, torch):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def allow_gated_backward_timing():
    """fla refuses its gated chunk backward (chunk_bwd_dqkwg: GLA, simple GLA, gated delta rule) on Hopper GPUs with
    Triton >= 3.4 and < 3.7.1, whose compiler gives it wrong results there (fla issue #640). The GPU machines' torch
    pins such a Triton, and a newer one cannot be brought. For timing only, the guard is lifted: the kernels run the
    same instructions either way. Returns the note that the results carry, or None where no guard applied."""
    try:
        import fla.ops.common.chunk_o as chunk_o
    except Exception:
        return None
    guarded = (getattr(chunk_o, "IS_NVIDIA_HOPPER", False) and getattr(chunk_o, "TRITON_ABOVE_3_4_0", False)
               and not getattr(chunk_o, "TRITON_ABOVE_3_7_1", True))
    if not guarded:
        return None
    chunk_o.TRITON_ABOVE_3_7_1 = True
    return ("fla's gated backward guard (Triton < 3.7.1 on Hopper, fla issue #640) lifted for timing: "
            "its gradients may be wrong on this Triton, its time is what is measured")


def fla(args):
    import torch

    note = allow_gated_backward_timing()
    if note:
        print("fla: " + note, flush=True)
    rows = []

    def save():  # after every row: a step stopped at its time limit keeps what it measured
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    for op in args.ops.split(","):
        try:
            f = fla_fn(op)
        except Exception as exc:  # fla missing or renamed: one line per op, the rest goes on
            print(f"fla {op}: unavailable: {exc}", file=sys.stderr)
            continue
        for B, T in parse_shapes(args.shapes):
            for D in [int(d) for d in args.head_dims.split(",")]:
                torch.manual_seed(0)
                x = fla_inputs(op, B, T, args.heads, D, torch)
                for mode in args.modes.split(","):
                    if mode == "fwd":
                        def run():
                            with torch.no_grad():
                                f(x)
                    else:
                        leaves = {n: t.detach().requires_grad_(t.is_floating_point()) for n, t in x.items()}

                        def run():
                            f(leaves).float().pow(2).mean().backward()
                    try:
                        ms = time_call(run, args.warmup, args.repeats, torch)
                    except Exception as exc:
                        print(f"fla {op} B={B} T={T} D={D} {mode}: failed: {exc}", file=sys.stderr)
                        continue
                    row = {"op": op, "batch": B, "seq_len": T, "heads": args.heads, "head_dim": D, "mode": mode,
                           "median_ms": ms}
                    if note and mode == "fwdbwd" and op != "delta_rule":
                        row["note"] = note
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    save()
                del x
                torch.cuda.empty_cache()
    save()


def report(args):
    def read(path, empty):  # a step that timed out may have left no file
        return json.load(open(path)) if path and os.path.exists(path) else empty

    peak = read(args.probe, {})
    fla_rows = read(args.fla, [])
    fla_ms = {(r["op"], r["batch"], r["seq_len"], r["head_dim"], r["mode"]): r["median_ms"] for r in fla_rows}
    mnemo = {}
    if args.mnemo_db and os.path.exists(args.mnemo_db):
        con = sqlite3.connect(args.mnemo_db)
        for model, mode, form, T, B, ms, cfg in con.execute(
                "SELECT model, mode, form, seq_len, batch, median_ms, config_json FROM benches "
                "WHERE mode LIKE 'kernel_%' ORDER BY id"):
            c = json.loads(cfg)
            key = (model, B, T, c.get("head_dim"), mode[len("kernel_"):])
            mnemo.setdefault(key, {})[form] = ms
    order = OPS + EXTRA_OPS
    keys = sorted(set(fla_ms) | set(mnemo),
                  key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[4], k[3], k[2]))
    tflops = peak.get("bf16_matmul_tflops")
    gbs = peak.get("copy_gb_s")
    heads = fla_rows[0]["heads"] if fla_rows else 16
    out_rows = []
    for key in keys:
        op, B, T, D, mode = key
        forms = mnemo.get(key, {})
        form = "fused_chunk" if "fused_chunk" in forms else ("chunk" if "chunk" in forms else None)
        ms_m, ms_f = (forms.get(form) if form else None), fla_ms.get(key)
        mult = 3 if mode == "fwdbwd" else 1
        flops = mult * flops_fwd(op, B, T, heads, D)
        nbytes = mult * bytes_fwd(op, B, T, heads, D)

        def mfu(ms):
            return None if ms is None or not tflops else flops / (ms / 1e3) / (tflops * 1e12)

        def bw(ms):
            return None if ms is None or not gbs else nbytes / (ms / 1e3) / (gbs * 1e9)

        out_rows.append({"op": op, "batch": B, "seq_len": T, "heads": heads, "head_dim": D, "mode": mode,
                         "mnemo_form": form, "mnemo_ms": ms_m, "mnemo_eager_chunk_ms": forms.get("chunk"),
                         "fla_ms": ms_f, "mnemo_over_fla": (ms_m / ms_f) if ms_m and ms_f else None,
                         "mnemo_mfu": mfu(ms_m), "fla_mfu": mfu(ms_f), "mnemo_bw_share": bw(ms_m),
                         "fla_bw_share": bw(ms_f), "model_gflop": flops / 1e9, "model_mb": nbytes / 1e6})

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    lines = [f"# Chunk kernels: mnemo vs flash-linear-attention ({peak.get('device', '?')})", "",
             f"torch {peak.get('torch', '?')}, CUDA {peak.get('cuda', '?')}; measured bf16 matmul peak "
             f"{f(tflops, '.0f')} TFLOP/s, copy bandwidth {f(gbs, '.0f')} GB/s; {heads} heads, bf16 q/k/v, median ms.",
             "", "| op | mode | B | T | D | mnemo form | mnemo ms | eager chunk ms | fla ms | mnemo / fla | "
             "MFU mnemo | MFU fla | BW mnemo | BW fla |", "|" + "---|" * 14]
    for r in out_rows:
        lines.append(f"| {r['op']} | {r['mode']} | {r['batch']} | {r['seq_len']} | {r['head_dim']} | "
                     f"{r['mnemo_form'] or '-'} | {f(r['mnemo_ms'], '.3f')} | {f(r['mnemo_eager_chunk_ms'], '.3f')} | "
                     f"{f(r['fla_ms'], '.3f')} | {f(r['mnemo_over_fla'], '.2f')} | {f(r['mnemo_mfu'], '.1%')} | "
                     f"{f(r['fla_mfu'], '.1%')} | {f(r['mnemo_bw_share'], '.1%')} | {f(r['fla_bw_share'], '.1%')} |")
    lines += ["", "MFU: chunk-form matmul FLOPs at C = 64 (GLA/simple GLA 4CD + 4D^2, delta rules and KDA 10CD + 6D^2, "
              "log-linear attention 4CD + 4D^2 (1 + log2(T/C)) per head and token; fwdbwd 3x) over the measured matmul "
              "peak. BW: q, k, v, gates read and o written once "
              "(fwdbwd 3x) over the measured copy bandwidth. '-': not measured (timed out, failed or no such form). "
              "The delta-rule ops run mnemo's CUDA kernels under the form name chunk (their eager chunk form is the "
              "CPU reference)."]
    notes = sorted({r["note"] for r in fla_rows if r.get("note")})
    lines += [f"fla rows of gated fwdbwd: {n}." for n in notes]
    with open(args.md, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(args.json, "w") as fh:
        json.dump({"probe": peak, "rows": out_rows}, fh, indent=1)
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("probe")
    a.add_argument("--json", required=True)
    a = sub.add_parser("fla")
    a.add_argument("--json", required=True)
    a.add_argument("--ops", default=",".join(OPS))
    a.add_argument("--shapes", default="4x2048,1x8192")
    a.add_argument("--heads", type=int, default=16)
    a.add_argument("--head-dims", default="64,128")
    a.add_argument("--modes", default="fwd,fwdbwd")
    a.add_argument("--warmup", type=int, default=2)
    a.add_argument("--repeats", type=int, default=5)
    a = sub.add_parser("report")
    a.add_argument("--probe")
    a.add_argument("--fla")
    a.add_argument("--mnemo-db")
    a.add_argument("--md", required=True)
    a.add_argument("--json", required=True)
    args = p.parse_args()
    {"probe": probe, "fla": fla, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
