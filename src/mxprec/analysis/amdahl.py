"""Amdahl's-law speedup of a training step when only the GEMMs get faster.

``amdahl_speedup(f, r) = 1 / ((1 - f) + f / r)`` with ``f`` the fraction of BF16 step time spent
in the accelerated matmuls and ``r`` their peak-throughput ratio over BF16.

Peak ratios over BF16 dense tensor-core throughput (:data:`PEAK_RATIO`):

* Hopper (H100/H200): FP8 2×. There are no MX/FP4/FP6 tensor cores; MX formats are executed on
  the FP8 tensor cores (E2M1/E2M3/E3M2 values are exact in E4M3, block scales applied around
  the GEMM), so 2× is their upper bound.
* Blackwell (B200): FP8 / MXFP8 / MXFP6 2×, MXFP4 / NVFP4 4×.

Example: r = 2 → 1.54, 1.67, 1.82 for f = 0.7, 0.8, 0.9; r = 4 → 2.11, 2.50, 3.08.
"""

from __future__ import annotations

__all__ = ["PEAK_RATIO", "amdahl_speedup", "amdahl_table", "peak_ratio"]

PEAK_RATIO: dict[str, dict[str, float]] = {
    "hopper": {"bf16": 1.0, "fp8": 2.0, "mxfp8": 2.0, "mxfp6": 2.0, "mxfp4": 2.0, "nvfp4": 2.0},
    "blackwell": {"bf16": 1.0, "fp8": 2.0, "mxfp8": 2.0, "mxfp6": 2.0, "mxfp4": 4.0, "nvfp4": 4.0},
}


def peak_ratio(fmt: str, arch: str = "hopper") -> float:
    """Peak GEMM throughput of ``fmt`` relative to BF16 on ``arch`` ('hopper' or 'blackwell')."""
    if arch not in PEAK_RATIO:
        raise ValueError(f"unknown arch {arch!r}; known: {sorted(PEAK_RATIO)}")
    table = PEAK_RATIO[arch]
    if fmt not in table:
        raise ValueError(f"unknown format {fmt!r} for {arch}; known: {sorted(table)}")
    return table[fmt]


def amdahl_speedup(f: float, r: float) -> float:
    """Whole-step speedup ``1 / ((1 - f) + f / r)`` for accelerated fraction ``f`` ∈ [0, 1], ratio ``r`` > 0."""
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"fraction f must be in [0, 1], got {f}")
    if not r > 0.0:
        raise ValueError(f"ratio r must be > 0, got {r}")
    return 1.0 / ((1.0 - f) + f / r)


def amdahl_table(r: float, fs: tuple[float, ...] = (0.7, 0.8, 0.9)) -> dict[float, float]:
    """``{f: amdahl_speedup(f, r)}`` for each ``f`` in ``fs``."""
    return {f: amdahl_speedup(f, r) for f in fs}
