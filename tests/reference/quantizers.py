"""Numpy + ml_dtypes reference of every quantizer in docs/numerics.md.

Deliberately written in a different style from a JAX implementation:

* element encoding enumerates the format's grid (every code 0 .. 2^(bits-1)-1 decoded by
  ml_dtypes) and picks the nearest grid point with ties to the even code, working on exact
  float64 values (every FP32 value and every grid point is exact in float64);
* exponents come from ``np.frexp`` in float64 (exact, FP32 subnormals included);
* FP32 scale arithmetic is done on ``np.float32`` scalars/arrays (IEEE FP32 division), with the
  contract's FTZ / DAZ made explicit (numpy does not flush): FP32 subnormal inputs are read as
  zeros of their sign (``_daz``) and every FP32 division / multiplication result that is subnormal
  is flushed to a zero of its sign (``_div32``, ``_mul32``);
* an FP32 scale is never below 2^-126: a scale that would be (amax < max_finite * 2^-126) is
  2^-126 (``_scale_floor``);
* power-of-two (MX) element scaling is done exactly in float64 (x * 2^-e is exact there).

Codes are returned as uint8 arrays holding the raw bit pattern of the element format in the low
``bits`` bits (E4M3 code == uint8 view of float8_e4m3fn, E2M1 code 0b0111 == 6.0, ...).

Nothing here imports mxprec or jax.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

__all__ = [
    "E2M1",
    "E2M3",
    "E3M2",
    "E4M3",
    "E5M2",
    "FORMATS",
    "RefFormat",
    "decode",
    "decode_table",
    "encode",
    "encode_sr",
    "floor_log2",
    "get_format",
    "grid",
    "mx_exponent",
    "ref_amax",
    "ref_delayed",
    "ref_delayed_update",
    "ref_dequant_mx",
    "ref_dequant_nvfp4",
    "ref_dequant_scaled",
    "ref_dequant_tile",
    "ref_mx",
    "ref_nbytes",
    "ref_nvfp4",
    "ref_pack",
    "ref_pack_fp4",
    "ref_pack_fp6",
    "ref_row",
    "ref_tensor",
    "ref_tile",
    "ref_unpack_fp4",
    "ref_unpack_fp6",
]


# --------------------------------------------------------------------------------------------
# Formats (values copied from the table in docs/numerics.md)
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RefFormat:
    name: str
    bits: int
    ebits: int
    mbits: int
    bias: int
    max_finite: float
    min_normal: float
    min_subnormal: float
    emax: int
    dtype: object
    has_nan: bool
    has_inf: bool

    def __repr__(self):  # short ids in pytest output
        return self.name


E4M3 = RefFormat("E4M3", 8, 4, 3, 7, 448.0, 2.0**-6, 2.0**-9, 8, ml_dtypes.float8_e4m3fn, True, False)
E5M2 = RefFormat("E5M2", 8, 5, 2, 15, 57344.0, 2.0**-14, 2.0**-16, 15, ml_dtypes.float8_e5m2, True, True)
E2M3 = RefFormat("E2M3", 6, 2, 3, 1, 7.5, 1.0, 0.125, 2, ml_dtypes.float6_e2m3fn, False, False)
E3M2 = RefFormat("E3M2", 6, 3, 2, 3, 28.0, 0.25, 0.0625, 4, ml_dtypes.float6_e3m2fn, False, False)
E2M1 = RefFormat("E2M1", 4, 2, 1, 1, 6.0, 1.0, 0.5, 2, ml_dtypes.float4_e2m1fn, False, False)

FORMATS = {f.name: f for f in (E4M3, E5M2, E2M3, E3M2, E2M1)}


def get_format(fmt) -> RefFormat:
    if isinstance(fmt, RefFormat):
        return fmt
    if isinstance(fmt, str):
        return FORMATS[fmt.upper()]
    raise TypeError(f"unknown format {fmt!r}")


_GRID_CACHE: dict = {}
_TABLE_CACHE: dict = {}


def decode_table(fmt) -> np.ndarray:
    """float64 value of every code 0 .. 2^bits-1 (decoded by ml_dtypes; NaN/Inf codes included)."""
    fmt = get_format(fmt)
    if fmt.name not in _TABLE_CACHE:
        codes = np.arange(2**fmt.bits, dtype=np.uint8)
        _TABLE_CACHE[fmt.name] = codes.view(fmt.dtype).astype(np.float64)
    return _TABLE_CACHE[fmt.name]


def grid(fmt) -> np.ndarray:
    """Non-negative finite grid, ascending; index == positive code."""
    fmt = get_format(fmt)
    if fmt.name not in _GRID_CACHE:
        pos = decode_table(fmt)[: 2 ** (fmt.bits - 1)]
        pos = pos[np.isfinite(pos)]
        assert np.all(np.diff(pos) > 0), "positive codes must be monotone"
        assert pos[0] == 0.0 and pos[-1] == fmt.max_finite
        _GRID_CACHE[fmt.name] = pos
    return _GRID_CACHE[fmt.name]


def _nan_code(fmt: RefFormat) -> int:
    tab = decode_table(fmt)[: 2 ** (fmt.bits - 1)]
    idx = np.flatnonzero(np.isnan(tab))
    return int(idx[0]) if idx.size else 0  # formats without NaN: 0 (unspecified by the spec)


# --------------------------------------------------------------------------------------------
# Element encoding
# --------------------------------------------------------------------------------------------


def encode(v, fmt) -> np.ndarray:
    """Clip to +-max_finite (NaN stays NaN), then RNE onto the grid. Returns uint8 codes.

    ``v`` may be any float array; it is converted to float64 (exact for float16/bfloat16/float32
    values). Sign of zero is preserved (negative values rounding to 0 give the -0 code).
    """
    fmt = get_format(fmt)
    v = np.asarray(v).astype(np.float64)
    g = grid(fmt)
    n = g.size
    sign = np.signbit(v)
    a = np.abs(v)
    nan = np.isnan(a)
    a = np.where(nan, 0.0, np.minimum(a, fmt.max_finite))
    hi_idx = np.clip(np.searchsorted(g, a, side="left"), 0, n - 1)  # g[hi-1] < a <= g[hi]
    lo_idx = np.maximum(hi_idx - 1, 0)
    hi = g[hi_idx]
    lo = g[lo_idx]
    mid = (lo + hi) / 2.0  # exact in float64 (grid values have few bits)
    exact = a == hi
    pick_hi = np.where(a > mid, True, np.where(a < mid, False, (hi_idx % 2) == 0))
    idx = np.where(exact | pick_hi, hi_idx, lo_idx)
    codes = idx.astype(np.uint8)
    codes = np.where(sign, codes | np.uint8(1 << (fmt.bits - 1)), codes)
    if fmt.has_nan:
        codes = np.where(nan, np.uint8(_nan_code(fmt)) | np.where(sign, np.uint8(1 << (fmt.bits - 1)), np.uint8(0)), codes)
    else:
        codes = np.where(nan, np.uint8(0), codes)  # unspecified by the spec
    return codes.astype(np.uint8)


def encode_sr(v, fmt, u, rule="lt") -> np.ndarray:
    """Stochastic rounding (spec section "Stochastic rounding"): round |v| away from zero to the
    next grid point with probability p = (|v|-|lo|)/(|hi|-|lo|). Saturates.

    rule "lt": up iff u < p; rule "floor": up iff u >= 1 - p (i.e. floor(r + u) with r the
    position in grid quanta). Both are unbiased; the spec does not pin which one, so this is only
    used for property tests."""
    fmt = get_format(fmt)
    v = np.asarray(v).astype(np.float64)
    u = np.asarray(u).astype(np.float64)
    g = grid(fmt)
    n = g.size
    sign = np.signbit(v)
    a = np.minimum(np.abs(v), fmt.max_finite)
    lo_idx = np.clip(np.searchsorted(g, a, side="right") - 1, 0, n - 1)  # g[lo] <= a
    hi_idx = np.minimum(lo_idx + 1, n - 1)
    lo, hi = g[lo_idx], g[hi_idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(hi > lo, (a - lo) / (hi - lo), 0.0)
    if rule == "lt":
        up = u < p
    elif rule == "floor":
        up = (u >= 1.0 - p) & (p > 0)
    else:
        raise ValueError(rule)
    idx = np.where(up, hi_idx, lo_idx)
    codes = idx.astype(np.uint8)
    codes = np.where(sign, codes | np.uint8(1 << (fmt.bits - 1)), codes)
    return codes.astype(np.uint8)


def decode(codes, fmt) -> np.ndarray:
    """float32 value of each code."""
    fmt = get_format(fmt)
    return decode_table(fmt)[np.asarray(codes).astype(np.int64)].astype(np.float32)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


F32_MIN_NORMAL = np.float32(2.0**-126)


def _f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def _daz(x) -> np.ndarray:
    """float32(x) with every FP32 subnormal replaced by a zero of its sign (FTZ / DAZ)."""
    x = _f32(x)
    return np.where(np.abs(x) < F32_MIN_NORMAL, np.copysign(np.float32(0.0), x), x).astype(np.float32)


def ref_amax(x, axis=None, keepdims=False) -> np.ndarray:
    """max |float32(x)| of the DAZ-read input (a subnormal maximum is +0); NaN if the group holds a NaN."""
    return np.max(np.abs(_daz(x)), axis=axis, keepdims=keepdims).astype(np.float32)


def floor_log2(a):
    """(E, mant) with a = mant * 2^E, mant in [1, 2), exact (float64 frexp; FP32 subnormals get
    their true exponent). a must be positive and finite."""
    m, e = np.frexp(np.asarray(a).astype(np.float64))
    return (e - 1).astype(np.int64), m * 2.0


def mx_exponent(amax, fmt, rule: str):
    """Unclamped MX shared exponent e for positive finite amax (array), per 'floor' / 'rceil'."""
    fmt = get_format(fmt)
    E, mant = floor_log2(amax)
    if rule == "floor":
        return E - fmt.emax
    if rule == "rceil":
        _, mant_max = floor_log2(fmt.max_finite)
        return E - fmt.emax + (mant > mant_max).astype(np.int64)
    raise ValueError(rule)


def _div32(a, b) -> np.ndarray:
    """IEEE FP32 a / b, a subnormal quotient flushed to a zero of its sign (FTZ)."""
    with np.errstate(all="ignore"):
        return _daz((_f32(a) / _f32(b)).astype(np.float32))


def _mul32(a, b) -> np.ndarray:
    """IEEE FP32 a * b, a subnormal product flushed to a zero of its sign (FTZ)."""
    with np.errstate(all="ignore"):
        return _daz((_f32(a) * _f32(b)).astype(np.float32))


def _scale_floor(amax, divisor) -> np.ndarray:
    """amax / divisor (FP32), or 2^-126 where amax < divisor * 2^-126 (the quotient would be subnormal):
    FP32 scales are normal. NaN / Inf propagate; amax == 0 is the caller's case."""
    amax = _f32(amax)
    tiny = amax < np.float32(divisor) * F32_MIN_NORMAL
    return np.where(tiny, F32_MIN_NORMAL, _div32(amax, np.float32(divisor))).astype(np.float32)


def _clip_encode_f32(q32, fmt) -> np.ndarray:
    fmt = get_format(fmt)
    m = np.float32(fmt.max_finite)
    return encode(np.clip(q32, -m, m), fmt)  # np.clip keeps NaN


def _amax_scale(amax, fmt) -> np.ndarray:
    """s = amax / max_finite (FP32, at least 2^-126), 1 where amax == 0 (NaN/Inf propagate)."""
    fmt = get_format(fmt)
    amax = _f32(amax)
    s = _scale_floor(amax, fmt.max_finite)
    return np.where(amax == 0, np.float32(1.0), s).astype(np.float32)


def _norm_axis(axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for rank {ndim}")
    return axis % ndim


def _blocks(x, axis, block):
    """Move axis last and split it into (n/block, block)."""
    x = np.moveaxis(x, axis, -1)
    n = x.shape[-1]
    if n % block:
        raise ValueError(f"axis length {n} not divisible by block {block}")
    return x.reshape(x.shape[:-1] + (n // block, block))


def _unblocks(xb, axis):
    x = xb.reshape(xb.shape[:-2] + (xb.shape[-2] * xb.shape[-1],))
    return np.moveaxis(x, -1, axis)


# --------------------------------------------------------------------------------------------
# 1. TensorScaling / 2. DelayedScaling / 3. RowScaling
# --------------------------------------------------------------------------------------------


def ref_tensor(x, fmt):
    """-> (codes uint8 x.shape, scale float32 scalar)."""
    x32 = _daz(x)
    s = _amax_scale(ref_amax(x32), fmt)[()]
    codes = _clip_encode_f32(_div32(x32, s), fmt)
    return codes, np.float32(s)


def ref_delayed(x, fmt, scale):
    """Quantize with the given (previous) scale -> codes."""
    return _clip_encode_f32(_div32(_daz(x), _daz(np.float32(scale))), fmt)


def ref_delayed_update(history, scale, amax, fmt, amax_compute="max", margin=0):
    """-> (new_history float32, new_scale float32)."""
    fmt = get_format(fmt)
    h = np.roll(_f32(history), 1)
    h[0] = np.float32(amax)
    if amax_compute == "max":
        ref = np.float32(np.max(h))  # NaN propagates
    elif amax_compute == "most_recent":
        ref = h[0]
    else:
        raise ValueError(amax_compute)
    if ref == 0 or not np.isfinite(ref):
        new = np.float32(scale)
    else:  # the quotient at least 2^-126, times 2^margin, at least 2^-126 again (margin < 0)
        new = _mul32(_scale_floor(ref, fmt.max_finite), np.float32(2.0**margin))[()]
        new = max(np.float32(new), F32_MIN_NORMAL)
        if not np.isfinite(new):  # a positive margin on a huge amax: the previous scale stays
            new = np.float32(scale)
    return h, np.float32(new)


def ref_row(x, fmt, axis=-1):
    """-> (codes, scale float32 of x.shape with shape[axis] = 1)."""
    x32 = _daz(x)
    s = _amax_scale(ref_amax(x32, axis=axis, keepdims=True), fmt)
    return _clip_encode_f32(_div32(x32, s), fmt), s


def ref_dequant_scaled(codes, fmt, scale) -> np.ndarray:
    """float32(element) * s (FP32 multiply, s broadcasts)."""
    with np.errstate(all="ignore"):
        return (decode(codes, fmt) * _f32(scale)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# 4. TileScaling
# --------------------------------------------------------------------------------------------


def _tile_axes(ndim, axis, tr):
    axis = _norm_axis(axis, ndim)
    if tr == 1:
        return axis, None
    if ndim < 2:
        raise ValueError("tile rows > 1 need rank >= 2")
    row_axis = max(a for a in range(ndim) if a != axis)
    return axis, row_axis


def _tile_view(x, axis, row_axis, tr, tc):
    """x -> (..., R/tr, tr, C/tc, tc) with the row axis and quantization axis moved last."""
    if row_axis is None:
        y = np.moveaxis(x, axis, -1)[..., None, :]  # fake row axis of length 1
    else:
        y = np.moveaxis(x, [row_axis, axis], [-2, -1])
    R, C = y.shape[-2:]
    if R % tr or C % tc:
        raise ValueError(f"shape {x.shape} not divisible by tile {(tr, tc)}")
    return y.reshape(y.shape[:-2] + (R // tr, tr, C // tc, tc))


def _tile_unview(y4, axis, row_axis):
    y = y4.reshape(y4.shape[:-4] + (y4.shape[-4] * y4.shape[-3], y4.shape[-2] * y4.shape[-1]))
    if row_axis is None:
        return np.moveaxis(y[..., 0, :], -1, axis)
    return np.moveaxis(y, [-2, -1], [row_axis, axis])


def ref_tile(x, fmt, axis=-1, tile=(1, 128), power_of_two=False):
    """-> (codes uint8 x.shape, scales float32 x.shape with shape[axis]/=tc, shape[row]/=tr).

    power_of_two with a NaN / Inf tile amax: the amax is the scale, as for the plain rule.
    """
    fmt = get_format(fmt)
    tr, tc = tile
    x32 = _daz(x)
    axis, row_axis = _tile_axes(x32.ndim, axis, tr)
    v = _tile_view(x32, axis, row_axis, tr, tc)
    amax = np.max(np.abs(v), axis=(-3, -1), keepdims=True).astype(np.float32)
    if power_of_two:
        finite_pos = np.isfinite(amax) & (amax > 0)
        safe = np.where(finite_pos, amax, np.float32(1.0))
        e = np.clip(mx_exponent(safe, fmt, "rceil"), -126, 127)
        s = np.ldexp(np.float64(1.0), e).astype(np.float32)
        s = np.where(amax == 0, np.float32(1.0), np.where(finite_pos, s, amax))
    else:
        s = _amax_scale(amax, fmt)
    s = s.astype(np.float32)
    codes = _clip_encode_f32(_div32(v, s), fmt)
    codes = _tile_unview(codes, axis, row_axis)
    scales = _tile_unview(s, axis, row_axis)
    return codes, scales


def ref_dequant_tile(codes, scales, fmt, axis=-1, tile=(1, 128)) -> np.ndarray:
    tr, tc = tile
    codes = np.asarray(codes)
    axis, row_axis = _tile_axes(codes.ndim, axis, tr)
    s = np.asarray(scales, np.float32)
    s = np.repeat(s, tc, axis=axis)
    if row_axis is not None:
        s = np.repeat(s, tr, axis=row_axis)
    return ref_dequant_scaled(codes, fmt, s)


# --------------------------------------------------------------------------------------------
# 5. MXScaling
# --------------------------------------------------------------------------------------------


def ref_mx(x, fmt, axis=-1, block=32, rule="rceil"):
    """-> (codes uint8 x.shape, scale_bytes uint8 x.shape with shape[axis] /= block)."""
    fmt = get_format(fmt)
    x32 = _daz(x)
    axis = _norm_axis(axis, x32.ndim)
    xb = _blocks(x32, axis, block)
    absb = np.abs(xb)
    bad = np.any(~np.isfinite(absb), axis=-1)  # NaN or +-Inf in the block
    amax = np.max(np.where(np.isfinite(absb), absb, 0), axis=-1)
    zero = (amax == 0) & ~bad
    normal = ~bad & ~zero
    safe = np.where(normal, amax, np.float32(1.0))
    e = np.clip(mx_exponent(safe, fmt, rule), -127, 127)
    e = np.where(normal, e, 0)
    sbytes = np.where(bad, 255, np.where(zero, 0, e + 127)).astype(np.uint8)
    # exact power-of-two division in float64 (x32 * 2^-e is exact: <= 24 significant bits,
    # exponent within float64 range)
    q = xb.astype(np.float64) * np.ldexp(1.0, -e)[..., None]
    q = np.where(normal[..., None], q, 0.0)
    codes = encode(np.clip(q, -fmt.max_finite, fmt.max_finite), fmt)
    codes = np.where(normal[..., None], codes, np.uint8(0)).astype(np.uint8)
    return _unblocks(codes, axis), np.moveaxis(sbytes, -1, axis)


def ref_dequant_mx(codes, scale_bytes, fmt, axis=-1, block=32) -> np.ndarray:
    """float32(element) * 2^(byte-127); byte 0xFF -> NaN. Computed exactly in float64, rounded
    once to float32 (== the IEEE FP32 product)."""
    fmt = get_format(fmt)
    codes = np.asarray(codes)
    axis = _norm_axis(axis, codes.ndim)
    sb = np.moveaxis(np.asarray(scale_bytes).astype(np.int64), axis, -1)
    elem = _blocks(decode(codes, fmt).astype(np.float64), axis, block)
    val = elem * np.ldexp(1.0, sb - 127)[..., None]
    val = np.where((sb == 255)[..., None], np.nan, val)
    with np.errstate(over="ignore"):  # e.g. 256 * 2^120 overflows FP32 to Inf, as in IEEE FP32
        return _unblocks(val, axis).astype(np.float32)


# --------------------------------------------------------------------------------------------
# 6. NVFP4Scaling
# --------------------------------------------------------------------------------------------


def ref_nvfp4(x, axis=-1):
    """-> (codes uint8 x.shape (E2M1), block_scale_bytes uint8 (E4M3 bits, shape[axis]/=16),
    tensor_scale float32 scalar)."""
    x32 = _daz(x)
    axis = _norm_axis(axis, x32.ndim)
    amax_t = ref_amax(x32)[()]
    s_t = np.float32(1.0) if amax_t == 0 else _scale_floor(amax_t, 2688.0)[()]
    xb = _blocks(x32, axis, 16)
    amax_b = np.max(np.abs(xb), axis=-1).astype(np.float32)
    t = _div32(_div32(amax_b, np.float32(6.0)), s_t)
    t = np.minimum(t, np.float32(448.0))  # NaN propagates
    sb_codes = encode(t, E4M3)
    sb_val = decode(sb_codes, E4M3)
    eff = _mul32(sb_val, np.float32(s_t))
    q = _div32(xb, eff[..., None])
    codes = _clip_encode_f32(q, E2M1)
    codes = np.where((eff == 0)[..., None], np.uint8(0), codes).astype(np.uint8)
    return _unblocks(codes, axis), np.moveaxis(sb_codes, -1, axis), np.float32(s_t)


def ref_dequant_nvfp4(codes, block_scale_bytes, tensor_scale, axis=-1) -> np.ndarray:
    codes = np.asarray(codes)
    axis = _norm_axis(axis, codes.ndim)
    sb = decode(np.moveaxis(np.asarray(block_scale_bytes), axis, -1), E4M3)
    with np.errstate(all="ignore"):
        eff = (sb * np.float32(tensor_scale)).astype(np.float32)
        elem = _blocks(decode(codes, E2M1), axis, 16)
        out = (elem * eff[..., None]).astype(np.float32)
    return _unblocks(out, axis)


# --------------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------------


def ref_pack_fp4(codes, axis=-1) -> np.ndarray:
    """Element 2i -> low nibble, 2i+1 -> high nibble of byte i along axis."""
    c = _blocks(np.asarray(codes).astype(np.uint8) & 0x0F, axis, 2)
    packed = (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)
    return np.moveaxis(packed, -1, axis)


def ref_unpack_fp4(packed, axis=-1) -> np.ndarray:
    p = np.moveaxis(np.asarray(packed).astype(np.uint8), axis, -1)
    c = np.stack([p & 0x0F, p >> 4], axis=-1)
    return _unblocks(c, axis).astype(np.uint8)


def ref_pack_fp6(codes, axis=-1) -> np.ndarray:
    """c0..c3 -> 24-bit word c0 | c1<<6 | c2<<12 | c3<<18, stored little-endian in 3 bytes."""
    c = _blocks(np.asarray(codes).astype(np.uint32) & 0x3F, axis, 4)
    w = c[..., 0] | (c[..., 1] << 6) | (c[..., 2] << 12) | (c[..., 3] << 18)
    b = np.stack([w & 0xFF, (w >> 8) & 0xFF, (w >> 16) & 0xFF], axis=-1).astype(np.uint8)
    return _unblocks(b, axis)


def ref_unpack_fp6(packed, axis=-1) -> np.ndarray:
    b = _blocks(np.asarray(packed).astype(np.uint32), axis, 3)
    w = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16)
    c = np.stack([(w >> (6 * i)) & 0x3F for i in range(4)], axis=-1).astype(np.uint8)
    return _unblocks(c, axis)


def ref_pack(codes, fmt, axis=-1) -> np.ndarray:
    """Storage bytes of the data for a given element format (FP8: codes unchanged)."""
    fmt = get_format(fmt)
    if fmt.bits == 8:
        return np.asarray(codes).astype(np.uint8)
    if fmt.bits == 6:
        return ref_pack_fp6(codes, axis)
    if fmt.bits == 4:
        return ref_pack_fp4(codes, axis)
    raise ValueError(fmt)


def ref_nbytes(shape, fmt, scaling, axis=-1, block=32, tile=(1, 128)) -> int:
    """data bytes + scale bytes (+4 for the NVFP4 FP32 tensor scale)."""
    fmt = get_format(fmt)
    n = int(np.prod(shape))
    data = n * fmt.bits // 8
    if scaling in ("tensor", "delayed"):
        return data + 4
    if scaling == "row":
        return data + 4 * (n // shape[axis])
    if scaling == "tile":
        tr, tc = tile
        return data + 4 * (n // (tr * tc))
    if scaling == "mx":
        return data + n // block
    if scaling == "nvfp4":
        return data + n // 16 + 4
    raise ValueError(scaling)
