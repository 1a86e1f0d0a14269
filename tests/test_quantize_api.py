"""quantize API behaviour beyond bit-exactness: SR statistics, byte accounting, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mxprec
from mxprec import formats


@pytest.mark.parametrize("spec", [mxprec.formats.MXFP4, mxprec.TensorScaling(formats.E5M2), mxprec.NVFP4Scaling()],
                         ids=["mxfp4", "tensor_e5m2", "nvfp4"])
def test_stochastic_rounding_is_unbiased(spec):
    """Mean of many SR draws of the same tensor -> the exactly scaled value (RNE stays biased)."""
    x = jax.random.uniform(jax.random.key(3), (4, 64), jnp.float32, minval=-3.0, maxval=3.0)
    x = x.at[:, 0].set(jnp.float32(3.0))  # pin every block's amax so the scale is the same for every draw
    n = 2048
    keys = jax.random.split(jax.random.key(0), n)
    deq = jax.jit(jax.vmap(lambda k: mxprec.dequantize(mxprec.quantize(x, spec, key=k))))(keys)
    mean = np.asarray(jnp.mean(deq, axis=0))
    rne = np.asarray(mxprec.dequantize(mxprec.quantize(x, spec)))
    # grid spacing around each value bounds the per-draw error; the mean's std is <= spacing/(2 sqrt n)
    # Elements whose draws never differ are on the grid or saturated (NVFP4's E4M3-rounded block
    # scale can put |x| / scale above 6): SR makes no claim there.
    spacing = np.abs(np.asarray(deq).max(axis=0) - np.asarray(deq).min(axis=0))
    rounded = spacing > 0
    z = np.abs(mean - np.asarray(x))[rounded] / (spacing[rounded] / (2 * np.sqrt(n)))
    assert rounded.mean() > 0.5 and np.mean(z < 4.5) > 0.995, np.sort(z)[-5:]
    assert np.abs(mean - np.asarray(x)).mean() < np.abs(rne - np.asarray(x)).mean() / 3


def test_stochastic_rounding_is_deterministic_per_key():
    x = jax.random.normal(jax.random.key(1), (8, 64), jnp.float32)
    a = mxprec.quantize(x, formats.MXFP8, key=jax.random.key(7)).codes()
    b = mxprec.quantize(x, formats.MXFP8, key=jax.random.key(7)).codes()
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_seed_byte_table():
    """Bytes per value the seed tables use: BF16 2.0, per-tensor FP8 ~1.0, MX 8.25/6.25/4.25 bits."""
    x = jnp.ones((4096, 4096), jnp.float32)
    per_value = lambda q: mxprec.nbytes(q) / x.size
    shapes = lambda spec: jax.eval_shape(lambda x: mxprec.quantize(x, spec), x)
    assert x.astype(jnp.bfloat16).dtype.itemsize == 2
    assert per_value(shapes(mxprec.TensorScaling(formats.E4M3))) == pytest.approx(1.0, abs=1e-6)
    assert per_value(shapes(formats.MXFP8)) == 1.03125
    assert per_value(shapes(formats.MXFP6_E2M3)) == 0.78125
    assert per_value(shapes(formats.MXFP4)) == 0.53125
    assert mxprec.bits_per_value(shapes(formats.MXFP8)) == 8.25
    assert mxprec.bits_per_value(shapes(formats.MXFP6_E3M2)) == 6.25
    assert mxprec.bits_per_value(shapes(formats.MXFP4)) == 4.25


def test_mx_scale_dtype_and_shape():
    x = jnp.ones((3, 64, 5), jnp.bfloat16)
    q = mxprec.quantize(x, formats.MXFP4, axis=1)
    assert q.scale.dtype == jnp.float8_e8m0fnu and q.scale.shape == (3, 2, 5)
    assert q.data.shape == (3, 32, 5) and q.data.dtype == jnp.uint8
    q6 = mxprec.quantize(x, formats.MXFP6_E2M3, axis=1)
    assert q6.data.shape == (3, 48, 5) and q6.codes().shape == x.shape


def test_bad_input_raises_before_compute():
    with pytest.raises(ValueError, match=r"shape \(4, 40\) axis 1 has size 40, not a multiple of the mx block 32"):
        mxprec.quantize(jnp.ones((4, 40), jnp.float32), formats.MXFP8)
    with pytest.raises(TypeError, match="integer input dtype int32 for shape"):
        mxprec.quantize(jnp.ones((4, 32), jnp.int32), formats.MXFP8)
    with pytest.raises(ValueError, match=r"axis 2 is out of range for a tensor of shape \(4, 32\)"):
        mxprec.quantize(jnp.ones((4, 32), jnp.float32), formats.MXFP8, axis=2)
    with pytest.raises(ValueError, match="row axis 0 has size 100"):
        mxprec.quantize(jnp.ones((100, 128), jnp.float32), mxprec.TileScaling(tile=(128, 128)))
    with pytest.raises(ValueError, match="needs state"):
        mxprec.quantize(jnp.ones((4, 32), jnp.float32), mxprec.DelayedScaling())
    with pytest.raises(ValueError, match="FP8 element formats"):
        mxprec.TensorScaling(formats.E2M1)
    with pytest.raises(ValueError, match="scale_rule"):
        mxprec.MXScaling(formats.E4M3, scale_rule="ceil")
    with pytest.raises(ValueError, match="unknown element format 'e9m9'"):
        mxprec.MXScaling("e9m9")
    with pytest.raises(ValueError, match="axis True is out of range"):
        mxprec.quantize(jnp.ones((4, 32), jnp.float32), formats.MXFP8, axis=True)


@pytest.mark.parametrize(
    "make,err,match",
    [
        (lambda: mxprec.DelayedScaling(history_len=2.5), TypeError, "history_len must be an int, got float"),
        (lambda: mxprec.DelayedScaling(history_len=0), ValueError, "history_len must be >= 1, got 0"),
        (lambda: mxprec.DelayedScaling(margin=0.5), TypeError, "margin must be an int, got float"),
        (lambda: mxprec.DelayedScaling(margin=33), ValueError, r"margin must be in \[-32, 32\], got 33"),
        (lambda: mxprec.DelayedScaling(margin=-2000), ValueError, r"margin must be in \[-32, 32\], got -2000"),
        (lambda: mxprec.MXScaling(formats.E4M3, block=True), TypeError, "block must be an int, got bool"),
        (lambda: mxprec.MXScaling(formats.E2M1, block=3), ValueError, "block=3 is invalid"),
        (lambda: mxprec.TileScaling(tile=(1.5, 32)), TypeError, r"tile\[0\] must be an int, got float"),
        (lambda: mxprec.TileScaling(tile=(1, 0)), ValueError, r"tile\[1\] must be >= 1"),
        (lambda: mxprec.TileScaling(tile=(1, 2, 3)), ValueError, "two positive ints"),
        (lambda: mxprec.NVFP4Scaling(block=32), ValueError, "block is the format's 16"),
        (lambda: mxprec.NVFP4Scaling(block=0), ValueError, "block is the format's 16"),
    ],
)
def test_spec_fields_are_validated(make, err, match):
    with pytest.raises(err, match=match):
        make()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_empty_tensors_quantize_to_the_contract_defaults(dtype):
    """No elements: amax +0, per-tensor scale 1, empty codes and scales (as the FFI lowering's
    test_empty_tensor_quantizes_to_the_contract_defaults), on the XLA path too."""
    q = mxprec.quantize(jnp.zeros((0, 64), dtype), mxprec.TensorScaling())
    assert q.data.shape == (0, 64) and float(q.amax) == 0.0 and float(q.scale) == 1.0
    q = mxprec.quantize(jnp.zeros((0, 64), dtype), formats.MXFP8)
    assert q.data.shape == (0, 64) and q.scale.shape == (0, 2) and float(q.amax) == 0.0
    q = mxprec.quantize(jnp.zeros((4, 0), dtype), mxprec.RowScaling())
    assert q.scale.shape == (4, 1) and np.all(np.asarray(q.scale) == 1.0)
    q = mxprec.quantize(jnp.zeros((0, 32), dtype), mxprec.NVFP4Scaling())
    assert q.data.shape == (0, 16) and float(q.tensor_scale) == 1.0


def test_delayed_update_checks_the_history_length():
    state = mxprec.DelayedScalingState.init(mxprec.DelayedScaling(history_len=16))
    with pytest.raises(ValueError, match=r"amax_history has shape \(16,\), but .* keeps \(1024,\)"):
        mxprec.update_delayed_state(state, jnp.float32(1.0), mxprec.DelayedScaling())


@pytest.mark.parametrize("fmt", [formats.E4M3, formats.E5M2], ids=lambda f: f.name)
def test_fp8_convert_rounds_like_the_software_rne_at_every_tie(fmt):
    """The quantizer's FP8 codes come from XLA's FP32 -> FP8 convert (after a clamp). It must round
    exactly like round_to_grid + encode on this backend, also for values a few FP32 ulps around each
    tie (a convert that went through FP16 would round those twice)."""
    from mxprec.quantize import _codes, encode, round_to_grid

    grid = np.arange(256, dtype=np.uint8).view(fmt.dtype).astype(np.float32)
    grid = np.unique(grid[np.isfinite(grid)])
    mids = ((grid[1:].astype(np.float64) + grid[:-1]) / 2).astype(np.float32)
    xs = [mids]
    for k in (1, 2, 7, 100, 1000):
        step = np.float32(k) * np.spacing(mids)
        xs += [mids + step, mids - step]
    x = np.concatenate(xs + [np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, 1e-40], np.float32)])
    x = jnp.asarray(np.concatenate([x, -x]))
    want = jax.jit(lambda v: encode(round_to_grid(v, fmt, None), fmt))(x)
    got = jax.jit(lambda v: _codes(v, fmt, None))(x)
    bad = np.nonzero(np.asarray(want != got))[0]
    assert bad.size == 0, f"{bad.size} codes differ, e.g. x={np.asarray(x)[bad[:5]]}"


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_tensor_amax_is_exact_nan_winning_and_flushes_subnormal_maxima(dtype):
    """One integer max over the FP32 bits of |x|: the exact maximum, NaN if any element is NaN (wherever
    it sits, with either sign), Inf above every finite value, and +0 for a subnormal maximum."""
    from mxprec.quantize import tensor_amax

    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 256)).astype(np.float32) * np.float32(2.0) ** rng.integers(-20, 20, (8, 1))
    x = np.asarray(jnp.asarray(x, dtype).astype(jnp.float32))  # representable in dtype
    got = np.asarray(tensor_amax(jnp.asarray(x, dtype), axis=1))
    np.testing.assert_array_equal(got, np.abs(x).max(axis=1))
    for pos in (0, 17, 255):
        for nan in (np.float32(np.nan), -np.float32(np.nan)):
            y = x.copy()
            y[3, pos] = nan
            y[5, pos] = np.inf
            a = np.asarray(tensor_amax(jnp.asarray(y, dtype), axis=1))
            assert np.isnan(a[3]) and a[5] == np.inf, (pos, a)
            np.testing.assert_array_equal(np.delete(a, [3, 5]), np.delete(np.abs(x).max(axis=1), [3, 5]))
    z = np.zeros((2, 4), np.float32)
    z[0] = [-0.0, 0.0, -0.0, 0.0]
    if dtype == jnp.float32:
        z[1] = [1e-40, -3e-39, 0.0, 2e-45]  # FP32 subnormals only: the maximum is flushed to +0
    a = np.asarray(tensor_amax(jnp.asarray(z, dtype), axis=1))
    assert a.tolist() == [0.0, 0.0] and not np.signbit(a).any()
    assert float(tensor_amax(jnp.asarray([1e-40, 2.0**-126], jnp.float32))) == 2.0**-126  # smallest normal kept


def test_quantize_amax_of_bfloat16_source_matches_the_fp32_rule():
    """quantize() reduces a bfloat16 source over its 16-bit patterns; the amax is the FP32 rule's: the exact
    maximum, NaN for any NaN, Inf above finite values, +0 for zeros and for a subnormal-only maximum."""
    from mxprec.quantize import tensor_amax

    spec = mxprec.TensorScaling(formats.E4M3)
    rng = np.random.default_rng(3)
    base = jnp.asarray(rng.standard_normal((64, 96)).astype(np.float32) * 3e3, jnp.bfloat16)
    bf = lambda v: jnp.asarray(v, jnp.bfloat16)
    sub = 2.0**-130  # a bfloat16 subnormal
    cases = {
        "random": base,
        "nan": base.at[5, 7].set(bf(np.nan)),
        "-nan": base.at[63, 95].set(bf(-np.nan)),
        "inf": base.at[0, 0].set(bf(-np.inf)),
        "zeros": jnp.zeros((4, 8), jnp.bfloat16).at[1, 1].set(bf(-0.0)),
        "subnormal": jnp.full((4, 8), bf(sub)).at[2, 3].set(bf(-2 * sub)),
    }
    for name, x in cases.items():
        got = np.asarray(jax.jit(lambda v: mxprec.quantize(v, spec).amax)(x))
        want = np.asarray(tensor_amax(x.astype(jnp.float32)))
        assert np.array_equal(got, want, equal_nan=True) and np.signbit(got) == np.signbit(want), (name, got, want)


@pytest.mark.parametrize(
    "shape,bshape",
    [
        ((64, 96), ()),
        ((2, 24, 3), (2, 1, 3)),
        ((2, 1, 3), ()),
        ((4, 1, 8), (4, 1, 1)),
        ((3, 5), (3, 1)),
        ((7,), ()),
        ((1, 9), ()),
    ],
)
def test_exact_div_is_ieee_division_and_reads_its_dividend_once(shape, bshape):
    """exact_div(a, b) is IEEE a / b bit for bit (the simplifier must not turn it into a * (1 / b)), and
    for a with two or more non-trivial axes the dividend is read by one op only (XLA does not fuse an
    expensive producer into a consumer that reads its operand twice)."""
    from mxprec.scaling import exact_div

    rng = np.random.default_rng(11)
    b = np.full(bshape, 448.0, np.float32) + np.float32(3) * (rng.random(bshape) > 0.5)  # inexact reciprocals
    # Exact quotients m * 2**e (a = m * 2**e * b exactly): a * (1 / b) misses many of them by an ulp.
    m = rng.integers(1, 200, shape).astype(np.float32)
    m = m * np.exp2(rng.integers(-20, 20, shape)).astype(np.float32)
    a = (m * np.broadcast_to(b, np.broadcast_shapes(shape, bshape))).astype(np.float32).reshape(shape)
    a.flat[0], a.flat[-1] = np.nan, -np.inf
    got = np.asarray(jax.jit(exact_div)(jnp.asarray(a), jnp.asarray(b)))
    want = a / b  # numpy: IEEE division; every quotient here is a normal number, NaN or Inf
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (got[~same][:4], want[~same][:4])

    jaxpr = jax.make_jaxpr(exact_div)(jnp.asarray(a), jnp.asarray(b)).jaxpr
    readers = [e for e in jaxpr.eqns if any(v is jaxpr.invars[0] for v in e.invars)]
    if sum(n > 1 for n in shape) >= 2:
        assert [e.primitive.name for e in readers] == ["div"], readers


def test_delayed_state_of_the_wrong_shape_is_named():
    """A DelayedScalingState whose scale (or an amax) holds several values: a ValueError naming the function, the
    field and the shape, on every path (it was a bare "cannot reshape array" from deep inside)."""
    from mxprec.kernels import ffi

    spec = mxprec.DelayedScaling(history_len=4)
    bad = mxprec.DelayedScalingState(jnp.zeros(4, jnp.float32), jnp.ones(2, jnp.float32))
    good = mxprec.DelayedScalingState.init(spec)
    x = jnp.ones((8, 32), jnp.float32)
    cases = [(lambda: mxprec.quantize(x, spec, state=bad), r"quantize: DelayedScalingState.scale"),
             (lambda: ffi.quantize(x, spec, -1, state=bad), r"ffi.quantize: DelayedScalingState.scale"),
             (lambda: mxprec.update_delayed_state(bad, 1.0, spec), r"update_delayed_state: DelayedScalingState.scale"),
             (lambda: mxprec.update_delayed_state(good, jnp.ones(3), spec), r"update_delayed_state: amax")]
    for call, what in cases:
        with pytest.raises(ValueError, match=what + r" must hold one value \(shape \(\)\), got shape \(\d,\)"):
            call()


@pytest.mark.parametrize("spec", [mxprec.TensorScaling(formats.E4M3), mxprec.RowScaling(formats.E5M2),
                                  mxprec.TileScaling(formats.E4M3, (1, 32)), mxprec.TileScaling(formats.E4M3, (32, 32)),
                                  mxprec.MXScaling(formats.E4M3), mxprec.MXScaling(formats.E2M1),
                                  mxprec.MXScaling(formats.E3M2), mxprec.NVFP4Scaling()], ids=lambda s: s.describe())
def test_qtensor_layout_is_what_quantize_gives(spec):
    """qtensor_layout (scaled_gemm's check of hand-made QTensors) agrees with quantize on every axis and rank."""
    from mxprec.quantize import qtensor_layout

    for shape in ((64,), (64, 96), (2, 64, 96), (2, 32, 64, 96)):
        for axis in range(len(shape)):
            if shape[axis] % 32 or (len(shape) == 1 and isinstance(spec, mxprec.TileScaling) and spec.tile[0] > 1):
                continue
            q = jax.eval_shape(lambda x, a=axis: mxprec.quantize(x, spec, axis=a),
                               jax.ShapeDtypeStruct(shape, jnp.float32))
            assert qtensor_layout(spec, shape, axis) == (q.data.shape, q.scale.shape), (shape, axis)


def test_scaled_gemm_refuses_a_qtensor_whose_scales_do_not_fit():
    """A QTensor edited by hand (scales cut to one column): a ValueError naming both layouts on the XLA path too
    (it broadcast the one column over every block without a word); the custom call refused it already."""
    import dataclasses

    from mxprec.kernels import scaled_gemm

    x = jax.random.normal(jax.random.key(0), (2, 64, 128), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (2, 128, 64), jnp.float32)
    spec = mxprec.MXScaling(formats.E4M3)
    q = mxprec.quantize(x, spec, axis=2)
    bad = dataclasses.replace(q, scale=q.scale[:, :, :1])
    with pytest.raises(ValueError, match=r"lhs QTensor of shape \(2, 64, 128\).*scale \(2, 64, 1\); that layout has "
                                         r"data \(2, 64, 128\) and scale \(2, 64, 4\)"):
        scaled_gemm(bad, mxprec.quantize(w, spec, axis=1), lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32,
                    backend="xla")
