"""Quick H200 benchmark of the sm_90a per-tensor FP8 GEMM (mxprec.kernels.cuda) against peers.

    PYTHONPATH=src python3 benchmarks/cuda_fp8_gemm.py [--out results.json] [--shapes 8192x8192x8192,...]

Rows: mxprec CUDA kernel (bf16 out; e4m3xe4m3 and e5m2xe4m3), XLA bf16 dot, XLA direct FP8 dot
(lax.dot_general on float8 operands, preferred f32, times the scale product, cast to bf16), and
torch._scaled_mm tensorwise if torch is importable. Shapes are M x K x N; operands are
A (M, K) and B (N, K) (K contiguous). Timing: R GEMMs on R distinct input sets (more than L2)
inside one jitted call (torch: CUDA events around R calls), median over repeats, TFLOP/s =
2 M N K / time. The scale product / output cast are part of each op's time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp

SHAPES = [(8192, 8192, 8192), (16384, 4096, 14336), (16384, 14336, 4096), (4096, 4096, 4096)]


def _inputs(m, k, n, nsets, a_dtype, b_dtype, seed=0):
    key = jax.random.PRNGKey(seed)
    sets = []
    for i in range(nsets):
        k1, k2, key = jax.random.split(key, 3)
        a = jax.random.normal(k1, (m, k), jnp.bfloat16)
        b = jax.random.normal(k2, (n, k), jnp.bfloat16)
        sets.append((a.astype(a_dtype), b.astype(b_dtype)))
    return sets


def _nsets(m, k, n):
    flop = 2 * m * k * n
    return max(4, min(32, int(5e13 // flop)))  # ~40 ms of work per timed call


def _time_jax(fn, sets, reps=7):
    f = jax.jit(fn)
    jax.block_until_ready(f(sets))
    jax.block_until_ready(f(sets))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(sets))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) / len(sets)


def bench_mxprec(m, k, n, pair):
    from mxprec import formats
    from mxprec.kernels import cuda
    from mxprec.quantize import QTensor
    from mxprec.scaling import TensorScaling

    fm = {"e4m3": (formats.E4M3, jnp.float8_e4m3fn), "e5m2": (formats.E5M2, jnp.float8_e5m2)}
    (fa, da), (fb, db) = fm[pair[0]], fm[pair[1]]
    ns = _nsets(m, k, n)
    sets = [
        (a[None], b[None], jnp.float32(0.5 + i), jnp.float32(0.25))
        for i, (a, b) in enumerate(_inputs(m, k, n, ns, da, db))
    ]

    def q(data, s, f):
        return QTensor(
            data=data,
            scale=s,
            amax=jnp.float32(1),
            tensor_scale=None,
            spec=TensorScaling(f),
            axis=2,
            shape=data.shape,
            dtype=jnp.dtype(jnp.bfloat16),
        )

    def fn(sets):
        return [
            cuda.scaled_gemm(
                q(a, sa, fa), q(b, sb, fb), lhs_contract=2, rhs_contract=2, out_dtype=jnp.bfloat16
            )
            for a, b, sa, sb in sets
        ]

    return _time_jax(fn, sets)


def bench_xla_bf16(m, k, n):
    sets = _inputs(m, k, n, _nsets(m, k, n), jnp.bfloat16, jnp.bfloat16)

    def fn(sets):
        return [
            jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.bfloat16)
            for a, b in sets
        ]

    return _time_jax(fn, sets)


def bench_xla_fp8(m, k, n, pair):
    dt = {"e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
    ns = _nsets(m, k, n)
    sets = [
        (a, b, jnp.float32(0.5 + i), jnp.float32(0.25))
        for i, (a, b) in enumerate(_inputs(m, k, n, ns, dt[pair[0]], dt[pair[1]]))
    ]

    def fn(sets):
        out = []
        for a, b, sa, sb in sets:
            acc = jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            out.append((acc * (sa * sb)).astype(jnp.bfloat16))
        return out

    return _time_jax(fn, sets)


def bench_torch(m, k, n, pair):
    import torch

    dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    ns = _nsets(m, k, n)
    sets = []
    for i in range(ns):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16).to(dt[pair[0]])
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).to(dt[pair[1]])
        sets.append((a, b, torch.tensor(0.5 + i, device="cuda"), torch.tensor(0.25, device="cuda")))

    def run():
        for a, b, sa, sb in sets:
            torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    run()
    run()
    torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    sets.clear()
    torch.cuda.empty_cache()
    return statistics.median(ts) / ns


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", default=None, help="comma-separated MxKxN")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument(
        "--only", default=None, help="comma-separated op names (mxprec,xla_bf16,xla_fp8,torch_scaled_mm)"
    )
    args = ap.parse_args(argv)
    shapes = (
        SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    )
    have_torch = False
    if not args.no_torch:
        try:
            import torch

            have_torch = torch.cuda.is_available()
        except Exception:  # noqa: BLE001
            have_torch = False
    rows = []
    cases = [
        ("mxprec", "cuda", ("e4m3", "e4m3")),
        ("mxprec", "cuda", ("e5m2", "e4m3")),
        ("mxprec", "cuda", ("e4m3", "e5m2")),
        ("xla_bf16", "xla", None),
        ("xla_fp8", "xla", ("e4m3", "e4m3")),
        ("xla_fp8", "xla", ("e5m2", "e4m3")),
    ]
    if have_torch:
        cases += [
            ("torch_scaled_mm", "torch", ("e4m3", "e4m3")),
            ("torch_scaled_mm", "torch", ("e5m2", "e4m3")),
        ]
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c[0] in keep]
    for m, k, n in shapes:
        flop = 2.0 * m * k * n
        for name, backend, pair in cases:
            try:
                if name == "mxprec":
                    t = bench_mxprec(m, k, n, pair)
                elif name == "xla_bf16":
                    t = bench_xla_bf16(m, k, n)
                elif name == "xla_fp8":
                    t = bench_xla_fp8(m, k, n, pair)
                else:
                    t = bench_torch(m, k, n, pair)
                tf = flop / t / 1e12
                err = None
            except Exception as e:  # noqa: BLE001
                tf, err = None, f"{type(e).__name__}: {e}"[:300]
            row = {
                "op": name,
                "backend": backend,
                "pair": "x".join(pair) if pair else "bf16",
                "m": m,
                "k": k,
                "n": n,
                "tflops": None if tf is None else round(tf, 1),
            }
            if err:
                row["error"] = err
            rows.append(row)
            print(
                f"{m}x{k}x{n} {name:16s} {row['pair']:10s} " + (f"{tf:8.1f} TFLOP/s" if tf else err),
                flush=True,
            )
    res = {
        "device": str(jax.devices()[0].device_kind),
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "rows": rows,
    }
    text = json.dumps(res, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
