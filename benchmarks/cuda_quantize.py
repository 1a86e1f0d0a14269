"""Bandwidth of the CUDA mxprec_quantize kernels (libmxprec_cuda.so) against a device copy and XLA.

    PYTHONPATH=src python3 benchmarks/cuda_quantize.py [--out DIR] [--shapes 8192x8192,16384x4096]
                                                       [--quick] [--reps 5] [--sets 4]

Rows, per bf16 input shape (R, C) and quantization axis (-1: along C, contiguous; 0: along R, the
column-wise copy Wgrad needs): "copy" (``jnp.copy`` in jit: XLA's device-to-device copy), "xla"
(the pure-JAX mxprec.quantize compiled by XLA, the peer) and "mxprec" (mxprec.kernels.ffi.quantize:
the custom call) for tensor / delayed / row / tile 1x128 / tile 128x128 / MXFP8 / MXFP4 / NVFP4, and Wgrad's
K-major 1x128 copy ("tile1x128_e4m3_kmajor": mxprec.kernels.cuda.quantize_transposed against the quantize along
axis 0 + FP8 code transpose it replaces, "mxprec+transpose"), and dY's two copies in one call
("tile1x128_e4m3_rows_kmajor": mxprec.kernels.cuda.quantize_rows_and_transposed, the 1 x 128 row copy and the K-major
copy from one read of x, against the two calls it replaces, "two calls"; GB/s counts x once plus both copies).
Timing: one jitted call quantizes ``--sets`` distinct inputs (together far larger than the 50 MB L2);
``--timing kernel`` (default) sums the GPU kernel time of ``--reps`` calls from a jax.profiler trace,
``--timing wall`` takes the median wall time of synchronized calls (launch + sync overhead included:
the first two sessions' tables used it); either is divided by the sets. GB/s counts the bytes an
ideal single pass moves: x read once + data + scales written. "passes" says how often the kernel
reads x (tensor current scaling and NVFP4 need the tensor amax first: 2); "% copy" is GB/s over the
copy row's GB/s (copy: read + write of x); "% copy traffic" counts every pass's read of x (the DRAM
traffic the kernel really moves) against the same copy bandwidth. Writes DIR/cuda_quantize.json (device, command, date,
rows) and DIR/cuda_quantize.md. Imports nothing CUDA-specific at import time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

SHAPES = [(8192, 8192), (16384, 4096)]

# name -> (spec factory, passes over x by the CUDA kernel along axis -1 / axis 0)
KERNELS = {
    "tensor_e4m3": ("TensorScaling(E4M3)", 2, 2),
    "delayed_e4m3": ("DelayedScaling(E4M3, history_len=16)", 1, 1),
    "row_e4m3": ("RowScaling(E4M3)", 1, 2),
    "tile1x128_e4m3": ("TileScaling(E4M3, (1, 128))", 1, 1),
    "tile128x128_e4m3": ("TileScaling(E4M3, (128, 128))", 1, 1),
    "mxfp8_e4m3": ("MXScaling(E4M3)", 1, 1),
    "mxfp6_e3m2": ("MXScaling(E3M2)", 1, 1),
    "mxfp6_e2m3": ("MXScaling(E2M3)", 1, 1),
    "mxfp4_e2m1": ("MXScaling(E2M1)", 1, 1),
    "nvfp4": ("NVFP4Scaling()", 2, 2),
    # Wgrad's K-major copy (axis 0 only): "mxprec" is mxprec.kernels.cuda.quantize_transposed (codes written
    # transposed), "mxprec+transpose" the path it replaces (quantize along axis 0, then transpose_codes).
    "tile1x128_e4m3_kmajor": ("TileScaling(E4M3, (1, 128))", 1, 1),
    # dY's Dgrad (1 x 128 along rows) and Wgrad (K-major) copies (axis 0 only): "mxprec" is
    # mxprec.kernels.cuda.quantize_rows_and_transposed, "two calls" ffi.quantize along axis -1 + quantize_transposed.
    "tile1x128_e4m3_rows_kmajor": ("TileScaling(E4M3, (1, 128))", 1, 1),
}
ROWS_KMAJOR = {"tile1x128_e4m3_rows_kmajor"}
KMAJOR = {"tile1x128_e4m3_kmajor", *ROWS_KMAJOR}
QUICK = ["tensor_e4m3", "row_e4m3", "tile1x128_e4m3", "mxfp8_e4m3"]
AXIS0 = ["tensor_e4m3", "row_e4m3", "tile1x128_e4m3", "mxfp8_e4m3", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "nvfp4",
         *KMAJOR]


# Input distributions (drawn in f32, rounded to bf16). The kernels' per-element work can depend on the values: until
# the twenty-fifth session hgroup_kernel's FP8 certificate refused FP8-subnormal quotients, and col_kernel divided a
# column pair per element when one of its tile scales was a power of two (a bf16 amax of 7 * 2**k), which
# jax.random.normal drawn in bf16 (the input until the twenty-fourth session) almost never produces
# (benchmarks/results/h200_quantize_kmajor.md, h200_quantize_group_division.md).
DISTS = {
    "normal": "standard normal",
    "lognormal": "sign * exp(N(0, 3)) (magnitudes over ~10 decades, as gradients)",
    "zeros": "standard normal with 1 % exact zeros",
}


def _input(key, shape, dist):
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, shape, jnp.float32)
    if dist == "lognormal":
        x = jnp.sign(x) * jnp.exp(3.0 * jax.random.normal(k2, shape, jnp.float32))
    elif dist == "zeros":
        x = jnp.where(jax.random.uniform(k2, shape) < 0.01, 0.0, x)
    return x.astype(jnp.bfloat16)


def _spec(name):
    from mxprec import formats
    from mxprec.scaling import DelayedScaling, MXScaling, NVFP4Scaling, RowScaling, TensorScaling, TileScaling

    env = {
        "E4M3": formats.E4M3,
        "E2M1": formats.E2M1,
        "E3M2": formats.E3M2,
        "E2M3": formats.E2M3,
        "DelayedScaling": DelayedScaling,
        "MXScaling": MXScaling,
        "NVFP4Scaling": NVFP4Scaling,
        "RowScaling": RowScaling,
        "TensorScaling": TensorScaling,
        "TileScaling": TileScaling,
    }
    return eval(KERNELS[name][0], env)


def _out_bytes(spec, shape, axis) -> int:
    import math

    from mxprec.scaling import MXScaling, NVFP4Scaling, RowScaling, TileScaling

    n = math.prod(shape)
    data = n * spec.fmt.bits // 8
    length = shape[axis]
    if isinstance(spec, RowScaling):
        return data + 4 * (n // length)
    if isinstance(spec, TileScaling):
        return data + 4 * (n // (spec.tile[0] * spec.tile[1]))
    if isinstance(spec, MXScaling):
        return data + n // spec.block
    if isinstance(spec, NVFP4Scaling):
        return data + n // 16 + 4
    return data + 4


def _time(fn, args, reps, timing="kernel"):
    """Seconds per call: summed GPU kernel time from a profiler trace of ``reps`` calls ("kernel"),
    or the median wall time of synchronized calls ("wall", which includes launch and sync overhead:
    ~0.1 ms per call, as large as one kernel on these shapes)."""
    import jax

    jax.block_until_ready(fn(*args))
    jax.block_until_ready(fn(*args))
    if timing == "kernel":
        import tempfile

        from mxprec.bench.trace_summary import summarize_trace

        with tempfile.TemporaryDirectory() as d:
            with jax.profiler.trace(d):
                for _ in range(reps):
                    out = fn(*args)
                jax.block_until_ready(out)
            ms = summarize_trace(d, steps=reps, top=0)["gpu_kernel_ms"]
        if ms <= 0:
            raise RuntimeError("the profiler trace holds no GPU kernels: use --timing wall off GPU")
        return ms * 1e-3
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def run(args):
    import jax
    import jax.numpy as jnp

    from mxprec.kernels import cuda, ffi
    from mxprec.quantize import quantize
    from mxprec.scaling import DelayedScaling, DelayedScalingState

    if not cuda.available() and not args.any_platform:
        print(f"mxprec CUDA library unavailable: {cuda._load()[1]}", file=sys.stderr)
        return None
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    names = QUICK if args.quick else list(KERNELS)
    if args.kernels:
        names = args.kernels.split(",")
    rows = []
    dev = jax.devices()[0]
    print(f"device: {dev.device_kind}; jax {jax.__version__}; sets {args.sets}; reps {args.reps}")
    hdr = f"{'shape':>12} {'axis':>4} {'kernel':>18} {'impl':>7} {'us':>9} {'GB/s':>8} {'%copy':>6} {'passes':>6} {'%traffic':>8}"
    print(hdr)
    for shape in shapes:
        key = jax.random.PRNGKey(0)
        xs = []
        for _ in range(args.sets):
            key, sub = jax.random.split(key)
            xs.append(_input(sub, shape, args.dist))
        xs = tuple(xs)
        x_bytes = xs[0].size * xs[0].dtype.itemsize

        copy = jax.jit(lambda *t: [jnp.copy(v) for v in t])
        t_copy = _time(copy, xs, args.reps, args.timing) / args.sets
        copy_gbps = 2 * x_bytes / t_copy / 1e9
        row = {
            "shape": list(shape),
            "axis": None,
            "kernel": "copy",
            "impl": "xla",
            "us": t_copy * 1e6,
            "gbps": copy_gbps,
            "pct_copy": 100.0,
            "passes": 1,
            "bytes": 2 * x_bytes,
        }
        rows.append(row)
        print(
            f"{'x'.join(map(str, shape)):>12} {'-':>4} {'copy':>18} {'xla':>7} {row['us']:9.1f} {copy_gbps:8.0f} "
            f"{100.0:6.1f} {1:>6}"
        )
        for name in names:
            spec = _spec(name)
            for axis in (-1, 0):
                if (axis == 0 and name not in AXIS0) or (axis == -1 and name in KMAJOR):
                    continue
                state = None
                if isinstance(spec, DelayedScaling):
                    st = DelayedScalingState.init(spec)
                    state = DelayedScalingState(st.amax_history, jnp.float32(0.0123))
                nbytes = x_bytes + _out_bytes(spec, shape, axis) * (2 if name in ROWS_KMAJOR else 1)
                passes = KERNELS[name][1 if axis == -1 else 2]
                if name == "tensor_e4m3":
                    passes = _current_scaling_passes(xs[0].size, xs[0].dtype.itemsize, getattr(dev, "core_count", 0))

                def ours(*t, spec=spec, axis=axis, state=state):
                    return [ffi.quantize(v, spec, axis, state=state) for v in t]

                def peer(*t, spec=spec, axis=axis, state=state):
                    return [quantize(v, spec, axis=axis, state=state) for v in t]

                def kmajor(*t, spec=spec):
                    return [cuda.quantize_transposed(v[None], spec) for v in t]

                def quantize_then_transpose(*t, spec=spec):
                    qs = [ffi.quantize(v, spec, 0) for v in t]
                    return [(cuda.transpose_codes(q.data), jnp.swapaxes(q.scale, 0, 1)) for q in qs]

                def rows_and_kmajor(*t, spec=spec):
                    return [cuda.quantize_rows_and_transposed(v[None], spec, spec) for v in t]

                def two_calls(*t, spec=spec):
                    return [(ffi.quantize(v, spec, -1), cuda.quantize_transposed(v[None], spec)) for v in t]

                if name in ROWS_KMAJOR:
                    impls = (("mxprec", rows_and_kmajor), ("two calls", two_calls))
                elif name in KMAJOR:
                    impls = (("mxprec", kmajor), ("mxprec+transpose", quantize_then_transpose))
                else:
                    impls = (("mxprec", ours),) if args.no_peer else (("mxprec", ours), ("xla", peer))
                for impl, fn in impls:
                    try:
                        t = _time(jax.jit(fn), xs, args.reps, args.timing) / args.sets
                    except Exception as e:  # noqa: BLE001 - report and keep going
                        print(
                            f"{name} axis {axis} {impl}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr
                        )
                        continue
                    gbps = nbytes / t / 1e9
                    row = {
                        "shape": list(shape),
                        "axis": axis,
                        "kernel": name,
                        "impl": impl,
                        "us": t * 1e6,
                        "gbps": gbps,
                        "pct_copy": 100.0 * gbps / copy_gbps,
                        "passes": passes if impl == "mxprec" else None,
                        "pct_copy_traffic": 100.0 * (nbytes + (passes - 1) * x_bytes) / t / 1e9 / copy_gbps
                        if impl == "mxprec"
                        else None,
                        "bytes": nbytes,
                    }
                    rows.append(row)
                    print(
                        f"{'x'.join(map(str, shape)):>12} {axis:>4} {name:>18} {impl:>7} {row['us']:9.1f} "
                        f"{gbps:8.0f} {row['pct_copy']:6.1f} {passes if impl == 'mxprec' else '-':>6} "
                        f"{_fmt(row['pct_copy_traffic']):>8}"
                    )
        del xs
    return {
        "device": str(dev.device_kind),
        "platform": dev.platform,
        "jax": jax.__version__,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "sets": args.sets,
        "reps": args.reps,
        "dist": args.dist,
        "timing": args.timing,
        "env": {k: v for k, v in os.environ.items() if k.startswith("MXPREC_")},
        "rows": rows,
    }


def _current_scaling_passes(n: int, itemsize: int, sms: int) -> float:
    """Reads of x by per-tensor current scaling's CUDA kernels: amax + cast (MXPREC_QUANTIZE_ONCHIP=0) read it twice;
    onchip_kernel (1 / 2, the default) once where it fits on chip (sms CTAs x 1024 threads x (2 + 14) chunks of 8
    16-bit elements; 1 + 7 for f32: csrc/cuda_kernels/cuda_quantize.cu's default build) and the rest twice."""
    if os.environ.get("MXPREC_QUANTIZE_ONCHIP", "2") == "0" or sms <= 0:
        return 2
    held = sms * 1024 * 8 * (8 if itemsize == 4 else 16)
    return round(1 + max(0, n - held) / n, 2)


_TIMING_DOC = {
    "kernel": "summed GPU kernel time per call from a jax.profiler trace",
    "wall": "median wall time of synchronized calls, launch overhead included",
}


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def markdown(result) -> str:
    lines = [
        f"# mxprec_quantize CUDA kernels: {result['device']}",
        "",
        (
            f"`{result['command']}` — {result['date']}, jax {result['jax']}; timing: "
            f"{result.get('timing', 'wall')} ({_TIMING_DOC[result.get('timing', 'wall')]}); bf16 input; GB/s = "
            "(x read once + outputs written) / time; % copy = GB/s over XLA's device copy (read + write of x)."
        ),
        "",
        "| shape | axis | kernel | impl | µs | GB/s | % copy | x passes | % copy traffic |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        shape = "×".join(map(str, r["shape"]))
        axis = "-" if r["axis"] is None else str(r["axis"])
        passes = "-" if r["passes"] is None else str(r["passes"])
        lines.append(
            f"| {shape} | {axis} | {r['kernel']} | {r['impl']} | {r['us']:.1f} | {r['gbps']:.0f} | "
            f"{r['pct_copy']:.1f} | {passes} | {_fmt(r.get('pct_copy_traffic'))} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="directory for cuda_quantize.json / cuda_quantize.md")
    p.add_argument("--shapes", default="", help="comma-separated RxC (default 8192x8192,16384x4096)")
    p.add_argument("--kernels", default="", help=f"comma-separated subset of {','.join(KERNELS)}")
    p.add_argument("--quick", action="store_true", help=f"only {','.join(QUICK)}")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--no-peer", action="store_true", help="time mxprec's kernels only (same-call A/Bs of builds)")
    p.add_argument("--sets", type=int, default=4, help="distinct inputs per timed call")
    p.add_argument("--dist", choices=tuple(DISTS), default="normal",
                   help="input values: " + "; ".join(f"{k}: {v}" for k, v in DISTS.items()).replace("%", "%%"))
    p.add_argument("--timing", choices=("kernel", "wall"), default="kernel",
                   help="kernel: GPU kernel time from a profiler trace; wall: synchronized wall time")
    p.add_argument("--any-platform", action="store_true", help=argparse.SUPPRESS)  # smoke test on CPU
    args = p.parse_args(argv)
    result = run(args)
    if result is None:
        return 1
    write_results(args.out, "cuda_quantize", result, markdown)
    return 0


def write_results(out_dir, stem: str, result: dict, to_markdown) -> None:
    """OUT_DIR/STEM.json (the result) and OUT_DIR/STEM.md (``to_markdown(result)``); nothing without a dir."""
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
        f.write(to_markdown(result))
    print(f"wrote {out_dir}/{stem}.json and {stem}.md")


if __name__ == "__main__":
    sys.exit(main())
