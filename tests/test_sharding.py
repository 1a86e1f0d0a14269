"""mxprec GEMMs and quantizers under jit + NamedSharding on 8 virtual CPU devices.

Mesh (2, 4) = ("data", "model"). For backend "xla" and "ffi" (the mxprec_scaled_gemm custom call
with its custom_partitioning / Shardy rule):

* data-parallel (batch/M sharded), tensor-parallel (N sharded) and DP x TP: the same result as one
  device (bit for bit with "ffi": its CPU kernel sums k in order for every output element), and
  no all-gather in the optimized HLO;
* FSDP-style (weights sharded along N on the data axis, gathered for the GEMM): the same result;
* K sharded: local GEMMs + an all-reduce of the FP32 partials, no all-gather; the same result
  within the FP32 summation bound K * 2**-23 * sum|a||b|;
* ffi.quantize on a sharded input: bit-identical QTensor, amaxes pmax-reduced, no all-gather.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import mxprec
from mxprec import formats, recipes
from mxprec.dot_general import DotGeneralState
from mxprec.kernels import ffi
from mxprec.scaling import (
    DelayedScaling,
    DelayedScalingState,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    TensorScaling,
    TileScaling,
)
from test_ffi_cpu import _CONTRACT, _assert_within, _gemm_bound, _gemm_operands, _qtensor_mismatch

pytestmark = pytest.mark.skipif(
    jax.device_count() < 8, reason="needs 8 devices (tests/conftest.py forces 8 CPU devices)"
)

needs_ffi = pytest.mark.skipif(not ffi.available("cpu"), reason="libmxprec_cpu.so is not built")
BACKENDS = ["xla", pytest.param("ffi", marks=needs_ffi)]

B, S, K, N = 4, 64, 512, 512  # x (B, S, K) @ w (K, N): M = B * S = 256
DN = (((2,), (0,)), ((), ()))

# name: (x spec, w spec, all-gather allowed, all-reduce expected)
PATTERNS = {
    "dp": (P("data", None, None), P(None, None), False, False),
    "tp": (P(None, None, None), P(None, "model"), False, False),
    "dp_tp": (P("data", None, None), P(None, "model"), False, False),
    "fsdp": (P("data", None, None), P(None, "data"), True, False),
    "k_sharded": (P(None, None, "model"), P("model", None), False, True),
}


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    x = jnp.asarray(rng.standard_normal((B, S, K)).astype(np.float32))
    w = jnp.asarray((rng.standard_normal((K, N)) * 0.05).astype(np.float32))
    ct = jnp.asarray(rng.standard_normal((B, S, N)).astype(np.float32))
    return x, w, ct


def _fns(preset, backend):
    recipe = recipes.get(preset, backend=backend)
    st = DotGeneralState.init(recipe)

    def fwd(x, w):
        return mxprec.dot_general(x, w, DN, preferred_element_type=jnp.float32, recipe=recipe, state=st)

    def fwd_bwd(x, w, ct):
        y, vjp = jax.vjp(fwd, x, w)
        return (y, *vjp(ct))

    return fwd, fwd_bwd


def _bounds(preset, x, w, ct):
    """Per-GEMM summation bounds (forward, dX, dW) shaped like the outputs."""
    ops = _gemm_operands(recipes.get(preset), x.reshape(1, B * S, K), w[None], ct.reshape(1, B * S, N))
    b = [_gemm_bound(a, c, *_CONTRACT[n]) for n, (a, c) in ops.items()]
    return b[0].reshape(B, S, N), b[1].reshape(B, S, K), b[2].reshape(K, N)


_FORWARD_CASES = (
    [("mxfp8", pat) for pat in PATTERNS]
    + [("fp8_current", pat) for pat in ("dp", "tp", "k_sharded")]  # per-tensor amax across shards
    + [(p, pat) for p in ("mxfp4", "fp8_block") for pat in ("dp_tp", "k_sharded")]  # packed K, 128x128 tiles
)


@functools.cache
def _cached_bounds(preset):
    rng = np.random.default_rng(21)  # the `data` fixture's arrays
    x = jnp.asarray(rng.standard_normal((B, S, K)).astype(np.float32))
    w = jnp.asarray((rng.standard_normal((K, N)) * 0.05).astype(np.float32))
    ct = jnp.asarray(rng.standard_normal((B, S, N)).astype(np.float32))
    return jax.jit(lambda x, w, c: _bounds(preset, x, w, c))(x, w, ct)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset,pattern", _FORWARD_CASES)
def test_sharded_dot_general_forward(mesh, data, preset, pattern, backend):
    x, w, _ = data
    xs, ws, gather_ok, reduce_expected = PATTERNS[pattern]
    fwd, _ = _fns(preset, backend)
    want = jax.jit(fwd)(x, w)
    xd = jax.device_put(x, NamedSharding(mesh, xs))
    wd = jax.device_put(w, NamedSharding(mesh, ws))
    f = jax.jit(fwd)
    got = f(xd, wd)
    hlo = f.lower(xd, wd).compile().as_text()
    if backend == "ffi":
        assert "mxprec_scaled_gemm" in hlo
    if not gather_ok:
        assert "all-gather" not in hlo, f"{pattern}: a sharded operand was gathered"
    if reduce_expected:
        assert "all-reduce" in hlo
    if backend == "ffi" and not reduce_expected:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))  # same per-element k order
    else:
        bound = _cached_bounds(preset)[0]
        _assert_within(got, want, bound, f"{preset} {pattern} {backend}")
    # Batch / M / N shardings pass through to the output.
    spec = tuple(got.sharding.spec) + (None,) * 3
    if pattern in ("dp", "dp_tp"):
        assert spec[0] == "data"
    if pattern in ("tp", "dp_tp"):
        assert spec[2] == "model"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pattern", ["dp_tp", "k_sharded", "fsdp"])
def test_sharded_dot_general_gradients(mesh, data, pattern, backend):
    preset = "mxfp8"
    x, w, ct = data
    xs, ws, _, _ = PATTERNS[pattern]
    _, fwd_bwd = _fns(preset, backend)
    want = jax.jit(fwd_bwd)(x, w, ct)
    xd = jax.device_put(x, NamedSharding(mesh, xs))
    wd = jax.device_put(w, NamedSharding(mesh, ws))
    cd = jax.device_put(ct, NamedSharding(mesh, xs if pattern != "k_sharded" else P()))
    got = jax.jit(fwd_bwd)(xd, wd, cd)
    bounds = _cached_bounds(preset)
    for name, g, r, b in zip(("forward", "dgrad", "wgrad"), got, want, bounds):
        _assert_within(g, r, b, f"{pattern} {backend} {name}")


QUANT_SPECS = [
    TensorScaling(formats.E4M3),
    DelayedScaling(formats.E5M2, history_len=2),
    RowScaling(formats.E4M3),
    TileScaling(formats.E4M3, (1, 128)),
    TileScaling(formats.E4M3, (128, 128), power_of_two=True),
    MXScaling(formats.E2M1),
    MXScaling(formats.E3M2, scale_rule="floor"),
    NVFP4Scaling(),
]


_QUANT_CASES = [(s, "K_sharded") for s in QUANT_SPECS] + [(s, "rows_sharded") for s in QUANT_SPECS[2:5]]
_XSPECS = {"K_sharded": P("data", None, "model"), "rows_sharded": P("data", "model", None)}


@needs_ffi
@pytest.mark.parametrize(
    "spec,sharded", _QUANT_CASES, ids=lambda v: v if isinstance(v, str) else v.describe().replace(" ", "_")
)
def test_sharded_ffi_quantize(mesh, spec, sharded):
    xspec = _XSPECS[sharded]
    rng = np.random.default_rng(22)
    x = jnp.asarray(
        (rng.standard_normal((4, 512, 512)) * np.exp2(rng.integers(-4, 4, (4, 512, 1)))).astype(np.float32)
    )
    x = x.at[1, 3, 300].set(700.0)  # the tensor amax lives on one shard
    st = (
        DelayedScalingState(jnp.zeros((2,), jnp.float32), jnp.float32(0.0123))
        if isinstance(spec, DelayedScaling)
        else None
    )
    f = jax.jit(lambda x, st: ffi.quantize(x, spec, -1, state=st))
    want = f(x, st)
    xd = jax.device_put(x, NamedSharding(mesh, xspec))
    got = f(xd, st)
    assert not _qtensor_mismatch(got, want), _qtensor_mismatch(got, want)
    hlo = f.lower(xd, st).compile().as_text()
    assert "mxprec_quantize" in hlo
    assert "all-gather" not in hlo
    assert "all-reduce" in hlo  # the amax (and tensor / row amaxes) are pmax-reduced
    assert tuple(got.data.sharding.spec)[:1] == ("data",)


def test_pmax_nan_reduces_amaxes_across_shards_with_nan_winning(mesh):
    """The cross-shard amax all-reduce (one integer pmax over the FP32 bits): the exact maximum, Inf
    above every finite shard, NaN from any single shard."""
    f = jax.jit(jax.shard_map(lambda v: ffi._pmax_nan(v, ("data", "model")), mesh=mesh,
                          in_specs=P(("data", "model")), out_specs=P(("data", "model"))))
    base = np.array([0.0, 3.5, 2.0**-126, 7.25, 1.0, 0.5, 6.0, 2.0], np.float32)
    np.testing.assert_array_equal(np.asarray(f(jnp.asarray(base))), np.full(8, 7.25, np.float32))
    for k in (0, 5, 7):
        for special in (np.inf, np.nan):
            v = base.copy()
            v[k] = special
            out = np.asarray(f(jnp.asarray(v)))
            assert (np.isnan(out).all() if np.isnan(special) else (out == np.inf).all()), (k, special, out)


# A backend's alignment as shard units (_GemmCfg.k_unit / n_unit; the CUDA wrapper passes K % 16, N % 8): the CPU
# kernel needs none, so the target's sharding rule alone decides. M = 64, K = 512, N = 512 on the 4-way "model" axis:
# local K / N = 128 keeps units 128 and drops 256.
_UNIT_FAMILIES = {
    "tensor": (TensorScaling(formats.E4M3), TensorScaling(formats.E4M3)),
    "row": (RowScaling(formats.E4M3), RowScaling(formats.E4M3)),
    "block": (TileScaling(formats.E4M3, (1, 128)), TileScaling(formats.E4M3, (128, 128))),
}


def _unit_gemm(x, w, lspec, rspec, k_unit, n_unit):
    """x (1, M, K) @ w (1, N, K)^T through the partitioned mxprec_scaled_gemm target, both contracting axis 2 (the
    CUDA wrapper's TN form), with the given shard units; f32 out."""
    ld, ls, lt, lo = ffi._operand_buffers(ffi.quantize(x, lspec, -1), 2, "lhs")
    rd, rs, rt, ro = ffi._operand_buffers(ffi.quantize(w, rspec, -1), 2, "rhs")
    cfg = ffi._GemmCfg(lo, ro, "float32", False, k_unit=k_unit, n_unit=n_unit)
    return ffi._gemm_vmappable(cfg)(ld, ls, lt, rd, rs, rt, jnp.zeros((), jnp.float32))


@needs_ffi
@pytest.mark.parametrize("family", list(_UNIT_FAMILIES))
@pytest.mark.parametrize("sharded", ["n", "k"])
@pytest.mark.parametrize("unit", [128, 256])
def test_sharded_gemm_keeps_the_backend_units(mesh, family, sharded, unit):
    lspec, rspec = _UNIT_FAMILIES[family]
    rng = np.random.default_rng(23)
    x = jnp.asarray(rng.standard_normal((1, 64, 512)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((1, 512, 512)).astype(np.float32))
    units = dict(k_unit=unit, n_unit=1) if sharded == "k" else dict(k_unit=1, n_unit=unit)
    f = jax.jit(lambda x, w: _unit_gemm(x, w, lspec, rspec, **units))
    want = f(x, w)
    xspec = P(None, None, "model") if sharded == "k" else P()
    wspec = P(None, None, "model") if sharded == "k" else P(None, "model", None)
    xd = jax.device_put(x, NamedSharding(mesh, xspec))
    wd = jax.device_put(w, NamedSharding(mesh, wspec))
    got = f(xd, wd)
    hlo = f.lower(xd, wd).compile().as_text()
    kept = unit == 128  # 512 / 4 = 128 per shard
    gemm = [line for line in hlo.splitlines() if 'custom_call_target="mxprec_scaled_gemm"' in line]
    assert len(gemm) == 1, gemm
    # The local GEMM: (1, 64, 128) out of a quarter of K (f32 partials, then their psum) or of N; else all of it.
    local_out = "f32[1,64,128]" if kept and sharded == "n" else "f32[1,64,512]"
    assert f"{local_out}" in gemm[0].split("custom-call(")[0], gemm[0]
    assert ("all-gather" not in hlo) == kept, f"{family} {sharded} unit {unit}: gathered = {not kept} expected"
    if sharded == "k":
        operands = gemm[0].split("custom-call(")[1]
        assert ("f8e4m3fn[1,64,128]" in operands) == kept, operands  # the lhs codes: a quarter of K, or all
        bound = _gemm_bound(ffi.quantize(x, lspec, -1), ffi.quantize(w, rspec, -1), 2, 2)
        _assert_within(got, want, bound, f"{family} K-sharded unit {unit}")
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@needs_ffi
@pytest.mark.parametrize("n", [256, 512])
def test_sharded_block_gemm_keeps_the_cuda_n_unit_with_a_1x128_rhs(mesh, n):
    """fp8_block's Wgrad pair (1 x 128 on both sides) sharded over N with the CUDA wrapper's units: a shard's N stays
    a multiple of 128 (the block kernels reject anything else), so N = 256 over 4 devices is gathered, 512 is not."""
    from mxprec.kernels import cuda

    spec = TileScaling(formats.E4M3, (1, 128))
    rng = np.random.default_rng(29)
    x = jnp.asarray(rng.standard_normal((1, 64, 256)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((1, n, 256)).astype(np.float32))
    f = jax.jit(lambda x, w: _unit_gemm(x, w, spec, spec, **cuda.gemm_shard_units("block", jnp.float32)))
    wd = jax.device_put(w, NamedSharding(mesh, P(None, "model", None)))
    hlo = f.lower(x, wd).compile().as_text()
    gemm = [line for line in hlo.splitlines() if 'custom_call_target="mxprec_scaled_gemm"' in line]
    assert len(gemm) == 1, gemm
    local_n = n if n == 256 else n // 4
    assert f"f32[1,64,{local_n}]" in gemm[0].split("custom-call(")[0], gemm[0]
    np.testing.assert_array_equal(np.asarray(f(x, wd)), np.asarray(f(x, w)))


def _quantize_transposed_stand_in(cfg, x):
    """What ``_quantize_transposed_call`` returns (``mxprec_quantize_transposed``, docs/ffi.md; a NaN amax with
    ``no_amax``), from mxprec.quantize: the CPU has no such kernel, so the next tests run the call's sharding rule and
    partitioning around this stand-in."""
    fmts = {0: formats.E4M3, 1: formats.E5M2}
    q = mxprec.quantize(jnp.swapaxes(x, 1, 2),
                        TileScaling(fmts[cfg.fmt], (1, cfg.block), power_of_two=bool(cfg.power_of_two)), axis=2)
    assert q.data.dtype == jnp.dtype(cfg.dtype)
    amax = jnp.full((), jnp.nan, jnp.float32) if cfg.no_amax else q.amax
    rows = ()
    if cfg.row_dtype:  # mxprec_quantize_rows_transposed: x's own 1 x 128 row groups too
        qr = mxprec.quantize(x, TileScaling(fmts[cfg.row_fmt], (1, 128), power_of_two=bool(cfg.row_power_of_two)),
                             axis=2)
        assert qr.data.dtype == jnp.dtype(cfg.row_dtype)
        rows = (qr.data, qr.scale)
    return (q.data, q.scale, amax, jnp.ones((), jnp.float32), *rows)


@pytest.mark.parametrize("xspec", [P("data", "model", None), P("data", None, "model"), P(None, ("data", "model"), None)],
                         ids=("B_R", "B_C", "R8"))
@pytest.mark.parametrize("cols", [512, 384])
def test_quantize_transposed_sharding_rule(mesh, monkeypatch, xspec, cols):
    """mxprec.kernels.cuda's partitioning of ``mxprec_quantize_transposed`` (x (B, R, C) -> codes and scales
    (B, C, R), amax): each shard's call sees whole 128 x 128 tiles, the codes and scales keep x's shardings with
    the last two axes swapped, the amax is pmax-reduced, and the result is the unsharded one bit for bit. A C
    sharding that would cut a tile (384 / 4 = 96) is dropped: that axis is gathered."""
    from mxprec.kernels import cuda

    monkeypatch.setattr(cuda, "_quantize_transposed_call", _quantize_transposed_stand_in)
    cfg = cuda._TransposedQuantCfg(0, 64, 0, jnp.dtype(jnp.float8_e4m3fn).name)
    rng = np.random.default_rng(24)
    x = (rng.standard_normal((4, 1024, cols)) * np.exp2(rng.integers(-6, 6, (4, 1024, 1)))).astype(np.float32)
    x[3, 700, 5] = 900.0  # the tensor amax on one shard
    want = jax.jit(lambda v: _quantize_transposed_stand_in(cfg, v))(x)
    f = jax.jit(cuda._quantize_transposed_vmappable(cfg))
    xd = jax.device_put(x, NamedSharding(mesh, xspec))
    got = f(xd)
    for name, a, b in zip(("data", "scale", "amax"), got[:3], want[:3]):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)), name
    hlo = f.lower(xd).compile().as_text()
    cut = xspec[2] is not None and cols // 4 % 128 != 0
    assert ("all-gather" in hlo) == cut, hlo if not cut else ""
    assert "all-reduce" in hlo  # the amax
    spec = tuple(got[0].sharding.spec) + (None,) * 3
    assert spec[0] == xspec[0]
    assert spec[2] == xspec[1]  # x's R axis is the codes' last axis
    assert spec[1] == (None if cut else xspec[2])


def test_quantize_transposed_without_amax_reduces_nothing(mesh, monkeypatch):
    """``amax=False`` (amax_mode 3): the sharded call's codes and scales as before, no cross-shard reduction of the
    amax the kernel did not compute (no all-reduce), and a NaN amax."""
    from mxprec.kernels import cuda

    monkeypatch.setattr(cuda, "_quantize_transposed_call", _quantize_transposed_stand_in)
    cfg = cuda._TransposedQuantCfg(0, 128, 0, jnp.dtype(jnp.float8_e4m3fn).name, no_amax=1)
    assert cfg.attrs()["amax_mode"] == 3
    x = np.random.default_rng(25).standard_normal((4, 1024, 512)).astype(np.float32)
    want = jax.jit(lambda v: _quantize_transposed_stand_in(cfg, v))(x)
    f = jax.jit(cuda._quantize_transposed_vmappable(cfg))
    xd = jax.device_put(x, NamedSharding(mesh, P("data", "model", None)))
    got = f(xd)
    for a, b in zip(got[:2], want[:2]):
        assert np.array_equal(np.asarray(a).reshape(-1).view(np.uint8), np.asarray(b).reshape(-1).view(np.uint8))
    assert np.isnan(np.asarray(got[2]))
    assert "all-reduce" not in f.lower(xd).compile().as_text()


@pytest.mark.parametrize("xspec", [P("data", "model", None), P("data", None, "model"), P(None, ("data", "model"), None)],
                         ids=("B_R", "B_C", "R8"))
@pytest.mark.parametrize("cols", [512, 384])
def test_quantize_rows_transposed_sharding_rule(mesh, monkeypatch, xspec, cols):
    """``mxprec_quantize_rows_transposed`` (quantize_rows_and_transposed) sharded: the transposed copy as above, the
    row copy (B, R, C) and its scales (B, R, C / 128) keep x's sharding (a C sharding that would cut a tile is
    dropped for both), everything bit for bit the unsharded result."""
    from mxprec.kernels import cuda

    monkeypatch.setattr(cuda, "_quantize_transposed_call", _quantize_transposed_stand_in)
    cfg = cuda._TransposedQuantCfg(0, 128, 0, jnp.dtype(jnp.float8_e4m3fn).name, 0, 1, 1,
                                   jnp.dtype(jnp.float8_e5m2).name)
    assert cfg.n_results == 6 and cfg.attrs()["row_fmt"] == 1
    rng = np.random.default_rng(26)
    x = (rng.standard_normal((4, 1024, cols)) * np.exp2(rng.integers(-6, 6, (4, 1024, 1)))).astype(np.float32)
    x[2, 900, 7] = -700.0  # the tensor amax on one shard
    want = jax.jit(lambda v: _quantize_transposed_stand_in(cfg, v))(x)
    f = jax.jit(cuda._quantize_transposed_vmappable(cfg))
    xd = jax.device_put(x, NamedSharding(mesh, xspec))
    got = f(xd)
    assert len(got) == 6
    for name, a, b in zip(("data", "scale", "amax", "tensor_scale", "row_data", "row_scale"), got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)), name
    cut = xspec[2] is not None and cols // 4 % 128 != 0
    assert ("all-gather" in f.lower(xd).compile().as_text()) == cut
    for rows in got[4:]:
        spec = tuple(rows.sharding.spec) + (None,) * 3
        assert spec[:2] == tuple(xspec)[:2] and spec[2] == (None if cut else xspec[2]), spec


@pytest.mark.parametrize("shape,xspec", [((2, 256, 512), P(None, "model", None)), ((2, 128, 512), P(None, "data", None)),
                                         ((2, 512, 512), P(None, None, ("data", "model")))],
                         ids=("2_tiles_over_4", "1_tile_over_2", "4_tiles_over_8"))
@pytest.mark.parametrize("rows_copy", [False, True])
def test_quantize_transposed_with_fewer_tiles_than_devices(mesh, monkeypatch, shape, xspec, rows_copy):
    """A dimension sharded over more devices than it has 128 x 128 tiles: Shardy puts the tile factor on a sub-axis
    of the mesh (or, with one tile, MLIR rejects the size-1 factor); both failed to compile until the forty-third
    session. Now that axis is gathered for the call and the results are the unsharded ones bit for bit."""
    from mxprec.kernels import cuda

    monkeypatch.setattr(cuda, "_quantize_transposed_call", _quantize_transposed_stand_in)
    rows = (1, jnp.dtype(jnp.float8_e5m2).name) if rows_copy else (0, "")
    cfg = cuda._TransposedQuantCfg(0, 64, 0, jnp.dtype(jnp.float8_e4m3fn).name, 0, rows[0], 0, rows[1])
    x = np.random.default_rng(27).standard_normal(shape).astype(np.float32)
    x[1, 100, 7] = 300.0
    want = jax.jit(lambda v: _quantize_transposed_stand_in(cfg, v))(x)
    f = jax.jit(cuda._quantize_transposed_vmappable(cfg))
    xd = jax.device_put(x, NamedSharding(mesh, xspec))
    got = f(xd)
    assert len(got) == cfg.n_results
    for i, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)), i
    assert "all-gather" in f.lower(xd).compile().as_text()


def test_unit_tile_factors_are_written_whole():
    """_merge_unit_factors: a compound dimension with a size-1 factor becomes one whole factor (MLIR's verifier
    rejects size-1 factors there), sizes and reduction factors follow; rules without one are unchanged."""
    from mxprec.kernels.ffi import _merge_unit_factors

    rule = "b (r rt) (c ct) -> b (c ct) (r rt), b (c ct) (r rg), , "
    sizes = dict(rt=128, ct=128, r=1, rg=2, reduction_factors=("rt",))
    shapes = [(2, 128, 512), (2, 512, 128), (2, 512, 2), (), ()]
    text, new = _merge_unit_factors(rule, sizes, shapes)
    assert text == "b r_rt (c ct) -> b (c ct) r_rt, b (c ct) r_rg, , "
    assert new == dict(ct=128, reduction_factors=())
    shapes[0], shapes[1], shapes[2] = (2, 256, 512), (2, 512, 256), (2, 512, 4)
    assert _merge_unit_factors(rule, dict(sizes, r=2), shapes) == (rule, dict(sizes, r=2))


# mxprec.kernels.hip's calls share the package's sharding rules. No ROCm here: with the library "registered" (a
# stand-in state), the custom-call targets they emit are served by the CPU handlers (the same contract), so the
# partitioning the HIP wrappers get is exercised on the 8 CPU devices.
_HIP_FAMILIES = {
    "mx": (MXScaling(fmt="e4m3"), MXScaling(fmt="e4m3")),
    "tensor": (TensorScaling(), TensorScaling(fmt="e5m2")),
    "block": (TileScaling(formats.E4M3, (1, 128)), TileScaling(formats.E4M3, (128, 128))),
}


@pytest.fixture
def hip_on_cpu(monkeypatch):
    # its tests are needs_ffi: libmxprec_cpu.so serves the HIP wrappers' calls here
    from mxprec.kernels import hip

    monkeypatch.setitem(hip._state, "result", (object(), ""))  # pretend libmxprec_hip.so is registered
    return hip


@needs_ffi
@pytest.mark.parametrize("family", list(_HIP_FAMILIES))
@pytest.mark.parametrize("sharded", ["n", "k4", "k8"])
def test_hip_gemm_wrapper_is_partitioned(mesh, hip_on_cpu, family, sharded):
    """hip.scaled_gemm under N sharding (4 ways) or K sharding (4 / 8 ways; 64 elements of K per shard are still
    two MX blocks, twice the per-tensor kernels' unit of 32): local GEMMs (K: FP32 partials + psum), no all-gather,
    the same result as one device.

    K = 512 over 8 devices with 128-element tiles (4 tiles): Shardy shards the tile factor over a sub-axis of the
    mesh, which the partition callbacks read as replicated (mxprec.kernels.ffi._on_mesh_axes): that operand is
    gathered, and the result is still one device's within the bound (until the forty-third session this failed
    to compile, IndivisibleError)."""
    hip = hip_on_cpu
    lspec, rspec = _HIP_FAMILIES[family]
    rng = np.random.default_rng(29)
    x = jnp.asarray(rng.standard_normal((1, 64, 512)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((1, 512, 512)).astype(np.float32))

    def f(x, w):  # both operands from the HIP quantize wrapper, as dot_general would take them
        return hip.scaled_gemm(hip.quantize(x, lspec, axis=2), hip.quantize(w, rspec, axis=2),
                               lhs_contract=2, rhs_contract=2, out_dtype=jnp.float32)

    f = jax.jit(f)
    want = f(x, w)
    cuts_tiles = sharded == "k8" and family == "block"
    k_axes = {"n": None, "k4": "model", "k8": ("data", "model")}[sharded]
    xspec = P() if k_axes is None else P(None, None, k_axes)
    wspec = P(None, "model", None) if k_axes is None else P(None, None, k_axes)
    xd, wd = jax.device_put(x, NamedSharding(mesh, xspec)), jax.device_put(w, NamedSharding(mesh, wspec))
    got = f(xd, wd)
    hlo = f.lower(xd, wd).compile().as_text()
    gemm = [line for line in hlo.splitlines() if 'custom_call_target="mxprec_scaled_gemm"' in line]
    assert len(gemm) == 1, gemm
    assert ("all-gather" in hlo) == cuts_tiles, f"{family} {sharded}"
    if sharded == "n":
        assert "f32[1,64,128]" in gemm[0].split("custom-call(")[0], gemm[0]
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    else:
        assert ("all-reduce" in hlo) != cuts_tiles  # K gathered: one local GEMM, no psum
        bound = _gemm_bound(mxprec.quantize(x, lspec, axis=2), mxprec.quantize(w, rspec, axis=2), 2, 2)
        _assert_within(got, want, bound, f"hip {family} {sharded}")


@needs_ffi
@pytest.mark.parametrize("spec", [TensorScaling(), RowScaling(), TileScaling(formats.E4M3, (1, 128)),
                                  MXScaling(fmt="e2m1")], ids=["tensor", "row", "tile", "mxfp4"])
def test_hip_quantize_wrapper_is_partitioned(mesh, hip_on_cpu, spec):
    """hip.quantize of a sharded input: the same QTensor as mxprec.quantize bit for bit (per-tensor and row amaxes
    reduced across the shards that split them), no all-gather."""
    hip = hip_on_cpu
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((4, 256, 512)) * np.exp2(rng.integers(-6, 6, (4, 256, 1)))).astype(np.float32)
    xd = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("data", None, "model")))
    f = jax.jit(lambda v: hip.quantize(v, spec))
    got = f(xd)
    assert "all-gather" not in f.lower(xd).compile().as_text()
    assert _qtensor_mismatch(got, mxprec.quantize(jnp.asarray(x), spec)) == []


# ----------------------------------------------------------------------------- a data-parallel training step


def check_llama_data_parallel(devices, arm: str, *, seq: int, targets: tuple[str, ...]):
    """The Llama benchmark's train step (AdamW, full remat, every projection on the arm's recipe) under jit with the
    batch sharded over ``devices`` (2 examples each) and the state replicated, against the same step on
    ``devices[0]`` alone:

    * the compiled sharded step runs the custom calls ``targets`` and all-reduces (the weight gradients);
    * the first loss within 1e-4 of one device's (the forward's codes and scales are the same, the amaxes being
      pmax-reduced; only sums run in other orders), the third within 2e-3;
    * each gradient of the first step (Frobenius norm) closer to one device's than a quarter of the recipe's own
      quantization error there, its distance from the BF16 model's gradient: a shard quantizing with its own
      scales would sit about as far as that error.
    """
    from mxprec.bench import llama as bench
    from mxprec.models import llama as L
    from mxprec.models.llama import cross_entropy_loss

    batch_size = 2 * len(devices)
    model, cfg, info = bench.build_model(L.micro(n_layers=2, seq=seq), arm)
    tx = bench.make_optimizer(lr=1e-3)
    state = bench.init_train_state(model, cfg, tx, batch=batch_size, seed=0, loss_scale=info["loss_scale"])
    batch = bench.synthetic_batch(cfg, batch_size, seed=0)
    step = jax.jit(bench.make_train_step(model, tx))

    def grads(variables, b, model=model):
        def loss(params):
            logits = model.apply(dict(variables, params=params), b["inputs"])
            return cross_entropy_loss(logits, b["targets"], pick=cfg.loss_pick)[0]

        return jax.grad(loss)(variables["params"])

    def run(st, b, n_steps=3):
        losses = []
        for _ in range(n_steps):
            st, m = step(st, b)
            losses.append(float(m["loss"]))
        return losses

    one = jax.device_put((state, batch), devices[0])
    want_losses, want_grads = run(*one), jax.jit(grads)(one[0]["variables"], one[1])
    bf16_model = bench.build_model(cfg, "bf16")[0]
    bf16_grads = jax.jit(functools.partial(grads, model=bf16_model))({"params": one[0]["variables"]["params"]},
                                                                     one[1])
    mesh = Mesh(np.array(devices), ("x",))
    dp = (jax.device_put(state, NamedSharding(mesh, P())), jax.device_put(batch, NamedSharding(mesh, P("x", None))))
    got_losses, got_grads = run(*dp), jax.jit(grads)(dp[0]["variables"], dp[1])
    hlo = step.lower(*dp).compile().as_text()
    for target in targets:
        assert f'custom_call_target="{target}"' in hlo, (arm, target)
    assert "all-reduce" in hlo
    assert np.all(np.isfinite(got_losses)), got_losses
    assert abs(got_losses[0] - want_losses[0]) <= 1e-4 * abs(want_losses[0]), (arm, got_losses, want_losses)
    assert abs(got_losses[-1] - want_losses[-1]) <= 2e-3 * abs(want_losses[-1]), (arm, got_losses, want_losses)
    flat_want = dict(jax.tree_util.tree_leaves_with_path(want_grads))
    flat_bf16 = dict(jax.tree_util.tree_leaves_with_path(bf16_grads))
    for path, g in jax.tree_util.tree_leaves_with_path(got_grads):
        r = np.asarray(flat_want[path], np.float64)
        dp_err = np.linalg.norm(np.asarray(g, np.float64) - r)
        q_err = np.linalg.norm(np.asarray(flat_bf16[path], np.float64) - r)
        assert dp_err <= max(0.25 * q_err, 1e-6 * np.linalg.norm(r)), (arm, jax.tree_util.keystr(path), dp_err, q_err)


@needs_ffi
@pytest.mark.parametrize("arm", ["fp8_current:ffi", "fp8_block:ffi"])
def test_llama_train_step_data_parallel(arm):
    """A whole training step on 2 CPU devices with every projection on the CPU FFI kernels (check_llama_data_parallel;
    the 2-GPU form is tests/test_cuda_sharding.py's)."""
    check_llama_data_parallel(jax.devices("cpu")[:2], arm, seq=64, targets=("mxprec_scaled_gemm", "mxprec_quantize"))
