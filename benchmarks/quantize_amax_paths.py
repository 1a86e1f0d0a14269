"""Kernel time of per-tensor current scaling (bf16 -> E4M3) by the value of the tensor amax.

    MXPREC_CUDA_LIBRARY=LIB PYTHONPATH=src python3 benchmarks/quantize_amax_paths.py \
        [--shapes 16384x4096,4096x4096] [--amaxes 8.25,8.3125] [--reps 5] [--sets 4] [--label NAME] [--out FILE]

``onchip_kernel`` codes a bf16 tensor by one multiply per element where its amax's significand is certified
(csrc/common/bf16_mul_certificate.h) and by Markstein's division otherwise, so the same shape runs two code paths
depending on one value. Each input is ``--sets`` arrays of N(0, 1) in bf16 with one element set to the amax
(8.25 = significand 4: divides; 8.3125 = significand 5: multiplies); the time is benchmarks/cuda_quantize.py's
profiler kernel time of ``ffi.quantize(x, TensorScaling(E4M3), -1)`` per array. Prints one JSON line per row and
appends them to ``--out`` when given. Run once per library (the library is loaded once per process).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _bf16_significand(v: float) -> int:
    """The 7 significand bits of bf16 value v (E4M3's certificate: 4 divides, 5 multiplies)."""
    import numpy as np

    return int((np.float32(v).view(np.uint32) >> 16) & 0x7F)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="16384x4096,4096x4096")
    p.add_argument("--amaxes", default="8.25,8.3125")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--sets", type=int, default=4)
    p.add_argument("--label", default=os.environ.get("MXPREC_CUDA_LIBRARY", "default library"))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp
    from cuda_quantize import _time

    from mxprec.formats import E4M3
    from mxprec.kernels import cuda, ffi
    from mxprec.scaling import TensorScaling

    if not cuda.available():
        print(f"mxprec CUDA library unavailable: {cuda._load()[1]}", file=sys.stderr)
        return 2
    spec = TensorScaling(E4M3)
    f = jax.jit(lambda xs: [ffi.quantize(x, spec, -1).data for x in xs])
    rows = []
    for shape_s in args.shapes.split(","):
        shape = tuple(int(v) for v in shape_s.split("x"))
        for amax in (float(v) for v in args.amaxes.split(",")):
            keys = jax.random.split(jax.random.PRNGKey(1), args.sets)
            xs = [jax.random.normal(k, shape, jnp.float32).astype(jnp.bfloat16).at[0, 0].set(amax) for k in keys]
            got = float(jnp.max(jnp.abs(xs[0].astype(jnp.float32))))
            if got != amax:
                raise ValueError(f"amax {amax} is not the input's amax ({got}): pick one above N(0, 1)'s tail")
            us = _time(f, (xs,), args.reps) / args.sets * 1e6
            row = {"library": args.label, "shape": list(shape), "amax": amax,
                   "significand": _bf16_significand(amax), "us": round(us, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
