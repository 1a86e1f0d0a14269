"""Scaling specs, exact scale rules, amax reductions and the delayed-scaling state update.

A *scaling spec* says how a tensor is grouped and how each group's scale is chosen. Every spec
quantizes along one axis (the GEMM's contraction axis). The scale is always the dequantization
multiplier: ``x ≈ float32(element) * scale``. Exact formulas: docs/numerics.md.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from mxprec import formats, xla_flags
from mxprec.formats import ElementFormat

__all__ = [
    "DelayedScaling",
    "DelayedScalingState",
    "MXScaling",
    "NVFP4Scaling",
    "RowScaling",
    "ScalingSpec",
    "TensorScaling",
    "TileScaling",
    "exact_div",
    "floor_log2",
    "mx_exponent",
    "update_delayed_state",
]

_FP8_ONLY = ("e4m3", "e5m2")


def _check_int(name: str, v, lo: int | None = None) -> int:
    """``v`` as an int: a Python / numpy integer (not a bool, not a float), at least ``lo``."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return int(v)


def _check_fp8(spec_name: str, fmt: ElementFormat) -> ElementFormat:
    fmt = formats.element_format(fmt)
    if fmt.name not in _FP8_ONLY:
        raise ValueError(
            f"{spec_name} supports FP8 element formats (E4M3, E5M2) only, got {fmt!r}; "
            "use MXScaling or NVFP4Scaling for FP6/FP4"
        )
    return fmt


@dataclasses.dataclass(frozen=True)
class TensorScaling:
    """Current per-tensor scaling: ``s = amax / max_finite`` (FP32), 1 when amax == 0."""

    fmt: ElementFormat = formats.E4M3

    def __post_init__(self):
        object.__setattr__(self, "fmt", _check_fp8("TensorScaling", self.fmt))

    @property
    def kind(self) -> str:
        return "tensor"

    def describe(self) -> str:
        return f"{self.fmt.name} per-tensor (current amax)"


MAX_DELAYED_MARGIN = 32  # |DelayedScaling.margin| at most: E5M2 spans 32 binades (2^-16 .. 57344)


@dataclasses.dataclass(frozen=True)
class DelayedScaling:
    """Per-tensor scaling from the amax history *before* this step (Transformer Engine semantics).

    The scale used at step t is ``state.scale``; afterwards :func:`update_delayed_state` pushes
    the current amax into the history and recomputes the scale from ``max(history)``
    (``amax_compute="max"``) or the newest entry (``"most_recent"``), times ``2**margin``
    (``margin`` an int in [-32, 32]).
    """

    fmt: ElementFormat = formats.E4M3
    history_len: int = 1024
    amax_compute: Literal["max", "most_recent"] = "max"
    margin: int = 0

    def __post_init__(self):
        object.__setattr__(self, "fmt", _check_fp8("DelayedScaling", self.fmt))
        object.__setattr__(self, "history_len", _check_int("DelayedScaling.history_len", self.history_len, 1))
        object.__setattr__(self, "margin", _check_int("DelayedScaling.margin", self.margin))
        if not -MAX_DELAYED_MARGIN <= self.margin <= MAX_DELAYED_MARGIN:
            # 2**margin shifts the codes by margin binades: beyond E5M2's 32 binades every code would be 0 or
            # saturated (and 2**margin itself leaves float32 past 127)
            raise ValueError(f"DelayedScaling.margin must be in [-{MAX_DELAYED_MARGIN}, {MAX_DELAYED_MARGIN}], "
                             f"got {self.margin}")
        if self.amax_compute not in ("max", "most_recent"):
            raise ValueError(
                f"DelayedScaling.amax_compute must be 'max' or 'most_recent', got {self.amax_compute!r}"
            )

    @property
    def kind(self) -> str:
        return "delayed"

    def describe(self) -> str:
        return (
            f"{self.fmt.name} per-tensor delayed (history {self.history_len}, "
            f"{self.amax_compute}, margin {self.margin})"
        )


@dataclasses.dataclass(frozen=True)
class RowScaling:
    """One FP32 scale per row: amax over the quantization axis only."""

    fmt: ElementFormat = formats.E4M3

    def __post_init__(self):
        object.__setattr__(self, "fmt", _check_fp8("RowScaling", self.fmt))

    @property
    def kind(self) -> str:
        return "row"

    def describe(self) -> str:
        return f"{self.fmt.name} per-row"


@dataclasses.dataclass(frozen=True)
class TileScaling:
    """DeepSeek-V3 tiles: ``tile=(tr, tc)``, tc along the quantization axis, tr along the row axis.

    The row axis is the last axis that is not the quantization axis. (1, 128) is the activation /
    gradient tiling, (128, 128) the weight blocking. FP32 scales, optionally powers of two.
    """

    fmt: ElementFormat = formats.E4M3
    tile: tuple[int, int] = (1, 128)
    power_of_two: bool = False

    def __post_init__(self):
        object.__setattr__(self, "fmt", _check_fp8("TileScaling", self.fmt))
        tile = tuple(self.tile)
        if len(tile) != 2:
            raise ValueError(f"TileScaling.tile must be two positive ints, got {self.tile!r}")
        tile = tuple(_check_int(f"TileScaling.tile[{i}]", t, 1) for i, t in enumerate(tile))
        object.__setattr__(self, "tile", tile)

    @property
    def kind(self) -> str:
        return "tile"

    @property
    def block(self) -> int:
        return self.tile[1]

    def describe(self) -> str:
        p2 = ", pow2" if self.power_of_two else ""
        return f"{self.fmt.name} {self.tile[0]}x{self.tile[1]} tiles{p2}"


@dataclasses.dataclass(frozen=True)
class MXScaling:
    """OCP MX: one E8M0 scale per ``block`` elements along the axis.

    ``scale_rule="rceil"`` (NVIDIA, default): smallest 2**e with amax / 2**e <= max_finite.
    ``scale_rule="floor"`` (OCP v1.0): 2**(floor(log2 amax) - emax_elem); may saturate.
    """

    fmt: ElementFormat = formats.E4M3
    block: int = 32
    scale_rule: Literal["rceil", "floor"] = "rceil"

    def __post_init__(self):
        object.__setattr__(self, "fmt", formats.element_format(self.fmt))
        if self.scale_rule not in ("rceil", "floor"):
            raise ValueError(f"MXScaling.scale_rule must be 'rceil' or 'floor', got {self.scale_rule!r}")
        object.__setattr__(self, "block", _check_int("MXScaling.block", self.block, 1))
        if (self.fmt.bits == 4 and self.block % 2) or (self.fmt.bits == 6 and self.block % 4):
            raise ValueError(f"MXScaling.block={self.block} is invalid for {self.fmt!r}")

    @property
    def kind(self) -> str:
        return "mx"

    def describe(self) -> str:
        return f"MX {self.fmt.name} /{self.block} E8M0 {self.scale_rule}"


@dataclasses.dataclass(frozen=True)
class NVFP4Scaling:
    """NVFP4: E2M1 elements, an E4M3 scale per 16, an FP32 tensor scale amax / (6 * 448)."""

    block: int = 16

    def __post_init__(self):
        if _check_int("NVFP4Scaling.block", self.block) != 16:
            raise ValueError(f"NVFP4Scaling.block is the format's 16 (E4M3 scale per 16 E2M1 values), got {self.block}")

    @property
    def fmt(self) -> ElementFormat:
        return formats.E2M1

    @property
    def kind(self) -> str:
        return "nvfp4"

    def describe(self) -> str:
        return f"NVFP4 e2m1 /{self.block} E4M3 + FP32 tensor scale"


ScalingSpec = TensorScaling | DelayedScaling | RowScaling | TileScaling | MXScaling | NVFP4Scaling


# ----------------------------------------------------------------------------- exact scale rules


def floor_log2(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Exact ``(floor(log2 a), a / 2**floor(log2 a))`` for finite positive FP32 ``a``.

    Reads the FP32 exponent and significand bits; FP32 subnormals get their true exponent.
    Returns int32 exponent and the significand's 23 fraction bits (int32) for exact comparisons.
    """
    bits = jax.lax.bitcast_convert_type(a.astype(jnp.float32), jnp.int32)
    biased = (bits >> 23) & 0xFF
    frac = bits & 0x7FFFFF
    # Subnormal: value = frac * 2**-149; normalise the leading one into bit 23.
    lz = jax.lax.clz(frac) - 8  # leading zeros within the 23-bit field + 1 for the hidden bit
    sub_exp = -126 - lz
    sub_frac = (frac << lz) & 0x7FFFFF
    is_sub = biased == 0
    exp = jnp.where(is_sub, sub_exp, biased - 127)
    frac = jnp.where(is_sub, sub_frac, frac)
    return exp.astype(jnp.int32), frac.astype(jnp.int32)


def mx_exponent(amax: jax.Array, fmt: ElementFormat, rule: str, lo: int = -127, hi: int = 127) -> jax.Array:
    """The exponent e of the power-of-two scale 2**e for a group with positive finite ``amax``.

    floor: e = floor(log2 amax) - emax.  rceil: + 1 when amax's significand exceeds
    max_finite's, i.e. the smallest e with amax / 2**e <= max_finite. Clamped to [lo, hi].
    """
    exp, frac = floor_log2(amax)
    e = exp - fmt.emax
    if rule == "rceil":
        max_frac = round((fmt.max_mantissa - 1.0) * 2**23)
        e = e + (frac > max_frac).astype(jnp.int32)
    elif rule != "floor":
        raise ValueError(f"unknown scale rule {rule!r}")
    return jnp.clip(e, lo, hi)


F32_MIN_NORMAL = np.float32(2.0**-126)  # the smallest FP32 scale (FP32 scales are normal)


def floored_scale(amax: jax.Array, divisor: float) -> jax.Array:
    """``exact_div(amax, divisor)``, or 2**-126 where ``amax < divisor * 2**-126``: where the quotient would be an FP32
    subnormal (which XLA on CPU, and the kernels after it, flush to 0: every code would then be a NaN or saturate).
    NaN / Inf propagate; ``amax == 0`` is the caller's case. The test is on ``amax`` (``divisor * 2**-126`` is exact),
    so every platform agrees whether or not it flushes subnormal quotients."""
    amax = jnp.asarray(amax, jnp.float32)
    tiny = amax < jnp.float32(divisor) * F32_MIN_NORMAL
    return jnp.where(tiny, F32_MIN_NORMAL, exact_div(amax, divisor))


def exact_div(a: jax.Array, b) -> jax.Array:
    """IEEE FP32 ``a / b``, elementwise, never rewritten into ``a * (1 / b)``.

    XLA's algebraic simplifier turns a division by a broadcast (of a constant or a traced value)
    into a multiplication by its reciprocal, which is not correctly rounded. So the divisor gets a
    +0 that varies along every non-trivial axis of ``a`` and the simplifier cannot see through: for
    ``a`` with two or more such axes, ``0 * float(sum of their indices)`` (it does not read ``a``:
    XLA will not fuse an expensive producer, e.g. SwiGLU's silu, into a consumer that reads its
    operand twice, and wrote it to memory first; on the H200 Llama step fp8_delayed's peak fell
    24.85 -> 24.37 GB), else ``min(|a|, 0)`` (+0 for every non-NaN ``a``, NaN for NaN). The result
    is bit-identical to true division (NaN/Inf included) and the extra ops fuse into the same loop.

    On GPUs XLA lowers the division itself to ``div.full.f32`` (up to 2 ulp off) unless LLVM gets
    ``-nvptx-prec-divf32=2``, which ``import mxprec`` requests (``mxprec.xla_flags``; this function
    warns when it is not in effect). A constant ``b``'s +0 is ``min(|a|, z)`` with ``z`` an
    optimization barrier of 0.0 (read from ``a`` itself so that it also varies along a vmapped
    axis): with it and IEEE division the H200 matched the CPU on 4.2 M random quotients by 448.

    Known cost: inside a scan (the Llama layers) the iota +0 is loop-invariant, so XLA hoists it out of the loop
    into an f32 tensor of ``a``'s shape that each cast then reads (4 bytes per element). Two forms that avoid the
    hoisting were slower in the H200 step (thirtieth session, ``h200_llama_thirtieth.md``): per-axis zero vectors
    (XLA hoisted a broadcast of one) and an index sum taking an integer from ``b`` (XLA hoisted the bare iotas).
    """
    xla_flags.warn_if_gpu_division_inexact()
    constant_b = isinstance(b, (int, float, np.number, np.ndarray))
    a = jnp.asarray(a, jnp.float32)
    b = jnp.asarray(b, jnp.float32)
    dims = [d for d in range(a.ndim) if a.shape[d] > 1]
    if constant_b and b.ndim == 0:
        z = jax.lax.optimization_barrier(jnp.zeros((), jnp.float32))
        return a / (b + jnp.minimum(jnp.abs(a), z))
    if len(dims) >= 2 and b.ndim <= a.ndim:
        idx = sum(jax.lax.broadcasted_iota(jnp.int32, a.shape, d) for d in dims)
        return a / (b + idx.astype(jnp.float32) * jnp.float32(0))
    return a / (b + jnp.minimum(jnp.abs(a), jnp.float32(0)))


def exp2_int(e: jax.Array) -> jax.Array:
    """2.0**e as FP32 for int32 e in [-126, 127], built from bits (exact, no transcendental)."""
    return jax.lax.bitcast_convert_type(((e + 127) << 23).astype(jnp.int32), jnp.float32)


# ----------------------------------------------------------------------------- delayed scaling


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DelayedScalingState:
    """Explicit delayed-scaling state.

    amax_history: float32 (history_len,), index 0 = most recent.
    scale: float32 (), the dequantization multiplier used by the *next* quantization.
    """

    amax_history: jax.Array
    scale: jax.Array

    @classmethod
    def init(cls, spec: DelayedScaling) -> DelayedScalingState:
        return cls(
            amax_history=jnp.zeros((spec.history_len,), jnp.float32),
            scale=jnp.ones((), jnp.float32),
        )


def delayed_scale_of(state: DelayedScalingState, op: str) -> jax.Array:
    """``state.scale`` as float32 ``()``; a ValueError naming ``op`` and the shape unless it holds one value."""
    return _scalar_f32(state.scale, f"{op}: DelayedScalingState.scale")


def _scalar_f32(v, what: str) -> jax.Array:
    shape = tuple(jnp.shape(v))
    if int(np.prod(shape)) != 1:
        raise ValueError(f"{what} must hold one value (shape ()), got shape {shape}")
    return jnp.asarray(v, jnp.float32).reshape(())


def update_delayed_state(state: DelayedScalingState, amax: jax.Array, spec: DelayedScaling) -> DelayedScalingState:
    """Pushes ``amax`` (the amax of the tensor just quantized) and recomputes the scale.

    history = roll(history, 1); history[0] = amax; ref = max(history) or history[0];
    scale = max(floored_scale(ref, max_finite) * 2**margin, 2**-126), kept unchanged when ref is 0 or not finite,
    or when that product overflows to Inf (a positive margin on a huge amax).
    """
    if tuple(jnp.shape(state.amax_history)) != (spec.history_len,):
        raise ValueError(
            f"update_delayed_state: amax_history has shape {tuple(jnp.shape(state.amax_history))}, "
            f"but {spec.describe()} keeps ({spec.history_len},)"
        )
    amax = _scalar_f32(amax, "update_delayed_state: amax")
    delayed_scale_of(state, "update_delayed_state")
    history = jnp.roll(state.amax_history, 1).at[0].set(amax)
    ref = jnp.max(history) if spec.amax_compute == "max" else history[0]
    new_scale = floored_scale(ref, spec.fmt.max_finite) * jnp.float32(2.0**spec.margin)
    new_scale = jnp.where(new_scale < F32_MIN_NORMAL, F32_MIN_NORMAL, new_scale)  # margin < 0
    ok = jnp.isfinite(ref) & (ref > 0) & jnp.isfinite(new_scale)
    return DelayedScalingState(amax_history=history, scale=jnp.where(ok, new_scale, state.scale))
