"""Kernel ops and backend choice. One module per op: ``scaled_gemm`` (and its FFI lowering in ``ffi``).

Backend choice is an argument, never an environment variable:

* ``"xla"`` — the exact pure-XLA formulation (see scaled_gemm's docstring).
* ``"ffi"`` — the ``mxprec_scaled_gemm`` custom call; raises if no native library serves this
  platform.
* ``"auto"`` — on GPU, ``"ffi"`` when a native library is loaded; otherwise (and always on CPU,
  where XLA's dot is faster than the C++ reference lowering) the exact XLA path. Never a silent
  downgrade of precision: both compute the same quantized GEMM.
"""

from __future__ import annotations

import jax

from mxprec.kernels.scaled_gemm import reference_scaled_gemm, scaled_gemm

__all__ = ["backend_report", "ffi_available", "reference_scaled_gemm", "resolve_backend", "scaled_gemm"]


def ffi_available(platform: str | None = None) -> bool:
    """Whether mxprec's native custom calls are registered for ``platform`` (default: current)."""
    platform = platform or jax.default_backend()
    if platform == "gpu":
        from mxprec.kernels import cuda, hip

        return hip.available() if hip.is_rocm() else cuda.available()
    from mxprec.kernels import ffi

    return ffi.available(platform)


# Platforms where "auto" prefers the native custom call: none yet. On CPU the C++ lowering exists
# to run the exact custom-call path in CI (backend="ffi"); XLA's CPU dot is faster. On the H200 our
# first CUTLASS sm_90a FP8 kernel measured ~390 TFLOP/s at 8192^3 against ~900-1290 for XLA's own
# FP8 dot (benchmarks/results/h200_gemm.md), so "auto" keeps XLA until the kernel wins.
_AUTO_FFI_PLATFORMS: tuple = ()


def resolve_backend(backend: str) -> str:
    """Validates ``backend``; ``"ffi"`` must have a native library here (else RuntimeError).

    ``"auto"`` stays ``"auto"`` on GPU (scaled_gemm picks the custom call per operand pair) and
    becomes ``"xla"`` on CPU.
    """
    if backend == "auto":
        platform = jax.default_backend()
        return "auto" if platform in _AUTO_FFI_PLATFORMS and ffi_available(platform) else "xla"
    if backend == "ffi":
        if jax.default_backend() == "gpu":
            from mxprec.kernels import cuda, hip

            hip.require() if hip.is_rocm() else cuda.require()
            return "ffi"
        from mxprec.kernels import ffi

        ffi.require(jax.default_backend())
        return "ffi"
    if backend == "xla":
        return "xla"
    raise ValueError(f"backend must be 'auto', 'xla' or 'ffi', got {backend!r}")


def backend_report(recipe) -> str:
    """Which backend the recipe's GEMMs run on here, and why."""
    platform = jax.default_backend()
    if not recipe.quantized:
        return f"backend: xla dot_general (no quantized operand) on {platform}"
    if recipe.backend == "xla":
        return f"backend: xla (requested) on {platform}"
    if ffi_available(platform) and (recipe.backend == "ffi" or platform in _AUTO_FFI_PLATFORMS):
        extra = " for per-tensor FP8 operand pairs, exact XLA path for the rest" if platform == "gpu" else ""
        return f"backend: ffi (mxprec_scaled_gemm custom call) on {platform}{extra}"
    if ffi_available(platform):
        return f"backend: xla exact path on {platform} (auto; the C++ custom call runs with backend='ffi')"
    if recipe.backend == "ffi":
        return f"backend: ffi requested but no mxprec native library for {platform} (will raise)"
    return f"backend: xla exact reference on {platform} (auto: no mxprec native library for {platform})"
