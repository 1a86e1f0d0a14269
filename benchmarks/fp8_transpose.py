"""Bandwidth of the CUDA FP8 code transpose (mxprec_transpose_bytes) against XLA's transpose and a device copy.

The K-contiguous copies of FP8 codes that the per-tensor GEMMs need (Wgrad's X and dY, Fprop's W), at the
shapes of the llama3_8b_4layer step (16384 tokens, D 4096, F 14336, KV 1024, vocab 32000). Per shape, in one
process: "copy" (``jnp.copy`` of the same bytes in jit: XLA's device-to-device copy), "xla" (``jnp.swapaxes`` in
jit: XLA's transpose emitter, what MXPREC_XLA_FP8_TRANSPOSE=separate runs) and "mxprec"
(``mxprec.kernels.cuda.transpose_codes``). GB/s = (read + write of the bytes) / time; % copy = GB/s over the copy
row's. Time: summed GPU kernel time from a profiler trace over ``--sets`` distinct inputs per call (so that no
input sits in L2), divided by the sets. Writes DIR/fp8_transpose.json and .md.

    python benchmarks/fp8_transpose.py --out DIR
"""

from __future__ import annotations

import argparse
import datetime
import sys

from cuda_quantize import _time, write_results  # benchmarks/ is the script's directory

SHAPES = ["16384x4096", "16384x14336", "4096x14336", "14336x4096", "16384x1024", "16384x32000", "8192x8192"]


def run(args) -> dict | None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from mxprec.kernels import cuda

    if not cuda.available():
        print(f"mxprec CUDA library unavailable: {cuda._load()[1]}", file=sys.stderr)
        return None
    dev = jax.devices()[0]
    print(f"device: {dev.device_kind}; jax {jax.__version__}; sets {args.sets}; reps {args.reps}")
    impls = {
        "copy": jax.jit(lambda *t: [jnp.copy(v) for v in t]),
        "xla": jax.jit(lambda *t: [jnp.swapaxes(v, -1, -2) for v in t]),
        "mxprec": jax.jit(lambda *t: [cuda.transpose_codes(v) for v in t]),
    }
    rows = []
    print(f"{'shape':>12} {'impl':>7} {'us':>9} {'GB/s':>8} {'%copy':>6}")
    for s in args.shapes.split(","):
        shape = tuple(int(v) for v in s.split("x"))
        rng = np.random.default_rng(0)
        xs = [
            jax.lax.bitcast_convert_type(jnp.asarray(rng.integers(0, 256, size=shape, dtype=np.uint8)), jnp.float8_e4m3fn)
            for _ in range(args.sets)
        ]
        nbytes = int(np.prod(shape))
        want = np.swapaxes(np.asarray(jax.lax.bitcast_convert_type(xs[0], jnp.uint8)), 0, 1)
        got = np.asarray(jax.lax.bitcast_convert_type(impls["mxprec"](xs[0])[0], jnp.uint8))
        if not np.array_equal(got, want):
            raise AssertionError(f"transpose_codes differs from swapaxes at {shape}")
        copy_gbps = None
        for impl, fn in impls.items():
            t = _time(fn, xs, args.reps) / args.sets
            gbps = 2 * nbytes / t / 1e9
            copy_gbps = copy_gbps or gbps
            row = {"shape": list(shape), "impl": impl, "us": t * 1e6, "gbps": gbps, "pct_copy": 100.0 * gbps / copy_gbps}
            rows.append(row)
            print(f"{s:>12} {impl:>7} {row['us']:9.1f} {gbps:8.0f} {row['pct_copy']:6.1f}")
    return {
        "device": dev.device_kind,
        "jax": jax.__version__,
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/fp8_transpose.py " + " ".join(sys.argv[1:]),
        "rows": rows,
    }


def markdown(result) -> str:
    lines = [
        f"# FP8 code transposes on {result['device']} ({result['date']}, jax {result['jax']})",
        "",
        (f"Command: `{result['command']}`. GB/s = (read + write) / GPU kernel time; % copy = over XLA's device copy "
         "of the same bytes."),
        "",
        "| shape (R×C, 1 byte) | impl | µs | GB/s | % copy |",
        "|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {'×'.join(map(str, r['shape']))} | {r['impl']} | {r['us']:.1f} | {r['gbps']:.0f} | {r['pct_copy']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="directory for fp8_transpose.json / fp8_transpose.md")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated RxC")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--sets", type=int, default=4, help="distinct inputs per timed call")
    args = p.parse_args(argv)
    result = run(args)
    if result is None:
        return 1
    write_results(args.out, "fp8_transpose", result, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
