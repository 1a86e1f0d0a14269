"""The CUDA kernels under jit + NamedSharding on several GPUs (skip with fewer than 2 GPUs or no libmxprec_cuda.so).

``dot_general`` with the FP8 recipes on the CUDA path (``backend="ffi"``: CUDA quantize kernels, the code
transposes, ``mxprec_quantize_transposed`` for Wgrad's operands of fp8_block, the sm_90a GEMMs; and fp8_block under
``"auto"``) on a 1-D mesh of every GPU, with x (B, S, K) @ w (K, N) sharded three ways:

* ``dp``: x along B; ``tp``: w along N; ``k``: x and w along K (the forward GEMM's partials are ``psum``-ed).

Each forward and each gradient equals the unsharded run on one GPU within the FP32 summation bound
``2 * C * 2**-23 * (|a| @ |b|)`` of its contraction length C (the quantized operands are the same bits: the amaxes
are ``pmax``-reduced across shards; a wrong cross-shard scale would miss the bound by orders of magnitude), the
compiled HLO runs mxprec's custom calls, and no operand is gathered (no ``all-gather``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from mxprec.kernels import cuda
from test_sharding import _fns, check_llama_data_parallel


def _gpus() -> int:
    try:
        return len(jax.devices("gpu"))
    except RuntimeError:
        return 0


pytestmark = pytest.mark.skipif(
    _gpus() < 2 or not cuda.available(), reason="needs 2 or more GPUs and libmxprec_cuda.so"
)

B, S, K, N = 2, 256, 512, 512
PATTERNS = {
    "dp": (P("x", None, None), P(None, None)),
    "tp": (P(None, None, None), P(None, "x")),
    "k": (P(None, None, "x"), P("x", None)),
}
CASES = [("fp8_current", "ffi"), ("fp8_rowwise", "ffi"), ("fp8_block", "ffi"), ("fp8_block", "auto")]


@functools.cache
def _data():
    rng = np.random.default_rng(31)
    x = rng.standard_normal((B, S, K)).astype(np.float32)
    x[1, 7, 300] = 40.0  # the tensor amax lives on one shard
    w = (rng.standard_normal((K, N)) * 0.05).astype(np.float32)
    ct = rng.standard_normal((B, S, N)).astype(np.float32)
    return x, w, ct


def _bounds(x, w, ct):
    """2 * C * 2**-23 * (|a| @ |b|) for the forward (C = K), dX (C = N) and dW (C = B * S)."""
    ax, aw, ac = np.abs(x).astype(np.float64), np.abs(w).astype(np.float64), np.abs(ct).astype(np.float64)
    u = 2.0 * 2.0**-23
    return (
        u * K * np.einsum("bsk,kn->bsn", ax, aw),
        u * N * np.einsum("bsn,kn->bsk", ac, aw),
        u * B * S * np.einsum("bsk,bsn->kn", ax, ac),
    )


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("preset,backend", CASES)
def test_sharded_cuda_dot_general_matches_one_gpu(preset, backend, pattern):
    x, w, ct = _data()
    f = jax.jit(_fns(preset, backend)[1])  # y, dX, dW of x @ w (test_sharding's)
    want = f(x, w, ct)  # one GPU
    mesh = Mesh(np.array(jax.devices("gpu")), ("x",))
    xs, ws = PATTERNS[pattern]
    args = (
        jax.device_put(x, NamedSharding(mesh, xs)),
        jax.device_put(w, NamedSharding(mesh, ws)),
        jax.device_put(ct, NamedSharding(mesh, xs if pattern != "k" else P())),
    )
    got = f(*args)
    hlo = f.lower(*args).compile().as_text()
    assert 'custom_call_target="mxprec_scaled_gemm"' in hlo
    assert 'custom_call_target="mxprec_quantize"' in hlo
    if preset == "fp8_block":
        assert 'custom_call_target="mxprec_quantize_transposed"' in hlo  # Wgrad's X and dY, K-major
    assert "all-gather" not in hlo, f"{preset} {backend} {pattern}: an operand was gathered"
    for name, g, r, bound in zip(("forward", "dX", "dW"), got, want, _bounds(x, w, ct)):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        diff = np.abs(g - r)
        assert np.all(diff <= bound), (
            f"{preset} {backend} {pattern} {name}: max diff {diff.max()} at bound {bound.ravel()[diff.argmax()]}, "
            f"{np.mean(diff == 0):.4f} of the elements equal"
        )


@pytest.mark.parametrize("xspec", [P("x", None, None), P(None, "x", None), P(None, None, "x")], ids=("B", "R", "C"))
@pytest.mark.parametrize("cols", [512, 384])
def test_sharded_quantize_transposed_is_bit_exact(xspec, cols):
    """``cuda.quantize_transposed`` of a sharded x: the unsharded call's codes, scales and amax bit for bit; B, R and
    C shardings carry over unless they would cut a 128 x 128 tile (C = 384 over 2 GPUs: 192), which is gathered."""
    from mxprec import formats
    from mxprec.scaling import TileScaling

    rng = np.random.default_rng(32)
    x = (rng.standard_normal((2, 512, cols)) * np.exp2(rng.integers(-6, 6, (2, 512, 1)))).astype(np.float32)
    x[1, 300, 5] = 900.0  # the tensor amax on one shard
    spec = TileScaling(formats.E4M3, (1, 64))
    f = jax.jit(lambda v: cuda.quantize_transposed(jnp.asarray(v, jnp.bfloat16), spec))
    want = f(x)
    mesh = Mesh(np.array(jax.devices("gpu")), ("x",))
    xd = jax.device_put(x, NamedSharding(mesh, xspec))
    got = f(xd)
    for field in ("data", "scale", "amax"):
        a, b = np.asarray(getattr(got, field)), np.asarray(getattr(want, field))
        assert a.dtype == b.dtype and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)), field
    hlo = f.lower(xd).compile().as_text()
    assert 'custom_call_target="mxprec_quantize_transposed"' in hlo
    cuts_a_tile = xspec[2] is not None and cols // 2 % 128 != 0
    assert ("all-gather" in hlo) == cuts_a_tile
    if not cuts_a_tile:
        axis = next(i for i, a in enumerate(xspec) if a is not None)
        swapped = {0: 0, 1: 2, 2: 1}[axis]  # x (B, R, C) -> codes (B, C, R)
        assert (tuple(got.data.sharding.spec) + (None,) * 3)[swapped] is not None


def _gpu_mesh() -> Mesh:
    return Mesh(np.array(jax.devices("gpu")), ("x",))


@pytest.mark.parametrize("spec,rows,gathers", [(("x", None), 1024, False), ((None, "x"), 1024, False),
                                               (("x", None), 384, True), (("x", None), 128, True)],
                         ids=("rows", "cols", "rows-cut", "one-tile"))
def test_sharded_swiglu_kernels_are_bit_exact(spec, rows, gathers):
    """The fused MLP block's SwiGLU kernels (per-tensor: mxprec_swiglu_{forward,backward}_fp8 and the amax-only
    calls; 1 x 128 tiles: mxprec_swiglu_{h,grad}_tiles) on adversarial gate / up / dh sharded over every GPU: each
    result, its codes, scales and pmax-reduced amaxes, bit for bit the one-GPU call's. Rows or columns split into
    whole tiles run without an all-gather; 384 rows over 2 GPUs (192 each) would cut the tile kernels' 128 x 128
    tiles, and that axis is gathered, as are 128 rows (one tile: a size-1 factor in the Shardy rule)."""
    from test_fused_mlp import FMTS, _adversarial, _sharded_run, _tile_spec

    scales = jnp.array([0.05, 0.003, 0.007], jnp.float32)
    mult = (jnp.float32(0.37), jnp.float32(3.1e-3), jnp.float32(1.7e4))
    spec_h, spec_g = _tile_spec("float8_e4m3fn"), _tile_spec("float8_e5m2", pow2=True)

    def calls(g, u, d):
        return (cuda.swiglu_backward_fp8(g, u, d, scales, FMTS, mult),
                cuda.swiglu_forward_fp8(g, u, scales[0], FMTS[0], mult[:2]),
                cuda.swiglu_backward_amax(g, u, d, mult), cuda.swiglu_forward_amax(g, u, mult[:2]),
                cuda.swiglu_h_tiles(g, u, spec_h), cuda.swiglu_h_tiles(g, u, spec_h, transposed=True),
                cuda.swiglu_grad_tiles(g, u, d, spec_g))

    mesh, got, hlo = _sharded_run(None, calls, _adversarial(m=rows, f=1024), spec, gathers, mesh=_gpu_mesh())
    for target in ("mxprec_swiglu_backward_fp8", "mxprec_swiglu_forward_fp8", "mxprec_swiglu_h_tiles",
                   "mxprec_swiglu_grad_tiles"):
        assert f'custom_call_target="{target}"' in hlo, target
    if not gathers:
        assert "all-reduce" in hlo  # the per-tensor amaxes' pmax
        (h, _), (h_t, _), grads = got[4:]
        assert h.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec)), 2)
        assert h_t.sharding.is_equivalent_to(NamedSharding(mesh, P(*spec[::-1])), 2)
        assert grads[2].sharding.is_equivalent_to(NamedSharding(mesh, P(*spec[::-1])), 2)


@pytest.mark.parametrize("xspec", [P("x", None, None), P(None, "x", None), P(None, None, "x")], ids=("B", "R", "C"))
def test_sharded_quantize_rows_and_transposed_is_bit_exact(xspec):
    """``cuda.quantize_rows_and_transposed`` (dY's Dgrad row copy and Wgrad's K-major copy from one read) of a
    sharded x: both copies' codes, scales and the tensor amax bit for bit the one-GPU call's, with no all-gather;
    the row copy keeps x's sharding."""
    from mxprec import formats
    from mxprec.scaling import TileScaling
    from test_fused_mlp import _sharded_run

    rng = np.random.default_rng(33)
    x = (rng.standard_normal((2, 512, 512)) * np.exp2(rng.integers(-6, 6, (2, 512, 1)))).astype(np.float32)
    x[1, 300, 5] = -900.0
    row_spec, spec = TileScaling(formats.E5M2, (1, 128)), TileScaling(formats.E5M2, (1, 128))

    def calls(v):
        return cuda.quantize_rows_and_transposed(jnp.asarray(v, jnp.bfloat16), row_spec, spec)

    _, got, hlo = _sharded_run(None, calls, [x], tuple(xspec), False, mesh=_gpu_mesh())
    assert 'custom_call_target="mxprec_quantize_rows_transposed"' in hlo
    assert tuple(got[0].data.sharding.spec) + (None,) * (3 - len(got[0].data.sharding.spec)) == tuple(xspec)


LLAMA_ARMS = ("fp8_current", "fp8_delayed+fused_mlp", "fp8_block", "fp8_block+fused_mlp")


@pytest.mark.parametrize("arm", LLAMA_ARMS)
def test_llama_train_step_data_parallel_matches_one_gpu(arm):
    """The Llama benchmark's train step with the batch sharded over every GPU (test_sharding's
    ``check_llama_data_parallel``), every projection on the CUDA kernels: mxprec's GEMM and quantize custom calls
    partition, and three steps track the one-GPU run."""
    check_llama_data_parallel(jax.devices("gpu"), arm, seq=256,
                              targets=("mxprec_scaled_gemm", "mxprec_quantize"))
