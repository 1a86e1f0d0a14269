"""Run a few CUDA quantize calls once each, for Nsight Compute to count their DRAM and L2 traffic.

    ncu --kernel-name regex:'onchip_kernel|tall_col_kernel' --metrics dram__bytes_read.sum,... \
        python3 benchmarks/ncu_quantize_traffic.py --kinds tensor:-1,row:0 --shape 16384x4096

Each kind (``tensor``: per-tensor current scaling, ``row``: row scaling, ``tile``: 1 x 128 tiles, ``mxfp8``; E4M3) is
compiled and run once on one bf16 input; ncu replays the kernels it names. ``h200_session.sh ncu-traffic`` wraps this with the metrics it reads
(DRAM bytes read / written, L2 hit rate): whether a kernel's second read of x comes from L2 or from DRAM.
"""

from __future__ import annotations

import argparse


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default="tensor:-1,row:0",
                   help="comma-separated KIND:AXIS, KIND in tensor, row, tile (1 x 128), mxfp8")
    p.add_argument("--shape", default="16384x4096", help="ROWSxCOLS of the bf16 input")
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from mxprec import formats as F
    from mxprec.kernels import ffi
    from mxprec.scaling import MXScaling, RowScaling, TensorScaling, TileScaling

    rows, cols = (int(v) for v in args.shape.split("x"))
    x = jax.random.normal(jax.random.PRNGKey(0), (rows, cols), jnp.bfloat16)
    specs = {"tensor": TensorScaling(F.E4M3), "row": RowScaling(F.E4M3), "tile": TileScaling(F.E4M3, (1, 128)),
             "mxfp8": MXScaling(F.E4M3)}
    for item in args.kinds.split(","):
        kind, axis = item.split(":")
        spec, ax = specs[kind], int(axis)
        q = jax.block_until_ready(jax.jit(lambda v, s=spec, a=ax: ffi.quantize(v, s, a))(x))
        print(f"{kind} axis {ax}: {q.data.shape} {q.data.dtype}", flush=True)


if __name__ == "__main__":
    main()
