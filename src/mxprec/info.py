"""``mxprec.info()``: what this machine runs (platform, native libraries, backend per recipe)."""

from __future__ import annotations

import os

import jax


def info() -> str:
    """A human-readable report: jax version, platform, devices, native custom calls available."""
    from mxprec import kernels, recipes

    platform = jax.default_backend()
    lines = [
        f"mxprec on jax {jax.__version__}, platform {platform}, devices {[d.device_kind for d in jax.devices()]}",
        (f"native custom calls (mxprec_scaled_gemm, mxprec_quantize) for {platform}: "
         f"{'available' if kernels.ffi_available(platform) else 'not available'}"),
    ]
    from mxprec import xla_flags

    lines.append(f"XLA GPU FP32 division: {'IEEE (div.rn)' if xla_flags.ieee_division_in_effect() else 'div.full (up to 2 ulp)'}"
                 f" [{xla_flags.STATE}]")
    autotuner = xla_flags.FUSION_AUTOTUNER_FLAG in os.environ.get("XLA_FLAGS", "")
    lines.append(f"XLA GPU reduction / transpose fusions: {'native emitter only' if autotuner else 'autotuned (Triton possible)'}")
    for name in ("bf16", "fp8_current", "mxfp8", "mxfp4"):
        lines.append(f"  {name:12s} -> {kernels.backend_report(recipes.get(name))}")
    return "\n".join(lines)
