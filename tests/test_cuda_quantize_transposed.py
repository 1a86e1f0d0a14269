"""mxprec.kernels.cuda.quantize_transposed: Wgrad's column-wise FP8 copy written K-major by the quantize kernel.

``quantize_transposed(x, spec)`` for x ``(B, R, C)`` is ``mxprec.quantize(swapaxes(x, 1, 2), spec, axis=2)``: the
codes and scales of quantizing x along axis 1, laid out as the (B, C, R) tensor a GEMM contracting R reads, so
the FP8 code transpose in front of the Wgrad GEMM disappears (csrc/cuda_kernels/cuda_quantize.cu, col_kernel with
kTransposed). GPU tests compare every QTensor field bit for bit with the CPU oracle of the transposed input (as
tests/test_cuda_quantize.py does for mxprec_quantize) on the adversarial input sets, with the numpy reference, and
with mxprec_quantize along axis 1; dot_general's fp8_block gradients must be bit-identical with and without the
transposed quantize. The CPU tests check the argument rules and dot_general's routing (the kernel emulated by the
JAX quantizer). ``quantize_rows_and_transposed`` (the same call also writing x's own 1 x 128 row groups, dY's Dgrad
copy) is checked the same way: both QTensors bit for bit against the two separate calls and the CPU oracle.
"""

from __future__ import annotations

import dataclasses
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import mxprec
import test_ffi_cpu as C
from mxprec import formats
from mxprec.kernels import cuda, ffi
from mxprec.quantize import quantize
from mxprec.scaling import MXScaling, TileScaling

E4M3, E5M2 = formats.E4M3, formats.E5M2
dg = sys.modules["mxprec.dot_general"]  # the module (mxprec.dot_general is also the function's name)

needs_gpu = pytest.mark.skipif(
    not cuda.available(), reason="no GPU or libmxprec_cuda.so not built: " + cuda._load()[1]
)

SPECS = [
    TileScaling(E4M3, (1, 128)),
    TileScaling(E5M2, (1, 128)),
    TileScaling(E4M3, (1, 128), power_of_two=True),
    TileScaling(E5M2, (1, 64)),
    TileScaling(E4M3, (1, 32), power_of_two=True),
]


def _sid(spec) -> str:
    return spec.describe().replace(" ", "_")


# ----------------------------------------------------------------------------- CPU: argument rules


def test_why_not_names_the_rule():
    ok = TileScaling(E4M3, (1, 128))
    assert cuda.why_not_quantize_transposed((2, 256, 384), jnp.bfloat16, ok, check_library=False) == ""
    for shape, dtype, spec, words in (
        ((256, 384), jnp.bfloat16, ok, "3-D"),
        ((1, 256, 384), jnp.int8, ok, "3-D"),
        ((1, 200, 384), jnp.float32, ok, "multiples of 128"),
        ((1, 256, 100), jnp.float32, ok, "multiples of 128"),
        ((0, 256, 128), jnp.float32, ok, "positive"),
        ((1, 256, 128), jnp.float32, TileScaling(E4M3, (128, 128)), "tile (1, G)"),
        ((1, 256, 128), jnp.float32, TileScaling(E4M3, (1, 16)), "tile (1, G)"),
        ((1, 256, 128), jnp.float32, MXScaling(E4M3), "TileScaling"),
        ((1, 128 * 65536, 128), jnp.float32, ok, "65535"),
    ):
        reason = cuda.why_not_quantize_transposed(shape, dtype, spec, check_library=False)
        assert words in reason, (shape, spec, reason)


@pytest.mark.parametrize("var,knob", [("MXPREC_TRANSPOSED_QUANTIZE", "quantizes_transposed"),
                                      ("MXPREC_ROWS_TRANSPOSED_QUANTIZE", "quantizes_rows_and_transposed")])
def test_knob_is_validated(monkeypatch, var, knob):
    monkeypatch.setenv(var, "yes")
    with pytest.raises(ValueError, match=var):
        getattr(cuda, knob)()
    monkeypatch.setenv(var, "0")
    assert not getattr(cuda, knob)()


@pytest.mark.skipif(cuda.available(), reason="checks the error without the CUDA library")
@pytest.mark.parametrize("name", ["quantize_transposed", "quantize_rows_and_transposed"])
def test_unavailable_library_raises_value_error(name):
    x, spec = jnp.zeros((1, 128, 128), jnp.float32), TileScaling(E4M3, (1, 128))
    args = (x, spec) if name == "quantize_transposed" else (x, spec, spec)
    with pytest.raises(ValueError, match=name):
        getattr(cuda, name)(*args)


# ----------------------------------------------------------------------------- CPU: dot_general's routing


def _emulated_transposed(calls):
    def q(x, spec, amax=True):
        calls.append((tuple(x.shape), spec))
        assert not amax  # dot_general never reads Wgrad's copies' amax
        return quantize(jnp.swapaxes(x, 1, 2), spec, axis=2)

    return q


def _fp8_block_grads(x, w, residuals):
    recipe = mxprec.recipes.get("fp8_block", backend="xla", residuals=residuals)

    def loss(x, w):
        y = mxprec.dot_general(x, w, (((2,), (0,)), ((), ())), recipe=recipe, preferred_element_type=jnp.float32)
        return jnp.sum(y * jnp.cos(y))

    return jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)


@pytest.mark.parametrize("residuals", ["wide", "quantized"])
def test_dot_general_wgrad_through_transposed_operands(monkeypatch, residuals):
    """With the transposed operands (here from the JAX quantizer), dW is the same GEMM of the same codes."""
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((2, 256, 384)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((384, 256)) / 16, jnp.float32)
    dx0, dw0 = _fp8_block_grads(x, w, residuals)
    calls = []
    monkeypatch.setattr(dg, "_transposed_wgrad_quantize", lambda src, spec, key, backend: True)
    monkeypatch.setattr(dg, "_rows_and_transposed_grad", lambda g, recipe, keys, backend: False)
    monkeypatch.setattr(cuda, "quantize_transposed", _emulated_transposed(calls))
    dx1, dw1 = _fp8_block_grads(x, w, residuals)
    # Wgrad's X (B=1, M=512, K=384) and dY (1, 512, 256), each through the transposed quantize once.
    assert sorted(s for s, _ in calls) == [(1, 512, 256), (1, 512, 384)], calls
    np.testing.assert_array_equal(np.asarray(dx1), np.asarray(dx0))
    # The same dequantized products summed by XLA's CPU dot with the other operand layout: the FP32 rounding
    # order differs (a wrong layout or scale would be off by O(|dW|)).
    dw0 = np.asarray(dw0)
    np.testing.assert_allclose(np.asarray(dw1), dw0, rtol=0, atol=1e-5 * np.abs(dw0).max())


def test_routing_stays_off_the_xla_backend_and_the_cpu():
    spec = TileScaling(E4M3, (1, 128))
    x = jnp.zeros((1, 256, 256), jnp.float32)
    assert not dg._transposed_wgrad_quantize(x, spec, None, "xla")
    if jax.default_backend() != "gpu":
        assert not dg._transposed_wgrad_quantize(x, spec, None, "auto")
        assert not dg._transposed_wgrad_quantize(x, spec, None, "ffi")


def test_why_not_rows_and_transposed_names_the_rule():
    ok, rows = TileScaling(E4M3, (1, 64)), TileScaling(E5M2, (1, 128))
    assert cuda.why_not_quantize_rows_and_transposed((2, 256, 384), jnp.bfloat16, rows, ok, check_library=False) == ""
    for shape, row_spec, spec, words in (
        ((2, 256, 384), TileScaling(E4M3, (1, 64)), ok, "row_spec"),
        ((2, 256, 384), TileScaling(E4M3, (128, 128)), ok, "tile (1, 128)"),
        ((2, 256, 384), MXScaling(E4M3), ok, "row_spec"),
        ((2, 256, 384), rows, TileScaling(E4M3, (1, 16)), "tile (1, G)"),
        ((2, 200, 384), rows, ok, "multiples of 128"),
    ):
        reason = cuda.why_not_quantize_rows_and_transposed(shape, jnp.float32, row_spec, spec, check_library=False)
        assert words in reason, (shape, row_spec, spec, reason)


@pytest.mark.parametrize("residuals", ["wide", "quantized"])
def test_dot_general_dy_copies_from_one_call(monkeypatch, residuals):
    """Where dY's two copies come from quantize_rows_and_transposed (here emulated by the JAX quantizer), dX and dW
    are the GEMMs of the same codes: dX bit for bit, dW up to XLA's summation order of the other layout."""
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((2, 256, 384)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((384, 256)) / 16, jnp.float32)
    dx0, dw0 = _fp8_block_grads(x, w, residuals)
    calls, pairs = [], []

    def rows_and_transposed(g, row_spec, spec, amax=True):
        pairs.append((tuple(g.shape), row_spec, spec))
        assert not amax  # fp8_block keeps no delayed state: nobody reads dY's amax
        return quantize(g, row_spec, axis=2), quantize(jnp.swapaxes(g, 1, 2), spec, axis=2)

    monkeypatch.setattr(dg, "_transposed_wgrad_quantize", lambda src, spec, key, backend: True)
    monkeypatch.setattr(dg, "_rows_and_transposed_grad", lambda g, recipe, keys, backend: True)
    monkeypatch.setattr(cuda, "quantize_transposed", _emulated_transposed(calls))
    monkeypatch.setattr(cuda, "quantize_rows_and_transposed", rows_and_transposed)
    dx1, dw1 = _fp8_block_grads(x, w, residuals)
    recipe = mxprec.recipes.get("fp8_block")
    assert pairs == [((1, 512, 256), recipe.dgrad_grad, recipe.wgrad_grad)], pairs  # dY (B=1, M=512, N=256)
    assert [s for s, _ in calls] == [(1, 512, 384)], calls  # only X's Wgrad copy goes through quantize_transposed
    np.testing.assert_array_equal(np.asarray(dx1), np.asarray(dx0))
    dw0 = np.asarray(dw0)
    np.testing.assert_allclose(np.asarray(dw1), dw0, rtol=0, atol=1e-5 * np.abs(dw0).max())


def test_dy_copies_routing_needs_the_cuda_quantizer_for_both():
    g = jnp.zeros((1, 256, 256), jnp.float32)
    block = mxprec.recipes.get("fp8_block")
    assert not dg._rows_and_transposed_grad(g, block, (None, None), "xla")
    if jax.default_backend() != "gpu":
        assert not dg._rows_and_transposed_grad(g, block, (None, None), "auto")
        assert not dg._rows_and_transposed_grad(g, block, (None, None), "ffi")
    assert not dg._rows_and_transposed_grad(g, block, (jax.random.key(0), None), "ffi")  # stochastic rounding
    rowwise = mxprec.recipes.get("fp8_rowwise")  # no 1 x 128 tiles
    assert not dg._rows_and_transposed_grad(g, rowwise, (None, None), "ffi")


# ----------------------------------------------------------------------------- GPU: bit-exact


def _gpu_transposed(x: np.ndarray, spec):
    return jax.jit(lambda t: cuda.quantize_transposed(t, spec))(jnp.asarray(x))


def _oracle(x: np.ndarray, spec):
    """mxprec.quantize of the transposed input, run by XLA's CPU runtime (the numerics contract)."""
    xt = np.ascontiguousarray(np.swapaxes(x, 1, 2))
    return C._jax_q(spec, 2)(jax.device_put(xt, jax.devices("cpu")[0]), None)


def _check(x: np.ndarray, spec, what: str, *, reference: bool = False):
    q = _gpu_transposed(x, spec)
    r = _oracle(x, spec)
    assert q.shape == r.shape and q.axis == 2, (q.shape, r.shape)
    bad = C._qtensor_mismatch(q, r)
    assert not bad, f"{_sid(spec)} {what}: vs mxprec.quantize (CPU) of the transpose: {bad}"
    # The same codes and scales as mxprec_quantize along axis 1, transposed.
    a = jax.jit(lambda t: ffi.quantize(t, spec, 1))(jnp.asarray(x))
    np.testing.assert_array_equal(C._u8(q.data), C._u8(jnp.swapaxes(a.data, 1, 2)))
    np.testing.assert_array_equal(
        np.asarray(q.scale).view(np.uint32), np.asarray(jnp.swapaxes(a.scale, 1, 2)).view(np.uint32)
    )
    if reference:  # one (R, C) slice against tests/reference (2-D), as test_cuda_quantize does
        q2 = dataclasses.replace(q, data=q.data[0], scale=q.scale[0], axis=1, shape=q.shape[1:])
        ref_bad = C._matches_reference(q2, spec, np.asarray(x[0], np.float32).T, 1)
        assert not ref_bad, f"{_sid(spec)} {what}: vs the numpy reference: {ref_bad}"


@needs_gpu
@pytest.mark.parametrize("spec", SPECS, ids=_sid)
def test_bit_exact_on_the_adversarial_inputs(spec):
    for name, make in C.INPUTS.items():
        x = make()  # (128, 256) f32: ties, NaN / Inf / zero blocks, -0, near FP32 max, tiny, subnormals
        _check(x[None], spec, name, reference=name != "specials")
        _check(np.ascontiguousarray(x.T)[None], spec, name + " (transposed input)")


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("spec", SPECS[:2] + SPECS[4:], ids=_sid)
def test_batches_and_input_dtypes(spec, dtype):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 256, 384)) * np.exp2(rng.integers(-8, 8, (3, 256, 1)))
    x[1, :128, :7] = 0.0  # zero groups in the second batch entry
    x[2, 128:, 200] = np.inf
    x = x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype))
    _check(x, spec, f"(3, 256, 384) {dtype}")


@needs_gpu
def test_under_vmap_one_call_per_example():
    """vmap of quantize_transposed (the partitioned call's batching rule maps it): per example the QTensor of the
    unbatched call, bit for bit, and its own amax."""
    spec = SPECS[0]
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((3, 2, 256, 384)) * np.exp2(rng.integers(-8, 8, (3, 1, 1, 1)))).astype(np.float32)
    got = jax.jit(jax.vmap(lambda t: cuda.quantize_transposed(t, spec)))(jnp.asarray(x))
    for i in range(3):
        want = _gpu_transposed(x[i], spec)
        np.testing.assert_array_equal(C._u8(got.data[i]), C._u8(want.data))
        np.testing.assert_array_equal(np.asarray(got.scale[i]).view(np.uint32), np.asarray(want.scale).view(np.uint32))
        assert np.asarray(got.amax[i]) == np.asarray(want.amax)


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradient_like_inputs(dtype):
    """Zeros, -0, FP32 subnormals and quotients far below the FP8 range (the band path's small quotients), through
    quantize_transposed and quantize_rows_and_transposed."""
    from test_cuda_quantize import _gradient_like

    x = _gradient_like((2, 256, 384))
    x = x.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else x
    for spec in SPECS[:2]:
        _check(x, spec, f"gradient-like {dtype}")
    for pair in PAIRS[:2]:
        _check_rows_and_transposed(x, *pair, f"gradient-like {dtype}")


@needs_gpu
def test_column_pairs_mixing_power_of_two_and_dividing_scales():
    """A column pair with a power-of-two scale beside a dividing one (the band's two operand forms)."""
    rng = np.random.default_rng(12)
    amax = np.where(np.arange(256) % 2 == 0, 7.0, 5.0) * np.exp2(rng.integers(-30, 30, 256))
    x = rng.uniform(-1, 1, (2, 256, 256)) * amax
    x[:, 3, :], x[:, 131, :] = amax, -amax  # each group's amax
    x[:, 200:, ::3] = 0.0
    x = x.astype(np.float32)
    for spec in SPECS[:2]:
        _check(x, spec, "mixed column pairs")
        _check(x.astype(ml_dtypes.bfloat16), spec, "mixed column pairs, bf16")


@needs_gpu
def test_large_bf16():
    rng = np.random.default_rng(30)
    x = rng.standard_normal((1, 1024, 4096), np.float32) * np.exp2(rng.integers(-10, 10, (1, 1024, 1)))
    _check(x.astype(ml_dtypes.bfloat16), TileScaling(E5M2, (1, 128)), "(1, 1024, 4096) bf16")


@needs_gpu
def test_bad_arguments_raise_before_the_kernel():
    with pytest.raises(ValueError, match="multiples of 128"):
        cuda.quantize_transposed(jnp.zeros((1, 128, 96), jnp.float32), TileScaling(E4M3, (1, 128)))
    with pytest.raises(ValueError, match="tile"):
        cuda.quantize_transposed(jnp.zeros((1, 128, 128), jnp.float32), TileScaling(E4M3, (128, 128)))


# ----------------------------------------------------------------------------- GPU: dot_general


def _grads(backend, knob, monkeypatch, residuals="wide", rows_knob="0"):
    """fp8_block's (dX, dW) and optimized HLO with MXPREC_TRANSPOSED_QUANTIZE=knob and
    MXPREC_ROWS_TRANSPOSED_QUANTIZE=rows_knob (dY's two copies from one call)."""
    monkeypatch.setenv("MXPREC_TRANSPOSED_QUANTIZE", knob)
    monkeypatch.setenv("MXPREC_ROWS_TRANSPOSED_QUANTIZE", rows_knob)
    recipe = mxprec.recipes.get("fp8_block", backend=backend, residuals=residuals)
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((2, 256, 512)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((512, 384)) / 16, jnp.float32)

    def loss(x, w):  # a fresh function per call: the knob is read while tracing
        y = mxprec.dot_general(x, w, (((2,), (0,)), ((), ())), recipe=recipe)
        return jnp.sum(y.astype(jnp.float32) ** 2)

    f = jax.jit(jax.grad(loss, argnums=(0, 1)))
    return f(x, w), f.lower(x, w).compile().as_text()


def _calls(hlo: str, target: str) -> int:
    return hlo.count(f'custom_call_target="{target}"')


def _bit_identical_grads(monkeypatch, backend, residuals, off: dict, on: dict) -> tuple[str, str]:
    """fp8_block's (dX, dW) with the knobs ``off``, then ``on`` (keyword arguments of _grads): bit-identical.
    Returns the two optimized HLO texts."""
    (dx0, dw0), hlo0 = _grads(backend, monkeypatch=monkeypatch, residuals=residuals, **off)
    (dx1, dw1), hlo1 = _grads(backend, monkeypatch=monkeypatch, residuals=residuals, **on)
    np.testing.assert_array_equal(np.asarray(dx1, np.float32), np.asarray(dx0, np.float32))
    np.testing.assert_array_equal(np.asarray(dw1), np.asarray(dw0))
    return hlo0, hlo1


@needs_gpu
@pytest.mark.parametrize("backend,residuals", [("auto", "wide"), ("ffi", "wide"), ("auto", "quantized")])
def test_fp8_block_gradients_bit_identical_with_the_transposed_quantize(monkeypatch, backend, residuals):
    hlo0, hlo1 = _bit_identical_grads(monkeypatch, backend, residuals, dict(knob="0"), dict(knob="1"))
    assert _calls(hlo1, cuda.QUANTIZE_TRANSPOSED_TARGET) == 2 and _calls(hlo0, cuda.QUANTIZE_TRANSPOSED_TARGET) == 0
    # Wgrad's two operands lose their code transposes (Fprop's W keeps its own).
    t0, t1 = _calls(hlo0, cuda.TRANSPOSE_TARGET), _calls(hlo1, cuda.TRANSPOSE_TARGET)
    assert t1 == t0 - 2, (t0, t1)


@needs_gpu
@pytest.mark.parametrize("spec", SPECS[:2], ids=_sid)
def test_without_amax_the_same_codes_and_scales(spec):
    """``amax=False`` (dot_general's Wgrad copies, amax_mode 3: no zeroed amax buffer, no atomics): the codes and
    scales of the call that computes the amax, bit for bit, and QTensor.amax NaN. The input holds NaN / Inf, so a
    kernel still accumulating into the unwritten amax result would not change what this compares."""
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((2, 256, 384)) * np.exp2(rng.integers(-8, 8, (2, 256, 1)))).astype(np.float32)
    x[1, 5, 7] = np.inf
    want = _gpu_transposed(x, spec)
    f = jax.jit(lambda t: cuda.quantize_transposed(t, spec, amax=False))
    assert "amax_mode = 3" in f.lower(jnp.asarray(x)).as_text()
    got = f(jnp.asarray(x))
    np.testing.assert_array_equal(C._u8(got.data), C._u8(want.data))
    np.testing.assert_array_equal(np.asarray(got.scale).view(np.uint32), np.asarray(want.scale).view(np.uint32))
    assert np.isnan(np.asarray(got.amax)) and np.asarray(want.amax) == np.inf


# ----------------------------------------------------------------------------- GPU: rows and transposed in one call

ROW_SPECS = [TileScaling(E4M3, (1, 128)), TileScaling(E5M2, (1, 128)), TileScaling(E4M3, (1, 128), power_of_two=True)]
PAIRS = [(ROW_SPECS[0], SPECS[0]), (ROW_SPECS[1], SPECS[0]), (ROW_SPECS[2], SPECS[3]), (ROW_SPECS[0], SPECS[4]),
         (ROW_SPECS[1], SPECS[1])]


def _pid(pair) -> str:
    return f"rows_{_sid(pair[0])}-cols_{_sid(pair[1])}"


def _check_rows_and_transposed(x: np.ndarray, row_spec, spec, what: str, amax: bool = True):
    """Both QTensors against the two separate CUDA calls (bit for bit, amax included) and the CPU oracle."""
    rows, cols = jax.jit(lambda t: cuda.quantize_rows_and_transposed(t, row_spec, spec, amax=amax))(jnp.asarray(x))
    assert rows.shape == x.shape and rows.axis == 2 and cols.shape == (x.shape[0], x.shape[2], x.shape[1])
    want_rows = jax.jit(lambda t: ffi.quantize(t, row_spec, 2))(jnp.asarray(x))
    want_cols = _gpu_transposed(x, spec)
    for got, want, name in ((rows, want_rows, "rows"), (cols, want_cols, "transposed")):
        np.testing.assert_array_equal(C._u8(got.data), C._u8(want.data), err_msg=f"{what}: {name} codes")
        np.testing.assert_array_equal(np.asarray(got.scale).view(np.uint32), np.asarray(want.scale).view(np.uint32),
                                      err_msg=f"{what}: {name} scales")
        if amax:
            np.testing.assert_array_equal(np.asarray(got.amax), np.asarray(want.amax), err_msg=f"{what}: {name} amax")
        else:
            assert np.isnan(np.asarray(got.amax)), what
    if amax:  # the row copy against the CPU oracle too (the transposed one: _check, above)
        r = C._jax_q(row_spec, 2)(jax.device_put(x, jax.devices("cpu")[0]), None)
        bad = C._qtensor_mismatch(rows, r)
        assert not bad, f"{_pid((row_spec, spec))} {what}: rows vs mxprec.quantize (CPU): {bad}"


@needs_gpu
@pytest.mark.parametrize("pair", PAIRS, ids=_pid)
def test_rows_and_transposed_bit_exact_on_the_adversarial_inputs(pair):
    for name, make in C.INPUTS.items():
        x = make()  # (128, 256) f32
        _check_rows_and_transposed(x[None], *pair, name)
        _check_rows_and_transposed(np.ascontiguousarray(x.T)[None], *pair, name + " (transposed input)")


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("pair", PAIRS[:2] + PAIRS[3:4], ids=_pid)
def test_rows_and_transposed_batches_and_input_dtypes(pair, dtype):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((3, 256, 384)) * np.exp2(rng.integers(-8, 8, (3, 256, 1)))
    x[1, :128, :7] = 0.0
    x[1, 7, 128:256] = 0.0  # a whole zero row group
    x[2, 128:, 200] = np.inf
    x[0, 9, 300] = np.nan
    x = x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype))
    _check_rows_and_transposed(x, *pair, f"(3, 256, 384) {dtype}")


@needs_gpu
def test_rows_and_transposed_large_bf16_without_amax():
    rng = np.random.default_rng(31)
    x = rng.standard_normal((1, 1024, 4096), np.float32) * np.exp2(rng.integers(-10, 10, (1, 1024, 1)))
    _check_rows_and_transposed(x.astype(ml_dtypes.bfloat16), *PAIRS[0], "(1, 1024, 4096) bf16", amax=False)
    f = jax.jit(lambda t: cuda.quantize_rows_and_transposed(t, *PAIRS[0], amax=False))
    assert "amax_mode = 3" in f.lower(jnp.asarray(x)).as_text()


@needs_gpu
def test_rows_and_transposed_under_vmap():
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((3, 2, 256, 384)) * np.exp2(rng.integers(-8, 8, (3, 1, 1, 1)))).astype(np.float32)
    got = jax.jit(jax.vmap(lambda t: cuda.quantize_rows_and_transposed(t, *PAIRS[1])))(jnp.asarray(x))
    for i in range(3):
        want = jax.jit(lambda t: cuda.quantize_rows_and_transposed(t, *PAIRS[1]))(jnp.asarray(x[i]))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(C._u8(g.data[i]), C._u8(w.data))
            np.testing.assert_array_equal(np.asarray(g.scale[i]).view(np.uint32), np.asarray(w.scale).view(np.uint32))
            assert np.asarray(g.amax[i]) == np.asarray(w.amax)


@needs_gpu
def test_rows_and_transposed_bad_arguments_raise_before_the_kernel():
    with pytest.raises(ValueError, match="row_spec"):
        cuda.quantize_rows_and_transposed(jnp.zeros((1, 128, 128), jnp.float32), TileScaling(E4M3, (1, 32)), SPECS[0])
    with pytest.raises(ValueError, match="multiples of 128"):
        cuda.quantize_rows_and_transposed(jnp.zeros((1, 128, 96), jnp.float32), *PAIRS[0])


@needs_gpu
@pytest.mark.parametrize("backend,residuals", [("auto", "wide"), ("ffi", "wide"), ("auto", "quantized")])
def test_fp8_block_gradients_bit_identical_with_dy_copies_from_one_call(monkeypatch, backend, residuals):
    hlo0, hlo1 = _bit_identical_grads(monkeypatch, backend, residuals, dict(knob="1", rows_knob="0"),
                                      dict(knob="1", rows_knob="1"))
    rows_t = cuda.QUANTIZE_ROWS_TRANSPOSED_TARGET
    assert _calls(hlo1, rows_t) == 1 and _calls(hlo0, rows_t) == 0
    # dY's transposed call and its Dgrad quantize call became the one call; X's transposed call stays.
    assert _calls(hlo1, cuda.QUANTIZE_TRANSPOSED_TARGET) == 1 and _calls(hlo0, cuda.QUANTIZE_TRANSPOSED_TARGET) == 2
    assert _calls(hlo1, "mxprec_quantize") == _calls(hlo0, "mxprec_quantize") - 1
