"""Bit-exact comparison of mxprec.quantize with the independent numpy reference (tests/reference).

Data bits and scale bits must match exactly. For the FP32-scaled FP8 schemes (tensor / delayed /
row / tile) NaN codes are compared as "both NaN" (the NaN payload/sign is not part of the
contract). MX NaN blocks must be exactly scale byte 0xFF with codes 0.

XLA on CPU flushes FP32 subnormals to zero (FTZ/DAZ), and the contract makes that explicit: subnormal
inputs are zeros of their sign, and FP32 scales are never below 2^-126 (the reference does both; the tiny-group
tests below check them). Dequantized outputs may land in the FP32 subnormal range, where a flushed ±0 is
accepted (``ftz_ok``).

Most checks run ``quantize`` under ``jax.jit`` (one compile per spec/shape keeps the file fast);
``test_eager_matches_reference`` covers the eager path.
"""

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import mxprec
from mxprec import formats

sys.path.insert(0, os.path.dirname(__file__))
import reference as R

FP8 = ["E4M3", "E5M2"]
MX_FMTS = ["E4M3", "E5M2", "E2M3", "E3M2", "E2M1"]
RULES = ["rceil", "floor"]
DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
F32_MIN_NORMAL = np.float32(2.0**-126)


def F(name):
    return getattr(formats, name)


# --------------------------------------------------------------------------------------------
# running mxprec
# --------------------------------------------------------------------------------------------


def _full(x, spec, axis):
    q = mxprec.quantize(x, spec, axis=axis)
    return dict(
        q=q,
        codes=q.codes(),
        data=q.data,
        scale=q.scale,
        amax=q.amax,
        tensor_scale=q.tensor_scale,
        deq=mxprec.dequantize(q),
    )


def _light(x, spec, axis):
    q = mxprec.quantize(x, spec, axis=axis)
    return dict(data=q.data, scale=q.scale, amax=q.amax, tensor_scale=q.tensor_scale)


_full_jit = jax.jit(_full, static_argnames=("spec", "axis"))
_light_jit = jax.jit(_light, static_argnames=("spec", "axis"))


def run(x, spec, axis=-1, light=False):
    """light=True compiles quantize only (about 3x cheaper to compile): no q.codes(), no
    dequantize; codes are then read from q.data with the reference unpackers."""
    out = (_light_jit if light else _full_jit)(x, spec, axis)
    return {k: (v if k == "q" or v is None else np.asarray(v)) for k, v in out.items()}


def make_spec(kind, fmt=None, rule="rceil", tile=(1, 32), p2=False):
    if kind == "tensor":
        return mxprec.TensorScaling(F(fmt))
    if kind == "row":
        return mxprec.RowScaling(F(fmt))
    if kind == "tile":
        return mxprec.TileScaling(F(fmt), tile=tile, power_of_two=p2)
    if kind == "mx":
        return mxprec.MXScaling(F(fmt), block=32, scale_rule=rule)
    if kind == "nvfp4":
        return mxprec.NVFP4Scaling()
    raise ValueError(kind)


# --------------------------------------------------------------------------------------------
# comparison helpers with minimal repros on failure
# --------------------------------------------------------------------------------------------


def _u8(a):
    a = np.asarray(a)
    assert a.dtype.itemsize == 1, a.dtype
    return a.view(np.uint8)


def _fmt_x(x, idx):
    v = np.asarray(x)[idx]
    return f"{float(v)!r}"


def _report(what, bad, got, ref, x=None, n=6):
    bad, got, ref = np.atleast_1d(bad), np.atleast_1d(got), np.atleast_1d(ref)
    idx = list(zip(*np.nonzero(bad)))[:n]
    lines = [f"{what}: {int(bad.sum())} mismatches of {bad.size}"]
    for i in idx:
        s = f"  at {tuple(int(j) for j in i)}: got {got[i]!r} ref {ref[i]!r}"
        if x is not None and np.shape(x) == np.shape(got):
            s += f" (x={_fmt_x(x, i)})"
        lines.append(s)
    return "\n".join(lines)


def assert_u8_equal(got, ref, what, x=None):
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    bad = got.astype(np.int64) != ref.astype(np.int64)
    assert not bad.any(), _report(what, bad, got, ref, x)


def assert_codes_nan_aware(got, ref, fmt, what="codes", x=None):
    """Exact bits, except NaN codes which only need to be NaN on both sides."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    gn = np.isnan(R.decode(got, fmt))
    rn = np.isnan(R.decode(ref, fmt))
    bad = (gn != rn) | (~gn & ~rn & (got != ref))
    assert not bad.any(), _report(what, bad, got, ref, x)


def assert_f32_equal(got, ref, what, ftz_ok=False, x=None):
    got = np.asarray(got)
    ref = np.asarray(ref, np.float32)
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}"
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    gn, rn = np.isnan(got), np.isnan(ref)
    same = got.view(np.uint32) == ref.view(np.uint32)
    ok = (gn & rn) | (~gn & ~rn & same)
    if ftz_ok:
        sub = (ref != 0) & (np.abs(ref) < F32_MIN_NORMAL)
        ok |= sub & (got == 0)
    bad = ~ok
    assert not bad.any(), _report(what, bad, got, ref, x)


def check(kind, x, fmt=None, axis=-1, rule="rceil", tile=(1, 32), p2=False, light=False):
    """Quantize x (a jax array) with mxprec and compare every output with the reference:
    q.codes(), q.data (packing), q.scale, q.amax, q.tensor_scale and dequantize(q).
    light=True: q.data / q.scale / q.amax / q.tensor_scale only (cheaper compile)."""
    spec = make_spec(kind, fmt, rule, tile, p2)
    out = run(x, spec, axis, light)
    xr = np.asarray(x)
    f = R.E2M1 if kind == "nvfp4" else R.get_format(fmt)
    ctx = f"{kind} {fmt} axis={axis} rule={rule} tile={tile} p2={p2} shape={xr.shape} dtype={xr.dtype}"
    if light:
        data = _u8(out["data"])
        out["codes"] = data if f.bits == 8 else (R.ref_unpack_fp4 if f.bits == 4 else R.ref_unpack_fp6)(data, axis)

    assert_f32_equal(out["amax"], R.ref_amax(xr), f"amax [{ctx}]")
    assert out["amax"].shape == ()

    if kind in ("tensor", "row", "tile"):
        if kind == "tensor":
            codes, scale = R.ref_tensor(xr, f)
        elif kind == "row":
            codes, scale = R.ref_row(xr, f, axis)
        else:
            codes, scale = R.ref_tile(xr, f, axis, tile, p2)
        assert_codes_nan_aware(out["codes"], codes, f, f"codes [{ctx}]", xr)
        assert_f32_equal(out["scale"], scale, f"scale [{ctx}]")
        assert out["data"].dtype == np.dtype(f.dtype), f"data dtype {out['data'].dtype} [{ctx}]"
        assert_codes_nan_aware(_u8(out["data"]), codes, f, f"data bits [{ctx}]", xr)
        if kind == "tile":
            deq = R.ref_dequant_tile(codes, scale, f, axis, tile)
        else:
            deq = R.ref_dequant_scaled(codes, f, scale)
        if not light:
            assert_f32_equal(out["deq"], deq, f"dequant [{ctx}]", ftz_ok=True, x=xr)
        assert out["tensor_scale"] is None
        return out, (codes, scale)

    if kind == "mx":
        codes, sbytes = R.ref_mx(xr, f, axis, 32, rule)
        assert_u8_equal(out["codes"], codes, f"codes [{ctx}]", xr)
        assert out["scale"].dtype == np.dtype(ml_dtypes.float8_e8m0fnu), f"scale dtype [{ctx}]"
        assert_u8_equal(_u8(out["scale"]), sbytes, f"scale bytes [{ctx}]")
        deq = R.ref_dequant_mx(codes, sbytes, f, axis, 32)
    else:  # nvfp4
        codes, sbytes, ts = R.ref_nvfp4(xr, axis)
        assert_u8_equal(out["codes"], codes, f"codes [{ctx}]", xr)
        assert out["scale"].dtype == np.dtype(ml_dtypes.float8_e4m3fn), f"scale dtype [{ctx}]"
        assert_u8_equal(_u8(out["scale"]), sbytes, f"block scale bytes [{ctx}]")
        assert_f32_equal(out["tensor_scale"], ts, f"tensor scale [{ctx}]")
        deq = R.ref_dequant_nvfp4(codes, sbytes, ts, axis)
    packed = R.ref_pack(codes, f, axis)
    if f.bits == 8:
        assert out["data"].dtype == np.dtype(f.dtype), f"data dtype [{ctx}]"
    else:
        assert out["data"].dtype == np.uint8, f"data dtype [{ctx}]"
    assert_u8_equal(_u8(out["data"]), packed, f"data bytes [{ctx}]")
    if f.bits == 4:
        assert_u8_equal(R.ref_unpack_fp4(_u8(out["data"]), axis), out["codes"], f"unpack(data) vs codes() [{ctx}]")
    elif f.bits == 6:
        assert_u8_equal(R.ref_unpack_fp6(_u8(out["data"]), axis), out["codes"], f"unpack(data) vs codes() [{ctx}]")
    if not light:
        assert_f32_equal(out["deq"], deq, f"dequant [{ctx}]", ftz_ok=True, x=xr)
    return out, (codes, sbytes)


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


def rand(shape, seed, spread=8):
    """Normal values times per-element powers of two in [2^-spread, 2^spread], plus a few exact
    zeros and negative zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = 0.0
    flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = -0.0
    return x.astype(np.float32)


def jx(x, dtype=jnp.float32):
    return jnp.asarray(np.asarray(x, np.float32)).astype(dtype)


def tie_values(f):
    """Positive magnitudes of element-grid ties, near ties, grid points and subnormal probes."""
    g = R.grid(f)
    mids = (g[1:] + g[:-1]) / 2
    near = np.concatenate([mids * (1 + 2.0**-12), mids * (1 - 2.0**-12)])
    sub = f.min_subnormal * np.array([0.25, 0.5, 0.75, 1, 1.25, 1.5, 2.5, 3.5, 1 / 3])
    v = np.concatenate([mids, near, g[1:], sub, [f.max_finite * 1.03, f.max_finite * 2]])
    return v


def blocks_with_lead(vals, lead, width, signs=True):
    """Rows of `width`: row[0] = lead[r], rest = consecutive chunk of vals (alternating signs)."""
    vals = np.asarray(vals, np.float64)
    if signs:
        vals = np.concatenate([vals, -vals])
    per = width - 1
    nrows = -(-vals.size // per)
    body = np.zeros(nrows * per)
    body[: vals.size] = vals
    body = body.reshape(nrows, per)
    lead = np.resize(np.asarray(lead, np.float64), nrows)
    return np.concatenate([lead[:, None], body], axis=1), lead


# shape/axis configs for MX-like (axis length multiple of 32): rank 1..4, axis first/middle/last
MX_CONFIGS = [
    ((64,), 0),
    ((3, 64), -1),
    ((64, 5), 0),
    ((2, 96, 3), 1),
    ((2, 3, 2, 64), -1),
    ((2, 32, 3, 2), 1),
]


# --------------------------------------------------------------------------------------------
# formats
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MX_FMTS)
def test_format_constants(name):
    m, r = F(name), R.get_format(name)
    for attr in ("bits", "ebits", "mbits", "bias", "max_finite", "min_normal", "min_subnormal", "emax"):
        assert getattr(m, attr) == getattr(r, attr), attr
    assert np.dtype(m.dtype) == np.dtype(r.dtype)


def test_scale_format_and_presets():
    assert formats.E8M0.bits == 8 and formats.E8M0.bias == 127
    assert np.dtype(formats.E8M0.dtype) == np.dtype(ml_dtypes.float8_e8m0fnu)
    for preset, name in [
        ("MXFP8", "E4M3"),
        ("MXFP8_E5M2", "E5M2"),
        ("MXFP6_E2M3", "E2M3"),
        ("MXFP6_E3M2", "E3M2"),
        ("MXFP4", "E2M1"),
    ]:
        p = getattr(formats, preset)
        assert p.fmt == F(name) and p.block == 32 and p.scale_rule == "rceil"


# --------------------------------------------------------------------------------------------
# MX
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fi,fmt,rule", [(i, f, RULES[i % 2]) for i, f in enumerate(MX_FMTS)] + [(5, "E2M1", "floor")]
)
def test_mx_random(fmt, fi, rule):
    """Every format (both rules for every format are in test_mx_adversarial / _pow2_boundaries);
    the shape/axis config and input dtype rotate so that ranks 1-4, axis first/middle/last and
    f32/bf16/f16 are all covered."""
    shape, axis = MX_CONFIGS[fi % len(MX_CONFIGS)]
    dtype = DTYPES[fi % 3]
    check("mx", jx(rand(shape, fi), dtype), fmt, axis, rule=rule, light=True)


# Adversarial / boundary tensors are padded to a common number of 32-wide rows so that the tests
# sharing a spec share one jit compile.
ROWS = 1600


def pad_rows(x, n=ROWS):
    assert x.shape[0] <= n, x.shape
    return np.concatenate([x, np.zeros((n - x.shape[0],) + x.shape[1:], x.dtype)])


def adversarial_rows(f, lead_scale=True):
    """Rows of 32: lead = ±max_finite*2^k, body = grid ties / near ties / grid points /
    element subnormals / saturating values, all times 2^k (k varies per row), so that
    amax / max_finite = 2^k exactly and the ties stay exact ties after scaling."""
    rows, _ = blocks_with_lead(tie_values(f), f.max_finite, 32)
    ks = np.resize(np.array([0, -20, 3, 17, -1, 9, -60, 60]), rows.shape[0])
    rows = rows * np.exp2(ks)[:, None]
    rows[1::2, 0] *= -1
    return rows


def boundary_amaxes(f, kmin):
    """amax = 2^k, 2^k(1±ulp), max_finite*2^k and its FP32 neighbours, FP32-normal and finite."""
    am = []
    for k in range(kmin, 128):
        for base in (2.0**k, f.max_finite * 2.0**k):
            with np.errstate(over="ignore"):
                b = np.float32(base)
            am += [b, np.nextafter(b, np.float32(0)), np.nextafter(b, np.float32(np.inf))]
    am = np.array(am, np.float32)
    return am[np.isfinite(am) & (am >= F32_MIN_NORMAL)]


def boundary_rows(f, kmin, seed):
    """One row of 32 per boundary amax: lead ±amax, body = amax * U(2^-10, 1) * ±1 with any FP32
    subnormal replaced by 0 (XLA CPU flushes subnormal inputs)."""
    am = boundary_amaxes(f, kmin)
    rng = np.random.default_rng(seed)
    body = am[:, None].astype(np.float64) * rng.uniform(2.0**-10, 1.0, (am.size, 31))
    body *= rng.choice([-1.0, 1.0], body.shape)
    body = body.astype(np.float32)
    body[np.abs(body) < F32_MIN_NORMAL] = 0.0
    lead = np.where(np.arange(am.size) % 2, -am, am)
    return np.concatenate([lead[:, None], body], 1)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("fmt", MX_FMTS)
def test_mx_adversarial(fmt, rule):
    """Exact ties (scaled by 2^k), near ties, element subnormals, saturation, zero blocks,
    -0 blocks, NaN/Inf blocks, the single-outlier block, in one tensor."""
    f = R.get_format(fmt)
    rows = adversarial_rows(f)
    special = np.zeros((9, 32))
    special[0] = 0.0  # all-zero block
    special[1] = -0.0  # all -0 block (spec: codes 0)
    special[2, ::2] = -0.0
    special[3] = 1.0
    special[3, 5] = np.nan
    special[4] = -2.0
    special[4, 31] = np.inf
    special[5] = 3.0
    special[5, 0] = -np.inf
    special[6, 7] = np.nan
    special[6, 8] = np.inf
    special[7] = 1.0
    special[7, 0] = 500.0  # outlier block
    special[8] = -1.0
    special[8, 9] = -500.0
    # very large / very small magnitudes (inputs stay FP32-normal)
    extreme = rand((8, 32), 21, spread=3).astype(np.float64)
    extreme *= np.array([1e38 / 8, 1e38 / 8, 1e-30, 1e-30, 1e30, 1e-25, 1e-36, 3e37])[:, None]
    extreme = extreme.astype(np.float32)
    extreme[np.abs(extreme) < F32_MIN_NORMAL] = 0.0
    x = pad_rows(np.concatenate([rows, special, extreme]).astype(np.float32))
    out, (_codes, _sb) = check("mx", jx(x), fmt, -1, rule=rule)
    n = rows.shape[0]
    # explicit expectations straight from the spec text
    sbo = _u8(out["scale"])[:, 0]
    assert sbo[n : n + 3].tolist() == [0, 0, 0]
    assert np.all(out["codes"][n : n + 3] == 0)
    assert sbo[n + 3 : n + 7].tolist() == [255] * 4
    assert np.all(out["codes"][n + 3 : n + 7] == 0)
    assert np.all(np.isnan(out["deq"][n + 3 : n + 7]))
    if fmt == "E4M3":
        elem = R.decode(out["codes"][n + 7 : n + 9], f)
        if rule == "floor":
            assert sbo[n + 7 : n + 9].tolist() == [127, 127] and elem[0, 0] == 448 and elem[1, 9] == -448
        else:  # 500 / 2 = 250 -> 256 on the E4M3 grid
            assert sbo[n + 7 : n + 9].tolist() == [128, 128] and elem[0, 0] == 256 and elem[1, 9] == -256


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("fmt", MX_FMTS)
def test_mx_pow2_boundaries(fmt, rule):
    """amax = 2^k, 2^k(1±ulp), max_finite*2^k(1±ulp) (where rceil's +1 flips) for every k that
    keeps the input FP32-normal: k in [-125, 127], including the [-127, 127] clamp."""
    x = pad_rows(boundary_rows(R.get_format(fmt), -125, 7))
    check("mx", jx(x), fmt, -1, rule=rule)


# --------------------------------------------------------------------------------------------
# FP32-scaled FP8: tensor, row, tile
# --------------------------------------------------------------------------------------------

FP8_CONFIGS = [((64,), 0), ((3, 40), -1), ((40, 3), 0), ((2, 24, 3), 1), ((2, 3, 2, 16), -1)]


@pytest.mark.parametrize(
    "kind,ci", [("tensor", 0), ("tensor", 3), ("row", 1), ("row", 2), ("row", 3), ("row", 4)]
)
def test_fp8_scaled_random(kind, ci):
    shape, axis = FP8_CONFIGS[ci]
    fmt = FP8[(ci + (kind == "row")) % 2]
    dtype = DTYPES[(ci + (kind == "row")) % 3]
    check(kind, jx(rand(shape, 100 + ci), dtype), fmt, axis, light=True)


TILE_CONFIGS = [
    ((256,), 0, (1, 128)),  # rank 1, default tile
    ((4, 64), -1, (2, 32)),
    ((64, 4), 0, (4, 16)),  # row axis = last axis
    ((2, 64, 4), 1, (2, 32)),  # middle axis, row axis = 2
    ((2, 16, 3, 4), 1, (2, 8)),  # rank 4, row axis = 3
    ((2, 4, 64), -1, (4, 16)),
]


@pytest.mark.parametrize("ci", range(len(TILE_CONFIGS)))
def test_tile_random(ci):
    shape, axis, tile = TILE_CONFIGS[ci]
    p2 = ci % 2 == 1
    fmt = FP8[(ci // 2) % 2]
    dtype = DTYPES[ci % 3]
    check("tile", jx(rand(shape, 200 + ci), dtype), fmt, axis, tile=tile, p2=p2, light=True)


def test_tile_default_spec():
    spec = mxprec.TileScaling(formats.E4M3)
    assert spec.tile == (1, 128) and spec.power_of_two is False


# (kind, tile, power_of_two, light) on the padded (ROWS, 32) adversarial/boundary tensors
FP8_ROW_SPECS = [("row", (1, 32), False, False), ("tile", (1, 32), False, True), ("tile", (1, 32), True, True)]


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_scaled_ties(fmt):
    """Ties / near ties / subnormals of the element grid, scaled by 2^k so that amax/max_finite
    is exactly 2^k; row scaling and tile scaling (both tile scale rules), and tensor scaling."""
    f = R.get_format(fmt)
    rows = adversarial_rows(f)
    x = pad_rows(rows.astype(np.float32))
    x[-3, 4] = np.nan  # non-finite rows in a large tensor (>= 4096 elements)
    x[-2, 7] = np.inf
    x[-1, 31] = -np.inf
    for kind, tile, p2, light in FP8_ROW_SPECS[:2]:  # pow2 tiles with non-finite amax are unspecified
        check(kind, jx(x), fmt, -1, tile=tile, p2=p2, light=light)
    x[-3:] = 0.0
    for kind, tile, p2, light in FP8_ROW_SPECS[2:]:
        check(kind, jx(x), fmt, -1, tile=tile, p2=p2, light=light)
    # tensor scaling: amax = max_finite * 2^-3 -> s = 2^-3 exactly
    v = tie_values(f)
    v = v[v <= f.max_finite]
    xt = np.resize(np.concatenate([v, -v]), 128)
    xt[0] = f.max_finite
    check("tensor", jx((xt * 2.0**-3).reshape(4, 32)), fmt, -1)


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_scaled_pow2_boundaries(fmt):
    """Row / tile scales at amax = 2^k(1±ulp) and max_finite*2^k(1±ulp). For the FP32 scales k
    starts where amax / max_finite is FP32-normal (XLA CPU FTZ); the pow2 tile runs the full
    range including its [-126, 127] clamp."""
    f = R.get_format(fmt)
    kmin = int(np.ceil(np.log2(f.max_finite))) - 126
    x = pad_rows(boundary_rows(f, kmin, 8))
    x_full = pad_rows(boundary_rows(f, -125, 8))
    for kind, tile, p2, light in FP8_ROW_SPECS:
        check(kind, jx(x_full if p2 else x), fmt, -1, tile=tile, p2=p2, light=light)


@pytest.mark.parametrize("fmt", FP8)
def test_tensor_pow2_boundaries_loop(fmt):
    """TensorScaling: one compile, many tensors with amax on power-of-two / max_finite*2^k
    boundaries."""
    f = R.get_format(fmt)
    rng = np.random.default_rng(9)
    body = rng.uniform(-1, 1, 31)
    kmin = int(np.ceil(np.log2(f.max_finite))) - 120
    for a in boundary_amaxes(f, kmin)[::3]:
        x = np.concatenate([[a], (body * np.float64(a)).astype(np.float32)]).astype(np.float32)
        x[np.abs(x) < F32_MIN_NORMAL] = 0.0
        check("tensor", jx(x), fmt, 0)


# (kind, tile, p2) used on (4, 32) tensors in the special-value tests below (shared compiles)
SMALL_SPECS = [("tensor", (1, 32), False), ("row", (1, 32), False), ("tile", (2, 16), False), ("tile", (1, 32), True)]


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_scaled_nonfinite(fmt):
    """NaN / Inf propagate through IEEE arithmetic (no special cases). (Tile power_of_two with a
    non-finite amax is not defined by the spec and is not tested.)"""
    base = rand((4, 32), 31)
    for bad in (np.nan, np.inf, -np.inf):
        x = base.copy()
        x[1, 3] = bad
        out, _ = check("tensor", jx(x), fmt, -1)
        assert np.isnan(out["scale"]) if np.isnan(bad) else np.isinf(out["scale"])
        assert np.all(np.isnan(out["deq"]))  # NaN, or 0 * Inf = NaN
        out, _ = check("row", jx(x), fmt, -1)
        assert np.isfinite(out["scale"][[0, 2, 3]]).all() and not np.isfinite(out["scale"][1, 0])
        check("tile", jx(x), fmt, -1, tile=(2, 16), p2=False)
    # large tensor (>= 4096 elements): NaN / Inf must still reach the tensor amax
    big = rand((64, 64), 32)
    for pos in [(0, 0), (17, 33), (63, 63)]:
        for bad in (np.nan, np.inf):
            x = big.copy()
            x[pos] = bad
            check("tensor", jx(x), fmt, -1, light=True)


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_scaled_zero_and_extreme(fmt):
    x = np.zeros((4, 32), np.float32)
    out, _ = check("tensor", jx(x), fmt, -1)
    assert out["scale"] == 1.0
    x[1] = -0.0
    x[0, 0] = 3.0
    x[2, 5] = -0.0
    for kind, tile, p2 in SMALL_SPECS:
        out, _ = check(kind, jx(x), fmt, -1, tile=tile, p2=p2)
        if kind == "row":
            assert out["scale"][1, 0] == 1.0
    # very large / very small magnitudes, alone and mixed in one tensor
    y = rand((4, 32), 41, spread=3).astype(np.float64)
    for mags in ([1e38 / 8] * 4, [1e-30] * 4, [1e38 / 8, 1e-30, 1.0, 1e20]):
        z = (y * np.array(mags)[:, None]).astype(np.float32)
        z[np.abs(z) < F32_MIN_NORMAL] = 0.0
        for kind, tile, p2 in SMALL_SPECS:
            check(kind, jx(z), fmt, -1, tile=tile, p2=p2)


# delayed scaling
# --------------------------------------------------------------------------------------------


def _delayed_steps():
    rng = np.random.default_rng(50)
    mags = [1.0, 100.0, 0.0, 5.0, "inf", "nan", 1e-3, 1e4, 2.0, 3.0, 0.5, 7.0]
    xs = []
    for m in mags:
        x = rng.standard_normal((3, 32)).astype(np.float32)
        if m == "inf":
            x[0, 1] = np.inf
        elif m == "nan":
            x[2, 2] = np.nan
        else:
            x = (x * np.float32(m)).astype(np.float32)
        xs.append(x)
    return xs


@pytest.mark.parametrize(
    "fmt,amax_compute,margin",
    [("E4M3", "max", 0), ("E4M3", "most_recent", 2), ("E5M2", "max", 3), ("E5M2", "most_recent", 0)],
)
def test_delayed_sequence(fmt, amax_compute, margin):
    spec = mxprec.DelayedScaling(F(fmt), history_len=4, amax_compute=amax_compute, margin=margin)
    f = R.get_format(fmt)
    state = mxprec.DelayedScalingState.init(spec)
    assert np.asarray(state.amax_history).shape == (4,)
    assert np.asarray(state.amax_history).dtype == np.float32
    assert_f32_equal(np.asarray(state.amax_history), np.zeros(4), "init history")
    assert_f32_equal(np.asarray(state.scale), np.float32(1), "init scale")

    @jax.jit
    def step(x, state):
        q = mxprec.quantize(x, spec, axis=-1, state=state)
        new = mxprec.update_delayed_state(state, q.amax, spec)
        return q.codes(), q.data, q.scale, q.amax, mxprec.dequantize(q), new

    h = np.zeros(4, np.float32)
    s = np.float32(1)
    for i, x in enumerate(_delayed_steps()):
        codes_g, data_g, scale_g, amax_g, deq_g, state = step(jx(x), state)
        ctx = f"step {i} {fmt} {amax_compute} margin={margin}"
        codes_r = R.ref_delayed(x, f, s)
        assert_codes_nan_aware(np.asarray(codes_g), codes_r, f, f"codes [{ctx}]", x)
        assert_codes_nan_aware(_u8(np.asarray(data_g)), codes_r, f, f"data [{ctx}]", x)
        assert_f32_equal(np.asarray(scale_g), s, f"q.scale [{ctx}]")
        assert_f32_equal(np.asarray(amax_g), R.ref_amax(x), f"amax [{ctx}]")
        assert_f32_equal(np.asarray(deq_g), R.ref_dequant_scaled(codes_r, f, s), f"dequant [{ctx}]", ftz_ok=True)
        h, s = R.ref_delayed_update(h, s, R.ref_amax(x), f, amax_compute, margin)
        assert_f32_equal(np.asarray(state.amax_history), h, f"history [{ctx}]")
        assert_f32_equal(np.asarray(state.scale), s, f"scale [{ctx}]")


def test_delayed_defaults_and_eager_update():
    spec = mxprec.DelayedScaling(formats.E4M3)
    assert spec.history_len == 1024 and spec.amax_compute == "max" and spec.margin == 0
    st = mxprec.DelayedScalingState.init(spec)
    assert np.asarray(st.amax_history).shape == (1024,)
    st = mxprec.update_delayed_state(st, jnp.float32(896.0), spec)
    assert float(st.scale) == 2.0 and float(st.amax_history[0]) == 896.0
    # Inf in x with a finite delayed scale saturates to max_finite (clip before encode)
    x = jnp.array([np.inf, -np.inf, 1.0], jnp.float32)
    q = jax.jit(lambda x, st: mxprec.quantize(x, spec, axis=-1, state=st))(x, st)
    assert _u8(np.asarray(q.codes())).tolist() == R.ref_delayed(np.asarray(x), R.E4M3, 2.0).tolist() == [0x7E, 0xFE, 0x30]
    st1 = mxprec.DelayedScalingState(amax_history=jnp.zeros((1,), jnp.float32), scale=st.scale)
    for bad in (0.0, np.nan, np.inf):
        st2 = mxprec.update_delayed_state(st1, jnp.float32(bad), mxprec.DelayedScaling(formats.E4M3, history_len=1, amax_compute="most_recent"))
        assert float(st2.scale) == 2.0


# --------------------------------------------------------------------------------------------
# tiny groups and FP32 subnormal inputs (docs/numerics.md: DAZ inputs, FP32 scales >= 2^-126)
# --------------------------------------------------------------------------------------------

# Where amax / divisor leaves the FP32 normal range (the scale floor): E4M3, E5M2, NVFP4's tensor scale; and
# NVFP4's block amax / 6.
TINY_EDGES = [448.0 * 2.0**-126, 57344.0 * 2.0**-126, 2688.0 * 2.0**-126, 6.0 * 2.0**-126, 2.0**-126]


def tiny_rows(seed, kmax=-100):
    """Rows of 32 with FP32-normal amaxes 2^k (k in [-126, kmax]) times U(1, 2), the floor edges above and their FP32
    neighbours, and bodies amax * U(2^-40, 1) * ±1 (FP32 subnormals kept: the contract reads them as zeros), plus
    rows of subnormals only, of -0 and of one subnormal beside normals."""
    rng = np.random.default_rng(seed)
    am = [np.float32(2.0**k * rng.uniform(1, 2)) for k in range(-126, kmax + 1)]
    for e in TINY_EDGES:
        if e <= 2.0**kmax:
            b = np.float32(e)
            am += [b, np.nextafter(b, np.float32(0)), np.nextafter(b, np.float32(1))]
    am = np.array([a for a in am if a >= F32_MIN_NORMAL], np.float32)
    body = am[:, None].astype(np.float64) * np.exp2(-rng.uniform(0, 40, (am.size, 31)))
    body *= rng.choice([-1.0, 1.0], body.shape)
    lead = np.where(np.arange(am.size) % 2, -am, am)
    rows = np.concatenate([lead[:, None], body], 1).astype(np.float32)
    special = np.zeros((4, 32), np.float32)
    special[0] = (rng.uniform(-1, 1, 32) * 2.0**-126).astype(np.float32)  # subnormals only: amax +0
    special[1] = -0.0
    special[2] = np.float32(2.0**-125)
    special[2, 3] = np.float32(-(2.0**-127))
    special[3, ::2] = np.float32(2.0**-149)
    return np.concatenate([rows, special])


def test_tiny_rows_hold_what_they_claim():
    x = tiny_rows(0)
    a = np.abs(x)
    assert ((a > 0) & (a < F32_MIN_NORMAL)).sum() > 300  # FP32 subnormal inputs
    row_amax = a.max(1)
    assert (row_amax < 448.0 * 2.0**-126).sum() > 10 and (row_amax >= 57344.0 * 2.0**-126).sum() > 10
    assert np.isin(np.float32(448.0 * 2.0**-126), row_amax)


TINY_CASES = [
    ("row", "E4M3", "rceil", False),
    ("row", "E5M2", "rceil", False),
    ("tile", "E4M3", "rceil", False),
    ("tile", "E5M2", "rceil", True),
    ("mx", "E4M3", "rceil", False),
    ("mx", "E5M2", "floor", False),
    ("mx", "E2M3", "floor", False),
    ("mx", "E2M1", "rceil", False),
    ("nvfp4", None, "rceil", False),
]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("kind,fmt,rule,p2", TINY_CASES)
def test_tiny_groups_and_subnormal_inputs(kind, fmt, rule, p2, dtype):
    """Groups whose scale would be an FP32 subnormal take 2^-126 (they had scale +0 on the CPU, and every code NaN
    or saturated), and FP32 subnormal inputs are zeros of their sign, against the reference. bf16 keeps most of
    the subnormals (its own subnormals are FP32 ones)."""
    check(kind, jx(pad_rows(tiny_rows(1)), dtype), fmt, -1, rule=rule, p2=p2)


@pytest.mark.parametrize("kind,fmt", [("tensor", "E4M3"), ("tensor", "E5M2"), ("nvfp4", None)])
def test_tiny_tensor_scales(kind, fmt):
    """Whole tensors below the floor edge of TensorScaling (E4M3 / E5M2) and NVFP4's tensor scale (amax < 2688 *
    2^-126): one scale of 2^-126, codes of the values rather than NaN / saturation."""
    x = tiny_rows(2, kmax=-119)
    out, _ = check(kind, jx(x), fmt, -1)
    got = out["tensor_scale"] if kind == "nvfp4" else out["scale"]
    assert float(got) == 2.0**-126
    assert np.count_nonzero(out["codes"]) > 0  # (NVFP4: most blocks' s_b * 2^-126 is subnormal: codes 0)
    if kind == "tensor":  # every value finite: no NaN code, none saturated
        v = R.decode(out["codes"], R.get_format(fmt))
        assert not np.isnan(v).any() and np.abs(v).max() < R.get_format(fmt).max_finite


@pytest.mark.parametrize("margin", [0, 3, -2])
@pytest.mark.parametrize("fmt", FP8)
def test_delayed_update_floors_tiny_scales(fmt, margin):
    """update_delayed_state with tiny amaxes (the edge, its neighbours, far below): the new scale is
    max(floored(ref / max_finite) * 2^margin, 2^-126), and the next step's codes follow it."""
    f = R.get_format(fmt)
    spec = mxprec.DelayedScaling(F(fmt), history_len=1, amax_compute="most_recent", margin=margin)
    edge = np.float32(f.max_finite * 2.0**-126)
    amaxes = [np.float32(1e-37), edge, np.nextafter(edge, np.float32(0)), np.nextafter(edge, np.float32(1)),
              np.float32(2.0**-126), np.float32(edge * 4)]
    update = jax.jit(lambda st, a: mxprec.update_delayed_state(st, a, spec))
    quant = jax.jit(lambda x, st: mxprec.quantize(x, spec, axis=-1, state=st).codes())
    x = tiny_rows(3, kmax=-105)
    h, s = np.zeros(1, np.float32), np.float32(1)
    st = mxprec.DelayedScalingState.init(spec)
    for a in amaxes:
        st = update(st, jnp.float32(a))
        h, s = R.ref_delayed_update(h, s, a, f, "most_recent", margin)
        assert_f32_equal(np.asarray(st.scale), s, f"scale after amax {a!r}")
        assert s >= F32_MIN_NORMAL
        assert_codes_nan_aware(np.asarray(quant(jx(x), st)), R.ref_delayed(x, f, s), f, f"codes under {s!r}", x)


@pytest.mark.parametrize("fmt", FP8)
def test_delayed_update_keeps_the_scale_where_the_margin_overflows_it(fmt):
    """margin 32 on amaxes near the float32 maximum: (ref / max_finite) * 2^32 overflows to Inf, so the previous
    scale stays (a scale of Inf made every code 0 and every output NaN); at the edge below it the product is used.
    Library and numpy reference agree bit for bit, and margin +-32 is accepted."""
    f = R.get_format(fmt)
    spec = mxprec.DelayedScaling(F(fmt), history_len=1, amax_compute="most_recent", margin=32)
    assert mxprec.DelayedScaling(F(fmt), margin=-32).margin == -32
    update = jax.jit(lambda st, a: mxprec.update_delayed_state(st, a, spec))
    big = np.float32(np.finfo(np.float32).max)
    amaxes = [np.float32(3.0), big, np.float32(f.max_finite * 2.0**95), np.float32(1e30), np.float32(5.0)]
    h, s = np.zeros(1, np.float32), np.float32(1)
    st = mxprec.DelayedScalingState.init(spec)
    scales = []
    for a in amaxes:
        st = update(st, jnp.float32(a))
        h, s = R.ref_delayed_update(h, s, a, f, "most_recent", 32)
        assert_f32_equal(np.asarray(st.scale), s, f"scale after amax {a!r}")
        assert np.isfinite(s)
        scales.append(float(s))
    assert scales[1] == scales[0]  # FP32 max: (ref / max_finite) * 2^32 is Inf: kept
    assert scales[2] == 2.0**127  # (max_finite * 2^95 / max_finite) * 2^32: finite, taken
    assert scales[4] == pytest.approx(5.0 / f.max_finite * 2.0**32)


# --------------------------------------------------------------------------------------------
# NVFP4
# --------------------------------------------------------------------------------------------

NV_CONFIGS = [((32,), 0), ((3, 48), -1), ((2, 16, 3), 1), ((2, 2, 3, 32), -1)]


@pytest.mark.parametrize("ci", range(len(NV_CONFIGS)))
def test_nvfp4_random(ci):
    shape, axis = NV_CONFIGS[ci]
    check("nvfp4", jx(rand(shape, 300 + ci), DTYPES[ci % 3]), None, axis, light=True)


def test_nvfp4_ties_and_underflow():
    f = R.E2M1
    for k in (0, -5, 7):
        blocks = []
        lead0 = np.zeros(16)
        lead0[0] = 2688 * 2.0**k  # s_t = 2^k, this block's s_b = 448
        blocks.append(lead0)
        vals = tie_values(f)
        vals = vals[vals <= f.max_finite]  # keep each block's amax at 6 * 2^(j+k)
        for j in (-9, -3, 0, 2, 6, 8):  # s_b = 2^j exactly
            rows, _ = blocks_with_lead(vals, 6.0, 16)
            blocks.extend(rows * 2.0 ** (j + k))
        tiny = np.full(16, -1e-7 * 2.0**k)  # block scale underflows to E4M3 zero -> codes 0
        blocks.append(tiny)
        blocks.append(np.zeros(16))
        x = np.concatenate(blocks).astype(np.float32)
        out, (_codes, _sb) = check("nvfp4", jx(x), None, 0)
        assert out["tensor_scale"] == np.float32(2.0**k)
        assert np.all(out["codes"][-32:] == 0)


def test_nvfp4_special():
    out, (_codes, _sb) = check("nvfp4", jx(np.zeros((2, 32))), None, -1)
    assert out["tensor_scale"] == 1.0 and np.all(out["codes"] == 0) and np.all(_u8(out["scale"]) == 0)
    for bad in (np.nan, np.inf, -np.inf):
        x = rand((2, 32), 60)
        x[1, 5] = bad
        out = run(jx(x), mxprec.NVFP4Scaling(), -1)
        assert np.all(np.isnan(out["deq"])), bad
        assert_f32_equal(out["amax"], R.ref_amax(x), "amax")
    x = rand((2, 32), 61, spread=2).astype(np.float64)
    for m in (1e38 / 8, 1e-30):
        check("nvfp4", jx((x * m).astype(np.float32)), None, -1)


# --------------------------------------------------------------------------------------------
# packing, bytes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt,shape,axis", [("E2M1", (2, 64, 3), 1), ("E3M2", (64, 5), 0)])
def test_packing_codes_other_axes(fmt, shape, axis):
    """q.data packs along a non-last axis exactly as the spec says, and q.codes() unpacks it
    (FP4: nibble pairs; FP6: 4 codes in 3 little-endian bytes); checked in full mode."""
    out, (_codes, _) = check("mx", jx(rand(shape, 70)), fmt, axis)
    f = R.get_format(fmt)
    assert out["data"].shape[axis] == shape[axis] * f.bits // 8
    np.testing.assert_array_equal(R.ref_pack(out["codes"], f, axis), out["data"])


def test_nbytes():
    x = jx(rand((4, 64), 80))
    cases = [
        (make_spec("tensor", "E4M3"), "tensor", "E4M3"),
        (make_spec("row", "E5M2"), "row", "E5M2"),
        (make_spec("tile", "E4M3", tile=(2, 32)), "tile", "E4M3"),
        (make_spec("mx", "E4M3"), "mx", "E4M3"),
        (make_spec("mx", "E2M3"), "mx", "E2M3"),
        (make_spec("mx", "E2M1"), "mx", "E2M1"),
        (make_spec("nvfp4"), "nvfp4", "E2M1"),
    ]
    bpv = {"E4M3": 8.25, "E2M3": 6.25, "E2M1": 4.25}
    for spec, kind, fmt in cases:
        q = jax.eval_shape(lambda x, spec=spec: mxprec.quantize(x, spec, axis=-1), x)  # shapes only, no compile
        assert mxprec.nbytes(q) == R.ref_nbytes((4, 64), fmt, kind, -1, 32, (2, 32)), spec
        if kind == "mx":
            assert mxprec.bits_per_value(q) == bpv[fmt]
        if kind == "nvfp4":
            assert mxprec.bits_per_value(q) == 4.5 + 32 / (4 * 64)


# --------------------------------------------------------------------------------------------
# jit / vmap / eager consistency
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,fmt,shape,axis", [("tensor", "E5M2", (5, 8), 0)])
def test_eager_matches_reference(kind, fmt, shape, axis):
    """Eager (op-by-op) quantize == jit quantize == reference. Eager dispatch is slow (seconds
    for MX/NVFP4), so only the cheap tensor-scaled case runs here."""
    x = jx(rand(shape, 90))
    spec = make_spec(kind, fmt)
    q = mxprec.quantize(x, spec, axis=axis)
    eager = dict(codes=np.asarray(q.codes()), scale=np.asarray(q.scale), deq=np.asarray(mxprec.dequantize(q)))
    jitted = run(x, spec, axis)
    assert_u8_equal(eager["codes"], jitted["codes"], "eager vs jit codes")
    np.testing.assert_array_equal(eager["scale"].reshape(-1).view(np.uint8), jitted["scale"].reshape(-1).view(np.uint8))
    assert_f32_equal(eager["deq"], jitted["deq"], "eager vs jit dequant")
    check(kind, x, fmt, axis)


@pytest.mark.parametrize(
    "kind,fmt,rule",
    [("tensor", "E4M3", None), ("mx", "E2M3", "floor"), ("nvfp4", None, None)],
)
def test_vmap_matches_reference(kind, fmt, rule):
    spec = make_spec(kind, fmt, rule or "rceil")
    xb = rand((5, 3, 64), 91).astype(np.float64)
    xb *= np.exp2(np.arange(5) * 7 - 14)[:, None, None]  # different scale per batch element
    xb = xb.astype(np.float32)
    out = jax.jit(jax.vmap(lambda x: _full(x, spec, -1)))(jx(xb))
    out = {k: (None if v is None or k == "q" else np.asarray(v)) for k, v in out.items()}
    f = R.E2M1 if kind == "nvfp4" else R.get_format(fmt)
    for b in range(xb.shape[0]):
        x = xb[b]
        if kind == "tensor":
            codes, scale = R.ref_tensor(x, f)
            assert_f32_equal(out["scale"][b], scale, f"vmap scale {b}")
        elif kind == "row":
            codes, scale = R.ref_row(x, f, -1)
            assert_f32_equal(out["scale"][b], scale, f"vmap scale {b}")
        elif kind == "mx":
            codes, sb = R.ref_mx(x, f, -1, 32, rule)
            assert_u8_equal(out["scale"][b].view(np.uint8), sb, f"vmap scale {b}")
        else:
            codes, sb, ts = R.ref_nvfp4(x, -1)
            assert_u8_equal(out["scale"][b].view(np.uint8), sb, f"vmap scale {b}")
            assert_f32_equal(out["tensor_scale"][b], ts, f"vmap tensor scale {b}")
        assert_codes_nan_aware(out["codes"][b], codes, f, f"vmap codes {b}")
        assert_f32_equal(out["amax"][b], R.ref_amax(x), f"vmap amax {b}")


# --------------------------------------------------------------------------------------------
# stochastic rounding (properties; the exact u-vs-p comparison is not pinned by the spec)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,fmt", [("mx", "E2M1"), ("tensor", "E4M3")])
def test_stochastic_rounding_properties(kind, fmt):
    f = R.get_format(fmt)
    spec = make_spec(kind, fmt)
    x = rand((8, 64), 95, spread=2)
    qf = jax.jit(lambda x, key: mxprec.quantize(x, spec, axis=-1, key=key).codes())
    k1 = jax.random.PRNGKey(0)
    c1 = np.asarray(qf(jx(x), k1))
    c1b = np.asarray(qf(jx(x), k1))
    c2 = np.asarray(qf(jx(x), jax.random.PRNGKey(1)))
    np.testing.assert_array_equal(c1, c1b)  # deterministic for a fixed key
    assert (c1 != c2).any()  # and actually stochastic
    # each code is one of the two grid neighbours of the exactly scaled value
    if kind == "mx":
        _, sb = R.ref_mx(x, f, -1, 32, "rceil")
        e = np.repeat(sb.astype(np.int64) - 127, 32, axis=-1)
        v = x.astype(np.float64) * np.exp2(-e)
    else:
        _, s = R.ref_tensor(x, f)
        v = (x / s).astype(np.float32)
    lo = R.encode_sr(v, f, np.ones_like(v))
    hi = R.encode_sr(v, f, np.zeros_like(v))
    ok = (c1 == lo) | (c1 == hi) | ((R.decode(c1, f) == 0) & (R.decode(lo, f) == 0))
    assert ok.all(), _report("SR neighbour", ~ok, c1, lo, x)
    # the draws are u = jax.random.uniform(key, x.shape); the spec does not pin whether "up" is
    # u < p or u >= 1 - p (floor(r + u)); accept either, but one of them for (nearly) all
    # elements (FP32 rounding of r + u may flip a few).
    u = np.asarray(jax.random.uniform(k1, x.shape))
    zero = R.decode(c1, f) == 0
    agree = {
        rule: np.mean((R.encode_sr(v, f, u, rule) == c1) | (zero & (R.decode(R.encode_sr(v, f, u, rule), f) == 0)))
        for rule in ("lt", "floor")
    }
    assert max(agree.values()) > 0.99, f"SR matches neither convention: {agree}"


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2", "E2M1", "E3M2"])
def test_stochastic_rounding_is_exactly_the_floor_rule(fmt):
    """round_to_grid with draws u: up iff frac + u >= 1 taken exactly (the reference's "floor" rule), also for u within
    an FP32 ulp of 1, where floor(r + u) in FP32 rounded on-grid values up a grid point (E2M1 4 -> 6)."""
    from mxprec.quantize import encode, round_to_grid

    f = R.get_format(fmt)
    g = R.grid(f)
    rng = np.random.default_rng(7)
    on_grid = g[1:].astype(np.float32)
    mid = ((g[1:] + g[:-1]) / 2).astype(np.float32)
    off = rng.uniform(0, f.max_finite, 4096).astype(np.float32)
    v = np.concatenate([on_grid, mid, off, np.nextafter(on_grid, np.float32(0)), np.nextafter(on_grid, np.float32(1e9))])
    v = np.concatenate([v, -v])
    us = [np.float32(1 - 2.0**-23), np.float32(1 - 2.0**-24), np.float32(0.5), np.float32(0.0)]
    us += [np.float32(1 - 2.0**-23 * k) for k in (2, 3, 5)]
    for u0 in us:
        u = np.full(v.shape, u0, np.float32)
        got = np.asarray(jax.jit(lambda v, u: encode(round_to_grid(v, formats.element_format(fmt.lower()), u), formats.element_format(fmt.lower())))(v, u))
        want = R.encode_sr(v, f, u, "floor")
        bad = got != want
        assert not bad.any(), f"{fmt} u={u0!r}: {int(bad.sum())} codes differ, e.g. v={v[bad][:4]}"
    u = rng.random(v.shape, np.float32)
    got = np.asarray(jax.jit(lambda v, u: encode(round_to_grid(v, formats.element_format(fmt.lower()), u), formats.element_format(fmt.lower())))(v, u))
    np.testing.assert_array_equal(got, R.encode_sr(v, f, u, "floor"))
