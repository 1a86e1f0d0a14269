"""What a profile's XLA kernels compute, from the optimized HLO text of the same program.

:func:`mxprec.bench.trace_summary.summarize_trace` lists kernels by name; an XLA fusion's kernel is named
after the fusion (``input_transpose_fusion_4`` for ``%input_transpose_fusion.4``, or for the fusion whose
``deduplicated_name`` / ``scheduling_name`` it is). This module reads each fusion's result type, operands
and ``op_name`` from the HLO dump (``--xla_dump_to=DIR --xla_dump_hlo_as_text``, the ``*after_optimizations.txt``
file of the train step) and files the non-GEMM kernels under roles:

* ``fp8_transpose``: a transpose fusion writing FP8 codes (the K-contiguous copies for the FP8 GEMMs);
* ``fp8_cast``: any other fusion with an FP8 result (a cast alone or fused into its producer, with or
  without the amax reduction);
* ``mxprec_quantize``: mxprec's CUDA quantize kernels (``mxprec::cuda_quantize``);
* ``optimizer``: fusions reading optimizer state (``opt_state`` operands: AdamW's update);
* ``norm``: fusions under a ``*norm`` scope;
* ``other``: everything else (residual adds, RoPE, loss, copies, ...).

    roles, rows = attribute(summary["top_kernels_ms"], open(hlo_path).read())
"""

from __future__ import annotations

import re

__all__ = ["ROLES", "attribute", "fusion_index"]

ROLES = ("fp8_transpose", "fp8_cast", "mxprec_quantize", "optimizer", "norm", "other")

_FUSION = re.compile(r"\s+(?:ROOT )?%(\S+) = (.*?) fusion\((.*?)\), kind=\w+, calls=%[^,\s]+(.*)")
_FP8_TYPE = re.compile(r"\bf8e(4m3fn|5m2)\[")


def fusion_index(hlo_text: str) -> dict[str, tuple[str, str, str]]:
    """``{kernel name: (result type, operands, op_name)}`` for every fusion of the HLO text.

    Keys are the fusion's name, deduplicated name and scheduling name with dots as underscores (the
    profiler's spelling); the first fusion seen keeps a key.
    """
    index: dict[str, tuple[str, str, str]] = {}
    for line in hlo_text.split("\n"):
        m = _FUSION.match(line)
        if not m:
            continue
        name, result, operands, rest = m.groups()
        op = re.findall(r'op_name="([^"]+)"', rest)
        names = [name] + re.findall(r'(?:deduplicated|scheduling)_name="([^"]+)"', rest)
        for key in names:
            index.setdefault(key.replace(".", "_"), (result, operands, op[0] if op else ""))
    return index


def _role(kernel: str, info: tuple[str, str, str] | None) -> str:
    if "cuda_quantize" in kernel:
        return "mxprec_quantize"
    if info is None:
        return "other"
    result, operands, op_name = info
    if _FP8_TYPE.search(result):
        return "fp8_transpose" if "transpose" in kernel else "fp8_cast"
    if "opt_state" in operands:
        return "optimizer"
    if re.search(r"norm\b|norm/", op_name):
        return "norm"
    return "other"


def attribute(top_kernels, hlo_text: str) -> tuple[dict[str, float], list[dict]]:
    """Per-role milliseconds of the non-GEMM, non-attention kernels of ``top_kernels`` (rows ``(name,
    category, ms)`` of summarize_trace) and one row per kernel: name, ms, role, result type, op_name."""
    index = fusion_index(hlo_text)
    roles = dict.fromkeys(ROLES, 0.0)
    rows = []
    for name, category, ms in top_kernels:
        if category != "other":
            continue
        info = index.get(name)
        role = _role(name, info)
        roles[role] += ms
        rows.append({"kernel": name, "ms": ms, "role": role, "result": info[0] if info else "",
                     "op_name": info[2] if info else ""})
    return roles, rows


def main(argv=None) -> int:
    """``python -m mxprec.bench.hlo_attribution LLAMA_JSON HLO_TXT[.gz]``: the role table of a profiled arm."""
    import argparse
    import gzip
    import json

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("llama_json", help="mxprec.bench llama --profile output (rows[0].profile.top_kernels_ms)")
    p.add_argument("hlo", help="the train step's *after_optimizations.txt (or .txt.gz)")
    args = p.parse_args(argv)
    with open(args.llama_json) as f:
        profile = json.load(f)["rows"][0]["profile"]
    opener = gzip.open if args.hlo.endswith(".gz") else open
    with opener(args.hlo, "rt") as f:
        roles, _ = attribute(profile["top_kernels_ms"], f.read())
    print("| role | ms per step |\n|---|---:|")
    for role, ms in roles.items():
        print(f"| {role} | {ms:.2f} |")
    print(f"| (top kernels' total) | {sum(roles.values()):.2f} of {profile['categories_ms'].get('other', 0.0):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
