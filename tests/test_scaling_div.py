"""The quantizers' division by the scale: ``div_by_scale`` against IEEE FP32 division.

On CUDA, ``div_by_scale`` is the reciprocal + two-FMA-correction form (Markstein's method) that
lets XLA's quantize fusions run at memory speed; elsewhere it is ``exact_div``. Its contract:
bit-identical to the correctly rounded FP32 quotient for |a / b| in [2**-100, 2**127), ±0, ±Inf
and NaN; smaller quotients keep the right sign and stay below 2**-98 (every FP8/FP6/FP4 format
flushes them to ±0), larger finite ones may come back as ±Inf (every format saturates them).

The CPU tests check the algorithm itself with an exactly rounded FMA emulated in numpy; the GPU
tests check what XLA compiles it to, bit for bit, and the quantized codes against exact_div's.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mxprec import formats

Q = importlib.import_module("mxprec.quantize")
from mxprec.scaling import TensorScaling, TileScaling, _div_reciprocal_fma

ON_GPU = jax.default_backend() == "gpu"


def _f32(bits):
    return np.asarray(bits, np.uint32).view(np.float32)


def _fp8_midpoints(dtype) -> np.ndarray:
    """Every positive midpoint between adjacent finite values of an FP8 format (exact in FP32)."""
    vals = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)))
    vals = vals[np.isfinite(vals)]
    return ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)


def _scales(rng) -> np.ndarray:
    fixed = [3 / 448, 1 / 448, 1.0, 1 / 57344, 2.0**-126, 2.0**-130, 1e-45, 2.0**126, 3e38, 0.9,
             _f32(0x3FFFFFFF), _f32(0x3F800001), _f32(0x3F7FFFFF), _f32(0x007FFFFF)]
    rand = np.exp2(rng.uniform(-40, 40, 48)) * rng.uniform(1, 2, 48)
    return np.concatenate([np.asarray(fixed, np.float32).ravel(), rand.astype(np.float32)])


def _dividends(rng, s: np.float32) -> np.ndarray:
    """Values whose quotient by s sits on or next to an FP8 rounding midpoint, every bf16 value,
    random FP32 bit patterns and the special values."""
    mids = np.concatenate([_fp8_midpoints(ml_dtype) for ml_dtype in (jnp.float8_e4m3fn, jnp.float8_e5m2)])
    with np.errstate(over="ignore"):
        near = (mids.astype(np.float64) * np.float64(s)).astype(np.float32)
    bits = near[np.isfinite(near)].view(np.uint32)[:, None].astype(np.int64) + np.arange(-3, 4)[None, :]
    near = _f32(np.clip(bits, 0, 0x7F7FFFFF).astype(np.uint32).ravel())
    bf16 = _f32(np.arange(65536, dtype=np.uint32) << 16)
    rand = _f32(rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32))
    special = np.asarray([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38, 1e-45, -1e-45], np.float32)
    a = np.concatenate([near, -near, bf16, rand, special])
    return a


def _check_contract(got: np.ndarray, a: np.ndarray, s: np.float32) -> None:
    with np.errstate(all="ignore"):
        want = a / s
        mag = np.abs(a.astype(np.float64) / np.float64(s))  # the true quotient's size
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"NaN mismatch for scale {s!r}"
    exact = ~nan & (((mag >= 2.0**-100) & (mag < 2.0**127)) | (a == 0) | (np.isinf(want) & np.isinf(a)))
    bad = exact & (got.view(np.uint32) != want.view(np.uint32))
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        raise AssertionError(f"scale {s!r}: {bad.sum()} quotients differ, e.g. a={a[i]!r} got={got[i]!r} want={want[i]!r}")
    tiny = ~nan & (mag < 2.0**-100) & (a != 0)
    assert np.all(np.signbit(got[tiny]) == np.signbit(want[tiny]))
    assert np.all(np.abs(got[tiny]) < 2.0**-98)
    huge = ~nan & ~exact & ~tiny
    assert np.all(np.signbit(got[huge]) == np.signbit(want[huge]))
    assert np.all((got[huge] == want[huge]) | np.isinf(got[huge]))


# ----------------------------------------------------------------------------- the algorithm (CPU)


def _fma32(a, b, c):
    """Correctly rounded FP32 fused multiply-add: a*b is exact in FP64; the FP64 sum is rounded to
    odd (its last bit records any inexactness), and rounding that to FP32 is then correct."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    p = a * b
    s = p + c
    bp = s - c
    err = (p - bp) + (c - (s - bp))  # TwoSum: s + err == p + c exactly
    bits = s.view(np.uint64)
    inexact = (err != 0) & np.isfinite(s) & ((bits & 1) == 0)
    toward = np.where((err > 0) == (s > 0), bits + 1, bits - 1)  # away from / toward zero by 1 ulp
    s = np.where(inexact & (s != 0), toward.view(np.float64), s)
    return s.astype(np.float32)


def _markstein_numpy(a: np.ndarray, b: np.float32) -> np.ndarray:
    """_div_reciprocal_fma step by step in numpy, with the FMAs the GPU contracts made explicit."""
    with np.errstate(all="ignore"):
        if not np.isfinite(b) or b == 0:
            return (a * (np.float32(1) / b)).astype(np.float32)
        m, e = np.frexp(np.float64(abs(b)))  # |b| = m * 2**e, m in [0.5, 1)
        sn = np.float32(np.copysign(m * 2, b))
        e = int(e) - 1
        rn = np.float32(1) / sn
        c1 = int(np.clip(-e, -126, 127))
        an = (a * np.float32(2.0**c1)) * np.float32(2.0 ** (-e - c1))
        q0 = (an * rn).astype(np.float32)
        q1 = _fma32(_fma32(-q0, sn, an), rn, q0)
        q2 = _fma32(_fma32(-q1, sn, an), rn, q1)
        mag = np.abs(q0)
        return np.where((mag >= 2.0**-100) & (mag < np.inf), q2, q0).astype(np.float32)


def test_fma32_emulation_is_correctly_rounded():
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(20000).astype(np.float32) for _ in range(3))
    got = _fma32(a, b, -c)
    from fractions import Fraction

    for i in range(0, 20000, 97):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) - Fraction(float(c[i]))
        lo = np.float32(float(exact))  # float() of a Fraction is correctly rounded to FP64 ...
        cand = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
        best = min(cand, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.asarray(v).view(np.uint32)) & 1))
        assert got[i] == best, (a[i], b[i], c[i])


def test_markstein_algorithm_is_correctly_rounded_with_exact_fma():
    rng = np.random.default_rng(0)
    for s in _scales(rng):
        a = _dividends(rng, s)
        _check_contract(_markstein_numpy(a, s), a, s)


def test_div_by_scale_is_exact_div_off_gpu(monkeypatch):
    if ON_GPU:
        pytest.skip("on the GPU div_by_scale is the reciprocal form (tested below)")
    from mxprec.scaling import div_by_scale, exact_div

    a = jnp.asarray(np.random.default_rng(2).standard_normal(4096).astype(np.float32))
    s = jnp.float32(3 / 448)
    assert jnp.array_equal(jax.jit(div_by_scale)(a, s), jax.jit(exact_div)(a, s))
    monkeypatch.setenv("MXPREC_XLA_DIV", "bogus")
    with pytest.raises(ValueError, match="MXPREC_XLA_DIV"):
        div_by_scale(a, s)


# ----------------------------------------------------------------------------- what XLA compiles (GPU)


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU: checks XLA's compiled FMA contraction")
def test_reciprocal_division_on_gpu_is_correctly_rounded():
    rng = np.random.default_rng(0)
    f = jax.jit(_div_reciprocal_fma)
    for s in _scales(rng):
        a = _dividends(rng, s)
        _check_contract(np.asarray(f(jnp.asarray(a), jnp.float32(s))), a, s)
    # per-row scales broadcast the same way (the row-wise and block quantizers' shapes)
    s_rows = _scales(rng)[:, None]
    a = rng.standard_normal((s_rows.shape[0], 4096)).astype(np.float32) * s_rows * 300
    got = np.asarray(f(jnp.asarray(a), jnp.asarray(s_rows)))
    for i, s in enumerate(s_rows[:, 0]):
        _check_contract(got[i], a[i], s)


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU")
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("spec_kind", ["tensor", "tile"])
def test_gpu_quantize_codes_equal_exact_division(fmt, spec_kind, monkeypatch):
    rng = np.random.default_rng(3)
    mids = _fp8_midpoints(jnp.float8_e4m3fn if fmt == "e4m3" else jnp.float8_e5m2)
    x = np.concatenate([mids, -mids, rng.standard_normal(8192 - 2 * mids.size).astype(np.float32)])
    x = (x * np.float32(0.37)).reshape(64, 128)
    x[3, :7] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3e38]
    spec = TensorScaling(formats.element_format(fmt)) if spec_kind == "tensor" else TileScaling(
        formats.element_format(fmt), (1, 128))
    q = jax.jit(lambda v: Q.quantize(v, spec, axis=1))
    fast = q(jnp.asarray(x))
    monkeypatch.setenv("MXPREC_XLA_DIV", "exact")
    exact = jax.jit(lambda v: Q.quantize(v, spec, axis=1))(jnp.asarray(x))
    assert np.array_equal(np.asarray(fast.data), np.asarray(exact.data))
    assert np.array_equal(np.asarray(fast.scale), np.asarray(exact.scale), equal_nan=True)
