"""ROCm (gfx950 / MI355X) lowering of ``mxprec_scaled_gemm`` and ``mxprec_quantize``.

**Compile-checked only: never run.** ``libmxprec_hip.so`` (csrc/hip_kernels/, built with
``bash csrc/hip_kernels/build_host.sh`` or ``cmake -S . -B build -DMXPREC_BUILD_HIP=ON``) has been
compiled against Debian's ROCm 5.2 HIP headers with clang-22 for gfx950, but we have no AMD GPU:
neither the handlers nor this wrapper have executed (docs/backends/hip.md).

The library exports the C symbols ``MxprecScaledGemmHip`` and ``MxprecQuantizeHip``, XLA FFI
handlers for the custom-call targets ``mxprec_scaled_gemm`` / ``mxprec_quantize`` on platform
``"ROCM"`` (the contracts of csrc/common/scaled_gemm.h / quantize.h). It is loaded lazily with
ctypes, and only on a machine whose JAX has a ROCm backend.

What the gfx950 kernels serve (anything else: :func:`supports` is False; called anyway, the handler
returns ``Unimplemented``):

* both operands MX (``MXScaling``, block 32) of one family: FP8 x FP8 (e4m3 / e5m2, all pairs,
  so HYBRID), FP6 x FP6 (e2m3 / e3m2), e2m1 x e2m1; K % 32 == 0;
* both per-tensor FP8 (``TensorScaling`` / ``DelayedScaling``), any e4m3 / e5m2 pair; K % 32 == 0;
* both ``TileScaling`` FP8 with tiles 1x128 / 128x128 (not both 128x128); K % 128 == 0;
* output float32 / bfloat16 / float16, optional f32 ``(N,)`` bias; any M, N.

The kernels read K-major operands only (``lhs (B, M, K')``, ``rhs (B, N, K')``: contract 2 for
both). An operand whose contraction axis is 1 is **transposed by this wrapper** (its data bytes and
its MX / tile scales; FP4 / FP6 packing along K is preserved by a transpose of the packed bytes)
before the call.

Both calls go through the package's sharding (custom_partitioning + Shardy rule) and batching rules
(:mod:`mxprec.kernels.ffi`, docs/ffi.md), as the CPU and CUDA calls do; a shard's local GEMM keeps the
kernels' K unit (128 for tiles, 32 otherwise).

:func:`quantize` (the twin of :func:`mxprec.quantize`) serves MX block 32 (all formats), tensor /
delayed / row / tile 1x128, 128x128 (FP8) and NVFP4 along any axis: the handler quantizes along the
contiguous axis only, so another axis is moved last before the call and the outputs moved back
(:func:`supports_quantize` says what is served; stochastic rounding is not).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mxprec.kernels.ffi import (
    _bias_buffer,
    _gemm_vmappable,
    _GemmCfg,
    _operand_desc,
    _quant_cfg,
    _quant_vmappable,
    _view3,
)
from mxprec.kernels.native import NativeLibrary
from mxprec.quantize import QTensor, _validate as _validate_quantize_args, qtensor_layout
from mxprec.scaling import (
    DelayedScaling,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    TensorScaling,
    TileScaling,
    delayed_scale_of,
)

__all__ = [
    "LIBRARY_NAME",
    "SYMBOLS",
    "available",
    "is_rocm",
    "library_search_paths",
    "quantize",
    "require",
    "scaled_gemm",
    "supports",
    "supports_quantize",
    "why_quantize_unsupported",
    "why_unsupported",
]

LIBRARY_NAME = "libmxprec_hip.so"
SCALED_GEMM_TARGET = "mxprec_scaled_gemm"
QUANTIZE_TARGET = "mxprec_quantize"
SYMBOLS = {SCALED_GEMM_TARGET: "MxprecScaledGemmHip", QUANTIZE_TARGET: "MxprecQuantizeHip"}
PLATFORM = "ROCM"
BUILD_HINT = (
    "`bash csrc/hip_kernels/build_host.sh` (writes build-hip/libmxprec_hip.so; needs clang-22 and the "
    "HIP runtime headers, see docs/backends/hip.md) or `cmake -S . -B build -DMXPREC_BUILD_HIP=ON`"
)

_BITS = {"e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4}
OUT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
MX_BLOCK = 32


def is_rocm() -> bool:
    """Whether JAX has a ROCm backend with devices here."""
    try:
        if jax.devices("rocm"):
            return True
    except RuntimeError:
        pass
    try:
        devs = jax.devices("gpu")
    except RuntimeError:
        return False
    return bool(devs) and "rocm" in str(getattr(devs[0].client, "platform_version", "")).lower()


def _rocm_precondition():
    if is_rocm():
        return None
    return (f"JAX has no ROCm backend here (default backend {jax.default_backend()!r}); the HIP kernels "
            f"need an AMD gfx950 GPU (MI355X) and {LIBRARY_NAME}, built with {BUILD_HINT}")


_LIB = NativeLibrary(file=LIBRARY_NAME, symbols=SYMBOLS, platform=PLATFORM, build_hint=BUILD_HINT,
                     build_dirs=("build-hip", "build"), precondition=_rocm_precondition)
_load = _LIB.load
_state = _LIB.state
library_search_paths = _LIB.search_paths


def available() -> bool:
    """Whether the ROCm handlers are loaded and registered (JAX has a ROCm backend)."""
    return _LIB.available()


def require() -> None:
    """Loads ``libmxprec_hip.so`` or raises RuntimeError naming what to build."""
    _LIB.require("mxprec HIP (ROCm) kernels")


def _k_unit(kind: str) -> int:
    """The multiple of K the gfx950 GEMMs need for operands of ``kind`` (and a shard's local K keeps)."""
    return 128 if kind == "tile" else 32


def _gemm_kind(q: QTensor) -> str | None:
    s = q.spec
    if isinstance(s, (TensorScaling, DelayedScaling)):
        return "tensor"
    if isinstance(s, TileScaling):
        return "tile"
    if isinstance(s, MXScaling):
        return "mx"
    return None


def why_unsupported(
    lhs,
    rhs,
    *,
    lhs_contract: int | None = None,
    rhs_contract: int | None = None,
    out_dtype=jnp.bfloat16,
    check_library: bool = True,
) -> str:
    """Empty string when :func:`scaled_gemm` can run these operands, else the reason."""
    for name, q in (("lhs", lhs), ("rhs", rhs)):
        if not isinstance(q, QTensor):
            return f"{name} is not a QTensor"
        if _gemm_kind(q) is None:
            return f"{name} has {type(q.spec).__name__}; only MXScaling, TensorScaling / DelayedScaling and TileScaling are implemented"
        if len(q.shape) != 3:
            return f"{name} must be 3-D, got shape {q.shape}"
    lc = lhs.axis if lhs_contract is None else lhs_contract
    rc = rhs.axis if rhs_contract is None else rhs_contract
    if lc not in (1, 2) or rc not in (1, 2):
        return f"contraction axes must be 1 or 2, got {lc} / {rc}"
    if lhs.axis != lc or rhs.axis != rc:
        return "operands must be quantized along their contraction axis"
    lk, rk = _gemm_kind(lhs), _gemm_kind(rhs)
    if lk != rk:
        return f"mixed scaling kinds {lk} x {rk} are not implemented"
    lf, rf = lhs.spec.fmt.name, rhs.spec.fmt.name
    if lk == "mx":
        if lhs.spec.block != MX_BLOCK or rhs.spec.block != MX_BLOCK:
            return f"MX block {lhs.spec.block} / {rhs.spec.block} is not implemented (32)"
        if _BITS[lf] != _BITS[rf]:
            return f"MX pair {lf} x {rf} mixes element widths (FP8 x FP8, FP6 x FP6, e2m1 x e2m1 only)"
    elif _BITS[lf] != 8 or _BITS[rf] != 8:
        return f"{lk} scaling needs FP8 operands, got {lf} x {rf}"
    if lk == "tile":
        (tra, tca), (trb, tcb) = lhs.spec.tile, rhs.spec.tile
        if (
            tca != 128
            or tcb != 128
            or tra not in (1, 128)
            or trb not in (1, 128)
            or (tra == 128 and trb == 128)
        ):
            return f"tiles {tra}x{tca} x {trb}x{tcb} are not implemented (1x128 / 128x128, not both 128x128)"
    od = jnp.dtype(out_dtype)
    if od not in OUT_DTYPES:
        return f"out_dtype {od} is not built (float32, bfloat16, float16)"
    b, k = lhs.shape[0], lhs.shape[lc]
    if rhs.shape[0] != b or rhs.shape[rc] != k:
        return f"lhs {lhs.shape} and rhs {rhs.shape} disagree on B or K"
    unit = _k_unit(lk)
    if k % unit:
        return f"K={k} must be a multiple of {unit} for {lk} operands"
    if check_library and not available():
        return _load()[1]
    return ""


def supports(
    lhs, rhs, *, lhs_contract=None, rhs_contract=None, out_dtype=jnp.bfloat16, check_library=True
) -> bool:
    """Whether :func:`scaled_gemm` runs these operands on the gfx950 kernels (library loaded on ROCm)."""
    return not why_unsupported(
        lhs,
        rhs,
        lhs_contract=lhs_contract,
        rhs_contract=rhs_contract,
        out_dtype=out_dtype,
        check_library=check_library,
    )


def _k_major(q: QTensor, contract: int, kind: str) -> tuple[jax.Array, jax.Array]:
    """(data, scale) with K on axis 2: transposes data and MX / tile scales when contract == 1."""
    if kind == "tensor":
        scale = jnp.asarray(q.scale, jnp.float32).reshape(())
    else:
        scale = jnp.asarray(q.scale)
    if contract == 2:
        return q.data, scale
    data = jnp.swapaxes(q.data, 1, 2)
    return data, scale if kind == "tensor" else jnp.swapaxes(scale, 1, 2)


def scaled_gemm(lhs: QTensor, rhs: QTensor, *, lhs_contract: int, rhs_contract: int, out_dtype, bias=None):
    """``out[b, m, n] = sum_k lhs[b, m, k] * rhs[b, k, n] (+ bias[n])`` on the gfx950 kernels.

    Args:
      lhs: QTensor ``(B, M, K)`` (lhs_contract=2) or ``(B, K, M)`` (=1).
      rhs: QTensor ``(B, N, K)`` (rhs_contract=2) or ``(B, K, N)`` (=1).
      out_dtype: float32, bfloat16 or float16.
      bias: optional float32 ``(N,)``, added in FP32 before the output cast.

    Operands with contraction axis 1 are transposed here so the kernel sees K contiguous. Raises
    ValueError when :func:`supports` is False. Never run (no AMD GPU): docs/backends/hip.md.
    """
    reason = why_unsupported(
        lhs, rhs, lhs_contract=lhs_contract, rhs_contract=rhs_contract, out_dtype=out_dtype
    )
    if reason:
        raise ValueError(f"mxprec.kernels.hip.scaled_gemm: {reason}")
    out_dtype = jnp.dtype(out_dtype)
    kind = _gemm_kind(lhs)
    a, sa = _k_major(lhs, lhs_contract, kind)
    b, sb = _k_major(rhs, rhs_contract, kind)
    n = b.shape[1]
    bias_buf = _bias_buffer(bias, n)

    # Both operands are K-major after _k_major: contract 2 on each. The call goes through the package's sharding
    # and batching rules (mxprec.kernels.ffi, as the CPU and CUDA calls do); a shard's local K keeps the kernels'
    # K % unit.
    cfg = _GemmCfg(_operand_desc(lhs.spec, 2), _operand_desc(rhs.spec, 2), out_dtype.name, bias is not None,
                   k_unit=_k_unit(kind))
    one = jnp.ones((), jnp.float32)
    return _gemm_vmappable(cfg)(a, sa, one, b, sb, one, bias_buf)


def _quant_call(cfg, x3, scale_in):
    """The partitioned, vmappable ``mxprec_quantize`` call (tests/test_hip_python.py replaces it with a stand-in)."""
    return _quant_vmappable(cfg)(x3, scale_in)


def why_quantize_unsupported(spec, key=None) -> str:
    """Empty string when :func:`quantize` serves ``spec`` on the gfx950 kernels, else the reason
    (shape checks are :func:`mxprec.quantize`'s; the library is not checked here)."""
    if key is not None:
        return "stochastic rounding (key=...) is not implemented by the gfx950 quantize kernels (RNE only)"
    fmt = getattr(getattr(spec, "fmt", None), "name", None)
    if isinstance(spec, MXScaling):
        if spec.block != MX_BLOCK:
            return f"MX block {spec.block} is not implemented (32 only)"
        return ""
    if isinstance(spec, NVFP4Scaling):
        if spec.block != 16 or fmt != "e2m1":
            return f"NVFP4 {fmt} block {spec.block} is not implemented (e2m1 block 16 only)"
        return ""
    if isinstance(spec, (TensorScaling, DelayedScaling, RowScaling, TileScaling)):
        if fmt not in ("e4m3", "e5m2"):
            return f"{type(spec).__name__} needs an FP8 format (e4m3 / e5m2), got {fmt}"
        if isinstance(spec, TileScaling):
            tr, tc = spec.tile
            if tc != 128 or tr not in (1, 128):
                return f"tile {tr}x{tc} is not implemented (1x128 and 128x128 only)"
        return ""
    return f"{type(spec).__name__} is not a scaling spec the gfx950 quantize kernels serve"


def supports_quantize(spec, key=None) -> bool:
    """Whether :func:`quantize` serves ``spec`` (False for stochastic rounding, i.e. a ``key``, and
    for kinds / formats / blocks / tiles the gfx950 kernels do not implement). Does not check that
    the library is loaded: see :func:`available`."""
    return not why_quantize_unsupported(spec, key)


def quantize(x: jax.Array, spec, axis: int = -1, state=None) -> QTensor:
    """:func:`mxprec.quantize` on the gfx950 ``mxprec_quantize`` handler (bit-identical to it by
    construction; never run: no AMD GPU).

    Serves ``MXScaling`` block 32 (every format, rceil / floor), ``TensorScaling``, ``DelayedScaling``
    (``state.scale`` goes in the ``scale_in`` buffer with attribute ``delayed=1``), ``RowScaling``,
    ``TileScaling`` 1x128 / 128x128 (FP8; power_of_two either way) and ``NVFP4Scaling`` (e2m1,
    block 16); RNE only (see :func:`supports_quantize`). x float32 / bfloat16 / float16 of rank >= 1.

    The handler quantizes along the contiguous axis of its ``(B, R, C)`` view only, so when ``axis``
    is not the last it is moved last here (``jnp.moveaxis``: a transpose) and data / scales are moved
    back after. For tile rows > 1 the view's R is the row axis of :func:`mxprec.quantize` (the last
    axis other than ``axis``). Buffers and attributes: csrc/common/quantize.h, as
    :func:`mxprec.kernels.ffi.quantize` builds them. Raises ValueError for an unsupported spec
    (or a DelayedScaling without ``state``), RuntimeError when the library is not loaded.
    """
    reason = why_quantize_unsupported(spec)
    if reason:
        raise ValueError(f"mxprec.kernels.hip.quantize: {reason}")
    try:
        axis = _validate_quantize_args(x, spec, axis)
    except ValueError as e:
        msg = str(e).removeprefix("quantize: ")
        raise ValueError(f"mxprec.kernels.hip.quantize: {msg}") from None
    if isinstance(spec, DelayedScaling):
        if state is None:
            raise ValueError(
                "mxprec.kernels.hip.quantize: DelayedScaling needs state=DelayedScalingState "
                "(DelayedScalingState.init(spec))"
            )
        scale_in = delayed_scale_of(state, "mxprec.kernels.hip.quantize")
    else:
        scale_in = jnp.ones((), jnp.float32)
    require()
    shape = tuple(x.shape)
    last = len(shape) - 1
    xm = x if axis == last else jnp.moveaxis(x, axis, -1)
    mshape = tuple(xm.shape)
    # axis last: the view is (prod(lead), shape[-2], C), so R is the row axis of tile scaling
    # (for axis != last, the row axis is the original last axis, now at -2).
    shape3, axis3 = _view3(mshape, last)
    assert axis3 == 2
    cfg = _quant_cfg(spec, axis3)
    data3, scale3, amax, ts = _quant_call(cfg, jnp.reshape(xm, shape3), scale_in)
    data_shape, scale_shape = qtensor_layout(spec, mshape, last)
    data = data3.reshape(data_shape)
    scale = scale3.reshape(scale_shape)
    if axis != last:
        data = jnp.moveaxis(data, -1, axis)
        if cfg.kind != 1:
            scale = jnp.moveaxis(scale, -1, axis)
    return QTensor(
        data=data,
        scale=scale,
        amax=amax,
        tensor_scale=ts if cfg.kind == 5 else None,
        spec=spec,
        axis=axis,
        shape=shape,
        dtype=jnp.dtype(x.dtype),
    )
