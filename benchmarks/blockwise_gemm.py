"""H200 A/B of the FP8 GEMM kernels of each scaling family (mxprec's persistent one, CUTLASS's) against torch.

    PYTHONPATH=src python3 benchmarks/blockwise_gemm.py [--out results.json] [--shapes 8192x8192x8192,...]
                                                         [--kernels cutlass,persistent:1x2,...] [--iters 20]
                                                         [--scalings 2d,1d,tensor,row]

Per shape M x K x N (A (M, K), B (N, K), K contiguous, bf16 out), in one process: torch._scaled_mm of each family
(cuBLASLt; if torch with CUDA is importable), then mxprec's ``scaled_gemm`` (backend ffi) with the family's
MXPREC_SM90_{BLOCKWISE,TENSORWISE,ROWWISE}_KERNEL set to each of --kernels (``persistent:MxN:TILE_N`` also sets
the family's _CLUSTER and _TILE_N; the handler reads them when the FFI call runs). Scalings: "2d" the Fprop
block pair (1x128 x 128x128 tiles), "1d" the Wgrad one (1x128 x 1x128), "tensor" per-tensor, "row" row-wise;
torch's reference is its blockwise (2d, 1d), tensorwise and rowwise form. Timing as benchmarks/gemm.py: mean over
--iters back-to-back calls after 3 warmups, TFLOP/s = 2 M N K / t. Prints and writes JSON rows {shape, impl,
scaling, tflops, ratio_vs_torch} and, per scaling, every kernel's max |difference| to the first kernel's output.
Results: benchmarks/results/h200_blockwise_persistent.md, h200_persistent_tensorwise.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
import gemm as gemm_bench  # bench, torch timing helpers, _b

import mxprec
from mxprec import formats
from mxprec.kernels import cuda
from mxprec.scaling import RowScaling, TensorScaling, TileScaling

DEFAULT_SHAPES = "8192x8192x8192,16384x4096x14336,16384x14336x4096,4096x4096x4096"
DEFAULT_KERNELS = "cutlass,persistent:1x2,persistent:1x1"
DEFAULT_SCALINGS = "2d,1d"

# scaling -> (environment prefix of its kernel choice, torch recipe, lhs spec, rhs spec)
E4M3 = formats.E4M3
SCALINGS = {
    "2d": ("MXPREC_SM90_BLOCKWISE", "fp8_block", TileScaling(E4M3, tile=(1, 128)), TileScaling(E4M3, tile=(128, 128))),
    "1d": ("MXPREC_SM90_BLOCKWISE", "fp8_block_1d", TileScaling(E4M3, tile=(1, 128)), TileScaling(E4M3, tile=(1, 128))),
    "tensor": ("MXPREC_SM90_TENSORWISE", "fp8_current", TensorScaling(E4M3), TensorScaling(E4M3)),
    "row": ("MXPREC_SM90_ROWWISE", "fp8_rowwise", RowScaling(E4M3), RowScaling(E4M3)),
}


def torch_times(m, k, n, iters):
    """{torch recipe: seconds} of torch._scaled_mm tensorwise / rowwise / blockwise 1x128 x 128x128 and (key
    "fp8_block_1d") blockwise 1x128 x 1x128, the Wgrad pair (empty without torch)."""
    rows = gemm_bench.torch_rows(m, k, n, iters, forms=("tensor", "row", "2d", "1d"))
    return {r["recipe"]: r["t"] for r in rows if r.get("t")}


def mxprec_gemm(m, k, n, iters, kernel, scaling):
    """kernel: auto | cutlass | persistent[:CLUSTER[:TILE_N]], with the persistent kernel's environment for the
    scaling's family (PREFIX_CLUSTER MxN, PREFIX_TILE_N); a missing field leaves the variable unset."""
    prefix, _, lspec, rspec = SCALINGS[scaling]
    name, *fields = kernel.split(":")
    fields = (fields + ["", ""])[:2]
    os.environ[f"{prefix}_KERNEL"] = name
    for var, value in zip((f"{prefix}_CLUSTER", f"{prefix}_TILE_N"), fields):
        if value:
            os.environ[var] = value
        else:
            os.environ.pop(var, None)
    kx, kw = jax.random.split(jax.random.PRNGKey(m + k + n))
    x = jax.random.normal(kx, (m, k), jnp.float32)
    w = jax.random.normal(kw, (n, k), jnp.float32)
    qx = mxprec.quantize(x, lspec, axis=1)
    qw = mxprec.quantize(w, rspec, axis=1)
    f = jax.jit(lambda a, b: cuda.scaled_gemm(a, b, lhs_contract=2, rhs_contract=2, out_dtype=jnp.bfloat16))
    a, b = gemm_bench._b(qx), gemm_bench._b(qw)
    return gemm_bench.bench(f, a, b, iters=iters), f(a, b)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=DEFAULT_SHAPES)
    p.add_argument("--kernels", default=DEFAULT_KERNELS)
    p.add_argument("--scalings", default=DEFAULT_SCALINGS, help="of " + ",".join(SCALINGS))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    for spec in args.shapes.split(","):
        m, k, n = (int(v) for v in spec.split("x"))
        scalings = args.scalings.split(",")
        t_torch = torch_times(m, k, n, args.iters)
        for recipe, t in t_torch.items():
            if any(SCALINGS[sc][1] == recipe for sc in scalings):
                rows.append(dict(shape=spec, impl=f"torch._scaled_mm {recipe}", scaling=recipe,
                                 tflops=round(gemm_bench.tflops(m, k, n, t), 1), ratio_vs_torch=1.0))
        outs = {}
        for scaling in scalings:
            t_ref = t_torch.get(SCALINGS[scaling][1])
            for kernel in args.kernels.split(","):
                try:
                    t, out = mxprec_gemm(m, k, n, args.iters, kernel, scaling)
                except Exception as e:  # noqa: BLE001 - a failing kernel is reported, not fatal
                    rows.append(dict(shape=spec, impl=f"mxprec {kernel}", scaling=scaling, error=str(e)[:300]))
                    continue
                outs[(kernel, scaling)] = out
                tf = gemm_bench.tflops(m, k, n, t)
                rows.append(dict(shape=spec, impl=f"mxprec {kernel}", scaling=scaling, tflops=round(tf, 1),
                                 ratio_vs_torch=round(tf / gemm_bench.tflops(m, k, n, t_ref), 3) if t_ref else None))
            kern = [kk for kk in args.kernels.split(",") if (kk, scaling) in outs]
            for other in kern[1:]:  # every kernel's output against the first one's
                o0, o1 = (outs[(kk, scaling)].astype(jnp.float32) for kk in (kern[0], other))
                rows.append(dict(shape=spec, impl=f"max |{kern[0]} - {other}| / max |{kern[0]}|", scaling=scaling,
                                 value=float(jnp.max(jnp.abs(o0 - o1)) / jnp.max(jnp.abs(o0)))))
        for r in rows:
            if r["shape"] == spec:
                print(json.dumps(r), flush=True)
    result = dict(device=jax.devices()[0].device_kind, date=datetime.date.today().isoformat(),
                  command="python3 benchmarks/blockwise_gemm.py " + " ".join(argv or sys.argv[1:]), rows=rows)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
