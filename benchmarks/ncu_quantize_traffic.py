"""Run a few CUDA quantize calls once each, for Nsight Compute to count their DRAM and L2 traffic.

    ncu --kernel-name regex:'onchip_kernel|tall_col_kernel' --metrics dram__bytes_read.sum,... \
        python3 benchmarks/ncu_quantize_traffic.py --kinds tensor_e4m3:-1,row_e4m3:0 --shape 16384x4096

Each kind (a kernel name of cuda_quantize.py, with its spec and input) is compiled and run once on one bf16 input;
ncu replays the kernels it names. ``h200_session.sh ncu-traffic`` wraps this with the metrics it reads (DRAM bytes
read / written, L2 sectors and hits): whether a kernel's second read of x comes from L2 or from DRAM.
"""

from __future__ import annotations

import argparse

from cuda_quantize import KERNELS, KMAJOR, _input, _spec  # benchmarks/ is the script's directory

# cuda_quantize.py's kernels that one plain ffi.quantize call runs (delayed scaling needs a state; the K-major kinds
# are other calls)
KINDS = [k for k in KERNELS if k not in KMAJOR and not k.startswith("delayed")]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default="tensor_e4m3:-1,row_e4m3:0",
                   help=f"comma-separated KIND:AXIS, KIND one of {','.join(KINDS)}")
    p.add_argument("--shape", default="16384x4096", help="ROWSxCOLS of the bf16 input")
    args = p.parse_args(argv)

    import jax

    from mxprec.kernels import ffi

    rows, cols = (int(v) for v in args.shape.split("x"))
    x = _input(jax.random.PRNGKey(0), (rows, cols), "normal")
    for item in args.kinds.split(","):
        kind, axis = item.split(":")
        if kind not in KINDS:
            p.error(f"unknown kind {kind!r}: one of {','.join(KINDS)}")
        spec, ax = _spec(kind), int(axis)
        q = jax.block_until_ready(jax.jit(lambda v, s=spec, a=ax: ffi.quantize(v, s, a))(x))
        print(f"{kind} axis {ax}: {q.data.shape} {q.data.dtype}", flush=True)


if __name__ == "__main__":
    main()
