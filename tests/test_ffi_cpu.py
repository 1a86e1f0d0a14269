"""The mxprec_quantize / mxprec_scaled_gemm custom calls on the CPU backend (libmxprec_cpu.so).

* the compiled HLO holds the custom calls;
* quantize is bit-exact against the numpy reference (tests/reference, the numerics contract) and
  against mxprec.quantize;
* scaled_gemm equals mxprec.kernels.reference_scaled_gemm within the FP32 summation bound
  ``|ffi - ref| <= K * 2**-23 * sum_k |a_k| |b_k|`` (both sum K FP32 products, each with relative
  error <= K * 2**-24), computed from the dequantized operands;
* mxprec.dot_general with backend="ffi" equals backend="xla" (forward and both gradients) within
  the same bound;
* malformed calls raise Python exceptions.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mxprec
from mxprec import formats, recipes
from mxprec.dot_general import DotGeneralState
from mxprec.kernels import ffi, reference_scaled_gemm, scaled_gemm
from mxprec.quantize import QTensor, dequantize, quantize
from mxprec.scaling import (
    DelayedScaling,
    DelayedScalingState,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    TensorScaling,
    TileScaling,
)

sys.path.insert(0, os.path.dirname(__file__))
import reference as R

pytestmark = pytest.mark.skipif(
    not ffi.available("cpu"),
    reason="libmxprec_cpu.so is not built: `pip install .` or `cmake -S . -B build && cmake --build build`",
)

E4M3, E5M2, E2M3, E3M2, E2M1 = formats.E4M3, formats.E5M2, formats.E2M3, formats.E3M2, formats.E2M1
_REF_FMT = {"e4m3": R.E4M3, "e5m2": R.E5M2, "e2m3": R.E2M3, "e3m2": R.E3M2, "e2m1": R.E2M1}

SPECS = [
    TensorScaling(E4M3),
    TensorScaling(E5M2),
    DelayedScaling(E4M3, history_len=4),
    DelayedScaling(E5M2, history_len=4),
    RowScaling(E4M3),
    RowScaling(E5M2),
    TileScaling(E4M3, (1, 128)),
    TileScaling(E5M2, (1, 128), power_of_two=True),
    TileScaling(E4M3, (128, 128)),
    TileScaling(E4M3, (128, 128), power_of_two=True),
    *[MXScaling(f, scale_rule=r) for f in (E4M3, E5M2, E2M3, E3M2, E2M1) for r in ("rceil", "floor")],
    NVFP4Scaling(),
]
DELAYED_SCALE = np.float32(0.0371)  # a non-power-of-two delayed scale


def _sid(spec) -> str:
    return spec.describe().replace(" ", "_")


# ----------------------------------------------------------------------------- inputs (128, 256)


def _normal(seed=0, shape=(128, 256)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, shape[:-1] + (1,)))
    return x.astype(np.float32)


def _specials() -> np.ndarray:
    """NaN / Inf blocks, zero blocks, the [500, 1, ...] outlier, -0, huge / tiny (finite) values."""
    x = _normal(1)
    x[1, 0:32] = 0.0  # zero block
    x[2, 0:32] = -0.0
    x[3, 0:32] = 1.0
    x[3, 0] = 500.0  # floor saturates (448), rceil: e = 1 -> 256
    x[4, 0:32] = np.float32(3e38)  # near FP32 max: exponent clamp
    x[4, 5] = -np.float32(3.4e38)
    x[5, 0:32] = np.float32(1e-30)  # tiny normal: MX exponent clamp at -127
    x[5, 7] = np.float32(3e-35)
    x[6, 40] = np.uint32(0xFFC12345).view(np.float32)  # a negative NaN with a payload, block 1 of row 6
    x[7, 70] = np.inf  # +Inf in block 2
    x[8, 100] = -np.inf
    x[9, :] = np.float32(np.nan)  # a NaN row (row scaling)
    x[10, 128:256] = np.inf
    return x


def _dyadic(seed=2) -> np.ndarray:
    """Few-bit dyadic values whose rows have amax 448 * 2**k or 57344 * 2**k: many exact ties."""
    rng = np.random.default_rng(seed)
    m = rng.integers(-64, 65, (128, 256)).astype(np.float64)
    x = m * np.exp2(rng.integers(-12, 4, (128, 256)))
    peak = np.where(np.arange(128)[:, None] % 2 == 0, 448.0, 57344.0) * np.exp2(rng.integers(-8, 8, (128, 1)))
    x = np.clip(x, -peak, peak)
    x[:, 0] = peak[:, 0]
    return x.astype(np.float32)


def _division_ties() -> np.ndarray:
    """Values at E4M3 midpoints times s = fl(3 / 448): ties only under IEEE division x / s."""
    s = np.float32(3.0) / np.float32(448.0)
    g = R.grid(R.E4M3)
    mids = ((g[1:] + g[:-1]) / 2 * np.float64(s)).astype(np.float32)
    v = np.concatenate([mids, np.nextafter(mids, np.float32(0)), -mids])
    v = v[np.abs(v) < 3.0]
    x = np.resize(v, (128, 256)).astype(np.float32)
    x[0, 0] = 3.0
    return x


def _subnormal() -> np.ndarray:
    """FP32 subnormals (zeros of their sign under the contract's DAZ) beside small normals, whose group scales
    (rows from 16 on also the tensor's) fall below 2**-126 and take the floor."""
    x = _normal(3) * np.float32(1e-36)
    x[0:4, 0:32] = np.float32(1e-40)
    x[4:8, 32:64] *= np.float32(1e-3)
    x[8:12] *= np.float32(2e-3)  # row amaxes ~1e-37: E4M3 / E5M2 row and tile scales at the floor
    x[12, 0] = np.float32(448 * 2.0**-126)  # E4M3's floor edge exactly
    return x.astype(np.float32)


INPUTS = {
    "normal": _normal,
    "specials": _specials,
    "dyadic_ties": _dyadic,
    "division_ties": _division_ties,
}


# ----------------------------------------------------------------------------- oracles


@functools.cache
def _ffi_q(spec, axis):
    return jax.jit(lambda x, st: ffi.quantize(x, spec, axis, state=st))


@functools.cache
def _jax_q(spec, axis):
    return jax.jit(lambda x, st: quantize(x, spec, axis=axis, state=st))


def _state(spec):
    if isinstance(spec, DelayedScaling):
        return DelayedScalingState(jnp.zeros((spec.history_len,), jnp.float32), jnp.asarray(DELAYED_SCALE))
    return None


def _u8(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a


def _f32_equal(a, b) -> bool:
    """Bitwise FP32 equality, any NaN equal to any NaN."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    both_nan = np.isnan(a) & np.isnan(b)
    return bool(np.all(both_nan | (a.view(np.uint32) == b.view(np.uint32))))


def _qtensor_mismatch(q: QTensor, r: QTensor) -> list[str]:
    bad = []
    if (
        q.data.shape != r.data.shape
        or q.data.dtype != r.data.dtype
        or not np.array_equal(_u8(q.data), _u8(r.data))
    ):
        n = int(np.sum(_u8(q.data) != _u8(r.data))) if q.data.shape == r.data.shape else -1
        bad.append(f"data ({n} bytes differ)")
    if q.scale.shape != r.scale.shape or q.scale.dtype != r.scale.dtype:
        bad.append(f"scale layout {q.scale.shape} {q.scale.dtype} vs {r.scale.shape} {r.scale.dtype}")
    elif q.scale.dtype.itemsize == 1:
        if not np.array_equal(_u8(q.scale), _u8(r.scale)):
            bad.append(f"scale ({int(np.sum(_u8(q.scale) != _u8(r.scale)))} bytes differ)")
    elif not _f32_equal(q.scale, r.scale):
        bad.append("scale")
    if not _f32_equal(q.amax, r.amax):
        bad.append(f"amax {q.amax} vs {r.amax}")
    if (q.tensor_scale is None) != (r.tensor_scale is None) or (
        q.tensor_scale is not None and not _f32_equal(q.tensor_scale, r.tensor_scale)
    ):
        bad.append("tensor_scale")
    for f in ("spec", "axis", "shape", "dtype"):
        if getattr(q, f) != getattr(r, f):
            bad.append(f)
    return bad


def _reference(spec, x: np.ndarray, axis: int):
    """(codes, scale) from tests/reference: scale as f32 values or uint8 bytes (MX / NVFP4)."""
    x32 = np.asarray(x, np.float32)
    if isinstance(spec, NVFP4Scaling):
        codes, sb, st = R.ref_nvfp4(x32, axis)
        return codes, sb, st
    f = _REF_FMT[spec.fmt.name]
    if isinstance(spec, TensorScaling):
        codes, s = R.ref_tensor(x32, f)
        return codes, s, None
    if isinstance(spec, DelayedScaling):
        return R.ref_delayed(x32, f, DELAYED_SCALE), DELAYED_SCALE, None
    if isinstance(spec, RowScaling):
        codes, s = R.ref_row(x32, f, axis)
        return codes, s, None
    if isinstance(spec, TileScaling):
        codes, s = R.ref_tile(x32, f, axis, spec.tile, spec.power_of_two)
        return codes, s, None
    codes, sbytes = R.ref_mx(x32, f, axis, spec.block, spec.scale_rule)
    return codes, sbytes, None


def _matches_reference(q: QTensor, spec, x: np.ndarray, axis: int) -> list[str]:
    """Differences from tests/reference. Not compared (the contract leaves them open): which FP8
    NaN code a NaN gets (XLA writes 0x7F / 0x7E with the sign, the reference the first NaN code)
    and the FP4/FP6 code of a NaN input."""
    codes, scale, ts = _reference(spec, x, axis)
    codes = np.asarray(codes).astype(np.uint8)
    bad = []
    ours = np.asarray(q.codes()).astype(np.uint8)
    differ = ours != codes
    if spec.fmt.is_fp8:
        nan = lambda c: np.isnan(c.view(spec.fmt.dtype).astype(np.float32))
        differ &= ~(nan(ours) & nan(codes))
    else:  # FP4 / FP6 have no NaN: a NaN input's code is left open (its scale makes it NaN)
        differ &= ~np.isnan(np.asarray(x, np.float32))
    if differ.any():
        bad.append(f"codes ({int(differ.sum())} differ)")
    if np.asarray(scale).dtype == np.uint8:
        if not np.array_equal(_u8(q.scale), scale):
            bad.append("scale bytes")
    else:
        mine = np.broadcast_to(np.asarray(q.scale, np.float32), np.shape(scale))
        if not _f32_equal(mine, scale):
            bad.append("scale")
    if ts is not None and not _f32_equal(q.tensor_scale, ts):
        bad.append("tensor_scale")
    return bad


# ----------------------------------------------------------------------------- HLO


def test_compiled_hlo_contains_custom_calls():
    x = jnp.asarray(_normal())
    qf = jax.jit(lambda x: ffi.quantize(x, MXScaling(E4M3), -1).data)
    assert "mxprec_quantize" in qf.lower(x).compile().as_text()

    q = quantize(x[None], MXScaling(E4M3), axis=2)
    w = quantize(jnp.asarray(_normal(5, (256, 64)))[None], MXScaling(E4M3), axis=1)
    g = jax.jit(lambda a, b: scaled_gemm(a, b, lhs_contract=2, rhs_contract=1, backend="ffi"))
    assert "mxprec_scaled_gemm" in g.lower(q, w).compile().as_text()

    recipe = recipes.get("mxfp8", backend="ffi")
    dn = (((1,), (0,)), ((), ()))
    f = jax.jit(
        jax.value_and_grad(lambda x, w: jnp.sum(mxprec.dot_general(x, w, dn, recipe=recipe)), argnums=(0, 1))
    )
    hlo = f.lower(x, jnp.asarray(_normal(5, (256, 64)))).compile().as_text()
    assert hlo.count("mxprec_scaled_gemm") >= 3  # Fprop, Dgrad, Wgrad
    assert "dot(" not in hlo.replace("dot_general", "")  # no XLA dot left: all GEMMs are custom calls


@pytest.mark.parametrize("shape", [(256, 384), (1, 256, 384), (2, 128, 256)])
@pytest.mark.parametrize("impl", ["xla", "ffi"])
def test_square_tiles_are_the_same_along_either_last_axis(shape, impl):
    """128x128 tiles quantized along axis -2 or -1 cover the same tiles: equal codes and scale arrays (in the
    source's axis order). dot_general relies on it to give fp8_block's Dgrad the Fprop weight copy."""
    x = jnp.asarray(_normal(17, shape))
    spec = TileScaling(E4M3, (128, 128))
    q = (lambda x, a: ffi.quantize(x, spec, a)) if impl == "ffi" else (lambda x, a: quantize(x, spec, axis=a))
    a, b = jax.jit(lambda x: (q(x, -2), q(x, -1)))(x)
    np.testing.assert_array_equal(np.asarray(a.data, np.float32), np.asarray(b.data, np.float32))
    np.testing.assert_array_equal(np.asarray(a.scale), np.asarray(b.scale))


def _fp8_block_grads(x, w):
    recipe = recipes.get("fp8_block", backend="ffi")
    dn = (((1,), (0,)), ((), ()))
    loss = lambda x, w: jnp.sum(mxprec.dot_general(x, w, dn, recipe=recipe).astype(jnp.float32) ** 2)
    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def test_fp8_block_weight_is_quantized_once_for_fprop_and_dgrad(monkeypatch):
    """fp8_block's 128x128 weight copy serves both Fprop (contracting K) and Dgrad (contracting N): five
    quantize calls per dot_general (X twice, dY twice, W once), not six, and the gradients are bit-identical to
    requantizing W for Dgrad."""
    dg = sys.modules["mxprec.dot_general"]  # the module (mxprec.dot_general is also the function's name)

    x = jnp.asarray(_normal(21, (256, 384)))
    w = jnp.asarray(_normal(22, (384, 256)) * 0.05)
    grads = _fp8_block_grads(x, w)
    assert grads.lower(x, w).compile().as_text().count('custom_call_target="mxprec_quantize"') == 5
    dx, dw = grads(x, w)
    monkeypatch.setattr(dg, "_square_tiles_on_last_two_axes", lambda q_prev, axis: False)
    requantized = _fp8_block_grads(x, w)
    assert requantized.lower(x, w).compile().as_text().count('custom_call_target="mxprec_quantize"') == 6
    dx6, dw6 = requantized(x, w)
    np.testing.assert_array_equal(np.asarray(dx), np.asarray(dx6))
    np.testing.assert_array_equal(np.asarray(dw), np.asarray(dw6))


@pytest.mark.parametrize(
    "spec",
    [
        RowScaling(formats.E4M3),
        TileScaling(formats.E4M3, tile=(1, 128)),
        TileScaling(formats.E5M2, tile=(128, 128)),
        MXScaling(formats.E2M1),
        TensorScaling(formats.E4M3),
        NVFP4Scaling(),
    ],
    ids=lambda s: type(s).__name__,
)
def test_quantize_without_amax_keeps_codes_and_scales(spec):
    """``ffi.quantize(amax=False)``: row / tile / mx calls carry ``amax_mode=3`` (no amax computed; QTensor.amax
    NaN); the kinds that scale by the tensor amax ignore the request. Codes and scales are the same bits."""
    x = jnp.asarray(_normal(31, (256, 384)) * 3.0)
    q = ffi.quantize(x, spec, axis=-1)
    f = jax.jit(lambda x: ffi.quantize(x, spec, axis=-1, amax=False))
    skip = isinstance(spec, (RowScaling, TileScaling, MXScaling))
    assert ("amax_mode = 3" in f.lower(x).as_text()) == skip
    qn = f(x)
    for got, want in ((qn.data, q.data), (qn.scale, q.scale)):
        np.testing.assert_array_equal(np.atleast_1d(np.asarray(got)).view(np.uint8),
                                      np.atleast_1d(np.asarray(want)).view(np.uint8))
    if skip:
        assert np.isnan(np.asarray(qn.amax))
    else:
        assert float(qn.amax) == float(q.amax) == float(np.max(np.abs(np.asarray(x))))


def test_fp8_block_quantizes_without_the_amax():
    """dot_general's quantize calls compute the tensor amax only where a delayed-scaling state reads it: fp8_block
    (no state) sends ``amax_mode=3`` on every call; the gradients are those of calls that compute it."""
    x = jnp.asarray(_normal(23, (256, 384)))
    w = jnp.asarray(_normal(24, (384, 256)) * 0.05)
    grads = _fp8_block_grads(x, w)
    text = grads.lower(x, w).as_text()
    assert text.count("amax_mode = 3") == text.count("mxprec_quantize") == 5
    dx, dw = grads(x, w)
    real = ffi.quantize
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ffi, "quantize", lambda *a, amax=True, **k: real(*a, **k))  # always amax=True
        grads_amax = _fp8_block_grads(x, w)
        assert "amax_mode = 3" not in grads_amax.lower(x, w).as_text()
        dx1, dw1 = grads_amax(x, w)
    np.testing.assert_array_equal(np.asarray(dx), np.asarray(dx1))
    np.testing.assert_array_equal(np.asarray(dw), np.asarray(dw1))


def test_quantize_traffic_script_counts_the_step_s_quantize_calls():
    """benchmarks/quantize_traffic.py on the micro config: every quantize call of the compiled fp8_block step is
    found with its operand (bf16 here), inside the scanned layers or outside them, and the weight reuse above
    shows: no weight is quantized along its N axis (axis 2 of the (1, K, N) view) inside the layers."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import quantize_traffic

    calls = quantize_traffic.quantize_calls("fp8_block:ffi", "micro", 2)
    assert calls and all(c["dtype"] == "bf16" and c["bytes"] > 0 for c in calls)
    assert {c["in_loop"] for c in calls} == {True, False}
    weights = [c for c in calls if c["in_loop"] and c["fmt"] == 0 and c["shape"][1] != 2 * 64]  # not X (B*S rows)
    assert weights and all(c["axis"] == 1 for c in weights), weights


def test_library_paths_and_missing_library_message(monkeypatch):
    paths = ffi.library_search_paths("cpu")
    assert paths and paths[0].name == "libmxprec_cpu.so" and paths[0].parent.name == "_lib"
    assert not ffi.available("rocm")
    with pytest.raises(RuntimeError, match="no native kernels for platform 'rocm'"):
        ffi.require("rocm")
    monkeypatch.setitem(ffi._LIBRARIES, "fakecpu", ("libmxprec_fakecpu.so", {}, "cmake --build build"))
    with pytest.raises(RuntimeError, match=r"libmxprec_fakecpu\.so .*not found .*cmake --build build"):
        ffi.require("fakecpu")
    ffi._loaded.pop("fakecpu", None)


# ----------------------------------------------------------------------------- quantize


_AXIS0_SPECS = (
    TensorScaling(E4M3),
    RowScaling(E5M2),
    TileScaling(E4M3, (128, 128)),
    MXScaling(E2M3),
    MXScaling(E2M1),
    NVFP4Scaling(),
)
_QUANT_CASES = [(s, c) for s in SPECS for c in ("normal", "specials", "dyadic_ties", "division_ties")] + [
    (s, "normal_axis0") for s in _AXIS0_SPECS
]


@pytest.mark.parametrize("spec,case", _QUANT_CASES, ids=lambda v: v if isinstance(v, str) else _sid(v))
def test_quantize_bit_exact(spec, case):
    axis = 0 if case == "normal_axis0" else -1
    x = INPUTS["normal" if case == "normal_axis0" else case]()
    q = _ffi_q(spec, axis)(jnp.asarray(x), _state(spec))
    # 1. The numerics contract (numpy reference, IEEE FP32 division).
    assert not _matches_reference(q, spec, x, axis % 2)
    # 2. mxprec.quantize, the JAX oracle: identical QTensor.
    r = _jax_q(spec, axis)(jnp.asarray(x), _state(spec))
    bad = _qtensor_mismatch(q, r)
    assert not bad, bad


def _tiny_tensor() -> np.ndarray:
    """A whole tensor of tiny normals (amax ~5e-37): every tensor-wide scale takes the 2**-126 floor too, NVFP4's
    s_t = amax / 2688 included."""
    return _normal(5) * np.float32(1e-37)


@pytest.mark.parametrize("inputs", [_subnormal, _tiny_tensor], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("spec", SPECS, ids=_sid)
def test_quantize_subnormal_inputs_and_tiny_scales(spec, inputs):
    """FP32 subnormal inputs and groups whose scale takes the 2**-126 floor: the C++ lowering, XLA's oracle and the
    numpy reference agree (all three read subnormal inputs as zeros of their sign)."""
    x = inputs()
    q = _ffi_q(spec, -1)(jnp.asarray(x), _state(spec))
    assert not _matches_reference(q, spec, x, -1)
    r = _jax_q(spec, -1)(jnp.asarray(x), _state(spec))
    assert not _qtensor_mismatch(q, r)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize(
    "spec", [MXScaling(E4M3), MXScaling(E2M1), TensorScaling(E5M2), NVFP4Scaling()], ids=_sid
)
def test_quantize_narrow_inputs(spec, dtype):
    x = jnp.asarray(_normal(7)).astype(dtype)
    q = _ffi_q(spec, -1)(x, None)
    assert not _matches_reference(q, spec, np.asarray(x.astype(jnp.float32)), 1)
    r = _jax_q(spec, -1)(x, None)
    bad = _qtensor_mismatch(q, r)
    assert not bad, bad


@pytest.mark.parametrize(
    "shape,axis,spec",
    [
        ((4, 64, 96), 1, MXScaling(E2M3)),
        ((2, 3, 64, 32), 2, MXScaling(E2M1)),
        ((2, 3, 8, 128), 3, TileScaling(E4M3, (8, 128))),
        ((2, 128, 3, 16), 1, TileScaling(E4M3, (16, 128), power_of_two=True)),
        ((96,), 0, MXScaling(E3M2)),
        ((6, 5, 32), 0, RowScaling(E5M2)),
    ],
)
def test_quantize_any_rank(shape, axis, spec):
    x = jnp.asarray(np.random.default_rng(8).standard_normal(shape).astype(np.float32))
    q = jax.jit(lambda x: ffi.quantize(x, spec, axis))(x)
    r = jax.jit(lambda x: quantize(x, spec, axis=axis))(x)
    assert [f for f in _qtensor_mismatch(q, r) if f != "scale"] == []
    np.testing.assert_allclose(np.asarray(q.scale, np.float32), np.asarray(r.scale, np.float32), rtol=2**-23)


def test_quantize_vmap():
    x = jnp.asarray(_normal(9, (3, 64, 128)))
    for spec in (MXScaling(E2M1), TensorScaling(E4M3)):
        q = jax.jit(jax.vmap(lambda t, spec=spec: ffi.quantize(t, spec, -1)))(x)
        for i in range(3):
            one = ffi.quantize(x[i], spec, -1)
            assert np.array_equal(_u8(q.data[i]), _u8(one.data))
            assert _f32_equal(np.asarray(q.scale[i], np.float32), np.asarray(one.scale, np.float32))
            assert _f32_equal(q.amax[i], one.amax)
    # amax=False: NaN under vmap too, as unbatched (the folded call's batching rule had computed the amaxes).
    f = jax.jit(jax.vmap(lambda t: ffi.quantize(t, RowScaling(E4M3), -1, amax=False).amax))
    assert np.isnan(np.asarray(f(x))).all()


# ----------------------------------------------------------------------------- scaled_gemm


@pytest.mark.parametrize("spec", [TensorScaling(E4M3), RowScaling(E4M3)], ids=_sid)
@pytest.mark.parametrize("backend", ["xla", "ffi"])
def test_scaled_gemm_scales_on_either_side_of_one_do_not_overflow(spec, backend):
    """lhs ~1e36 (scale ~1e33) times rhs ~1e-30 (scale ~1e-32): the result ~1e6 is finite, so no intermediate may
    overflow (the XLA path had multiplied the FP8 dot by the lhs scale first: Inf)."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((1, 4, 64)) * 1e36).astype(np.float32)
    w = (rng.standard_normal((1, 64, 4)) * 1e-30).astype(np.float32)
    qx, qw = quantize(jnp.asarray(x), spec, axis=2), quantize(jnp.asarray(w), spec, axis=1)
    y = np.asarray(scaled_gemm(qx, qw, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32, backend=backend))
    want = np.asarray(reference_scaled_gemm(qx, qw, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32))
    assert np.isfinite(y).all() and np.isfinite(want).all()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("backend", ["xla", "ffi"])
def test_scaled_gemm_refuses_integer_operands_and_output_dtypes(backend):
    q = quantize(jnp.ones((1, 4, 64), jnp.float32), TensorScaling(E4M3), axis=2)
    with pytest.raises(TypeError, match=r"unquantized rhs is float32 / bfloat16 / float16.*int8 \(1, 64, 4\)"):
        scaled_gemm(q, jnp.ones((1, 64, 4), jnp.int8), lhs_contract=2, rhs_contract=1, backend=backend)
    with pytest.raises(TypeError, match="out_dtype must be float32, bfloat16 or float16, got int32"):
        scaled_gemm(q, jnp.ones((1, 64, 4), jnp.float32), lhs_contract=2, rhs_contract=1, out_dtype=jnp.int32,
                    backend=backend)
    with pytest.raises(ValueError, match="lhs is quantized along axis 2 but contracts axis 1"):
        scaled_gemm(q, jnp.ones((1, 4, 64), jnp.float32), lhs_contract=1, rhs_contract=1, backend=backend)

QUANTIZED_PRESETS = [
    "fp8_delayed",
    "fp8_current",
    "fp8_rowwise",
    "fp8_block",
    "mxfp8",
    "mxfp8_floor",
    "mxfp6",
    "mxfp4",
    "nvfp4",
]


def _q_role(t, spec, axis):
    """An operand quantized the way mxprec.dot_general quantizes a role (None: bf16 compute;
    delayed scaling from a fresh state, as DotGeneralState.init gives)."""
    if spec is None:
        return t.astype(jnp.bfloat16)
    if isinstance(spec, DelayedScaling):
        return quantize(t, spec, axis=axis, state=DelayedScalingState.init(spec))
    return quantize(t, spec, axis=axis)


def _wide(op):
    return dequantize(op) if isinstance(op, QTensor) else op.astype(jnp.float32)


def _gemm_bound(a, b, lc, rc):
    """K * 2**-23 * sum_k |a||b| (elementwise), from the dequantized operands."""
    K = a.shape[lc]
    dims = (((lc,), (rc,)), ((0,), (0,)))
    s = jax.lax.dot_general(jnp.abs(_wide(a)), jnp.abs(_wide(b)), dims, precision="highest")
    return K * 2.0**-23 * s + 1e-30


_CONTRACT = {"fprop": (2, 1), "dgrad": (2, 2), "wgrad": (1, 1)}


def _gemm_operands(recipe, x, w, g):
    """The operand pairs of the recipe's three GEMMs, quantized as mxprec.dot_general does:
    x (B, M, K), w (B, K, N), g = dY (B, M, N)."""
    r = recipe
    return {
        "fprop": (_q_role(x, r.fprop_lhs, 2), _q_role(w, r.fprop_rhs, 1)),
        "dgrad": (_q_role(g, r.dgrad_grad, 2), _q_role(w, r.dgrad_rhs, 2)),
        "wgrad": (_q_role(x, r.wgrad_lhs, 1), _q_role(g, r.wgrad_grad, 1)),
    }


def _assert_within(out, ref, bound, what=""):
    out = np.asarray(out, np.float32)
    ref = np.asarray(ref, np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(out), nan), what
    diff = np.abs(np.where(nan, 0, out) - np.where(nan, 0, ref))
    bound = np.asarray(bound, np.float32)
    assert np.all(diff <= bound), (
        f"{what}: max diff {diff.max()} vs bound at worst {bound.ravel()[diff.argmax()]}"
    )


@pytest.mark.parametrize("preset", QUANTIZED_PRESETS)
def test_scaled_gemm_every_recipe_operand_pair(preset):
    recipe = recipes.get(preset)
    rng = np.random.default_rng(11)
    B, M, K, N = 2, 128, 256, 128
    x = jnp.asarray(rng.standard_normal((B, M, K)).astype(np.float32))
    w = jnp.asarray((rng.standard_normal((B, K, N)) * 0.05).astype(np.float32))
    g = jnp.asarray(rng.standard_normal((B, M, N)).astype(np.float32))

    @jax.jit
    def run(x, w, g):
        out = {}
        for name, (a, b) in _gemm_operands(recipe, x, w, g).items():
            lc, rc = _CONTRACT[name]
            out[name] = (
                scaled_gemm(a, b, lhs_contract=lc, rhs_contract=rc, out_dtype=jnp.float32, backend="ffi"),
                reference_scaled_gemm(a, b, lhs_contract=lc, rhs_contract=rc, out_dtype=jnp.float32),
                _gemm_bound(a, b, lc, rc),
            )
        return out

    for name, (out, ref, bound) in run(x, w, g).items():
        _assert_within(out, ref, bound, f"{preset} {name}")


def test_scaled_gemm_mixed_plain_operands_bias_and_out_dtypes():
    rng = np.random.default_rng(12)
    x = jnp.asarray(rng.standard_normal((2, 64, 128)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((2, 128, 96)).astype(np.float32))
    bias = jnp.asarray(rng.standard_normal((96,)).astype(np.float32))
    cases = [
        lambda x, w: (x.astype(jnp.bfloat16), quantize(w, MXScaling(E2M1), axis=1)),
        lambda x, w: (quantize(x, TileScaling(E4M3, (1, 128)), axis=2), w.astype(jnp.float16)),
        lambda x, w: (x, w),
    ]
    dtypes = (jnp.float32, jnp.bfloat16, jnp.float16)
    for make in cases:

        @jax.jit
        def run(x, w, bias, make=make):
            a, b = make(x, w)
            gemm = functools.partial(ffi.scaled_gemm, a, b, lhs_contract=2, rhs_contract=1)
            ref = reference_scaled_gemm(a, b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32)
            return (
                [gemm(out_dtype=d) for d in dtypes],
                gemm(out_dtype=jnp.float32, bias=bias),
                ref,
                _gemm_bound(a, b, 2, 1),
            )

        outs, with_bias, ref, bound = run(x, w, bias)
        for out, out_dtype in zip(outs, dtypes):
            assert out.dtype == out_dtype and out.shape == (2, 64, 96)
            ulp = 0 if out_dtype == jnp.float32 else 2.0 ** -(8 if out_dtype == jnp.bfloat16 else 11)
            _assert_within(out, ref, bound + ulp * np.abs(np.asarray(ref)), jnp.dtype(out_dtype).name)
        want = np.asarray(ref) + np.asarray(bias)[None, None, :]
        _assert_within(with_bias, want, bound + 2.0**-23 * np.abs(want), "bias")


def test_scaled_gemm_nan_blocks_propagate():
    x = _specials()[None]
    x[0, 4] = _normal(4)[4]  # (finite 3e38 rows overflow the FP32 sum: order-dependent Inf - Inf)

    @jax.jit
    def run(x, w):
        q = quantize(x, MXScaling(E4M3), axis=2)
        qw = quantize(w, MXScaling(E4M3), axis=1)
        return (
            ffi.scaled_gemm(q, qw, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32),
            reference_scaled_gemm(q, qw, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32),
        )

    out, ref = run(jnp.asarray(x), jnp.asarray(_normal(13, (256, 32)))[None])
    assert np.array_equal(np.isnan(np.asarray(out)), np.isnan(np.asarray(ref)))
    assert np.isnan(np.asarray(out))[0, 6].all() and not np.isnan(np.asarray(out))[0, 0].any()


def test_scaled_gemm_vmap():
    rng = np.random.default_rng(14)
    x = jnp.asarray(rng.standard_normal((3, 2, 32, 64)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((3, 2, 64, 48)).astype(np.float32))
    for spec in (MXScaling(E4M3), TensorScaling(E4M3)):  # fold into B / per-example tensor scale

        def one(x, w, spec=spec):
            a = quantize(x, spec, axis=2)
            b = quantize(w, spec, axis=1)
            return ffi.scaled_gemm(a, b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32)

        out = jax.jit(jax.vmap(one))(x, w)
        single = jax.jit(one)
        for i in range(3):
            assert np.array_equal(np.asarray(out[i]), np.asarray(single(x[i], w[i])))


# ----------------------------------------------------------------------------- dot_general


@pytest.mark.parametrize("preset", QUANTIZED_PRESETS)
def test_dot_general_ffi_matches_xla(preset):
    """Forward, dX and dW of mxprec.dot_general: backend="ffi" vs "xla", within the K bound of each GEMM."""
    rng = np.random.default_rng(15)
    x = jnp.asarray(rng.standard_normal((4, 32, 256)).astype(np.float32))
    w = jnp.asarray((rng.standard_normal((256, 128)) * 0.05).astype(np.float32))
    ct = jnp.asarray(rng.standard_normal((4, 32, 128)).astype(np.float32))
    dn = (((2,), (0,)), ((), ()))

    def run(backend):
        recipe = recipes.get(preset, backend=backend)
        st = DotGeneralState.init(recipe)

        def f(x, w):
            return mxprec.dot_general(x, w, dn, preferred_element_type=jnp.float32, recipe=recipe, state=st)

        y, vjp = jax.vjp(f, x, w)
        return (y, *vjp(ct))

    recipe = recipes.get(preset)

    @jax.jit
    def everything(x, w, g):
        ops = _gemm_operands(recipe, x.reshape(1, 128, 256), w[None], g.reshape(1, 128, 128))
        return run("ffi"), run("xla"), [_gemm_bound(a, b, *_CONTRACT[n]) for n, (a, b) in ops.items()]

    out, ref, bounds = everything(x, w, ct)
    for name, o, r, bound in zip(("forward", "dgrad", "wgrad"), out, ref, bounds):
        _assert_within(o, r, np.asarray(bound).reshape(r.shape), f"{preset} {name}")


# ----------------------------------------------------------------------------- malformed calls


def _raw_gemm_call(bufs, out_shape=(1, 8, 8), out_dtype=jnp.float32, **overrides):
    attrs = {"lhs_kind": 4, "lhs_fmt": 0, "lhs_block": 32, "lhs_tile_rows": 1, "lhs_contract": 2}
    attrs.update({"rhs_kind": 4, "rhs_fmt": 0, "rhs_block": 32, "rhs_tile_rows": 1, "rhs_contract": 1})
    attrs["has_bias"] = 0
    attrs.update(overrides)
    call = jax.ffi.ffi_call("mxprec_scaled_gemm", jax.ShapeDtypeStruct(out_shape, out_dtype))
    return jax.block_until_ready(
        jax.jit(lambda *b: call(*b, **{k: np.int32(v) for k, v in attrs.items()}))(*bufs)
    )


@functools.cache
def _mx_operands():
    a = jax.jit(lambda t: quantize(t, MXScaling(E4M3), axis=2))(jnp.ones((1, 8, 64), jnp.float32))
    b = jax.jit(lambda t: quantize(t, MXScaling(E4M3), axis=1))(jnp.ones((1, 64, 8), jnp.float32))
    return a, b


def _mx_pair():
    a, b = _mx_operands()
    one = jnp.ones((), jnp.float32)
    return [a.data, a.scale, one, b.data, b.scale, one, one], a, b


def test_raw_call_is_well_formed():
    bufs, _, _ = _mx_pair()
    np.testing.assert_array_equal(np.asarray(_raw_gemm_call(bufs)), np.full((1, 8, 8), 64.0, np.float32))


@pytest.mark.parametrize(
    "mutate,overrides,match",
    [
        (lambda b: b.__setitem__(1, b[1][:, :, :1]), {}, "lhs scale has shape"),  # wrong scale shape
        (lambda b: b.__setitem__(4, b[4].astype(jnp.float32)), {}, "rhs scale has shape .* dtype float32"),
        (lambda b: b.__setitem__(0, b[0].view(jnp.uint8)), {}, "lhs data has dtype uint8"),  # wrong dtype
        (lambda b: b.__setitem__(3, b[3][:, :32]), {}, "disagree on B or K"),
        (lambda b: None, {"lhs_kind": 9}, "lhs_kind=9 is not a ScalingKind"),
        (lambda b: None, {"rhs_fmt": 17}, "rhs_fmt=17 is not an ElemFormat"),
        (lambda b: None, {"lhs_contract": 0}, "must be 1 or 2"),
        (lambda b: None, {"lhs_block": 48}, "not a multiple of the mx block 48"),
        (lambda b: None, {"lhs_kind": 1}, "lhs scale has shape"),
        (lambda b: None, {"has_bias": 1}, "bias has shape"),
    ],
)
def test_malformed_scaled_gemm_raises(mutate, overrides, match):
    bufs, _, _ = _mx_pair()
    mutate(bufs)
    with pytest.raises(jax.errors.JaxRuntimeError, match=match):
        _raw_gemm_call(bufs, **overrides)


def check_malformed_quantize_calls_raise():
    """Raw ``mxprec_quantize`` calls the handler must reject with a clear error (any platform's handler)."""
    outs = (
        jax.ShapeDtypeStruct((1, 8, 48), jnp.float8_e4m3fn),
        jax.ShapeDtypeStruct((1, 8, 1), jnp.float8_e8m0fnu),
        jax.ShapeDtypeStruct((), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.float32),
    )
    qcall = jax.ffi.ffi_call("mxprec_quantize", outs)
    attrs = {"kind": 4, "fmt": 0, "block": 32, "tile_rows": 1, "scale_rule": 0, "power_of_two": 0}
    attrs.update({"axis": 2, "delayed": 0, "amax_mode": 0})
    one = jnp.ones((), jnp.float32)
    for over, match in (
        ({}, "not a multiple of the block 32"),
        ({"kind": 0}, "kind=0"),
        ({"scale_rule": 5}, "scale_rule"),
        ({"amax_mode": 4}, "amax_mode=4"),
        ({"kind": 5, "fmt": 4, "block": 16, "amax_mode": 3}, "amax_mode=3 .*needs kind row, tile or mx"),
    ):
        kw = {k: np.int32(v) for k, v in dict(attrs, **over).items()}
        with pytest.raises(jax.errors.JaxRuntimeError, match=match):
            jax.block_until_ready(
                jax.jit(lambda x, kw=kw: qcall(x, one, one, **kw))(jnp.ones((1, 8, 48), jnp.float32))
            )


def test_malformed_calls_raise_python_errors():
    _, a, b = _mx_pair()
    # Wrong result shape / dtype and a missing attribute.
    bufs, _, _ = _mx_pair()
    with pytest.raises(jax.errors.JaxRuntimeError, match="result has shape"):
        _raw_gemm_call(bufs, out_shape=(1, 8, 9))
    with pytest.raises(jax.errors.JaxRuntimeError, match="result has shape .* dtype int32"):
        _raw_gemm_call(bufs, out_dtype=jnp.int32)
    with pytest.raises(jax.errors.JaxRuntimeError):  # missing attributes
        call = jax.ffi.ffi_call("mxprec_scaled_gemm", jax.ShapeDtypeStruct((1, 8, 8), jnp.float32))
        jax.block_until_ready(jax.jit(lambda *t: call(*t, lhs_kind=np.int32(4)))(*bufs))
    # The wrapper's own checks: TypeError / ValueError before anything runs.
    with pytest.raises(TypeError, match="int32"):
        ffi.scaled_gemm(
            jnp.ones((1, 8, 64), jnp.int32), b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32
        )
    with pytest.raises(ValueError, match="quantized along axis 2 but contracts axis 1"):
        ffi.scaled_gemm(a, b, lhs_contract=1, rhs_contract=1, out_dtype=jnp.float32)
    with pytest.raises(TypeError, match="out_dtype"):
        ffi.scaled_gemm(a, b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.int8)
    # A QTensor whose scale was tampered with reaches the handler, which rejects it.
    bad = dataclasses.replace(a, scale=a.scale[:, :4])
    with pytest.raises(jax.errors.JaxRuntimeError, match="lhs scale has shape"):
        jax.block_until_ready(ffi.scaled_gemm(bad, b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32))
    # quantize: raw call with a block that does not divide the axis, and a bad kind.
    check_malformed_quantize_calls_raise()
    with pytest.raises(TypeError, match="integer input dtype"):
        ffi.quantize(jnp.ones((4, 32), jnp.int32), MXScaling(E4M3), -1)
    with pytest.raises(ValueError, match="DelayedScaling needs state"):
        ffi.quantize(jnp.ones((4, 32), jnp.float32), DelayedScaling(E4M3), -1)


def test_empty_tensor_quantizes_to_the_contract_defaults():
    """x with no elements: amax 0, tensor scale 1 (delayed: the given scale), scales of empty groups 1 / E8M0 0."""
    q = ffi.quantize(jnp.zeros((0, 64), jnp.float32), TensorScaling(formats.E4M3), -1)
    assert q.data.shape == (0, 64) and float(q.amax) == 0.0 and float(q.scale) == 1.0
    q = ffi.quantize(jnp.zeros((0, 64), jnp.float32), MXScaling(formats.E4M3), -1)
    assert q.data.shape == (0, 64) and float(q.amax) == 0.0
    q = ffi.quantize(jnp.zeros((4, 0), jnp.float32), RowScaling(formats.E4M3), -1)
    assert q.scale.shape == (4, 1) and np.all(np.asarray(q.scale) == 1.0)
