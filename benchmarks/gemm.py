"""GEMM benchmark: mxprec recipes vs XLA bf16, XLA direct FP8, jax.nn.scaled_dot_general and torch.

One run, one device, same shapes. For every shape (M×K×N) it times:

* peers: XLA bf16 dot (FP32 accumulate), XLA direct FP8 dot (e4m3×e4m3 and e5m2×e4m3; what Flax's
  Fp8DirectDotGeneralOp emits), ``jax.nn.scaled_dot_general`` MXFP8, ``torch._scaled_mm``
  tensorwise / rowwise / blockwise when torch with CUDA is importable;
* mxprec ``scaled_gemm`` for every quantized recipe's Fprop operand pair on pre-quantized
  operands (``tflops``) and with the activation quantized inside the timed region
  (``tflops_with_q``, as seed 002's Table 23).

Writes ``<out>/gemm_<device>.json`` (object with device, command, date, rows) and a markdown table.
Usage: ``python benchmarks/gemm.py --out benchmarks/results [--shapes small] [--backend xla]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
from jax import lax

import mxprec

PAPER_SHAPES = [(8192, 8192, 8192), (16384, 4096, 14336), (16384, 14336, 4096), (4096, 4096, 4096)]
LLAMA_SHAPES = [  # (tokens, K, N): Llama-2-7B MLP up/down, Llama-3-70B MLP up/down
    (16384, 4096, 11008), (16384, 11008, 4096), (8192, 8192, 28672), (8192, 28672, 8192),
]
SMALL_M = [(1024, 8192, 8192), (2048, 8192, 8192)]
CPU_SHAPES = [(256, 512, 256)]
RECIPES = ["fp8_current", "fp8_rowwise", "fp8_block", "mxfp8", "mxfp6", "mxfp4", "nvfp4"]
DN = (((1,), (0,)), ((), ()))
DN_TN = (((1,), (1,)), ((), ()))  # x (M, K) . w (N, K)


def timed_window(fn, sync, window_s: float) -> dict:
    """3 warmups, a 5-call estimate, then back-to-back calls of fn() for about window_s, ended by sync(last output):
    mean seconds per call, the call count and the window's wall-clock bounds (benchmarks/gemm_steady.py)."""
    for _ in range(3):
        out = fn()
    sync(out)
    t0 = time.perf_counter()
    for _ in range(5):
        out = fn()
    sync(out)
    n = max(5, math.ceil(window_s / ((time.perf_counter() - t0) / 5)))
    start = time.time()
    t0 = time.perf_counter()
    for _ in range(n):
        out = fn()
    sync(out)
    dt = time.perf_counter() - t0
    return dict(t=dt / n, calls=n, start=start, end=start + dt)


def timed_burst(fn, sync, iters: int, warmup: int = 3) -> float:
    """Mean seconds per call of fn() over iters back-to-back calls after warmup ones, ended by sync(last output)."""
    for _ in range(warmup):
        out = fn()
    sync(out)
    t0 = time.perf_counter()
    for _ in range(iters):
        out = fn()
    sync(out)
    return (time.perf_counter() - t0) / iters


def bench(fn, *args, iters: int, warmup: int = 3, window_s: float = 0.0) -> float:
    """Mean seconds per call of a jitted fn (block_until_ready around a batch of calls): iters calls after warmup,
    or, with window_s, calls for about that long (at the H200's power cap a 20-call burst after an idle gap runs at
    a higher clock than a sustained load: benchmarks/results/h200_gemm_steady.md)."""
    if window_s:
        return timed_window(lambda: fn(*args), jax.block_until_ready, window_s)["t"]
    return timed_burst(lambda: fn(*args), jax.block_until_ready, iters, warmup)


def pitched_block_scales(s, pad: bool = True):
    """torch._scaled_mm's 128x128-tile B scales from (N/128, K/128) ones: the (K/128, N/128) view of an (N/128, P)
    buffer, P = K/128 rounded up to a multiple of 4 (16 bytes) when pad. Where K/128 % 4 != 0, torch 2.11 returns
    wrong values without an error for the unpadded view and refuses the padded one ("Invalid scaling
    configuration"), so it has no correct form there (benchmarks/check_torch_block_scales.py); padded, the row is an
    error row instead of the timing of a wrong product."""
    import torch

    kb = s.shape[1]
    p = -(-kb // 4) * 4 if pad else kb
    buf = torch.zeros(s.shape[0], p, dtype=s.dtype, device=s.device)
    buf[:, :kb] = s
    return buf[:, :kb].t()


def tflops(m, k, n, s):
    return 2.0 * m * k * n / s / 1e12


def peer_rows(m, k, n, x, w, iters, all_peers=True, window_s=0.0):
    """XLA bf16 (the speedup baseline), then, with all_peers, XLA FP8, jax.nn MXFP8 and torch."""
    rows = []
    f_bf16 = jax.jit(lambda a, b: lax.dot_general(a, b, DN, preferred_element_type=jnp.float32).astype(jnp.bfloat16))
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    t = bench(f_bf16, xb, wb, iters=iters, window_s=window_s)
    rows.append(dict(op="gemm", recipe="bf16", backend="xla", impl="xla bf16", t=t))
    _log(m, k, n, "xla bf16")
    if not all_peers:
        return rows
    wt = w.T  # (N, K): FP8 GEMMs on Hopper want K contiguous in both operands ("TN"), as torch gets it
    for name, da, db in (("xla fp8 e4m3xe4m3", jnp.float8_e4m3fn, jnp.float8_e4m3fn),
                         ("xla fp8 e5m2xe4m3", jnp.float8_e5m2, jnp.float8_e4m3fn)):
        sa, sb = jnp.float32(1.0), jnp.float32(1.0)
        f = jax.jit(lambda a, b, sa, sb: (lax.dot_general(a, b, DN_TN, preferred_element_type=jnp.float32)
                                          * (sa * sb)).astype(jnp.bfloat16))
        t = bench(f, x.astype(da), wt.astype(db), sa, sb, iters=iters, window_s=window_s)
        rows.append(dict(op="gemm", recipe="fp8_current", backend="xla", impl=name, t=t))
        _log(m, k, n, name)
    try:
        f = jax.jit(lambda a, b: jax.nn.scaled_dot_general(a, b, DN, preferred_element_type=jnp.bfloat16))
        t = bench(f, xb, wb, iters=iters, window_s=window_s)
        rows.append(dict(op="gemm", recipe="mxfp8", backend="jax.nn", impl="jax.nn.scaled_dot_general mxfp8", t=t))
    except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
        rows.append(dict(op="gemm", recipe="mxfp8", backend="jax.nn", impl="jax.nn.scaled_dot_general", error=str(e)[:200]))
    _log(m, k, n, "jax.nn.scaled_dot_general")
    rows += torch_rows(m, k, n, iters, window_s=window_s)
    return rows


def _log(m, k, n, what):
    print(f"  {m}x{k}x{n} {what}: done at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)


def torch_rows(m, k, n, iters, forms=("tensor", "row", "2d"), window_s=0.0):
    """torch._scaled_mm rows (cuBLASLt) of the scaling forms asked for: "tensor", "row", "2d" (1x128 activations x
    128x128 weights) and "1d" (1x128 x 1x128 along K, the Wgrad pair; recipe name "fp8_block_1d")."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    rows = []
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major (K, N)

    def run(name, recipe, sa, sb):
        try:
            f = lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            sync = lambda _: torch.cuda.synchronize()
            t = timed_window(f, sync, window_s)["t"] if window_s else timed_burst(f, sync, iters)
            rows.append(dict(op="gemm", recipe=recipe, backend="torch", impl=name, t=t))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(op="gemm", recipe=recipe, backend="torch", impl=name, error=str(e)[:200]))

    one = torch.tensor(1.0, device="cuda")
    if "tensor" in forms:
        run("torch._scaled_mm tensorwise", "fp8_current", one, one)
    if "row" in forms:
        run("torch._scaled_mm rowwise", "fp8_rowwise", torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda"))
    # DeepSeek-style 1x128 activations / 128x128 weights (torch >= 2.9 blockwise API; outer-dim-major scales)
    sa = torch.ones(k // 128, m, device="cuda").t()
    # B scales' pitch padded to 16 bytes (pitched_block_scales): such K gives an error row, not a wrong product's time
    if "2d" in forms:
        sb = pitched_block_scales(torch.ones(n // 128, k // 128, device="cuda"))
        run("torch._scaled_mm blockwise 1x128/128x128", "fp8_block", sa, sb)
    if "1d" in forms:  # b.t() (N, K) with 1x128 scales: (N, K / 128), N-major
        run("torch._scaled_mm blockwise 1x128/1x128", "fp8_block_1d", sa, torch.ones(k // 128, n, device="cuda"))
    return rows


def mxprec_rows(m, k, n, x, w, iters, backend, recipes=RECIPES, window_s=0.0):
    """The weight is quantized once, outside the timed region, as (N, K) (K contiguous, rhs_contract 2)."""
    rows = []
    for name in recipes:
        t_start = time.perf_counter()
        r = mxprec.recipes.get(name, backend=backend)
        try:
            qw = jax.jit(lambda w, r=r: mxprec.quantize(w.T, r.fprop_rhs, axis=1))(w)
            qx = jax.jit(lambda x, r=r: mxprec.quantize(x, r.fprop_lhs, axis=1))(x)
            be = mxprec.kernels.resolve_backend(backend)  # "auto" on GPU picks per operand pair
            if be == "ffi" and jax.default_backend() == "gpu":
                from mxprec.kernels import cuda

                if not cuda.supports(_b(qx), _b(qw), lhs_contract=2, rhs_contract=2):
                    continue  # no sm_90a kernel for this pair (docs/backends/cuda.md): not timed
            gemm = jax.jit(lambda qx, qw, be=be: mxprec.scaled_gemm(_b(qx), _b(qw), lhs_contract=2,
                                                            rhs_contract=2, out_dtype=jnp.bfloat16, backend=be))
            t = bench(gemm, qx, qw, iters=iters, window_s=window_s)
            with_q = jax.jit(lambda x, qw, r=r, be=be: mxprec.scaled_gemm(_b(mxprec.quantize(x, r.fprop_lhs, axis=1)),
                                                                          _b(qw),
                                                              lhs_contract=2, rhs_contract=2,
                                                              out_dtype=jnp.bfloat16, backend=be))
            tq = bench(with_q, x.astype(jnp.bfloat16), qw, iters=iters, window_s=window_s)
            rows.append(dict(op="gemm", recipe=name, backend=f"mxprec-{be}", impl=f"mxprec {name}", t=t, tq=tq))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(op="gemm", recipe=name, backend=f"mxprec-{backend}", impl=f"mxprec {name}", error=str(e)[:300]))
        print(f"  {m}x{k}x{n} mxprec {name} ({backend}): {time.perf_counter() - t_start:.1f} s incl. compile",
              file=sys.stderr, flush=True)
    return rows


def _sig(v: float) -> float:
    return float(f"{v:.4g}")


def _b(q):
    """Adds the leading batch axis (B = 1) to a 2-D QTensor, bumping its axis."""
    import dataclasses

    def add(a):
        return None if a is None else (a[None] if a.ndim else a)

    return dataclasses.replace(q, data=q.data[None], scale=add(q.scale), axis=q.axis + 1, shape=(1, *q.shape))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="auto",
                   help="auto | paper | all | cpu | comma-separated MxKxN list")
    p.add_argument("--recipes", default=",".join(RECIPES), help="mxprec recipes to time (default: %(default)s)")
    p.add_argument("--backend", default="both", choices=["auto", "xla", "ffi", "both"])
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--window-ms", type=float, default=0.0,
                   help="time each implementation for about this long instead of --iters calls (steady clocks)")
    p.add_argument("--bf16-only", action="store_true",
                   help="of the peers, time only XLA bf16 (A/B runs of mxprec builds; peers once elsewhere)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="merge per-shape result JSONs (one run each, same device) into --out, in --shapes order")
    p.add_argument("--command", default=None, help="with --merge: the command line to record")
    args = p.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out, args.command)
    on_gpu = jax.default_backend() == "gpu"
    named = {"paper": PAPER_SHAPES, "all": PAPER_SHAPES + LLAMA_SHAPES + SMALL_M, "cpu": CPU_SHAPES}
    if args.shapes in named:
        shapes = named[args.shapes]
    elif args.shapes == "auto":
        shapes = PAPER_SHAPES + LLAMA_SHAPES + SMALL_M if on_gpu else CPU_SHAPES
    else:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    recipes = [r for r in args.recipes.split(",") if r]
    iters = args.iters or (20 if on_gpu else 2)
    device = jax.devices()[0].device_kind
    rows = []
    for m, k, n in shapes:
        kx, kw = jax.random.split(jax.random.key(0))
        x = jax.random.normal(kx, (m, k), jnp.float32).astype(jnp.bfloat16)
        w = (jax.random.normal(kw, (k, n), jnp.float32) * 0.02).astype(jnp.bfloat16)
        backends = ["xla", "ffi"] if args.backend == "both" else [args.backend]
        t_start = time.perf_counter()
        shape_rows = peer_rows(m, k, n, x, w, iters, all_peers=not args.bf16_only, window_s=args.window_ms / 1e3)
        print(f"  {m}x{k}x{n} peers: {time.perf_counter() - t_start:.1f} s incl. compile", file=sys.stderr, flush=True)
        for be in backends:
            shape_rows += mxprec_rows(m, k, n, x, w, iters, be, recipes, window_s=args.window_ms / 1e3)
        t_bf16 = shape_rows[0]["t"]
        for r in shape_rows:
            r.update(m=m, k=k, n=n)
            if "t" in r:
                r["tflops"] = _sig(tflops(m, k, n, r.pop("t")))
                r["speedup_vs_xla_bf16"] = round(r["tflops"] / tflops(m, k, n, t_bf16), 3)
            tq = r.pop("tq", None)
            r["tflops_with_q"] = None if tq is None else _sig(tflops(m, k, n, tq))
            print(json.dumps(r), flush=True)
        rows += shape_rows
        _write(rows, device, argv, args.out, final=False)  # a run cut short keeps every finished shape
    _write(rows, device, argv, args.out, final=True)


def _write(rows, device, argv, out_dir, final):
    # ratio to the best peer of the same recipe
    for r in rows:
        if r.get("backend", "").startswith("mxprec") and "tflops" in r:
            peers = [q["tflops"] for q in rows if q["recipe"] == r["recipe"] and (q["m"], q["k"], q["n"]) == (r["m"], r["k"], r["n"])
                     and not q["backend"].startswith("mxprec") and "tflops" in q]
            r["ratio_vs_best_peer"] = round(r["tflops"] / max(peers), 3) if peers and max(peers) > 0 else None
    result = dict(device=device, command="python " + " ".join([sys.argv[0]] + (argv or sys.argv[1:])),
                  date=datetime.date.today().isoformat(), jax=jax.__version__, rows=rows)
    path = _save(result, out_dir)
    if final:
        print(markdown(result))
        print("wrote", path)


def _save(result, out_dir) -> str:
    """Writes ``<device>_gemm.json`` and its markdown table into out_dir; returns the JSON path."""
    os.makedirs(out_dir, exist_ok=True)
    device = result["device"]
    tag = "h200" if "H200" in device else device.lower().replace(" ", "_")
    path = os.path.join(out_dir, f"{tag}_gemm.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    with open(path.replace(".json", ".md"), "w") as f:
        f.write(markdown(result))
    return path


def merge(paths, out_dir, command=None):
    """One result from per-shape runs (e.g. one device call per few shapes), ordered as ``--shapes all``."""
    parts = []
    for p in paths:
        with open(p) as fh:
            parts.append(json.load(fh))
    devices = {p["device"] for p in parts}
    if len(devices) != 1:
        raise SystemExit(f"--merge: results from different devices {sorted(devices)}")
    order = {s: i for i, s in enumerate(PAPER_SHAPES + LLAMA_SHAPES + SMALL_M)}
    rows = sorted((r for p in parts for r in p["rows"]), key=lambda r: order.get((r["m"], r["k"], r["n"]), len(order)))
    result = dict(device=parts[0]["device"], command=command or " ; ".join(p["command"] for p in parts),
                  date=max(p["date"] for p in parts), jax=parts[0]["jax"], rows=rows)
    print("wrote", _save(result, out_dir), f"({len(rows)} rows)")


def markdown(result) -> str:
    lines = [f"# GEMM benchmark on {result['device']} ({result['date']}, jax {result['jax']})", "",
             f"Command: `{result['command']}`", "",
             "| M×K×N | impl | recipe | backend | TFLOP/s | with Q | × XLA bf16 | × best peer |", "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        shape = f"{r['m']}×{r['k']}×{r['n']}"
        if "error" in r:
            lines.append(f"| {shape} | {r['impl']} | {r['recipe']} | {r['backend']} | error: {r['error'][:60]} | | | |")
            continue
        lines.append(f"| {shape} | {r['impl']} | {r['recipe']} | {r['backend']} | {r['tflops']} | "
                     f"{r.get('tflops_with_q') or ''} | {r['speedup_vs_xla_bf16']} | {r.get('ratio_vs_best_peer') or ''} |")
    return "\n".join(lines + summary(result["rows"])) + "\n"


def summary(rows) -> list[str]:
    """Per mxprec recipe and backend: the range over shapes of × XLA bf16 and × best peer."""
    groups = {}
    for r in rows:
        if r.get("backend", "").startswith("mxprec") and "tflops" in r:
            groups.setdefault((r["recipe"], r["backend"]), []).append(r)
    if not groups:
        return []

    def span(vals):
        vals = [v for v in vals if v is not None]
        return f"{min(vals):.2f}–{max(vals):.2f}" if vals else ""

    out = ["", "Over all shapes (min–max):", "", "| recipe | backend | shapes | × XLA bf16 | × best peer |", "|---|---|---:|---|---|"]
    for (recipe, backend), rs in groups.items():
        out.append(f"| {recipe} | {backend} | {len(rs)} | {span([r['speedup_vs_xla_bf16'] for r in rs])} | "
                   f"{span([r.get('ratio_vs_best_peer') for r in rs])} |")
    return out


if __name__ == "__main__":
    main()
