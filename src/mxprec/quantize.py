"""QTensor, quantize / dequantize, element rounding and FP4/FP6 packing (pure JAX).

This module is the numerical oracle: every native kernel must reproduce it bit for bit. The
rules are written out in docs/numerics.md.

Invariant::

    q = quantize(x, spec, axis=a)
    dequantize(q) ≈ x          # error bounded by the element format's half-ulp at the group scale
    q.scale broadcasts along axis a in groups of the spec's block (MX 32, NVFP4 16, tile tc)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mxprec import formats
from mxprec.formats import ElementFormat
from mxprec.scaling import (
    DelayedScaling,
    DelayedScalingState,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    ScalingSpec,
    TensorScaling,
    TileScaling,
    delayed_scale_of,
    exact_div,
    exp2_int,
    floor_log2,
    floored_scale,
    mx_exponent,
)

__all__ = [
    "SUPPORTED_INPUT_DTYPES",
    "QTensor",
    "bits_per_value",
    "decode",
    "dequantize",
    "encode",
    "nbytes",
    "pack",
    "quantize",
    "round_to_grid",
    "tensor_amax",
    "unpack",
]

SUPPORTED_INPUT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QTensor:
    """A quantized tensor: element data, its scales, and the static facts needed to read them.

    data:  FP8 formats: ``float8_e4m3fn`` / ``float8_e5m2`` of ``shape``.
           FP4: uint8, two codes per byte along ``axis`` (``shape[axis] // 2``).
           FP6: uint8, four codes in three bytes along ``axis`` (``shape[axis] * 3 // 4``).
    scale: tensor/delayed: float32 ``()``; row: float32 with ``shape[axis] = 1``;
           tile: float32 with ``shape[axis] /= tc`` (and ``shape[row_axis] /= tr``);
           MX: ``float8_e8m0fnu`` with ``shape[axis] /= block``;
           NVFP4: ``float8_e4m3fn`` block scales with ``shape[axis] /= 16``.
    amax:  float32 ``()``, amax of the source tensor (feeds delayed scaling).
    tensor_scale: NVFP4's float32 ``()`` second-level scale, else None.

    Invariant: ``dequantize(q) ≈ x``; scales broadcast along ``axis`` in blocks.
    """

    data: jax.Array
    scale: jax.Array
    amax: jax.Array
    tensor_scale: jax.Array | None
    spec: Any = dataclasses.field(metadata=dict(static=True))
    axis: int = dataclasses.field(metadata=dict(static=True))
    shape: tuple = dataclasses.field(metadata=dict(static=True))
    dtype: Any = dataclasses.field(metadata=dict(static=True))

    @property
    def fmt(self) -> ElementFormat:
        return self.spec.fmt

    def codes(self) -> jax.Array:
        """Element codes, one uint8 per element, shape ``self.shape`` (the unpacked view)."""
        if self.fmt.is_fp8:
            return jax.lax.bitcast_convert_type(self.data, jnp.uint8)
        return unpack(self.data, self.fmt, self.axis)

    def values(self) -> jax.Array:
        """Element values as float32 (exact), shape ``self.shape``, before scaling.

        FP8 codes pass an optimization barrier first: with ``xla_allow_excess_precision`` (on by
        default) XLA's GPU compiler drops an FP32 -> FP8 -> FP32 convert pair, so a quantize and a
        dequantize in one jitted function would skip the FP8 rounding (measured on the H200:
        fp8_block's XLA path returned unrounded products).
        """
        if self.fmt.is_fp8:
            return jax.lax.optimization_barrier(self.data).astype(jnp.float32)
        return decode(self.codes(), self.fmt)

    def dequantize(self, dtype=jnp.float32) -> jax.Array:
        return dequantize(self, dtype)


# ----------------------------------------------------------------------------- element rounding


def round_to_grid(v: jax.Array, fmt: ElementFormat, uniform: jax.Array | None = None) -> jax.Array:
    """Saturate FP32 ``v`` to ±max_finite and round onto ``fmt``'s grid (FP32 result, exact).

    Round-to-nearest-even by default; with ``uniform`` (FP32 draws in [0, 1), shape of v),
    stochastic rounding: up with probability equal to the distance from the lower grid point.
    NaN stays NaN.
    """
    mx = jnp.float32(fmt.max_finite)
    a = jnp.minimum(jnp.abs(v), mx)
    exp, _ = floor_log2(jnp.maximum(a, jnp.float32(fmt.min_normal)))
    quantum = exp2_int(exp - fmt.mbits)
    r = a * exp2_int(fmt.mbits - exp)  # = a / quantum exactly (a power of two), no FP32 division
    r = jnp.round(r) if uniform is None else _stochastic_floor(r, uniform)
    out = jnp.minimum(r * quantum, mx)
    return jnp.where(jnp.signbit(v), -out, out)


def _stochastic_floor(r: jax.Array, uniform: jax.Array) -> jax.Array:
    """floor(r + u) with the sum taken exactly: up iff frac(r) + u >= 1. In FP32, ``r + u`` rounds up to the next
    integer when u lies within half an ulp of 1, which moved on-grid values (frac 0) up a grid point. frac(r) is exact
    (r >= 0); the comparison uses the exact sum s + err of Knuth's TwoSum."""
    fl = jnp.floor(r)
    frac = r - fl
    s = frac + uniform
    bb = s - frac
    err = (frac - (s - bb)) + (uniform - bb)
    up = (s > 1) | ((s == 1) & (err >= 0))
    return fl + up.astype(jnp.float32)


def encode(g: jax.Array, fmt: ElementFormat) -> jax.Array:
    """Codes (uint8, one per element) of FP32 values ``g`` that lie exactly on ``fmt``'s grid."""
    if fmt.is_fp8:
        return jax.lax.bitcast_convert_type(g.astype(fmt.dtype), jnp.uint8)
    a = jnp.abs(g)
    exp, frac = floor_log2(jnp.maximum(a, jnp.float32(fmt.min_normal)))
    normal = a >= jnp.float32(fmt.min_normal)
    exp_field = jnp.where(normal, exp + fmt.bias, 0)
    mant = jnp.where(
        normal,
        frac >> (23 - fmt.mbits),
        (a / jnp.float32(fmt.min_subnormal)).astype(jnp.int32),
    )
    sign = jnp.signbit(g).astype(jnp.int32) << (fmt.bits - 1)
    return (sign | (exp_field << fmt.mbits) | mant).astype(jnp.uint8)


def _decode_table(fmt: ElementFormat) -> np.ndarray:
    codes = np.arange(2**fmt.bits, dtype=np.uint8)
    return codes.view(fmt.dtype).astype(np.float32)


def decode(codes: jax.Array, fmt: ElementFormat) -> jax.Array:
    """FP32 values of uint8 ``codes`` (any shape)."""
    if fmt.is_fp8:
        return jax.lax.bitcast_convert_type(codes, fmt.dtype).astype(jnp.float32)
    return jnp.asarray(_decode_table(fmt))[codes.astype(jnp.int32)]


# ----------------------------------------------------------------------------- packing


def pack(codes: jax.Array, fmt: ElementFormat, axis: int) -> jax.Array:
    """FP4: 2 codes/byte (element 2i low nibble); FP6: 4 codes in 3 bytes (LSB first). FP8: bitcast."""
    if fmt.is_fp8:
        return jax.lax.bitcast_convert_type(codes, fmt.dtype)
    c = jnp.moveaxis(codes.astype(jnp.uint32), axis, -1)
    n = c.shape[-1]
    if fmt.bits == 4:
        c = c.reshape(*c.shape[:-1], n // 2, 2)
        out = (c[..., 0] | (c[..., 1] << 4)).astype(jnp.uint8)
    else:
        c = c.reshape(*c.shape[:-1], n // 4, 4)
        w = c[..., 0] | (c[..., 1] << 6) | (c[..., 2] << 12) | (c[..., 3] << 18)
        out = jnp.stack([w & 0xFF, (w >> 8) & 0xFF, (w >> 16) & 0xFF], axis=-1)
        out = out.reshape(*c.shape[:-2], n * 3 // 4).astype(jnp.uint8)
    return jnp.moveaxis(out, -1, axis)


def unpack(data: jax.Array, fmt: ElementFormat, axis: int) -> jax.Array:
    """Inverse of :func:`pack`: uint8 codes, one per element."""
    if fmt.is_fp8:
        return jax.lax.bitcast_convert_type(data, jnp.uint8)
    d = jnp.moveaxis(data.astype(jnp.uint32), axis, -1)
    m = d.shape[-1]
    if fmt.bits == 4:
        out = jnp.stack([d & 0xF, d >> 4], axis=-1).reshape(*d.shape[:-1], m * 2)
    else:
        d = d.reshape(*d.shape[:-1], m // 3, 3)
        w = d[..., 0] | (d[..., 1] << 8) | (d[..., 2] << 16)
        out = jnp.stack([(w >> (6 * i)) & 0x3F for i in range(4)], axis=-1)
        out = out.reshape(*d.shape[:-2], m // 3 * 4)
    return jnp.moveaxis(out.astype(jnp.uint8), -1, axis)


# ----------------------------------------------------------------------------- validation


def _normalize_axis(x_shape: tuple, axis: int) -> int:
    ndim = len(x_shape)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis!r} is out of range for a tensor of shape {x_shape} (rank {ndim})")
    return int(axis) % ndim


def _row_axis(ndim: int, axis: int) -> int:
    for r in range(ndim - 1, -1, -1):
        if r != axis:
            return r
    raise ValueError("TileScaling with tile rows > 1 needs a tensor of rank >= 2")


def qtensor_layout(spec, shape: tuple, axis: int) -> tuple[tuple, tuple]:
    """``(data shape, scale shape)`` of the QTensor that quantizing an array of ``shape`` along ``axis``
    (non-negative) by ``spec`` gives (see :class:`QTensor`)."""
    data, scale = list(shape), list(shape)
    bits = spec.fmt.bits
    if bits != 8:
        data[axis] = data[axis] * bits // 8
    if isinstance(spec, (TensorScaling, DelayedScaling)):
        return tuple(data), ()
    if isinstance(spec, RowScaling):
        scale[axis] = 1
    elif isinstance(spec, TileScaling):
        tr, tc = spec.tile
        scale[axis] //= tc
        if tr > 1:
            scale[_row_axis(len(shape), axis)] //= tr
    else:  # MX, NVFP4
        scale[axis] //= spec.block
    return tuple(data), tuple(scale)


def _validate(x, spec, axis: int) -> int:
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        raise TypeError(f"quantize expects an array, got {type(x).__name__}")
    dtype = jnp.dtype(x.dtype)
    if dtype not in SUPPORTED_INPUT_DTYPES:
        kind = "integer" if jnp.issubdtype(dtype, jnp.integer) else "unsupported"
        raise TypeError(
            f"quantize: {kind} input dtype {dtype} for shape {tuple(x.shape)}; "
            f"supported: float32, bfloat16, float16"
        )
    if not isinstance(spec, (TensorScaling, DelayedScaling, RowScaling, TileScaling, MXScaling, NVFP4Scaling)):
        raise TypeError(f"quantize: spec must be a scaling spec, got {spec!r}")
    shape = tuple(x.shape)
    if len(shape) == 0:
        raise ValueError("quantize: scalar input has no axis to quantize along; reshape it to (1,)")
    axis = _normalize_axis(shape, axis)
    n = shape[axis]
    block = {
        "mx": getattr(spec, "block", None),
        "nvfp4": getattr(spec, "block", None),
        "tile": spec.tile[1] if isinstance(spec, TileScaling) else None,
    }.get(spec.kind)
    if block is not None and n % block:
        raise ValueError(
            f"quantize: shape {shape} axis {axis} has size {n}, not a multiple of the "
            f"{spec.kind} block {block} ({spec.describe()}); pad the tensor first"
        )
    if isinstance(spec, TileScaling) and spec.tile[0] > 1:
        r = _row_axis(len(shape), axis)
        if shape[r] % spec.tile[0]:
            raise ValueError(
                f"quantize: shape {shape} row axis {r} has size {shape[r]}, not a multiple of "
                f"the tile rows {spec.tile[0]} ({spec.describe()})"
            )
    return axis


# ----------------------------------------------------------------------------- quantize


def tensor_amax(x: jax.Array, axis=None, keepdims: bool = False) -> jax.Array:
    """float32 max |x| over ``axis``; NaN when the group holds a NaN (XLA CPU's max may drop it).

    The value of ``_amax(x.astype(float32))``. A bfloat16 ``x`` is reduced over its own 16-bit patterns:
    bf16 -> f32 is exact and order-preserving, so the max and the NaN / subnormal rules are unchanged, and
    XLA's reduction reads 2-byte values. On the H200 Llama step this cut fp8_delayed's peak memory
    25.12 -> 24.85 GB (XLA packs the gradients' quantize fusions differently; docs/backends/cuda_sessions.md,
    tenth session).
    """
    if x.dtype == jnp.bfloat16 and x.size:
        b16 = jnp.max(jax.lax.bitcast_convert_type(jnp.abs(x), jnp.uint16), axis=axis, keepdims=keepdims)
        return _amax_from_bits(b16.astype(jnp.uint32) << 16)
    return _amax(x.astype(jnp.float32), axis, keepdims)


def _amax(x32: jax.Array, axis=None, keepdims: bool = False) -> jax.Array:
    """max |x| over ``axis``; NaN (canonical) when the group holds a NaN; +0 when it is subnormal.

    One integer max over the FP32 bits of |x|: for non-negative floats the bit order is the numeric
    order and every NaN pattern lies above +Inf, so the NaN rule needs no second reduction (XLA's
    float max reduction need not propagate NaN, and a separate any(isnan) pass cost a second read
    of x where XLA did not fuse the two). A subnormal maximum is flushed to +0 on every platform,
    as XLA's CPU runtime (the oracle) and the native kernels do. An empty group's amax is +0 (the contract's).
    """
    bits = jax.lax.bitcast_convert_type(jnp.abs(x32), jnp.uint32)
    initial = 0 if x32.size == 0 else None  # (the identity of the unsigned max; only where there is nothing to max)
    return _amax_from_bits(jnp.max(bits, axis=axis, keepdims=keepdims, initial=initial))


def _amax_from_bits(bits: jax.Array) -> jax.Array:
    """The amax whose FP32 bits are ``bits``, a max over bit patterns of non-negative values (or NaNs):
    a subnormal maximum flushed to +0 (as XLA CPU's FTZ), any NaN made canonical."""
    bits = jnp.where(bits < jnp.uint32(0x00800000), jnp.uint32(0), bits)
    a = jax.lax.bitcast_convert_type(bits, jnp.float32)
    return jnp.where(jnp.isnan(a), jnp.float32(jnp.nan), a)


def _per_group_fp32_scale(amax: jax.Array, fmt: ElementFormat, power_of_two: bool = False) -> jax.Array:
    if power_of_two:
        safe = jnp.where(jnp.isfinite(amax) & (amax > 0), amax, jnp.float32(1))
        s = exp2_int(mx_exponent(safe, fmt, "rceil", lo=-126, hi=127))
        s = jnp.where(jnp.isfinite(amax), s, amax)  # NaN/Inf propagate like the plain rule
    else:
        s = floored_scale(amax, fmt.max_finite)
    return jnp.where(amax == 0, jnp.float32(1), s)


def _codes(v: jax.Array, fmt: ElementFormat, uniform: jax.Array | None) -> jax.Array:
    """``encode(round_to_grid(v, fmt, uniform), fmt)``; for FP8 with RNE, one saturating convert.

    XLA's FP32 -> FP8 conversion rounds to nearest even (the hardware ``cvt.rn`` on GPU); after
    clamping to ±max_finite it gives the same codes as round_to_grid + encode for every input
    (NaN included), in a fraction of the ALU work.
    """
    if fmt.is_fp8 and uniform is None:
        mx = jnp.float32(fmt.max_finite)
        return jax.lax.bitcast_convert_type(jnp.clip(v, -mx, mx).astype(fmt.dtype), jnp.uint8)
    return encode(round_to_grid(v, fmt, uniform), fmt)


def _scaled_codes(x32, s, fmt, uniform):
    return _codes(exact_div(x32, s), fmt, uniform)


def _blocked(xt: jax.Array, block: int) -> jax.Array:
    return xt.reshape(*xt.shape[:-1], xt.shape[-1] // block, block)


def _mx_divide(x: jax.Array, e: jax.Array) -> jax.Array:
    """x / 2**e exactly for int e in [-127, 127], in two halves so no FP32 subnormal scale forms."""
    e1 = e // 2
    return (x * exp2_int(-e1)) * exp2_int(-(e - e1))


def _mx_multiply(v: jax.Array, e: jax.Array) -> jax.Array:
    e1 = e // 2
    return (v * exp2_int(e1)) * exp2_int(e - e1)


def quantize(
    x: jax.Array,
    spec: ScalingSpec,
    *,
    axis: int = -1,
    key: jax.Array | None = None,
    state: DelayedScalingState | None = None,
) -> QTensor:
    """Quantizes ``x`` (any rank; float32/bfloat16/float16) along ``axis`` according to ``spec``.

    Args:
      x: the wide source tensor.
      spec: a scaling spec (TensorScaling, DelayedScaling, RowScaling, TileScaling, MXScaling,
        NVFP4Scaling).
      axis: the quantization (contraction) axis: blocks / tiles run along it.
      key: PRNG key; when given, elements use stochastic rounding instead of RNE.
      state: DelayedScalingState (required for DelayedScaling; ignored otherwise).

    Returns:
      QTensor; see its docstring for data / scale shapes.
    """
    axis = _validate(x, spec, axis)
    if isinstance(spec, DelayedScaling) and state is None:
        raise ValueError(
            "quantize: DelayedScaling needs state=DelayedScalingState (DelayedScalingState.init(spec))"
        )
    fmt = spec.fmt
    shape = tuple(x.shape)
    x32 = x.astype(jnp.float32)
    uniform = None if key is None else jax.random.uniform(key, shape, jnp.float32)
    amax_t = tensor_amax(x)
    tensor_scale = None

    if isinstance(spec, (TensorScaling, DelayedScaling)):
        if isinstance(spec, TensorScaling):
            scale = _per_group_fp32_scale(amax_t, fmt)
        else:
            scale = delayed_scale_of(state, "quantize")
        codes = _scaled_codes(x32, scale, fmt, uniform)

    elif isinstance(spec, RowScaling):
        amax_r = _amax(x32, axis=axis, keepdims=True)
        scale = _per_group_fp32_scale(amax_r, fmt)
        codes = _scaled_codes(x32, scale, fmt, uniform)

    elif isinstance(spec, TileScaling):
        tr, tc = spec.tile
        ndim = len(shape)
        if tr > 1:
            r = _row_axis(ndim, axis)
            perm = [d for d in range(ndim) if d not in (r, axis)] + [r, axis]
        else:
            perm = [d for d in range(ndim) if d != axis] + [axis]
        inv = np.argsort(perm)
        xt = jnp.transpose(x32, perm)
        R, K = (xt.shape[-2], xt.shape[-1]) if ndim >= 2 else (1, xt.shape[-1])
        lead = xt.shape[:-2] if ndim >= 2 else ()
        x5 = xt.reshape(*lead, R // tr, tr, K // tc, tc)
        amax_g = _amax(x5, axis=(-3, -1), keepdims=True)
        s5 = _per_group_fp32_scale(amax_g, fmt, spec.power_of_two)
        u5 = None if uniform is None else jnp.transpose(uniform, perm).reshape(x5.shape)
        codes = jnp.transpose(_scaled_codes(x5, s5, fmt, u5).reshape(xt.shape), inv)
        st = s5.reshape(*lead, R // tr, K // tc) if ndim >= 2 else s5.reshape(K // tc)
        scale = jnp.transpose(st, inv)

    elif isinstance(spec, MXScaling):
        xt = _blocked(jnp.moveaxis(x32, axis, -1), spec.block)
        amax_b = _amax(xt, axis=-1, keepdims=True)
        bad = ~jnp.isfinite(amax_b)
        zero = amax_b == 0
        safe = jnp.where(bad | zero, jnp.float32(1), amax_b)
        e = mx_exponent(safe, fmt, spec.scale_rule)
        ut = None if uniform is None else _blocked(jnp.moveaxis(uniform, axis, -1), spec.block)
        codes = _codes(jnp.where(bad | zero, jnp.float32(0), _mx_divide(xt, e)), fmt, ut)
        codes = jnp.moveaxis(codes.reshape(*xt.shape[:-2], xt.shape[-2] * xt.shape[-1]), -1, axis)
        byte = jnp.where(bad, 255, jnp.where(zero, 0, e + 127)).astype(jnp.uint8)[..., 0]
        scale = jax.lax.bitcast_convert_type(jnp.moveaxis(byte, -1, axis), jnp.float8_e8m0fnu)

    elif isinstance(spec, NVFP4Scaling):
        tensor_scale = jnp.where(amax_t == 0, jnp.float32(1), floored_scale(amax_t, 6 * 448))
        xt = _blocked(jnp.moveaxis(x32, axis, -1), spec.block)
        amax_b = _amax(xt, axis=-1, keepdims=True)
        sb = round_to_grid(
            # The barrier keeps XLA from fusing (a / 6) / t into a / (6 * t), which rounds differently.
            jnp.minimum(exact_div(jax.lax.optimization_barrier(exact_div(amax_b, 6)), tensor_scale),
                        jnp.float32(448)),
            formats.E4M3,
        )
        eff = sb * tensor_scale
        ut = None if uniform is None else _blocked(jnp.moveaxis(uniform, axis, -1), spec.block)
        g = round_to_grid(exact_div(xt, eff), fmt, ut)
        g = jnp.where(eff == 0, jnp.float32(0), g)
        codes = jnp.moveaxis(encode(g, fmt).reshape(*xt.shape[:-2], xt.shape[-2] * xt.shape[-1]), -1, axis)
        scale = jnp.moveaxis(sb[..., 0].astype(jnp.float8_e4m3fn), -1, axis)
    else:  # pragma: no cover - _validate rejects this
        raise TypeError(spec)

    return QTensor(
        data=pack(codes, fmt, axis),
        scale=scale,
        amax=amax_t,
        tensor_scale=tensor_scale,
        spec=spec,
        axis=axis,
        shape=shape,
        dtype=jnp.dtype(x.dtype),
    )


# ----------------------------------------------------------------------------- dequantize


def scale_as_f32(q: QTensor) -> jax.Array:
    """The per-group dequantization multiplier as float32 (MX: 2**e, NaN for byte 0xFF).

    MX scales of 2**-127 are FP32 subnormal; use :func:`dequantize`, which applies them exactly.
    """
    spec = q.spec
    if isinstance(spec, MXScaling):
        byte = jax.lax.bitcast_convert_type(q.scale, jnp.uint8).astype(jnp.int32)
        return jnp.where(byte == 255, jnp.float32(jnp.nan), _mx_multiply(jnp.float32(1), byte - 127))
    if isinstance(spec, NVFP4Scaling):
        return q.scale.astype(jnp.float32) * q.tensor_scale
    return q.scale


def dequantize(q: QTensor, dtype=jnp.float32) -> jax.Array:
    """Returns ``values * scale`` in ``dtype``, shape ``q.shape`` (scales broadcast per group)."""
    v = q.values()
    spec = q.spec
    if isinstance(spec, (TensorScaling, DelayedScaling, RowScaling)):
        out = v * q.scale
    elif isinstance(spec, TileScaling):
        tr, tc = spec.tile
        s = jnp.repeat(q.scale, tc, axis=q.axis)
        if tr > 1:
            s = jnp.repeat(s, tr, axis=_row_axis(len(q.shape), q.axis))
        out = v * s
    elif isinstance(spec, MXScaling):
        byte = jax.lax.bitcast_convert_type(q.scale, jnp.uint8).astype(jnp.int32)
        e = jnp.repeat(byte - 127, spec.block, axis=q.axis)
        out = jnp.where(e == 128, jnp.float32(jnp.nan), _mx_multiply(v, e))
    elif isinstance(spec, NVFP4Scaling):
        s = jnp.repeat(q.scale.astype(jnp.float32) * q.tensor_scale, spec.block, axis=q.axis)
        out = v * s
    else:  # pragma: no cover
        raise TypeError(spec)
    return out.astype(dtype)


# ----------------------------------------------------------------------------- bytes


def nbytes(q: QTensor) -> int:
    """Storage bytes of ``q``: packed data + scales (+ the FP32 tensor scale)."""
    total = q.data.size * q.data.dtype.itemsize + q.scale.size * q.scale.dtype.itemsize
    if q.tensor_scale is not None:
        total += 4
    return int(total)


def bits_per_value(q: QTensor) -> float:
    """Effective storage bits per logical element (MXFP8 8.25, MXFP6 6.25, MXFP4 4.25)."""
    return 8.0 * nbytes(q) / math.prod(q.shape)
