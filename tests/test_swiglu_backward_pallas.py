"""benchmarks/swiglu_backward_pallas.py on the CPU (Pallas interpret mode): the prototype behind
benchmarks/results/h200_swiglu_backward_pallas.md computes what its formula says, block by block."""

from __future__ import annotations

import functools
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "swiglu_backward_pallas.py"
_spec = importlib.util.spec_from_file_location("swiglu_backward_pallas", _PATH)
proto = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proto)

F32 = jnp.float32


def _formula(gate, up, dh, s=proto.SCALES):
    """The prototype's formula on whole arrays (no blocks): FP32 math, BF16-rounded h / d_gate / d_up."""
    g, u, d = gate.astype(F32), up.astype(F32), dh.astype(F32)
    sig = 1.0 / (1.0 + jnp.exp(-g))
    silu = g * sig
    h = (silu * u).astype(jnp.bfloat16).astype(F32)
    du = (d * silu).astype(jnp.bfloat16).astype(F32)
    dg = (d * u * sig * (1.0 + g * (1.0 - sig))).astype(jnp.bfloat16).astype(F32)
    codes = (jnp.clip(h / s[0], -448.0, 448.0).astype(jnp.float8_e4m3fn),
             jnp.clip(dg / s[1], -57344.0, 57344.0).astype(jnp.float8_e5m2),
             jnp.clip(du / s[2], -57344.0, 57344.0).astype(jnp.float8_e5m2))
    return codes + tuple(jnp.max(jnp.abs(t)) for t in (h, dg, du))


def _inputs():
    k = jax.random.split(jax.random.key(0), 3)
    return tuple(jax.random.normal(ki, (32, 512), F32).astype(jnp.bfloat16) for ki in k)


def test_blocks_codes_and_amaxes_follow_the_formula():
    args = _inputs()
    out = jax.jit(functools.partial(proto.swiglu_bwd_fp8, bm=16, bn=256, interpret=True))(*args)
    want = jax.jit(_formula)(*args)
    for o, w in zip(out, want):
        assert o.dtype == w.dtype and o.shape == w.shape
        np.testing.assert_array_equal(np.asarray(o.astype(F32)), np.asarray(w.astype(F32)))


def test_most_codes_equal_the_models_backward():
    # XLA computes the model's SwiGLU backward with BF16 intermediates, the prototype in FP32: a few percent of
    # the codes differ (by more than a step where d_gate's two terms cancel), as its results table says.
    args = _inputs()
    out = jax.jit(functools.partial(proto.swiglu_bwd_fp8, bm=16, bn=256, interpret=True))(*args)
    ref = jax.jit(proto.reference)(*args)
    for o, r in zip(out[:3], ref[:3]):
        assert np.mean(np.asarray(o.astype(F32)) != np.asarray(r.astype(F32))) < 0.06


def test_transposed_copies_hold_the_same_codes():
    args = _inputs()
    out = jax.jit(functools.partial(proto.swiglu_bwd_fp8, bm=16, bn=128, interpret=True, transposed=True))(*args)
    assert len(out) == 9
    for t, a in zip(out[6:], out[:3]):
        assert t.shape == a.shape[::-1] and t.dtype == a.dtype
        np.testing.assert_array_equal(np.asarray(t.astype(F32)).T, np.asarray(a.astype(F32)))
