"""The one GEMM op every recipe runs: a batched GEMM of two (optionally) quantized operands.

Operands are 3-D: ``lhs`` is ``(B, M, K)`` (``lhs_contract=2``) or ``(B, K, M)``
(``lhs_contract=1``); ``rhs`` is ``(B, K, N)`` (``rhs_contract=1``) or ``(B, N, K)``
(``rhs_contract=2``). Each is a :class:`~mxprec.QTensor` quantized along its contraction axis, or
a plain array (an unquantized operand, already in its compute dtype). The result is
``(B, M, N)`` in ``out_dtype``, accumulated in FP32.

Mathematically equivalent to::

    a = dequantize(lhs, float32); b = dequantize(rhs, float32)
    out = lax.dot_general(a, b, (((lhs_contract,), (rhs_contract,)), ((0,), (0,))),
                          precision=HIGHEST, preferred_element_type=float32).astype(out_dtype)

which :func:`reference_scaled_gemm` implements; it is the oracle for every backend. Backends:

* ``"xla"``: exact XLA formulations. Per-tensor / per-row FP8 operands (scales constant along K)
  run XLA's native FP8 dot (cuBLASLt on GPU, FP32 accumulation: ``ANY_F8_ANY_F8_F32``) with the
  scales applied to the FP32 result. On GPU a per-tensor pair's dot writes ``out_dtype`` directly
  and the scales are applied to that (rounded to ``out_dtype`` twice; ``MXPREC_XLA_FP8_FORM``
  selects the form, see :func:`_gpu_fp8_form`). Block-
  and tile-scaled operands are dequantized and run a wide dot with FP32 accumulation: FP32 on CPU;
  on GPU BF16 where it holds every element exactly (MX and power-of-two tiles, unless a scaled
  value falls below 2**-126; NVFP4 with its FP32 tensor scales applied to the result), else FP32
  at HIGHEST precision (tiles with FP32 scales: exact, and about 10x slower than BF16).
* ``"ffi"``: the ``mxprec_scaled_gemm`` custom call: the C++ lowering on CPU (mxprec.kernels.ffi),
  the CUTLASS sm_90a kernels on NVIDIA GPUs (mxprec.kernels.cuda; per-tensor FP8 pairs), the
  gfx950 kernels on ROCm (mxprec.kernels.hip; compiled, never run), raising
  NotImplementedError for operands no kernel serves.
* ``"auto"``: on NVIDIA GPUs the CUDA kernels for the operand families that measured faster there
  (``mxprec.kernels.cuda.AUTO_FAMILIES``: block-scaled 1x128 / 128x128 tiles and row-wise scales), the
  exact XLA path for the rest (per-tensor FP8 runs cuBLASLt through XLA); on CPU the XLA path (faster than
  the C++ reference lowering).
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
from jax import lax

from mxprec.quantize import SUPPORTED_INPUT_DTYPES, QTensor, dequantize, qtensor_layout, scale_as_f32
from mxprec.scaling import DelayedScaling, MXScaling, NVFP4Scaling, RowScaling, TensorScaling, TileScaling

__all__ = ["Operand", "reference_scaled_gemm", "scaled_gemm", "scaled_gemm_deferred"]

Operand = QTensor | jax.Array
_CONSTANT_ALONG_K = (TensorScaling, DelayedScaling, RowScaling)
_PER_TENSOR = (TensorScaling, DelayedScaling)


def _dims(lhs_contract: int, rhs_contract: int):
    return (((lhs_contract,), (rhs_contract,)), ((0,), (0,)))


def _check(lhs: Operand, rhs: Operand, lhs_contract: int, rhs_contract: int, out_dtype=None) -> None:
    for name, op, c in (("lhs", lhs, lhs_contract), ("rhs", rhs, rhs_contract)):
        if c not in (1, 2):
            raise ValueError(f"scaled_gemm: {name}_contract must be 1 or 2, got {c}")
        shape = op.shape
        if len(shape) != 3:
            raise ValueError(f"scaled_gemm: {name} must be 3-D (B, rows, cols), got shape {shape}")
        if not isinstance(op, QTensor) and jnp.dtype(op.dtype) not in SUPPORTED_INPUT_DTYPES:
            raise TypeError(
                f"scaled_gemm: an unquantized {name} is float32 / bfloat16 / float16 (quantize FP8 / integer data "
                f"into a QTensor), got {op.dtype} {tuple(shape)}"
            )
        if isinstance(op, QTensor) and op.axis != c:
            raise ValueError(
                f"scaled_gemm: {name} is quantized along axis {op.axis} but contracts axis {c}"
            )
        if isinstance(op, QTensor):
            data, scale = qtensor_layout(op.spec, tuple(op.shape), op.axis)
            got = (tuple(jnp.shape(op.data)), tuple(jnp.shape(op.scale)))
            if got != (data, scale):
                raise ValueError(
                    f"scaled_gemm: {name} QTensor of shape {tuple(op.shape)} quantized along axis {op.axis} by "
                    f"{op.spec.describe()} holds data {got[0]} and scale {got[1]}; that layout has data {data} and "
                    f"scale {scale}"
                )
    if out_dtype is not None and jnp.dtype(out_dtype) not in SUPPORTED_INPUT_DTYPES:
        raise TypeError(f"scaled_gemm: out_dtype must be float32, bfloat16 or float16, got {jnp.dtype(out_dtype)}")
    if lhs.shape[0] != rhs.shape[0] or lhs.shape[lhs_contract] != rhs.shape[rhs_contract]:
        raise ValueError(
            f"scaled_gemm: lhs {lhs.shape} (contract {lhs_contract}) and rhs {rhs.shape} "
            f"(contract {rhs_contract}) disagree on B or K"
        )


def _wide(op: Operand, dtype) -> jax.Array:
    return dequantize(op, dtype) if isinstance(op, QTensor) else op.astype(dtype)


def reference_scaled_gemm(lhs: Operand, rhs: Operand, *, lhs_contract: int, rhs_contract: int, out_dtype) -> jax.Array:
    """The oracle: dequantize both operands to FP32, FP32 dot at HIGHEST precision."""
    _check(lhs, rhs, lhs_contract, rhs_contract)
    out = lax.dot_general(
        _wide(lhs, jnp.float32),
        _wide(rhs, jnp.float32),
        _dims(lhs_contract, rhs_contract),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=jnp.float32,
    )
    return out.astype(out_dtype)


def _row_scale_for_output(q: QTensor, contract: int, is_lhs: bool) -> jax.Array:
    """Per-tensor / per-row scale of an operand, shaped to broadcast over the (B, M, N) output."""
    s = scale_as_f32(q)
    if s.ndim == 0:
        return s
    # Row scales have shape[contract] == 1; move the kept (free) axis into the output position.
    s = jnp.squeeze(s, axis=contract)  # (B, free)
    return s[:, :, None] if is_lhs else s[:, None, :]


def _apply_scales(acc: jax.Array, sl: jax.Array, sr: jax.Array) -> jax.Array:
    """``acc * sl * sr`` with no intermediate overflow or underflow the result does not have: scales on either side
    of 1 multiply each other first (their product lies between them), others one after the other (the intermediate
    then lies between acc and the result). For the usual scales (both below 1) that is ``(acc * sl) * sr``."""
    opposite = (jnp.abs(sl) >= 1) != (jnp.abs(sr) >= 1)
    first = jnp.where(opposite, sl * sr, sl)
    second = jnp.where(opposite, jnp.float32(1), sr)
    return (acc * first) * second


_FP8_FORMS = ("direct", "native", "direct_fast")


def _gpu_fp8_form() -> str:
    """``MXPREC_XLA_FP8_FORM``: how the XLA path writes an FP8 GEMM on GPU (see _xla_scaled_gemm).

    ``direct`` (default) | ``native`` | ``direct_fast`` (cuBLASLt fast accumulation: for
    benchmarks/xla_fp8_forms.py's comparison only, it drops the FP32 promotion).
    """
    form = os.environ.get("MXPREC_XLA_FP8_FORM", "direct")
    if form not in _FP8_FORMS:
        raise ValueError(f"MXPREC_XLA_FP8_FORM must be one of {_FP8_FORMS}, got {form!r}")
    return form


_FP8_TRANSPOSES = ("cuda", "separate", "fused")


def _gpu_fp8_transpose() -> str:
    """``MXPREC_XLA_FP8_TRANSPOSE``: how the K-contiguous copy of an FP8 operand is made on GPU.

    cuBLASLt's FP8 GEMMs are TN-only, so an operand contracted along axis 1 (Wgrad's X and dY,
    Fprop's W) is transposed. ``cuda`` (default): under backend="auto" with the CUDA library loaded,
    the 1-byte codes are transposed by mxprec's kernel (:func:`mxprec.kernels.cuda.transpose_codes`)
    and the dot contracts the copy along axis 2; otherwise (backend="xla", no library) as
    ``separate``. ``separate``: an optimization barrier on the FP8 codes keeps the transpose out of
    the quantize fusion, so XLA casts in a plain loop fusion and transposes the 1-byte codes in its
    own kernel. ``fused``: XLA fuses the transpose into the quantize fusion (one kernel writing the
    row-major and the transposed codes). Same bits in every mode.
    """
    mode = os.environ.get("MXPREC_XLA_FP8_TRANSPOSE", "cuda")
    if mode not in _FP8_TRANSPOSES:
        raise ValueError(f"MXPREC_XLA_FP8_TRANSPOSE must be one of {_FP8_TRANSPOSES}, got {mode!r}")
    return mode


def _fp8_codes_for_dot(lhs: QTensor, rhs: QTensor, lhs_contract: int, rhs_contract: int, cuda_transpose: bool):
    """The operands' FP8 codes and contraction axes for the dot.

    ``cuda_transpose``: codes contracted along axis 1 are transposed by the CUDA kernel (contraction
    axis 2 then). Otherwise, on GPU in ``separate`` mode, those XLA must transpose sit behind an
    optimization barrier.
    """
    ld, rd = lhs.data, rhs.data
    if cuda_transpose:
        from mxprec.kernels import cuda

        # a shape past the kernel's grid stays as it is: the dot contracts axis 1 (XLA transposes it)
        if lhs_contract == 1 and not cuda.why_not_transpose_codes(ld.shape):
            ld, lhs_contract = cuda.transpose_codes(ld), 2
        if rhs_contract == 1 and not cuda.why_not_transpose_codes(rd.shape):
            rd, rhs_contract = cuda.transpose_codes(rd), 2
    elif jax.default_backend() == "gpu" and _gpu_fp8_transpose() != "fused":
        if lhs_contract == 1:
            ld = lax.optimization_barrier(ld)
        if rhs_contract == 1:
            rd = lax.optimization_barrier(rd)
    return ld, rd, lhs_contract, rhs_contract


def _xla_scaled_gemm(
    lhs: Operand, rhs: Operand, lhs_contract: int, rhs_contract: int, out_dtype, cuda_transpose: bool = False,
    defer: bool = False,
):
    dims = _dims(lhs_contract, rhs_contract)
    both_q = isinstance(lhs, QTensor) and isinstance(rhs, QTensor)
    if both_q and isinstance(lhs.spec, _CONSTANT_ALONG_K) and isinstance(rhs.spec, _CONSTANT_ALONG_K):
        # Scales are constant along K: factor them out of the sum, run the native FP8 dot. On GPU the
        # dot names its algorithm: at DEFAULT precision XLA gives an FP8 dot cuBLASLt's fast
        # accumulation (no FP32 promotion); ANY_F8_ANY_F8_F32 accumulates in FP32.
        algo = None
        ld, rd, lc, rc = _fp8_codes_for_dot(lhs, rhs, lhs_contract, rhs_contract, cuda_transpose)
        dims = _dims(lc, rc)
        if jax.default_backend() == "gpu":
            form = _gpu_fp8_form()
            fast = form == "direct_fast"
            preset = lax.DotAlgorithmPreset
            algo = preset.ANY_F8_ANY_F8_F32_FAST_ACCUM if fast else preset.ANY_F8_ANY_F8_F32
            if isinstance(lhs.spec, _PER_TENSOR) and isinstance(rhs.spec, _PER_TENSOR) and form != "native":
                # One cuBLASLt call writing out_dtype (BF16) itself: the FP32 product never reaches
                # memory. The scales multiply the BF16 product in FP32, so the result is rounded to
                # out_dtype twice (documented tolerance, docs/numerics.md).
                y = lax.dot_general(ld, rd, dims, precision=algo, preferred_element_type=out_dtype)
                if defer:
                    return y, lhs.scale * rhs.scale
                return (y.astype(jnp.float32) * (lhs.scale * rhs.scale)).astype(out_dtype)
        acc = lax.dot_general(ld, rd, dims, precision=algo, preferred_element_type=jnp.float32)
        sl, sr = _row_scale_for_output(lhs, lhs_contract, True), _row_scale_for_output(rhs, rhs_contract, False)
        return _apply_scales(acc, sl, sr).astype(out_dtype)
    if not isinstance(lhs, QTensor) and not isinstance(rhs, QTensor):
        if jax.default_backend() == "cpu" and (lhs.dtype != jnp.float32 or rhs.dtype != jnp.float32):
            # XLA's CPU runtime has no BF16 x BF16 -> F32 dot for some layouts ("Unsupported element type for
            # DotThunk"): widen first. 16-bit products are exact in FP32, so the result is the same.
            lhs, rhs = lhs.astype(jnp.float32), rhs.astype(jnp.float32)
            return lax.dot_general(lhs, rhs, dims, precision=lax.Precision.HIGHEST,
                                   preferred_element_type=jnp.float32).astype(out_dtype)
        return lax.dot_general(lhs, rhs, dims, preferred_element_type=jnp.float32).astype(out_dtype)
    if jax.default_backend() == "gpu" and _bf16_exact(lhs) and _bf16_exact(rhs):
        # BF16 holds every dequantized element exactly: a BF16 dot with FP32 accumulation (NVFP4's FP32
        # tensor scales, constant along K, are applied to its result instead of to the elements).
        out = lax.dot_general(
            _wide(_without_tensor_scale(lhs), jnp.bfloat16), _wide(_without_tensor_scale(rhs), jnp.bfloat16),
            dims, preferred_element_type=jnp.float32,
        )
        ts = _tensor_scale(lhs) * _tensor_scale(rhs)
        return jnp.where(jnp.isfinite(ts), out * ts, jnp.float32(jnp.nan)).astype(out_dtype)
    # FP32 elements (the CPU; on GPU an FP32 tile scale, whose products with the codes BF16 would round).
    out = lax.dot_general(
        _wide(lhs, jnp.float32), _wide(rhs, jnp.float32), dims, precision=lax.Precision.HIGHEST,
        preferred_element_type=jnp.float32,
    )
    return out.astype(out_dtype)


def _bf16_exact(op: Operand) -> bool:
    """Whether BF16 holds every dequantized element of ``op`` (NVFP4: without its tensor scale) exactly:
    codes times power-of-two scales (MX, power-of-two tiles; unless a value falls below 2**-126), NVFP4's
    E2M1 codes times E4M3 block scales (at most 6 significant bits), and BF16 arrays. FP32 tile scales are
    not: a code times an arbitrary FP32 scale needs up to 28 significant bits."""
    if not isinstance(op, QTensor):
        return jnp.dtype(op.dtype) == jnp.dtype(jnp.bfloat16)
    spec = op.spec
    return isinstance(spec, (MXScaling, NVFP4Scaling)) or (isinstance(spec, TileScaling) and spec.power_of_two)


def _without_tensor_scale(op: Operand) -> Operand:
    if isinstance(op, QTensor) and op.tensor_scale is not None:
        return dataclasses.replace(op, tensor_scale=jnp.ones((), jnp.float32))
    return op


def _tensor_scale(op: Operand) -> jax.Array:
    ts = op.tensor_scale if isinstance(op, QTensor) else None
    return jnp.ones((), jnp.float32) if ts is None else jnp.asarray(ts, jnp.float32)


def scaled_gemm(
    lhs: Operand,
    rhs: Operand,
    *,
    lhs_contract: int = 2,
    rhs_contract: int = 1,
    out_dtype=jnp.bfloat16,
    backend: str = "xla",
) -> jax.Array:
    """Batched GEMM of (quantized) operands with FP32 accumulation; see the module docstring.

    Args:
      lhs: ``(B, M, K)`` or ``(B, K, M)`` QTensor / array.
      rhs: ``(B, K, N)`` or ``(B, N, K)`` QTensor / array.
      lhs_contract, rhs_contract: the contraction axis of each operand (1 or 2).
      out_dtype: result dtype.
      backend: ``"auto"``, ``"xla"`` or ``"ffi"``.

    Returns:
      ``(B, M, N)`` array of ``out_dtype``.
    """
    _check(lhs, rhs, lhs_contract, rhs_contract, out_dtype)
    kw = dict(lhs_contract=lhs_contract, rhs_contract=rhs_contract, out_dtype=out_dtype)
    if backend not in ("xla", "ffi", "auto"):
        raise ValueError(f"scaled_gemm: backend must be 'auto', 'xla' or 'ffi', got {backend!r}")
    if jax.default_backend() == "gpu" and backend != "xla":
        from mxprec.kernels import cuda, hip

        if hip.is_rocm():  # gfx950 kernels: compiled and ISA-checked, never run (docs/backends/hip.md)
            if hip.available() and hip.supports(lhs, rhs, **kw):
                return hip.scaled_gemm(lhs, rhs, **kw)
            if backend == "ffi":
                reason = hip.why_unsupported(lhs, rhs, **kw) if hip.available() else "libmxprec_hip.so is not loaded"
                raise NotImplementedError(f"scaled_gemm: backend='ffi' on ROCm cannot run these operands: {reason}")
            return _xla_scaled_gemm(lhs, rhs, lhs_contract, rhs_contract, out_dtype)

        if cuda.available() and (backend == "ffi" or cuda.auto_prefers(lhs, rhs)) and cuda.supports(lhs, rhs, **kw):
            return cuda.scaled_gemm(lhs, rhs, **kw)
        if backend == "ffi":
            reason = cuda.why_unsupported(lhs, rhs, **kw) if cuda.available() else "libmxprec_cuda.so is not loaded"
            raise NotImplementedError(f"scaled_gemm: backend='ffi' on GPU cannot run these operands: {reason}")
        # auto: exact XLA path (its FP8 code transposes on the CUDA kernel, MXPREC_XLA_FP8_TRANSPOSE)
        return _xla_scaled_gemm(lhs, rhs, lhs_contract, rhs_contract, out_dtype, cuda.transposes_codes())
    if backend == "ffi":
        from mxprec.kernels import ffi

        return ffi.scaled_gemm(lhs, rhs, **kw)
    return _xla_scaled_gemm(lhs, rhs, lhs_contract, rhs_contract, out_dtype)


def scaled_gemm_deferred(lhs: Operand, rhs: Operand, *, lhs_contract: int = 2, rhs_contract: int = 1,
                         out_dtype=jnp.bfloat16, backend: str = "xla"):
    """``(y, multiplier)`` with ``scaled_gemm(...) == (y.astype(float32) * multiplier).astype(out_dtype)`` bit for bit.

    Where XLA's per-tensor FP8 dot serves the call on a GPU (its "direct" form: the dot writes ``out_dtype``, a
    second pass multiplies by the two scales), ``y`` is that dot's output and ``multiplier`` the scales' product,
    so a consumer that applies the multiplier itself (a custom call XLA cannot fuse the pass into,
    :mod:`mxprec.fused_mlp`'s kernels) saves the pass. Elsewhere ``(scaled_gemm(...), None)``.
    """
    defer = (jax.default_backend() == "gpu" and backend in ("xla", "auto") and isinstance(lhs, QTensor)
             and isinstance(rhs, QTensor) and isinstance(lhs.spec, _PER_TENSOR) and isinstance(rhs.spec, _PER_TENSOR)
             and _gpu_fp8_form() != "native")
    if defer and backend == "auto":
        from mxprec.kernels import cuda, hip

        if hip.is_rocm() or (cuda.available() and cuda.auto_prefers(lhs, rhs)):
            defer = False
    if not defer:
        return scaled_gemm(lhs, rhs, lhs_contract=lhs_contract, rhs_contract=rhs_contract, out_dtype=out_dtype,
                           backend=backend), None
    _check(lhs, rhs, lhs_contract, rhs_contract)
    from mxprec.kernels import cuda

    transpose = backend == "auto" and cuda.transposes_codes()
    return _xla_scaled_gemm(lhs, rhs, lhs_contract, rhs_contract, out_dtype, transpose, defer=True)
