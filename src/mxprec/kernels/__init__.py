"""Kernel ops and backend choice. One module per op: ``scaled_gemm`` (and its FFI lowering in ``ffi``).

Backend choice is an argument, never an environment variable:

* ``"xla"`` — the exact pure-XLA formulation (see scaled_gemm's docstring).
* ``"ffi"`` — the ``mxprec_scaled_gemm`` custom call; raises if no native library serves this
  platform.
* ``"auto"`` — on an NVIDIA GPU with libmxprec_cuda.so loaded, the CUDA kernels for what measured
  faster than XLA there (``mxprec.kernels.cuda.AUTO_FAMILIES``: block-scaled and row-wise FP8 GEMMs;
  ``AUTO_QUANTIZE``: the quantization of TileScaling, MXScaling and NVFP4Scaling operands; ``AUTO_QUANTIZE_WEIGHTS``:
  that of per-tensor and delayed-scaled weight operands) and the exact XLA path
  for the rest; everywhere else (CPU, where XLA's dot is faster than the C++ reference lowering;
  ROCm, whose kernels never ran) the exact XLA path. Never a silent downgrade of precision: both
  compute the same quantized GEMM.
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


def _auto_uses_cuda() -> bool:
    """Whether "auto" may pick the CUDA kernels here: an NVIDIA GPU with libmxprec_cuda.so loaded.

    On CPU the C++ lowering exists to run the exact custom-call path in CI (backend="ffi"); XLA's CPU
    dot is faster. The ROCm kernels are compiled but have never run, so "auto" keeps XLA there.
    """
    if jax.default_backend() != "gpu":
        return False
    from mxprec.kernels import cuda, hip

    return not hip.is_rocm() and cuda.available()


def resolve_backend(backend: str) -> str:
    """Validates ``backend``; ``"ffi"`` must have a native library here (else RuntimeError).

    ``"auto"`` stays ``"auto"`` where the CUDA kernels are loaded (scaled_gemm then picks per operand
    pair, see ``mxprec.kernels.cuda.AUTO_FAMILIES``) and becomes ``"xla"`` everywhere else.
    """
    if backend == "auto":
        return "auto" if _auto_uses_cuda() else "xla"
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
    if recipe.backend == "ffi" and ffi_available(platform):
        extra = " (raises for operand pairs no kernel serves)" if platform == "gpu" else ""
        if recipe.stochastic_grad_rounding and any(
                getattr(recipe, role) is not None for role in ("dgrad_grad", "wgrad_grad")):
            # mxprec_quantize rounds to nearest only: the keyed stochastic rounding is the JAX quantizer's
            extra += "; dY's stochastically rounded copies are quantized by the JAX quantizer (no native SR)"
        return f"backend: ffi (mxprec_scaled_gemm custom call) on {platform}{extra}"
    if recipe.backend == "auto" and _auto_uses_cuda():
        from mxprec.kernels import cuda

        base = cuda.auto_quantize_kinds()
        kinds = "/".join(k.__name__ for k in base)
        weights = "/".join(k.__name__ for k in cuda.auto_quantize_kinds(weight=True) if k not in base)
        weights = f" (+ {weights} for weights)" if weights else ""
        return (f"backend: auto on gpu: CUDA kernels for the {'/'.join(cuda.auto_families())} FP8 families and "
                f"{kinds}{weights} quantization, exact XLA path (cuBLASLt FP8) for the rest")
    if ffi_available(platform):
        return f"backend: xla exact path on {platform} (auto; the C++ custom call runs with backend='ffi')"
    if recipe.backend == "ffi":
        return f"backend: ffi requested but no mxprec native library for {platform} (will raise)"
    return f"backend: xla exact reference on {platform} (auto: no mxprec native library for {platform})"
