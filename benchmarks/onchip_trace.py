"""Phase timings of onchip_kernel (per-tensor current scaling in one read of x) from a trace build.

    MXPREC_CUDA_LIBRARY=build-cuda/ab/trace.so PYTHONPATH=src python3 benchmarks/onchip_trace.py \
        [--shapes 16384x4096,4096x4096] [--launches 8] [--out DIR]

The library must be built with ``EXTRA_NVCC_FLAGS=-DMXPREC_ONCHIP_TRACE`` (never the default build): thread 0 of
CTAs 0, G / 2 and G - 1 then prints, per launch, its SM clock at each phase boundary (each after a __syncthreads)
and the global timer at entry, after the grid barrier and at the end. This script quantizes bf16 normal inputs
with TensorScaling(E4M3) along the last axis in a child process, reads the child's output, and prints per shape
the median time (us) from the CTA's entry to each boundary: loads issued (issue), spill rounds' keys (spillkeys),
held rounds landed (landed), the CTA's keys maxed (amax), past the grid barrier (barrier), spill rounds' codes
(spillcodes), shared-memory rounds' codes (smemcodes), end. Cycles become us by the SM clock measured between
the barrier and the end (global timer against clock64). Also the spread of the CTAs' entry and barrier exits.
Writes DIR/onchip_trace.json when --out is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

MARKS = ["issue", "spillkeys", "landed", "amax", "barrier", "spillcodes", "smemcodes", "end"]
LINE = re.compile(r"oc_trace n=(\d+) cta=(\d+) (.*)")


def child(shapes, launches):
    import jax
    import jax.numpy as jnp

    from mxprec.formats import E4M3
    from mxprec.kernels import cuda, ffi
    from mxprec.scaling import TensorScaling

    if not cuda.available():
        print(f"mxprec CUDA library unavailable: {cuda._load()[1]}", file=sys.stderr)
        sys.exit(2)
    f = jax.jit(lambda v: ffi.quantize(v, TensorScaling(E4M3), -1))
    for shape in shapes:
        x = jax.random.normal(jax.random.PRNGKey(0), shape, jnp.float32).astype(jnp.bfloat16)
        jax.block_until_ready(f(x))
        print(f"oc_shape {shape[0]}x{shape[1]}", flush=True)
        for _ in range(launches):
            jax.block_until_ready(f(x))
        sys.stdout.flush()


def summarize(text: str) -> dict:
    by_n: dict[int, list[dict]] = {}
    for m in LINE.finditer(text):
        fields = dict(kv.split("=") for kv in m.group(3).split())
        rec = {k: int(v) for k, v in fields.items()}
        rec["cta"] = int(m.group(2))
        by_n.setdefault(int(m.group(1)), []).append(rec)
    out = {}
    for n, recs in by_n.items():
        recs = recs[3 * (len(recs) // 12) :]  # the first quarter of the launches (three lines each): warming up
        ghz = statistics.median(
            (r["end"] - r["barrier"]) / max(r["g_end"] - r["g_bar"], 1) for r in recs if r["g_end"] > r["g_bar"]
        )
        row = {"n": n, "sm_ghz": ghz, "records": len(recs)}
        for mark in MARKS:
            row[mark + "_us"] = statistics.median(r[mark] for r in recs) / ghz / 1e3
        # per launch: the three CTAs printed consecutively; spread of their entries / barrier exits in us
        entries, bars = [], []
        for i in range(0, len(recs) - 2, 3):
            trio = recs[i : i + 3]
            entries.append((max(r["g_entry"] for r in trio) - min(r["g_entry"] for r in trio)) / 1e3)
            bars.append((max(r["g_bar"] for r in trio) - min(r["g_bar"] for r in trio)) / 1e3)
        row["entry_spread_us"] = statistics.median(entries) if entries else None
        row["barrier_exit_spread_us"] = statistics.median(bars) if bars else None
        out[n] = row
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="16384x4096,4096x4096")
    p.add_argument("--launches", type=int, default=8)
    p.add_argument("--out", default=None)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.child:
        child(shapes, args.launches)
        return 0
    proc = subprocess.run(
        [sys.executable, __file__, "--child", "--shapes", args.shapes, "--launches", str(args.launches)],
        check=False,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
        return proc.returncode
    rows = summarize(proc.stdout)
    if not rows:
        print("no oc_trace lines: is MXPREC_CUDA_LIBRARY a -DMXPREC_ONCHIP_TRACE build?", file=sys.stderr)
        return 1
    print(f"{'n':>10} {'GHz':>5} " + " ".join(f"{m:>10}" for m in MARKS) + "  entry±  bar±  (us from the CTA's entry)")
    for n, r in sorted(rows.items()):
        print(
            f"{n:>10} {r['sm_ghz']:5.2f} "
            + " ".join(f"{r[m + '_us']:10.2f}" for m in MARKS)
            + f"  {r['entry_spread_us']:.2f}  {r['barrier_exit_spread_us']:.2f}"
        )
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "onchip_trace.json"), "w") as fh:
            json.dump({"rows": list(rows.values()), "raw_tail": proc.stdout[-20000:]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
