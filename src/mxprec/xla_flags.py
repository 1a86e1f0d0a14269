"""The XLA compiler flag mxprec's numerics need on NVIDIA GPUs: IEEE FP32 division.

XLA's GPU compiler lowers every FP32 division to PTX ``div.full.f32`` (it feeds LLVM
``-nvptx-prec-divf32=1``), an approximation with up to 2 ulp of error. The JAX quantizer divides
twice per code (the scale ``amax / max_finite``, then ``x / scale``), so on the H200 (jax 0.11.2)
29 % of random FP32 quotients and 55-62 % of the quantizer's scales came out 1 ulp from the
correctly rounded value (eighteenth session: 1.2 M of 4.2 M quotients; the GPU test
tests/test_cuda.py::test_xla_gpu_exact_div_is_correctly_rounded divides the same way). With
``-nvptx-prec-divf32=2`` (IEEE ``div.rn.f32``) every one of them was exact, and the fp8_delayed
Llama step took 158.4 / 158.4 ms against 157.0 ms (step std 4-5 ms).

So ``import mxprec`` adds ``--xla_backend_extra_options=-nvptx-prec-divf32=2`` to ``XLA_FLAGS``
when no JAX backend has started yet (XLA reads the variable when the first backend starts). It
changes every FP32 division of the process's GPU programs, the user's own included, to IEEE
division. Opt out with ``MXPREC_XLA_GPU_IEEE_DIVISION=0``; then, or when a backend had already
started, the first quantization traced for a GPU by the XLA path warns (``XlaGpuDivisionWarning``)
that its FP32 scales and codes may differ from the reference's. Where only a ROCm plugin is installed
the NVPTX option is not added (its division was not measured).

With it, ``import mxprec`` also adds ``--xla_gpu_experimental_enable_fusion_autotuner=false``
(``FUSION_AUTOTUNER_FLAG``): XLA otherwise autotunes reduction and transpose fusions between its own
emitter and its Triton block-level emitter, whose FP32 division the LLVM option does not reach. On the
H200 (jax 0.11.2, forty-second session) a program quantizing tensors and their transposes together had 9
Triton fusions and 56-67 codes (of 196608) one step off the oracle's, each an exact tie of ``x / scale``;
with the flag none, and the bf16 / fp8_delayed Llama steps were unchanged (221.3 / 159.4 against 221.2 /
159.5 ms). An unknown flag aborts XLA, so it is added only for the jaxlib versions where it was checked
(``FUSION_AUTOTUNER_JAXLIB``; elsewhere the state says ``"set"`` all the same and the Triton fusions stay).
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import shlex
import warnings

import jax

DIVISION_OPTION = "-nvptx-prec-divf32=2"
FUSION_AUTOTUNER_FLAG = "--xla_gpu_experimental_enable_fusion_autotuner=false"
FUSION_AUTOTUNER_JAXLIB = ((0, 10), (0, 11))  # (major, minor) of the jaxlib versions that parse the flag
EXTRA_OPTIONS_FLAG = "--xla_backend_extra_options"
OPT_OUT_ENV = "MXPREC_XLA_GPU_IEEE_DIVISION"


class XlaGpuDivisionWarning(UserWarning):
    """XLA's GPU programs divide with ``div.full.f32``: the XLA quantizer is not bit-exact there."""


def with_ieee_division(xla_flags: str) -> str:
    """``xla_flags`` with ``-nvptx-prec-divf32=2`` among XLA's backend options (merged into an
    existing ``--xla_backend_extra_options``, whose value is a comma-separated list)."""
    tokens = shlex.split(xla_flags)
    if any("nvptx-prec-divf32" in t for t in tokens):
        return xla_flags
    for i, t in enumerate(tokens):
        if t.startswith(EXTRA_OPTIONS_FLAG + "="):
            value = t.split("=", 1)[1]
            tokens[i] = f"{EXTRA_OPTIONS_FLAG}={value + ',' if value else ''}{DIVISION_OPTION}"
            return " ".join(shlex.quote(t) for t in tokens)
    return " ".join([*map(shlex.quote, tokens), f"{EXTRA_OPTIONS_FLAG}={DIVISION_OPTION}"])


def with_native_fusion_emitters(xla_flags: str, jaxlib_version: str | None = None) -> str:
    """``xla_flags`` with ``FUSION_AUTOTUNER_FLAG`` appended, unless it names the fusion autotuner already or
    ``jaxlib_version`` (default: the installed jaxlib's) is not one where the flag was checked."""
    if "xla_gpu_experimental_enable_fusion_autotuner" in xla_flags:
        return xla_flags
    if jaxlib_version is None:
        import jaxlib

        jaxlib_version = jaxlib.__version__
    try:
        major_minor = tuple(int(p) for p in jaxlib_version.split(".")[:2])
    except ValueError:
        return xla_flags
    if major_minor not in FUSION_AUTOTUNER_JAXLIB:
        return xla_flags
    return f"{xla_flags} {FUSION_AUTOTUNER_FLAG}".strip()


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a JAX without the query: assume the worst
        return True


def _gpu_plugins() -> set[str]:
    """Which JAX GPU plugins are installed: a subset of {"cuda", "rocm"} (module names only, nothing imported)."""
    names = [m.name for m in pkgutil.iter_modules() if m.name.startswith(("jax_cuda", "jax_rocm"))]
    spec = importlib.util.find_spec("jax_plugins")
    if spec is not None and spec.submodule_search_locations:
        names += [m.name for m in pkgutil.iter_modules(list(spec.submodule_search_locations))]
    return {kind for kind in ("cuda", "rocm") if any(kind in n for n in names)}


def request_ieee_division() -> str:
    """Called by ``import mxprec``. Returns how IEEE division stands: ``"set"`` (added now),
    ``"user"`` (already in XLA_FLAGS), ``"user_other"`` (XLA_FLAGS sets another division precision),
    ``"opted_out"``, ``"too_late"`` (a backend had started) or ``"not_cuda"`` (only a ROCm plugin is
    installed: the option is NVPTX's, LLVM might reject it)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "nvptx-prec-divf32=2" in flags:
        return "user"
    if "nvptx-prec-divf32" in flags:
        return "user_other"
    if os.environ.get(OPT_OUT_ENV, "1") == "0":
        return "opted_out"
    if _gpu_plugins() == {"rocm"}:
        return "not_cuda"
    if _backends_started():
        return "too_late"
    os.environ["XLA_FLAGS"] = with_native_fusion_emitters(with_ieee_division(flags))
    return "set"


STATE = request_ieee_division()
_warned = False


def ieee_division_in_effect() -> bool:
    """Whether this process's XLA GPU programs divide with IEEE ``div.rn.f32``."""
    return STATE in ("set", "user")


def warn_if_gpu_division_inexact() -> None:
    """Warn once when the XLA quantizer is traced for a GPU without IEEE division."""
    global _warned
    if _warned or ieee_division_in_effect() or STATE == "not_cuda" or jax.default_backend() != "gpu":
        return
    _warned = True
    why = {"opted_out": f"{OPT_OUT_ENV}=0 is set",
           "user_other": "XLA_FLAGS sets another -nvptx-prec-divf32",
           "too_late": "a JAX backend had started before `import mxprec`"}[STATE]
    warnings.warn(
        f"XLA's GPU compiler divides FP32 with div.full.f32 (up to 2 ulp off) and {why}, so the XLA "
        f"quantizer's FP32 scales and codes may differ from the reference's. Import mxprec before "
        f"running any JAX computation, or set XLA_FLAGS={EXTRA_OPTIONS_FLAG}={DIVISION_OPTION}.",
        XlaGpuDivisionWarning, stacklevel=3)
