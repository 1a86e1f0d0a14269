"""Summarize a ``jax.profiler.trace`` capture: GPU kernel time by category and the top kernels.

The profiler writes ``<dir>/plugins/profile/<run>/*.trace.json.gz`` (Chrome trace events). Device
kernels are the complete events (``ph == "X"``) on a GPU process's ``Stream`` threads; XLA's own
per-op rows (``XLA Ops``) are summed separately so a kernel can be traced back to its HLO op.

    summary = summarize_trace(log_dir, steps=2)
    summary["categories_ms"]   # {"gemm_fp8": .., "gemm_wide": .., "attention": .., "other": ..} per step
    summary["idle"]            # per GPU: time it ran no kernel between its first and last traced kernel
                               # (idle_gaps' dict, one per GPU process)
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re

__all__ = ["categorize", "idle_gaps", "summarize_trace"]

_FP8 = re.compile(r"e4m3|e5m2|f8e|fp8|_f8|qgmma", re.IGNORECASE)
_GEMM = re.compile(r"gemm|xmma|cutlass|cublas|matmul|gemv|wgmma|sm90_|nvjet", re.IGNORECASE)
_ATTN = re.compile(r"cudnn|fmha|flash|sdpa|attention|dot_product", re.IGNORECASE)
# cuBLASLt's nvjet kernels spell their A/B types as the first letters after the arch: q = E4M3,
# r = E5M2 (t = BF16, s = FP32), e.g. nvjet_sm90_qrtst_... is an E4M3 x E5M2 GEMM.
_NVJET_FP8 = re.compile(r"nvjet_sm\d+a?_[qr][qr]")
# mxprec's own CUDA GEMMs (csrc/cuda_kernels) are all FP8; their names carry no type, e.g.
# mxprec::cuda::persistent::blockwise_gemm_kernel<2, 0, 1, 192, 5, 1, 2>(...).
_MXPREC_FP8 = re.compile(r"mxprec::cuda::(\w+::)*\w*gemm")


def categorize(kernel: str) -> str:
    """``gemm_fp8`` | ``gemm_wide`` | ``attention`` | ``other`` from a GPU kernel's name."""
    if _ATTN.search(kernel):
        return "attention"
    if _GEMM.search(kernel):
        fp8 = _FP8.search(kernel) or _NVJET_FP8.search(kernel) or _MXPREC_FP8.search(kernel)
        return "gemm_fp8" if fp8 else "gemm_wide"
    return "other"


# Idle-gap buckets (us): a back-to-back launch on one stream leaves ~1-2 us; longer gaps mean the next kernel was
# not yet launched (host-side work, a synchronization) or waited on another stream.
_GAP_BUCKETS_US = ((0.0, "<5us"), (5.0, "5-20us"), (20.0, "20-100us"), (100.0, "100us-1ms"), (1000.0, ">=1ms"))


def idle_gaps(kernels: list[tuple[float, float, str]], steps: int = 1, top: int = 15) -> dict:
    """Where one GPU ran no kernel: gaps between the union of its kernels' [start, start + dur) intervals (us).

    ``kernels``: (start_us, dur_us, name) of every kernel on the device's streams. Each gap is charged to
    the kernel that ends it (the launch that came late) and to the one before it. Returns per-step ms:
    ``idle_ms``, ``by_bucket`` (ms and count per gap-length bucket), ``before_kernel_ms`` /
    ``after_kernel_ms`` (the kernels whose start ends / whose end starts the most idle time) and
    ``largest_us`` (the longest gaps with the kernels around them, e.g. a step boundary).
    """
    per_step = 1e-3 / max(steps, 1)
    ordered = sorted(kernels)
    gaps = []  # (gap_us, previous kernel, next kernel)
    end, last = None, ""
    for start, dur, name in ordered:
        if end is not None and start > end:
            gaps.append((start - end, last, name))
        if end is None or start + dur > end:
            end, last = start + dur, name
    buckets = {label: [0.0, 0] for _, label in _GAP_BUCKETS_US}
    before, after = collections.Counter(), collections.Counter()
    for gap, prev, nxt in gaps:
        label = [lab for lo, lab in _GAP_BUCKETS_US if gap >= lo][-1]
        buckets[label][0] += gap
        buckets[label][1] += 1
        before[nxt[:120]] += gap
        after[prev[:120]] += gap
    return {
        "idle_ms": round(sum(g for g, _, _ in gaps) * per_step, 3),
        "by_bucket": {lab: {"ms": round(ms * per_step, 3), "count": round(n / max(steps, 1), 1)}
                      for lab, (ms, n) in buckets.items()},
        "before_kernel_ms": [[k, round(us * per_step, 3)] for k, us in before.most_common(top)],
        "after_kernel_ms": [[k, round(us * per_step, 3)] for k, us in after.most_common(top)],
        "largest_us": [[round(g, 1), prev[:80], nxt[:80]] for g, prev, nxt in sorted(gaps, reverse=True)[:top]],
    }


def _latest_trace(log_dir: str) -> str:
    files = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.trace.json.gz"))
    if not files:
        raise FileNotFoundError(f"no *.trace.json.gz under {log_dir}/plugins/profile")
    return max(files, key=os.path.getmtime)


def summarize_trace(log_dir: str, steps: int = 1, top: int = 25) -> dict:
    """Per-step GPU time (ms): by kernel category, top kernels (and their launches), top XLA ops; launches per step."""
    with gzip.open(_latest_trace(log_dir), "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu_pids, stream_tids, op_tids = set(), set(), set()
    lines = {}  # (pid, tid) -> "process / thread", for reading an unfamiliar trace
    pnames = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        name = str(e.get("args", {}).get("name", ""))
        if e.get("name") == "process_name":
            pnames[e["pid"]] = name
            if "GPU" in name:
                gpu_pids.add(e["pid"])
        elif e.get("name") == "thread_name":
            lines[(e["pid"], e["tid"])] = name
            if name.startswith("Stream"):
                stream_tids.add((e["pid"], e["tid"]))
            elif name == "XLA Ops":
                op_tids.add((e["pid"], e["tid"]))
    kernels, ops, per_line = collections.Counter(), collections.Counter(), collections.Counter()
    launches = collections.Counter()
    intervals = collections.defaultdict(list)  # GPU pid -> [(start, dur, kernel)]
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (e["pid"], e.get("tid"))
        per_line[f"{pnames.get(key[0], key[0])} / {lines.get(key, key[1])}"] += float(e.get("dur", 0.0))
        if e.get("pid") not in gpu_pids:
            continue
        if key in stream_tids:
            kernels[e["name"]] += float(e.get("dur", 0.0))
            launches[e["name"]] += 1
            intervals[e["pid"]].append((float(e.get("ts", 0.0)), float(e.get("dur", 0.0)), e["name"]))
        elif key in op_tids:
            ops[e["name"]] += float(e.get("dur", 0.0))
    per_step = 1e-3 / max(steps, 1)  # us -> ms per step
    cats = collections.Counter()
    for k, us in kernels.items():
        cats[categorize(k)] += us
    return {
        "steps": steps,
        "gpu_kernel_ms": round(sum(kernels.values()) * per_step, 3),
        "kernel_launches": round(sum(launches.values()) / max(steps, 1)),
        "categories_ms": {c: round(us * per_step, 3) for c, us in cats.most_common()},
        "top_kernels_ms": [[k[:200], categorize(k), round(us * per_step, 3)] for k, us in kernels.most_common(top)],
        # launches per step of the same kernels (a memset or a small transpose: many cheap calls, or a few slow ones)
        "top_kernels_launches": {k[:200]: round(launches[k] / max(steps, 1), 1) for k, _ in kernels.most_common(top)},
        "top_ops_ms": [[k[:120], round(us * per_step, 3)] for k, us in ops.most_common(top)],
        "lines_ms": {k: round(us * per_step, 3) for k, us in per_line.most_common(20)},
        # one entry per GPU (pid) traced; the single-GPU benchmark has one
        "idle": [idle_gaps(v, steps=steps) for _, v in sorted(intervals.items())],
    }
