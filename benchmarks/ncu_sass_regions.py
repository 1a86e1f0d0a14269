"""Warp-stall samples of one kernel by SASS region, from Nsight Compute's source page.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass | gzip > K.csv.gz   # h200_session.sh ncu-src
    python3 benchmarks/ncu_sass_regions.py K.csv.gz --map 30          # coarse map: find the regions
    python3 benchmarks/ncu_sass_regions.py K.csv.gz mainloop=345:515 epilogue=515:940 producer=1060:1344

``--map N``: per block of N instructions, the share of all stall samples, the largest execution count in the
block (per-k-tile code runs tiles x k-tiles x warps times, per-tile code tiles x warps times) and its most
frequent opcodes. ``NAME=A:B[,C:D...]``: the share of the samples on instructions [A, B) (+ [C, D) ...),
indices as in the map; the rest is reported as ``other``. Used for benchmarks/results/h200_ncu_gemm.md.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import re


def load(path: str) -> list[tuple[int, int, str]]:
    """(stall samples, instructions executed, SASS text) per instruction, in address order."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")  # after the "Kernel Name" line
    ix = {h: i for i, h in enumerate(rows[start])}
    samples, executed = ix["Warp Stall Sampling (All Samples)"], ix["Instructions Executed"]
    return [(int(r[samples] or 0), int(r[executed] or 0), r[ix["Source"]].strip()) for r in rows[start + 1 :]]


def coarse_map(instrs, block: int) -> list[str]:
    total = sum(s for s, _, _ in instrs) or 1
    lines = []
    for b in range(0, len(instrs), block):
        chunk = instrs[b : b + block]
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", src).split(" ")[0] for _, _, src in chunk)
        top = ",".join(f"{op}x{n}" for op, n in ops.most_common(4))
        share = 100 * sum(s for s, _, _ in chunk) / total
        lines.append(f"{b:6d} {share:6.2f}% max_executed={max(e for _, e, _ in chunk):>10d} {top}")
    return lines


def regions(instrs, spec: dict[str, list[tuple[int, int]]]) -> dict[str, float]:
    total = sum(s for s, _, _ in instrs) or 1
    out = {name: sum(instrs[i][0] for a, b in ranges for i in range(a, b)) for name, ranges in spec.items()}
    out["other"] = total - sum(out.values())
    return {name: round(100 * v / total, 1) for name, v in out.items()}


def _parse(arg: str) -> tuple[str, list[tuple[int, int]]]:
    name, _, ranges = arg.partition("=")
    if not ranges:
        raise argparse.ArgumentTypeError(f"expected NAME=A:B[,C:D], got {arg!r}")
    return name, [tuple(int(v) for v in part.split(":")) for part in ranges.split(",")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output (optionally .gz)")
    ap.add_argument("regions", nargs="*", type=_parse, help="NAME=A:B[,C:D...] instruction index ranges")
    ap.add_argument("--map", type=int, default=0, metavar="N", help="print a coarse map in blocks of N instructions")
    args = ap.parse_args(argv)
    instrs = load(args.csv)
    print(f"{len(instrs)} instructions, {sum(s for s, _, _ in instrs)} stall samples")
    if args.map:
        print("\n".join(coarse_map(instrs, args.map)))
    if args.regions:
        print(regions(instrs, dict(args.regions)))


if __name__ == "__main__":
    main()
