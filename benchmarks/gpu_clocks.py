"""SM clock, power and clock-event reasons while each Llama arm runs, from an ``nvidia-smi`` log.

    OUT=$OUT bash benchmarks/h200_session.sh clocks:fp8_delayed,bf16     # logs and runs the arms, then:
    python3 benchmarks/gpu_clocks.py --log r/smi_log.csv --runs r/clocks_ARM/ [...] --out f.json

``h200_session.sh clocks:ARMS`` samples ``nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,
power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 50`` while it runs each arm
(``python -m mxprec.bench llama``, one process per arm). This script keeps the samples drawn during
each arm's warmup and timed steps (the row's ``steps_unix`` window, which leaves out compiling and
the BF16 arm's profile and standalone GEMM timing) while the GPU is busy (power above ``--busy-w``)
and reports the SM clock, power and the clock-event reasons (bit 0x4: software power cap) per arm, and per
timed step: the mean SM clock of the samples inside it and the correlation of step times with those clocks
(the blocking loop runs the steps back to back, so they are placed backwards from the window's end).
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import glob
import json
import os
import statistics


def read_log(path: str) -> list[tuple[float, int, float, int, str]]:
    """(unix time, SM MHz, W, °C, reasons) per sample of an nvidia-smi CSV log (unparsable lines skipped).

    nvidia-smi writes the machine's local time; it is read as UTC, the device machines' zone (a log from a
    machine in another zone would miss the bench's ``steps_unix`` windows: no busy samples)."""
    out = []
    with open(path) as f:
        for row in csv.reader(f):
            try:
                t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                out.append((t.replace(tzinfo=datetime.UTC).timestamp(), int(row[1].split()[0]),
                            float(row[3].split()[0]), int(row[4]), row[5].strip()))
            except (ValueError, IndexError):
                continue
    return out


def summarize(samples, start: float, end: float, busy_w: float) -> dict:
    """The busy samples of [start, end]: SM clock and power (min / median / max), reasons by count."""
    busy = [s for s in samples if start <= s[0] <= end and s[2] > busy_w]
    if not busy:
        return {"busy_samples": 0}
    clk, pw = [s[1] for s in busy], [s[2] for s in busy]
    reasons = collections.Counter(s[4] for s in busy)
    return {
        "busy_samples": len(busy),
        "sm_mhz": {"min": min(clk), "median": statistics.median(clk), "max": max(clk)},
        "power_w": {"min": min(pw), "median": round(statistics.median(pw), 1), "max": max(pw)},
        "temperature_c_max": max(s[3] for s in busy),
        "reasons": dict(reasons.most_common()),
        "power_capped_fraction": round(sum(n for r, n in reasons.items() if int(r, 16) & 0x4) / len(busy), 3),
    }


def per_step_clocks(samples, end: float, step_times: list[float]) -> dict:
    """Mean SM clock of the samples inside each timed step (None where none fell inside) and the Pearson
    correlation of step time with it over the steps that have one. The steps end back to back at ``end``."""
    spans, t = [], end
    for dur in reversed(step_times):
        spans.append((t - dur, t))
        t -= dur
    spans.reverse()
    clocks = []
    for a, b in spans:
        inside = [s[1] for s in samples if a <= s[0] <= b]
        clocks.append(round(statistics.fmean(inside), 1) if inside else None)
    pairs = [(d, c) for d, c in zip(step_times, clocks) if c is not None]
    corr = None
    if len(pairs) >= 3 and statistics.pstdev(c for _, c in pairs) > 0 and statistics.pstdev(d for d, _ in pairs) > 0:
        corr = round(statistics.correlation([d for d, _ in pairs], [c for _, c in pairs]), 3)
    return {"step_sm_mhz": clocks, "corr_step_time_sm_clock": corr}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", required=True, help="the nvidia-smi CSV")
    p.add_argument("--runs", nargs="+", required=True, help="per-arm directories, each with the bench's llama_*.json")
    p.add_argument("--busy-w", type=float, default=300.0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    samples = read_log(args.log)
    rows = []
    for d in args.runs:
        (bench,) = glob.glob(os.path.join(d, "llama_*.json"))
        with open(bench) as fh:
            r = json.load(fh)["rows"][0]
        start, end = r["steps_unix"]
        times = r["step_times_s"]
        rows.append({"arm": r["arm"], "step_s_mean": r["step_s_mean"], "step_s_median": statistics.median(times),
                     "step_times_s": times, **summarize(samples, start, end, args.busy_w),
                     **per_step_clocks(samples, end, times)})
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("step_times_s", "step_sm_mhz")}), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"command": "python3 benchmarks/gpu_clocks.py " + " ".join(argv or []), "busy_w": args.busy_w,
                       "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
