"""mxprec.kernels.hip.quantize without ROCm: its lowering for platform "rocm" (jax.export) for every
kind the gfx950 ``mxprec_quantize`` handler serves, along the last axis and axis 0, must pass the
contract's attributes (csrc/common/quantize.h) and give exactly :func:`mxprec.quantize`'s QTensor
(shapes, dtypes, axis); on CPU the call itself raises RuntimeError (library unavailable)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import mxprec
from mxprec.kernels import hip
from mxprec.scaling import (
    DelayedScaling,
    DelayedScalingState,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    TensorScaling,
    TileScaling,
)

# name -> (spec, expected attrs (kind, fmt, block, tile_rows, delayed), shape)
CASES = {
    "mx_e4m3_rceil": (MXScaling(fmt="e4m3"), dict(kind=4, fmt=0, block=32, tile_rows=1, delayed=0, scale_rule=0)),
    "mx_e5m2_floor": (
        MXScaling(fmt="e5m2", scale_rule="floor"),
        dict(kind=4, fmt=1, block=32, tile_rows=1, delayed=0, scale_rule=1),
    ),
    "mx_e2m3": (MXScaling(fmt="e2m3"), dict(kind=4, fmt=2, block=32, tile_rows=1, delayed=0)),
    "mx_e3m2_floor": (
        MXScaling(fmt="e3m2", scale_rule="floor"),
        dict(kind=4, fmt=3, block=32, tile_rows=1, delayed=0, scale_rule=1),
    ),
    "mx_e2m1": (MXScaling(fmt="e2m1"), dict(kind=4, fmt=4, block=32, tile_rows=1, delayed=0)),
    "tensor_e4m3": (TensorScaling(), dict(kind=1, fmt=0, block=1, tile_rows=1, delayed=0)),
    "tensor_e5m2": (TensorScaling(fmt="e5m2"), dict(kind=1, fmt=1, block=1, tile_rows=1, delayed=0)),
    "delayed": (DelayedScaling(), dict(kind=1, fmt=0, block=1, tile_rows=1, delayed=1)),
    "row": (RowScaling(fmt="e5m2"), dict(kind=2, fmt=1, block=1, tile_rows=1, delayed=0)),
    "tile_1x128": (TileScaling(tile=(1, 128)), dict(kind=3, fmt=0, block=128, tile_rows=1, delayed=0)),
    "tile_128x128_pow2": (
        TileScaling(tile=(128, 128), power_of_two=True),
        dict(kind=3, fmt=0, block=128, tile_rows=128, delayed=0, power_of_two=1),
    ),
    "nvfp4": (NVFP4Scaling(), dict(kind=5, fmt=4, block=16, tile_rows=1, delayed=0)),
}
# (shape, axis): quantization axis sizes are multiples of 128; tile row axes multiples of 128.
SHAPES = [((2, 128, 256), -1), ((256, 3, 128), 0), ((256, 128), 0), ((384,), 0)]


@pytest.fixture
def fake_library(monkeypatch):
    monkeypatch.setitem(hip._state, "result", (object(), ""))  # pretend the library is registered


def _state(spec):
    return DelayedScalingState.init(spec) if isinstance(spec, DelayedScaling) else None


def _export(spec, shape, axis, dtype=jnp.bfloat16):
    x = jax.ShapeDtypeStruct(shape, dtype)
    st = _state(spec)
    checks = [export.DisabledSafetyCheck.custom_call("mxprec_quantize")]
    if st is None:
        exp = export.export(
            jax.jit(lambda v: hip.quantize(v, spec, axis=axis)), platforms=("rocm",), disabled_checks=checks
        )(x)
    else:
        exp = export.export(
            jax.jit(lambda v, s: hip.quantize(v, spec, axis=axis, state=s)),
            platforms=("rocm",),
            disabled_checks=checks,
        )(x, st)
    return exp


PARAMS = [
    pytest.param(name, shape, axis, id=f"{name}-{shape}-{axis}")
    for name, (spec, _) in CASES.items()
    for shape, axis in SHAPES
    if not (isinstance(spec, TileScaling) and spec.tile[0] > 1 and len(shape) < 2)  # needs rank >= 2
]


@pytest.mark.parametrize("name,shape,axis", PARAMS)
def test_rocm_lowering_matches_reference(fake_library, name, shape, axis):
    spec, attrs = CASES[name]
    exp = _export(spec, shape, axis)
    text = exp.mlir_module()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call @mxprec_quantize" in line]
    assert len(calls) == 1, text
    call = calls[0]
    for k, v in {"axis": 2, **attrs}.items():
        assert re.search(rf"\b{k} = {v} : i32", call), (k, v, call)
    ndim = len(shape)
    moved = axis % ndim != ndim - 1
    assert ("stablehlo.transpose" in text) == moved

    # The exported results are exactly mxprec.quantize's QTensor leaves.
    x = jax.ShapeDtypeStruct(shape, jnp.bfloat16)
    st = _state(spec)
    ref = jax.eval_shape(lambda v: mxprec.quantize(v, spec, axis=axis, state=st), x)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    assert exp.out_tree == ref_tree
    assert [(a.shape, a.dtype) for a in exp.out_avals] == [(r.shape, r.dtype) for r in ref_leaves]

    got = jax.eval_shape(lambda v: hip.quantize(v, spec, axis=axis, state=st), x)
    assert got.axis == ref.axis and got.shape == ref.shape and got.dtype == ref.dtype
    assert (got.data.shape, got.data.dtype) == (ref.data.shape, ref.data.dtype)
    assert (got.scale.shape, got.scale.dtype) == (ref.scale.shape, ref.scale.dtype)


def test_tile_rows_view(fake_library):
    """128x128 tiles on axis 0 of (256, 384, 128): the handler's R is the row axis (the original
    last axis, 128) and C the quantization axis (256)."""
    exp = _export(TileScaling(tile=(128, 128)), (256, 384, 128), 0, jnp.float32)
    call = next(line for line in exp.mlir_module().splitlines() if "custom_call @mxprec_quantize" in line)
    assert "(tensor<384x128x256xf32>" in call
    assert "tensor<384x1x2xf32>" in call  # scale (B, R/128, C/128)


def test_supports_quantize():
    for spec, _ in CASES.values():
        assert hip.supports_quantize(spec), spec
    assert not hip.supports_quantize(MXScaling(), key=jax.random.key(0))
    assert "stochastic" in hip.why_quantize_unsupported(MXScaling(), key=jax.random.key(0))
    assert not hip.supports_quantize(MXScaling(block=16))
    assert not hip.supports_quantize(TileScaling(tile=(128, 64)))
    assert not hip.supports_quantize(TileScaling(tile=(32, 128)))
    with pytest.raises(ValueError, match="NVFP4Scaling.block is the format's 16"):  # refused by the spec itself
        NVFP4Scaling(block=32)
    assert not hip.supports_quantize("mx")


def test_quantize_value_errors(fake_library):
    x = jnp.zeros((4, 64), jnp.float32)
    with pytest.raises(ValueError, match=r"hip\.quantize: MX block 16"):
        hip.quantize(x, MXScaling(block=16))
    with pytest.raises(ValueError, match=r"hip\.quantize: tile 128x64"):
        hip.quantize(x, TileScaling(tile=(128, 64)))
    with pytest.raises(ValueError, match=r"hip\.quantize: .*not a multiple"):
        hip.quantize(x, MXScaling(), axis=0)
    with pytest.raises(ValueError, match=r"hip\.quantize: .*DelayedScalingState"):
        hip.quantize(x, DelayedScaling())
    with pytest.raises(ValueError, match=r"hip\.quantize: axis"):
        hip.quantize(x, TensorScaling(), axis=2)


def test_quantize_raises_runtime_error_on_cpu():
    if jax.default_backend() != "cpu":
        pytest.skip("CPU-only check")
    x = jnp.asarray(np.ones((4, 64), np.float32))
    for spec in (MXScaling(), TensorScaling(), RowScaling(), NVFP4Scaling()):
        with pytest.raises(RuntimeError, match=r"libmxprec_hip\.so"):
            hip.quantize(x, spec)
    with pytest.raises(RuntimeError, match=r"libmxprec_hip\.so"):
        hip.quantize(jnp.ones((128, 3), jnp.float32), TileScaling(), axis=0)


@pytest.mark.parametrize("name,shape,axis", PARAMS)
def test_view_and_moveaxis_are_exact(fake_library, monkeypatch, name, shape, axis):
    """With the custom call replaced by mxprec.quantize of the (B, R, C) view along view axis 2 (the
    handler's contract), hip.quantize equals mxprec.quantize bit for bit: the view, the moveaxis and
    the reshapes / moves back of data and scales are right."""
    from mxprec.scaling import DelayedScalingState as S

    spec, _ = CASES[name]

    def fake_ffi(cfg, x3, scale_in):
        st = S(amax_history=jnp.zeros((spec.history_len,), jnp.float32), scale=scale_in) if cfg.delayed else None
        q = mxprec.quantize(x3, spec, axis=2, state=st)
        ts = q.tensor_scale if q.tensor_scale is not None else jnp.ones((), jnp.float32)
        return q.data, q.scale, q.amax, ts

    monkeypatch.setattr(hip, "_quant_call", fake_ffi)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(shape) * np.exp(rng.uniform(-4, 4, shape)), jnp.float32)
    st = _state(spec)
    if st is not None:
        st = S(st.amax_history, jnp.float32(0.0123))
    got = jax.jit(lambda v: hip.quantize(v, spec, axis=axis, state=st))(x)
    ref = jax.jit(lambda v: mxprec.quantize(v, spec, axis=axis, state=st))(x)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(ref)
    for g, r in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_array_equal(
            np.asarray(jax.lax.bitcast_convert_type(g, jnp.uint8) if g.dtype.itemsize == 1 else g),
            np.asarray(jax.lax.bitcast_convert_type(r, jnp.uint8) if r.dtype.itemsize == 1 else r),
        )
