"""mxprec.dot_general vs an oracle built from the numpy quantizers in tests/reference.

Every recipe's Fprop and both gradients must equal float64 GEMMs of the reference-dequantized
operands, within the FP32 summation-order bound |diff| <= 2·K·2^-24·(|A|·|B|).
The backend under test is a module-level parameter so the same suite runs on "xla" and "ffi".

On a GPU the bound is |diff| <= 2^-9·(|A|·|B|) instead: Hopper's FP8 tensor cores (cuBLASLt
behind XLA's FP8 dot, and our CUTLASS kernels) sum 128 of K in a reduced-precision internal
accumulator before promoting to FP32 (the bound of tests/test_cuda.py). With backend "ffi" on a
GPU an operand pair without a CUDA kernel (MX / NVFP4; shapes the kernels do not take) raises
NotImplementedError by design (no silent fallback): such cases skip, naming the reason.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import mxprec
import reference as ref
from mxprec.scaling import DelayedScaling, MXScaling, NVFP4Scaling, RowScaling, TensorScaling, TileScaling

ON_GPU = jax.default_backend() == "gpu"
BACKENDS = ["xla", pytest.param("ffi", marks=pytest.mark.skipif(
    not mxprec.kernels.ffi_available(), reason=f"no mxprec native library for {jax.default_backend()} here"))]
QUANTIZED = ["fp8_current", "fp8_delayed", "fp8_rowwise", "fp8_block", "mxfp8", "mxfp8_floor", "mxfp6", "mxfp4", "nvfp4"]

# (lhs shape, rhs shape, dimension_numbers): plain, batch dims, two contracting dims, odd orders.
CASES = [
    ((128, 128), (128, 128), (((1,), (0,)), ((), ()))),
    ((2, 64, 128), (128, 128), (((2,), (0,)), ((), ()))),
    ((128, 128), (128, 256), (((0,), (0,)), ((), ()))),
    ((2, 128, 128), (2, 128, 128), (((2,), (1,)), ((0,), (0,)))),
    ((4, 32, 128), (32, 4, 128), (((0, 1), (1, 0)), ((), ()))),
    ((128, 2, 128), (2, 128, 128), (((0,), (1,)), ((1,), (0,)))),
]


# ----------------------------------------------------------------------------- numpy oracle


def _np_canon(lhs_shape, rhs_shape, dn):
    (lc, rc), (lb, rb) = dn
    lf = [d for d in range(len(lhs_shape)) if d not in lc and d not in lb]
    rf = [d for d in range(len(rhs_shape)) if d not in rc and d not in rb]
    return list(lb) + lf + list(lc), list(rb) + list(rc) + rf


def _ref_qdq(x: np.ndarray, spec, axis: int, scale: float = 1.0) -> np.ndarray:
    """Reference quantize→dequantize of a float32 array, as float64."""
    if spec is None:
        return np.asarray(x, np.float32).astype(jnp.bfloat16).astype(np.float64)
    f = spec.fmt.name
    if isinstance(spec, TensorScaling):
        c, s = ref.ref_tensor(x, f)
        return ref.ref_dequant_scaled(c, f, s).astype(np.float64)
    if isinstance(spec, DelayedScaling):
        return ref.ref_dequant_scaled(ref.ref_delayed(x, f, scale), f, np.float32(scale)).astype(np.float64)
    if isinstance(spec, RowScaling):
        c, s = ref.ref_row(x, f, axis)
        return ref.ref_dequant_scaled(c, f, s).astype(np.float64)
    if isinstance(spec, TileScaling):
        c, s = ref.ref_tile(x, f, axis, spec.tile, spec.power_of_two)
        return ref.ref_dequant_tile(c, s, f, axis, spec.tile).astype(np.float64)
    if isinstance(spec, MXScaling):
        c, s = ref.ref_mx(x, f, axis, spec.block, spec.scale_rule)
        return ref.ref_dequant_mx(c, s, f, axis, spec.block).astype(np.float64)
    if isinstance(spec, NVFP4Scaling):
        c, s, t = ref.ref_nvfp4(x, axis)
        return ref.ref_dequant_nvfp4(c, s, t, axis).astype(np.float64)
    raise TypeError(spec)


def _bmm(a, b):  # (B, M, K) x (B, K, N) in float64, plus the |a|·|b| bound term
    return np.einsum("bmk,bkn->bmn", a, b), np.einsum("bmk,bkn->bmn", np.abs(a), np.abs(b))


def oracle(recipe, x, w, g, dn):
    """float64 (y, dx, dw) and their error bounds, in the original layouts."""
    lp, rp = _np_canon(x.shape, w.shape, dn)
    xt, wt = np.transpose(x, lp), np.transpose(w, rp)
    nb = len(dn[1][0])
    B = math.prod(xt.shape[:nb])
    K = math.prod(w.shape[d] for d in dn[0][1])
    M = x.size // (B * K)
    N = w.size // (B * K)
    x3, w3, g3 = xt.reshape(B, M, K), wt.reshape(B, K, N), g.reshape(B, M, N)
    q = functools.partial(_ref_qdq)
    y, by = _bmm(q(x3, recipe.fprop_lhs, 2), q(w3, recipe.fprop_rhs, 1))
    dx, bdx = _bmm(q(g3, recipe.dgrad_grad, 2), np.swapaxes(q(w3, recipe.dgrad_rhs, 2), 1, 2))
    dw, bdw = _bmm(np.swapaxes(q(x3, recipe.wgrad_lhs, 1), 1, 2), q(g3, recipe.wgrad_grad, 1))

    def back(t, shape, perm):
        return np.transpose(t.reshape([shape[p] for p in perm]), np.argsort(perm))

    return (
        (y.reshape(g.shape), by.reshape(g.shape), K),
        (back(dx, x.shape, lp), back(bdx, x.shape, lp), N),
        (back(dw, w.shape, rp), back(bdw, w.shape, rp), M),
    )


def _assert_close(got, want, bound, n, what):
    got = np.asarray(got, np.float64)
    tol = (2.0**-9 if ON_GPU else 2.0 * n * 2.0**-24) * bound + 1e-30
    err = np.abs(got - want)
    bad = err > tol
    assert not bad.any(), f"{what}: {bad.sum()} elements outside the FP32 summation bound; max err {err.max()}"


def _inputs(xs, ws, seed=0):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(k1, xs, jnp.float32)
    w = jax.random.normal(k2, ws, jnp.float32) * jnp.float32(0.1)
    return x, w, k3


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", QUANTIZED)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_reference_oracle(backend, name, case):
    xs, ws, dn = CASES[case]
    recipe = mxprec.recipes.get(name, backend=backend, stochastic_grad_rounding=False)
    x, w, kg = _inputs(xs, ws, seed=case)
    state = mxprec.DotGeneralState.init(recipe)
    f = jax.jit(lambda x, w: mxprec.dot_general(x, w, dn, preferred_element_type=jnp.float32,
                                                  recipe=recipe, state=state))
    try:
        y, vjp = jax.vjp(f, x, w)
        g = jax.random.normal(kg, y.shape, jnp.float32)
        dx, dw = vjp(g)
    except NotImplementedError as e:
        if not (ON_GPU and backend == "ffi"):
            raise
        pytest.skip(f"no CUDA kernel: {str(e)[:200]}")
    assert y.dtype == jnp.float32 and dx.dtype == x.dtype and dw.dtype == w.dtype
    (ry, by, K), (rdx, bdx, N), (rdw, bdw, M) = oracle(recipe, np.asarray(x), np.asarray(w), np.asarray(g), dn)
    _assert_close(y, ry, by, K, f"{name} fprop")
    _assert_close(dx, rdx, bdx, N, f"{name} dgrad")
    _assert_close(dw, rdw, bdw, M, f"{name} wgrad")


@pytest.mark.parametrize("case", range(len(CASES)))
def test_bf16_is_lax_dot_general_bit_for_bit(case):
    xs, ws, dn = CASES[case]
    x, w, _ = _inputs(xs, ws)
    x, w = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    got = jax.jit(lambda x, w: mxprec.dot_general(x, w, dn, preferred_element_type=jnp.float32, recipe="bf16"))(x, w)
    want = jax.jit(lambda x, w: lax.dot_general(x, w, dn, preferred_element_type=jnp.float32))(x, w)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_unquantized_backward_gemms_stay_in_the_compute_dtype():
    """bf16 recipe on bf16 operands: every dot of the VJP is BF16 x BF16 (an FP32 cotangent would make
    JAX's transpose rule run FP32 GEMMs — measured 1.63x slower Llama steps on the H200)."""
    x = jnp.ones((8, 4, 64), jnp.bfloat16)
    w = jnp.ones((64, 32), jnp.bfloat16)
    dn = (((2,), (0,)), ((), ()))

    def loss(x, w):
        return jnp.sum(mxprec.dot_general(x, w, dn, recipe="bf16").astype(jnp.float32))

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, w)
    dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
    assert len(dots) == 3
    for e in dots:
        assert [v.aval.dtype for v in e.invars] == [jnp.bfloat16, jnp.bfloat16], e


def test_output_and_grad_dtypes():
    x, w, _ = _inputs((64, 128), (128, 128))
    x = x.astype(jnp.bfloat16)
    dn = (((1,), (0,)), ((), ()))
    y = mxprec.dot_general(x, w, dn, recipe="mxfp8")
    assert y.dtype == jnp.bfloat16  # recipe default output for low-precision GEMMs
    dx, dw = jax.grad(lambda x, w: jnp.sum(mxprec.dot_general(x, w, dn, recipe="mxfp8").astype(jnp.float32)),
                      argnums=(0, 1))(x, w)
    assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.float32


@pytest.mark.parametrize("name", ["fp8_current", "mxfp8", "fp8_block"])
def test_quantized_residuals_equal_wide_residuals(name):
    """Saving column-wise quantized copies gives the same gradients as requantizing the wide source."""
    x, w, _kg = _inputs((2, 128, 128), (128, 128))
    dn = (((2,), (0,)), ((), ()))
    grads = {}
    for policy in ("wide", "quantized"):
        r = mxprec.recipes.get(name, residuals=policy)
        f = lambda x, w, r=r: jnp.sum(mxprec.dot_general(x, w, dn, preferred_element_type=jnp.float32, recipe=r) ** 2)
        grads[policy] = jax.jit(jax.grad(f, argnums=(0, 1)))(x, w)
    for a, b in zip(grads["wide"], grads["quantized"]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_vmap_and_checkpoint():
    r = mxprec.recipes.get("mxfp8")
    x, w, _ = _inputs((3, 64, 128), (128, 128))
    dn = (((1,), (0,)), ((), ()))
    f = lambda x, w: mxprec.dot_general(x, w, dn, preferred_element_type=jnp.float32, recipe=r)
    batched = jax.vmap(f, in_axes=(0, None))(x, w)
    looped = jnp.stack([f(x[i], w) for i in range(3)])
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(batched), np.asarray(looped))
    else:  # the GPU runs one M=192 GEMM against three M=64 ones: same products, FP32 sums in another order
        k = x.shape[-1]
        bound = k * k * float(jnp.finfo(jnp.float32).eps) * float(jnp.max(jnp.abs(x))) * float(jnp.max(jnp.abs(w)))
        np.testing.assert_allclose(np.asarray(batched), np.asarray(looped), rtol=0, atol=bound)

    loss = lambda x, w: jnp.sum(f(x[0], w) ** 2)
    plain = jax.grad(loss, argnums=1)(x, w)
    for policy in (jax.checkpoint_policies.nothing_saveable, mxprec.training.remat_policy(save_gemm_outputs=True)):
        remat = jax.grad(jax.checkpoint(loss, policy=policy), argnums=1)(x, w)
        np.testing.assert_array_equal(np.asarray(plain), np.asarray(remat))


def test_remat_policy_saves_named_gemm_outputs():
    r = mxprec.recipes.get("fp8_current")
    x, w, _ = _inputs((64, 128), (128, 128))
    dn = (((1,), (0,)), ((), ()))

    def loss(x, w):
        return jnp.sum(jnp.tanh(mxprec.dot_general(x, w, dn, preferred_element_type=jnp.float32, recipe=r)))

    saved = jax.ad_checkpoint.print_saved_residuals  # noqa: F841  (exists on every supported jax)
    policy = mxprec.training.remat_policy(save_gemm_outputs=True)
    jaxpr = jax.make_jaxpr(jax.grad(jax.checkpoint(loss, policy=policy), argnums=1))(x, w)
    assert "mxprec_gemm" in str(jaxpr)


def test_delayed_state_updates_and_max_combines():
    r = mxprec.recipes.get("fp8_delayed")
    dn = (((1,), (0,)), ((), ()))
    x, w, _ = _inputs((64, 128), (128, 128))
    state = mxprec.DotGeneralState.init(r)

    def two_uses(x, w, st):
        st = mxprec.max_combining(st)
        y1 = mxprec.dot_general(x, w, dn, preferred_element_type=jnp.float32, recipe=r, state=st)
        y2 = mxprec.dot_general(x * jnp.float32(4), w, dn, preferred_element_type=jnp.float32, recipe=r, state=st)
        return jnp.sum(y1) + jnp.sum(y2)

    new = jax.jit(jax.grad(two_uses, argnums=2))(x, w, state)
    amax_x = float(jnp.max(jnp.abs(x)))
    # max-combined: the 4x input's amax wins (a sum would give 5x)
    np.testing.assert_allclose(float(new.lhs.amax_history[0]), 4 * amax_x, rtol=1e-6)
    np.testing.assert_allclose(float(new.lhs.scale), 4 * amax_x / 448.0, rtol=1e-6)
    np.testing.assert_allclose(float(new.rhs.amax_history[0]), float(jnp.max(jnp.abs(w))), rtol=1e-6)
    assert float(new.grad.amax_history[0]) == 1.0  # d(sum)/dy = 1
    np.testing.assert_allclose(float(new.grad.scale), 1.0 / 57344.0, rtol=1e-6)


def test_delayed_state_through_lax_scan_gradient_accumulation():
    r = mxprec.recipes.get("fp8_delayed")
    dn = (((1,), (0,)), ((), ()))
    x, w, _ = _inputs((4, 32, 128), (128, 128))
    scales = jnp.asarray([1.0, 3.0, 2.0, 0.5], jnp.float32)
    state = mxprec.DotGeneralState.init(r)

    def loss(w, st):
        st = mxprec.max_combining(st)

        def body(acc, i):
            y = mxprec.dot_general(x[i] * scales[i], w, dn, preferred_element_type=jnp.float32, recipe=r, state=st)
            return acc + jnp.sum(y), None

        acc, _ = lax.scan(body, jnp.float32(0), jnp.arange(4))
        return acc

    gw, new = jax.jit(jax.grad(loss, argnums=(0, 1)))(w, state)
    want = max(float(jnp.max(jnp.abs(x[i] * scales[i]))) for i in range(4))
    np.testing.assert_allclose(float(new.lhs.amax_history[0]), want, rtol=1e-6)
    assert np.isfinite(np.asarray(gw)).all()


class _MLP(nn.Module):
    recipe: mxprec.Recipe

    @nn.compact
    def __call__(self, x):
        cls = self.recipe.dot_general_cls()
        h = nn.Dense(128, dot_general_cls=cls, name="up")(x)
        h = nn.relu(h)
        return nn.DenseGeneral(64, dot_general_cls=cls, name="down")(h)


@pytest.mark.parametrize("name", ["bf16", "fp8_delayed", "mxfp8"])
def test_flax_linen_training_updates_state(name):
    r = mxprec.recipes.get(name)
    model = _MLP(r)
    x = jax.random.normal(jax.random.key(1), (32, 128), jnp.float32)
    t = jax.random.normal(jax.random.key(2), (32, 64), jnp.float32)
    variables = model.init(jax.random.key(0), x)
    has_state = mxprec.flax.OVERWRITE_WITH_GRADIENT in variables
    assert has_state == r.is_delayed
    import optax

    tx = optax.adam(1e-2)
    opt_state = tx.init(mxprec.flax.split_owg(variables)[0])

    @jax.jit
    def step(variables, opt_state):
        def loss_fn(v):
            y = model.apply(mxprec.flax.max_combine_owg(v), x).astype(jnp.float32)
            return jnp.mean((y - t) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(variables)
        variables, opt_state = mxprec.flax.apply_updates_with_owg(variables, grads, opt_state, tx)
        return variables, opt_state, loss

    losses = []
    with jax.numpy_dtype_promotion("standard"):  # optax mixes float ** int32 internally
        for _ in range(30):
            variables, opt_state, loss = step(variables, opt_state)
            losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0], losses
    if has_state:
        owg = variables[mxprec.flax.OVERWRITE_WITH_GRADIENT]["up"]["MxDotGeneral_0"]
        assert float(owg["input_scale"]) != 1.0
        assert float(owg["input_amax_history"][0]) == pytest.approx(float(jnp.max(jnp.abs(x))), rel=1e-6)
        assert float(owg["kernel_amax_history"][1]) > 0  # history rolled across steps


def test_flax_nn_scan_over_layers():
    r = mxprec.recipes.get("fp8_delayed")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, h, _):
            return nn.Dense(128, dot_general_cls=r.dot_general_cls())(h), None

    Stack = nn.scan(Block, variable_axes={"params": 0, mxprec.flax.OVERWRITE_WITH_GRADIENT: 0},
                    split_rngs={"params": True}, length=3)
    x = jax.random.normal(jax.random.key(1), (32, 128), jnp.float32)
    model = Stack()
    v = model.init(jax.random.key(0), x, None)
    grads = jax.grad(lambda v: jnp.sum(model.apply(v, x, None)[0].astype(jnp.float32)))(v)
    hist = grads[mxprec.flax.OVERWRITE_WITH_GRADIENT]["Dense_0"]["MxDotGeneral_0"]["input_amax_history"]
    assert hist.shape == (3, 1024) and bool(jnp.all(hist[:, 0] > 0))


def test_nnx_linear_swap():
    from flax import nnx

    r = mxprec.recipes.get("mxfp8")
    lin = nnx.Linear(128, 64, dot_general=r.dot_general(), rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (32, 128), jnp.float32)
    y = lin(x)
    want = mxprec.dot_general(x, lin.kernel[...], (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32, recipe=r) + lin.bias[...][None, :]
    np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(want, np.float32), rtol=1e-2, atol=1e-2)
    d = mxprec.flax.DelayedDotGeneral(mxprec.recipes.get("fp8_delayed"))
    lin2 = nnx.LinearGeneral(128, 64, dot_general=d, rngs=nnx.Rngs(0))
    assert lin2(x).shape == (32, 64)
    with pytest.raises(ValueError, match="delayed scaling"):
        mxprec.recipes.get("fp8_delayed").dot_general()


def test_nnx_delayed_state_updates_with_the_documented_step():
    """nnx.grad's default filter (nnx.Param) drops the delayed-scaling state's "gradient", so the state never moves;
    differentiating PARAMS_AND_STATE and writing split_owg_state's second part back updates it."""
    from flax import nnx

    r = mxprec.recipes.get("fp8_delayed")
    x = jax.random.normal(jax.random.key(1), (32, 128), jnp.float32) * 100

    def loss(m):
        return jnp.sum(m(x).astype(jnp.float32) ** 2)

    def sgd(m, param_grads):
        params = nnx.state(m, nnx.Param)
        nnx.update(m, jax.tree.map(lambda p, g: p - 1e-9 * g, params, param_grads))

    m = nnx.Linear(128, 64, dot_general=mxprec.flax.DelayedDotGeneral(r), rngs=nnx.Rngs(0))
    sgd(m, nnx.grad(loss)(m))
    assert float(m.dot_general.lhs_scale[...]) == 1.0 and not bool(jnp.any(m.dot_general.lhs_amax_history[...]))

    for _ in range(2):
        grads = nnx.grad(loss, argnums=nnx.DiffState(0, mxprec.flax.PARAMS_AND_STATE))(m)
        param_grads, new_state = mxprec.flax.split_owg_state(grads)
        sgd(m, param_grads)
        nnx.update(m, new_state)
    amax = float(jnp.max(jnp.abs(x)))
    np.testing.assert_array_equal(np.asarray(m.dot_general.lhs_amax_history[...][:3]), [amax, amax, 0.0])
    assert float(m.dot_general.lhs_scale[...]) == pytest.approx(amax / 448.0, rel=1e-6)


# ----------------------------------------------------------------------------- bad input


def test_bad_inputs_raise_clearly():
    x, w, _ = _inputs((64, 80), (80, 128))
    dn = (((1,), (0,)), ((), ()))
    with pytest.raises(ValueError, match=r"K=80 to be a multiple of 32.*\(64, 80\)"):
        mxprec.dot_general(x, w, dn, recipe="mxfp8")
    with pytest.raises(ValueError, match="contracting sizes differ"):
        mxprec.dot_general(x, jnp.zeros((64, 128), jnp.float32), dn, recipe="mxfp8")
    with pytest.raises(ValueError, match="unknown recipe 'mxfp9'.*mxfp8"):
        mxprec.recipes.get("mxfp9")
    with pytest.raises(ValueError, match="needs state"):
        mxprec.dot_general(jnp.zeros((32, 128), jnp.float32), jnp.zeros((128, 32), jnp.float32), dn, recipe="fp8_delayed")
    with pytest.raises(TypeError, match="floating"):
        mxprec.dot_general(jnp.zeros((32, 128), jnp.int32), jnp.zeros((128, 32), jnp.float32), dn, recipe="mxfp8")
    with pytest.raises(TypeError, match=r"quantizes float32 / bfloat16 / float16 operands; lhs is float8_e4m3fn"):
        mxprec.dot_general(jnp.zeros((32, 128), jnp.float8_e4m3fn), jnp.zeros((128, 32), jnp.float32), dn,
                           recipe="mxfp8")


def test_numpy_operands_as_lax_takes_them():
    """numpy float64 operands (x64 off) become float32, as lax.dot_general takes them; the result equals the one
    of the float32 arrays."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((64, 64)), rng.standard_normal((64, 32))
    dn = (((1,), (0,)), ((), ()))
    for name in ("mxfp8", "fp8_current"):
        got = mxprec.dot_general(x, w, dn, recipe=name)
        want = mxprec.dot_general(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32), dn, recipe=name)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_backward_block_sizes_are_checked_with_the_callers_shapes():
    """The forward needs only K to fit the blocks (inference with 8 tokens runs); differentiating also needs M
    (Wgrad's contraction) and N (Dgrad's): a ValueError naming the GEMM and the caller's shapes, at trace time."""
    dn = (((1,), (0,)), ((), ()))
    for name, (m, k, n), gemm in (("mxfp8", (8, 64, 32), "Wgrad's contraction size M=8"),
                                  ("mxfp8", (64, 64, 40), "Dgrad's contraction size N=40"),
                                  ("nvfp4", (8, 64, 32), "Wgrad's contraction size M=8")):
        x, w, _ = _inputs((m, k), (k, n))
        assert mxprec.dot_general(x, w, dn, recipe=name).shape == (m, n)
        loss = lambda x, w: jnp.sum(mxprec.dot_general(x, w, dn, recipe=name))
        with pytest.raises(ValueError, match=rf"{gemm} to be a multiple of .*lhs float32\({m}, {k}\)"):
            jax.grad(loss, (0, 1))(x, w)


@pytest.mark.parametrize("name", ["fp8_current", "fp8_delayed", "mxfp8", "fp8_block", "nvfp4"])
def test_zero_size_operands(name):
    """An empty GEMM (an MoE expert with no tokens, K = 0, N = 0): lax.dot_general's result (empty, or zeros for
    K = 0), zero or empty gradients, and a delayed state left as it was (its cotangent is the state itself)."""
    dn = (((1,), (0,)), ((), ()))
    recipe = mxprec.recipes.get(name)
    for (m, k, n) in ((0, 128, 128), (128, 0, 128), (128, 128, 0)):
        x = jnp.ones((m, k), jnp.float32)
        w = jnp.ones((k, n), jnp.float32)
        st = mxprec.DotGeneralState.init(recipe)
        if st is not None:  # a state that is not the initial one: a zero cotangent would show
            st = jax.tree.map(lambda v: v + 3.0, st)

        def loss(x, w, st):
            return jnp.sum(mxprec.dot_general(x, w, dn, recipe=recipe, state=st, preferred_element_type=jnp.float32))

        y = jax.jit(lambda x, w, st: mxprec.dot_general(x, w, dn, recipe=recipe, state=st))(x, w, st)
        np.testing.assert_array_equal(np.asarray(y), np.zeros((m, n), np.float32))
        dx, dw, dst = jax.jit(jax.grad(loss, (0, 1, 2)))(x, w, st)
        assert dx.shape == x.shape and dw.shape == w.shape and dx.dtype == dw.dtype == jnp.float32
        assert not np.asarray(dx).any() and not np.asarray(dw).any()
        if st is not None:
            for got, want in zip(jax.tree.leaves(dst), jax.tree.leaves(st)):
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_state_must_match_the_recipe():
    dn = (((1,), (0,)), ((), ()))
    x, w = jnp.zeros((32, 128), jnp.float32), jnp.zeros((128, 32), jnp.float32)
    delayed = mxprec.recipes.get("fp8_delayed")
    for name in ("fp8_current", "bf16"):  # a state cotangent of zeros would overwrite a Flax collection
        with pytest.raises(ValueError, match=rf"{name}' has no delayed scaling, so state must be None"):
            mxprec.dot_general(x, w, dn, recipe=name, state=mxprec.DotGeneralState.init(delayed))
    st = mxprec.DotGeneralState.init(delayed)
    short = mxprec.DelayedScalingState.init(DelayedScaling(mxprec.formats.E4M3, history_len=16))
    with pytest.raises(ValueError, match=r"state.lhs should have \(amax_history, scale\) shapes \(\(1024,\), \(\)\)"):
        mxprec.dot_general(x, w, dn, recipe=delayed, state=mxprec.DotGeneralState(short, st.rhs, st.grad))


@pytest.mark.parametrize("name", ["fp8_delayed", "fp8_current"])
def test_stochastic_grad_rounding_changes_the_gradients(name):
    """stochastic_grad_rounding=True quantizes dY with stochastic rounding for every scaling kind (delayed
    included: it had been dropped there); same inputs, RNE vs SR gradients differ."""
    dn = (((1,), (0,)), ((), ()))
    x, w, _ = _inputs((64, 64), (64, 64))
    g = jax.random.normal(jax.random.key(2), (64, 64)) * 1e-3
    grads = []
    for sr in (False, True):
        r = mxprec.recipes.get(name, stochastic_grad_rounding=sr)
        st = mxprec.DotGeneralState.init(r)
        loss = lambda a, b: jnp.sum(
            mxprec.dot_general(a, b, dn, recipe=r, state=st, preferred_element_type=jnp.float32) * g)
        grads.append(jax.jit(jax.grad(loss, (0, 1)))(x, w))
    assert not all(bool(jnp.array_equal(a, b)) for a, b in zip(*grads))


def test_recipe_names_and_describe():
    names = mxprec.recipes.names()
    for n in ["bf16", "fp16", "fp8_delayed", "fp8_current", "fp8_rowwise", "fp8_block", "mxfp8", "mxfp8_floor",
              "mxfp6", "mxfp4", "nvfp4", "te_fp8_delayedscaling", "te_fp8_currentscaling", "te_mxfp8",
              "te_nvfp4", "aiter_fp4", "fp8"]:
        assert n in names
    assert mxprec.recipes.get("aiter_fp4").fprop_lhs == mxprec.formats.MXFP4
    assert mxprec.recipes.get("fp8").name == "fp8_delayed"
    r6 = mxprec.recipes.get("mxfp6")
    assert r6.fprop_lhs.fmt == mxprec.formats.E2M3 and r6.dgrad_grad.fmt == mxprec.formats.E3M2
    text = mxprec.recipes.get("mxfp8").describe()
    assert "fprop_lhs" in text and "wgrad_grad" in text and "backend" in text


@pytest.mark.skipif(not mxprec.kernels.ffi_available("cpu") or jax.default_backend() != "cpu",
                    reason="libmxprec_cpu.so not built, or not on the CPU (the CUDA kernels take no MX operands)")
def test_ffi_backend_runs_both_custom_calls():
    r = mxprec.recipes.get("mxfp8", backend="ffi")
    x, w, _ = _inputs((64, 128), (128, 128))
    dn = (((1,), (0,)), ((), ()))
    f = jax.jit(jax.grad(lambda x, w: jnp.sum(mxprec.dot_general(x, w, dn, recipe=r).astype(jnp.float32)), argnums=(0, 1)))
    hlo = f.lower(x, w).compile().as_text()
    assert "mxprec_scaled_gemm" in hlo and "mxprec_quantize" in hlo
    assert "backend: ffi" in r.describe() and "JAX quantizer" not in r.describe()


@pytest.mark.skipif(not (mxprec.kernels.ffi_available("cpu") and jax.default_backend() == "cpu"),
                    reason="libmxprec_cpu.so not built, or not on the CPU")
def test_ffi_backend_says_where_stochastic_rounding_runs():
    """nvfp4 rounds dY stochastically, which mxprec_quantize cannot: under backend="ffi" those two copies come from
    the JAX quantizer (two quantize custom calls in the program, not four), and describe() says so."""
    x, w, _ = _inputs((64, 128), (128, 128))
    dn = (((1,), (0,)), ((), ()))
    calls = {}
    for sr in (True, False):
        r = mxprec.recipes.get("nvfp4", backend="ffi", stochastic_grad_rounding=sr)
        assert ("dY's stochastically rounded copies are quantized by the JAX quantizer" in r.describe()) == sr
        loss = lambda x, w, r=r: jnp.sum(mxprec.dot_general(x, w, dn, recipe=r).astype(jnp.float32))
        calls[sr] = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, w).as_text().count("@mxprec_quantize")
    assert calls == {True: 2, False: 4}


@pytest.mark.parametrize("mode", [None, "cuda", "separate", "fused"])
def test_gpu_fp8_operands_to_transpose_sit_behind_a_barrier(monkeypatch, mode):
    """On GPU, without the CUDA transpose (backend="xla", or no library), the FP8 codes XLA must
    transpose for cuBLASLt (contraction axis 1) get an optimization barrier (modes cuda, the default,
    and separate) so the transpose is a kernel of its own; "fused" leaves them to XLA's fusion;
    anything else is an error. The codes are the same arrays."""
    import dataclasses
    import importlib

    sg = importlib.import_module("mxprec.kernels.scaled_gemm")  # the module (the package exports the function)
    if mode is None:
        monkeypatch.delenv("MXPREC_XLA_FP8_TRANSPOSE", raising=False)
    else:
        monkeypatch.setenv("MXPREC_XLA_FP8_TRANSPOSE", mode)
    monkeypatch.setattr(sg.jax, "default_backend", lambda: "gpu")
    spec = TensorScaling(mxprec.formats.E4M3)
    a = mxprec.quantize(jnp.ones((1, 64, 32)), spec, axis=1)  # (B, K, M): contracts axis 1
    b = mxprec.quantize(jnp.ones((1, 64, 48)), spec, axis=1)
    for lc, rc, n_barriers in ((1, 1, 2), (2, 1, 1), (2, 2, 0)):
        l = a if lc == 1 else dataclasses.replace(a, axis=2)  # axis only steers the code selection here
        r = b if rc == 1 else dataclasses.replace(b, axis=2)
        f = lambda l, r, lc=lc, rc=rc: sg._fp8_codes_for_dot(l, r, lc, rc, False)[:2]
        jaxpr = str(jax.make_jaxpr(f)(l, r))
        expected = n_barriers if mode != "fused" else 0
        assert jaxpr.count("optimization_barrier") == expected, (lc, rc, mode, jaxpr)
    monkeypatch.setenv("MXPREC_XLA_FP8_TRANSPOSE", "sideways")
    with pytest.raises(ValueError, match="MXPREC_XLA_FP8_TRANSPOSE"):
        sg._fp8_codes_for_dot(a, b, 1, 1, False)
    with pytest.raises(ValueError, match="MXPREC_XLA_FP8_TRANSPOSE"):
        importlib.import_module("mxprec.kernels.cuda").transposes_codes()


@pytest.mark.parametrize("kind", ["tile", "tile_pow2", "nvfp4", "mx"])
def test_gpu_xla_wide_dot_holds_the_dequantized_elements_exactly(monkeypatch, kind):
    """The XLA path's dequantize-and-dot form as it runs on GPU (default_backend patched; the dots run
    on the CPU here): BF16 only where it holds every dequantized element (MX, power-of-two tiles,
    NVFP4 without its tensor scale), FP32 for tiles with FP32 scales. Within the FP32 summation
    bound of the oracle; BF16 elements of FP32-scaled tiles missed it by 2**-10 of |A| @ |B|. (The
    GPU oracle suite's fp8_block failures of the same session had another cause: the dropped FP8
    rounding that QTensor.values()'s barrier fixes.)"""
    import importlib

    sg = importlib.import_module("mxprec.kernels.scaled_gemm")
    specs = {
        "tile": (TileScaling(mxprec.formats.E4M3, (1, 128)), TileScaling(mxprec.formats.E4M3, (128, 128))),
        "tile_pow2": (TileScaling(mxprec.formats.E4M3, (1, 128), True),
                      TileScaling(mxprec.formats.E4M3, (128, 128), True)),
        "nvfp4": (NVFP4Scaling(), NVFP4Scaling()),
        "mx": (MXScaling(mxprec.formats.E4M3), MXScaling(mxprec.formats.E4M3)),
    }[kind]
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(size=(2, 128, 256)) * np.exp2(rng.integers(-4, 5, size=(2, 128, 1))), jnp.float32)
    w = jnp.asarray(rng.normal(size=(2, 256, 128)) * 0.1, jnp.float32)
    a, b = mxprec.quantize(x, specs[0], axis=2), mxprec.quantize(w, specs[1], axis=1)
    want = np.asarray(sg.reference_scaled_gemm(a, b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32), np.float64)
    bound = np.abs(np.asarray(mxprec.dequantize(a), np.float64)) @ np.abs(np.asarray(mxprec.dequantize(b), np.float64))
    monkeypatch.setattr(sg.jax, "default_backend", lambda: "gpu")
    got = np.asarray(sg._xla_scaled_gemm(a, b, 2, 1, jnp.float32), np.float64)
    assert np.all(np.abs(got - want) <= 2 * 256 * 2.0**-24 * bound + 1e-30), kind


def test_cuda_transpose_contracts_the_transposed_codes_along_axis_2(monkeypatch):
    """With the CUDA transpose (backend="auto", library loaded) the codes contracted along axis 1 go
    through cuda.transpose_codes and the dot contracts the copy along axis 2, with no barrier; the
    GEMM's value is the same within FP32 summation (here the kernel is stood in for by jnp.swapaxes on the
    CPU). Not bit for bit: XLA's CPU dot may sum the K = 64 products in another order for the other layout
    (one element of 1536 differed by one ulp on a CI machine)."""
    import importlib

    sg = importlib.import_module("mxprec.kernels.scaled_gemm")
    calls = []

    def fake_transpose(x):
        calls.append(x.shape)
        return jnp.swapaxes(x, -1, -2)

    monkeypatch.setattr(importlib.import_module("mxprec.kernels.cuda"), "transpose_codes", fake_transpose)
    spec = TensorScaling(mxprec.formats.E4M3)
    rng = np.random.default_rng(0)
    a = mxprec.quantize(jnp.asarray(rng.normal(size=(1, 64, 32)), jnp.float32), spec, axis=1)
    b = mxprec.quantize(jnp.asarray(rng.normal(size=(1, 64, 48)), jnp.float32), spec, axis=1)
    ld, rd, lc, rc = sg._fp8_codes_for_dot(a, b, 1, 1, True)
    assert (lc, rc) == (2, 2) and calls == [(1, 64, 32), (1, 64, 48)]
    assert ld.shape == (1, 32, 64) and rd.shape == (1, 48, 64)
    want = np.asarray(sg._xla_scaled_gemm(a, b, 1, 1, jnp.float32))
    got = np.asarray(sg._xla_scaled_gemm(a, b, 1, 1, jnp.float32, cuda_transpose=True))
    # Each is the exact sum within gamma_K * sum |products| (K = 64), then two scale multiplies.
    da = np.abs(np.asarray(mxprec.dequantize(a, jnp.float32), np.float64))
    db = np.abs(np.asarray(mxprec.dequantize(b, jnp.float32), np.float64))
    bound = (2 * 64 + 4) * 2.0**-24 * np.einsum("bkm,bkn->bmn", da, db)
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)
    assert np.mean(got == want) > 0.9  # the same computation, not merely a close one


@pytest.mark.skipif(not ON_GPU, reason="inspects XLA's GPU lowering of the per-tensor FP8 GEMMs")
@pytest.mark.parametrize("name", ["fp8_current", "fp8_delayed"])
def test_gpu_xla_per_tensor_gemms_are_fp8_dots_with_fp32_accumulation(name):
    """No silent wide fallback: every GEMM of the step consumes FP8 operands, none fast-accumulates."""
    import re

    recipe = mxprec.recipes.get(name, backend="xla")
    state = mxprec.DotGeneralState.init(recipe)
    x = jnp.ones((1024, 512), jnp.bfloat16)
    w = jnp.ones((512, 768), jnp.float32)
    g = jnp.ones((1024, 768), jnp.bfloat16)
    dn = (((1,), (0,)), ((), ()))

    def step(x, w, g):
        y, vjp = jax.vjp(lambda x, w: mxprec.dot_general(x, w, dn, recipe=recipe, state=state), x, w)
        return y, vjp(g)

    hlo = jax.jit(step).lower(x, w, g).compile().as_text()
    # Optimized HLO prints operands without types: judge each GEMM by its cuBLAS target.
    targets = re.findall(r'custom_call_target="(__cublas[^"]*)"', hlo)
    assert targets.count("__cublas$lt$matmul$f8") == 3, targets
    assert len(targets) == 3 and " dot(" not in hlo, "a GEMM that is not a cuBLASLt FP8 matmul"
    assert hlo.count('"algorithm":"ALG_DOT_ANY_F8_ANY_F8_F32"') == 3, "FP8 GEMMs must accumulate in FP32"


def _record_quantizer_calls(monkeypatch) -> list:
    """Wraps dot_general's ``_q``: each call appends ``(operand size, weight flag)`` to the returned list
    (operands in dot_general's canonical 3-D form). On a GPU with the CUDA kernels, fp8_block's Wgrad copies (and
    dY's Dgrad copy with them) would come from the transposed quantize calls, not ``_q``: that routing is switched
    off here (``MXPREC_TRANSPOSED_QUANTIZE=0``, the same bits; tests/test_cuda_quantize_transposed.py covers it)."""
    import sys

    monkeypatch.setenv("MXPREC_TRANSPOSED_QUANTIZE", "0")

    dg = sys.modules["mxprec.dot_general"]  # the module (mxprec.dot_general is the function)
    seen = []
    real_q = dg._q

    def recording_q(t, spec, axis, recipe_, state=None, key=None, backend="xla", weight=False):
        seen.append((math.prod(t.shape), weight))
        return real_q(t, spec, axis, recipe_, state, key, backend, weight)

    monkeypatch.setattr(dg, "_q", recording_q)
    return seen


@pytest.mark.parametrize("recipe", ["fp8_current", "fp8_delayed", "fp8_block"])
def test_weight_operands_are_marked_for_the_quantizer(monkeypatch, recipe):
    """dot_general tells _q which operand is the weight (rhs: Fprop's W, Dgrad's W): MXPREC_AUTO_QUANTIZE's
    ``weights`` routes exactly those to the CUDA quantize kernel under backend="auto"."""
    seen = _record_quantizer_calls(monkeypatch)
    r = mxprec.recipes.get(recipe)
    x = jnp.ones((128, 256), jnp.float32)  # sizes tell the operands apart: x 32768, w 98304, dY 49152
    w = jnp.ones((256, 384), jnp.float32)
    state = mxprec.DotGeneralState.init(r)  # None unless delayed

    def f(x, w):
        return mxprec.dot_general(x, w, (((1,), (0,)), ((), ())), recipe=r, state=state).sum()

    jax.grad(f, argnums=(0, 1))(x, w)
    assert {wt for size, wt in seen if size == w.size} == {True}
    assert {wt for size, wt in seen if size != w.size} == {False}
    assert {size for size, _ in seen} >= {x.size, 128 * 384}


@pytest.mark.parametrize("recipe", ["fp8_current", "fp8_delayed", "fp8_block"])
def test_wide_residuals_keep_the_per_tensor_copies_the_backward_would_recompute(monkeypatch, recipe):
    """residuals="wide": a per-tensor X / W copy whose backward spec is the same is kept from Fprop, not
    requantized (same codes, one pass fewer); so is fp8_block's 128x128 W copy (the same tiles whichever of its
    two axes is contracted); fp8_block's 1x128 X copy (other tiles per GEMM) is requantized."""
    calls = _record_quantizer_calls(monkeypatch)
    r = mxprec.recipes.get(recipe)
    assert r.residuals == "wide"
    x = jax.random.normal(jax.random.PRNGKey(0), (128, 256), jnp.float32)  # sizes: x 32768, w 98304, dY 49152
    w = jax.random.normal(jax.random.PRNGKey(1), (256, 384), jnp.float32)
    state = mxprec.DotGeneralState.init(r)

    def f(x, w):
        return jnp.sum(mxprec.dot_general(x, w, (((1,), (0,)), ((), ())), recipe=r, state=state) ** 2)

    jax.grad(f, argnums=(0, 1))(x, w)
    seen = [size for size, _ in calls]
    per_tensor = recipe != "fp8_block"
    assert seen.count(x.size) == (1 if per_tensor else 2), seen
    assert seen.count(w.size) == 1, seen


def test_one_delayed_state_per_tensor_needs_one_spec():
    """X's Fprop and Wgrad roles share one state: different DelayedScaling specs (E5M2 and E4M3) would quantize
    Wgrad's X with a scale made for E5M2 (saturating at 448)."""
    with pytest.raises(ValueError, match="fprop_lhs and Recipe.wgrad_lhs .* must be equal"):
        mxprec.Recipe(name="mixed", fprop_lhs=DelayedScaling(mxprec.formats.E5M2), wgrad_lhs=DelayedScaling(mxprec.formats.E4M3))
    mxprec.Recipe(name="same", fprop_lhs=DelayedScaling(mxprec.formats.E4M3), wgrad_lhs=DelayedScaling(mxprec.formats.E4M3))


def test_state_dtype_is_checked_before_running():
    r = mxprec.recipes.get("fp8_delayed")
    x, w = jnp.ones((32, 128)), jnp.ones((128, 32))
    for dt in (jnp.bfloat16, jnp.int32):
        st = jax.tree.map(lambda v, dt=dt: v.astype(dt), mxprec.DotGeneralState.init(r))
        with pytest.raises(TypeError, match=r"state.lhs \(amax_history, scale\) must be float32"):
            mxprec.dot_general(x, w, (((1,), (0,)), ((), ())), recipe=r, state=st)


def test_unquantized_fprop_pair_with_a_transposed_lhs_runs_under_jit():
    """A custom recipe that quantizes only dY: Fprop's BF16 pair on the transposed X (lhs contracting dim 0), which
    XLA's CPU runtime cannot run as a BF16 x BF16 -> F32 dot, equals the bf16 preset's result."""
    dn = (((0,), (0,)), ((), ()))
    x = jax.random.normal(jax.random.key(0), (128, 128))
    w = jax.random.normal(jax.random.key(1), (128, 256))
    r = mxprec.Recipe(name="grad_only_row", dgrad_grad=RowScaling(mxprec.formats.E5M2), wgrad_grad=RowScaling(mxprec.formats.E5M2))
    got = jax.jit(lambda x, w: mxprec.dot_general(x, w, dn, recipe=r, preferred_element_type=jnp.float32))(x, w)
    want = jax.jit(lambda x, w: mxprec.dot_general(x, w, dn, recipe="bf16", preferred_element_type=jnp.float32))(x, w)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-4)
