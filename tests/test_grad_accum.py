"""Token-weighted gradient accumulation: seed 003 worked examples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mxprec.training import grad_accum as ga, loss_scaling as lsm


def linear_loss(theta, mb):
    """Per-token loss x_t * theta; returns (sum over valid tokens, n_valid)."""
    mask = mb["mask"]
    tok = jnp.where(mask, mb["x"] * theta, jnp.float32(0))
    return jnp.sum(tok), jnp.sum(mask.astype(jnp.int32))


def stack(*mbs):
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *mbs)


def mb(x, mask):
    return {"x": jnp.asarray(x, jnp.float32), "mask": jnp.asarray(mask, jnp.bool_)}


# Two micro-batches, one valid token each (N = 2): gradients 1/2 = 0.5 and 9/2 = 4.5.
SEED = stack(mb([1.0, 7.0], [True, False]), mb([9.0, 7.0], [True, False]))


def test_seed_example_sgd():
    theta = jnp.float32(1.0)
    loss, g = ga.accumulate_gradients(linear_loss, theta, SEED)
    assert float(g) == 5.0 and g.dtype == jnp.float32
    assert float(loss) == 5.0
    assert float(theta - jnp.float32(0.1) * g) == pytest.approx(0.5)


def test_seed_example_per_microbatch_and_loss_scale():
    theta = jnp.float32(1.0)
    n = jnp.float32(2)
    ls = lsm.DynamicLossScale.create(8.0)
    per = [ga.microbatch_grads(linear_loss, theta, jax.tree_util.tree_map(lambda a, i=i: a[i], SEED), n)[1]
           for i in range(2)]
    assert [float(p) for p in per] == [0.5, 4.5]
    scaled = [
        ga.microbatch_grads(linear_loss, theta, jax.tree_util.tree_map(lambda a, i=i: a[i], SEED), n, ls)[1]
        for i in range(2)
    ]
    assert [float(p) for p in scaled] == [4.0, 36.0]
    loss, g = jax.jit(lambda t, m, s: ga.accumulate_gradients(linear_loss, t, m, loss_scale=s))(theta, SEED, ls)
    assert float(g) == 5.0 and float(loss) == 5.0


def test_overflow_in_cycle():
    theta = jnp.float32(1.0)
    mbs = stack(mb([1.0], [True]), mb([jnp.inf], [True]))
    ls = lsm.DynamicLossScale.create(8.0)
    _, g = ga.accumulate_gradients(linear_loss, theta, mbs, loss_scale=ls)
    finite = lsm.all_finite(g)
    assert not bool(finite)
    new_theta = lsm.masked_update(finite, theta - jnp.float32(0.1) * g, theta)
    assert float(new_theta) == 1.0
    assert float(lsm.update(ls, finite).scale) == 4.0


def test_token_weighting_three_and_one():
    theta = jnp.float32(1.0)
    mbs = stack(mb([1.0, 2.0, 3.0, 100.0], [1, 1, 1, 0]), mb([4.0, 100.0, 100.0, 100.0], [1, 0, 0, 0]))
    loss, g = ga.accumulate_gradients(linear_loss, theta, mbs)
    # each valid token weighted 1/4: (1+2+3+4)/4 = 2.5 (mean of means would give 3.0)
    assert float(g) == 2.5 and float(loss) == 2.5
    assert float(ga.count_valid_tokens(linear_loss, theta, mbs)) == 4.0


def test_empty_microbatch_contributes_zero():
    theta = jnp.float32(1.0)
    base = [mb([1.0, 2.0, 3.0, 0.0], [1, 1, 1, 0]), mb([4.0, 0.0, 0.0, 0.0], [1, 0, 0, 0])]
    empty = mb([5.0, 5.0, 5.0, 5.0], [0, 0, 0, 0])
    l1, g1 = ga.accumulate_gradients(linear_loss, theta, stack(*base))
    l2, g2 = ga.accumulate_gradients(linear_loss, theta, stack(base[0], empty, base[1]))
    assert float(g1) == float(g2) and float(l1) == float(l2)
    # a cycle with no valid token: zero loss, zero gradient, no NaN
    l0, g0 = ga.accumulate_gradients(linear_loss, theta, stack(empty, empty))
    assert float(l0) == 0.0 and float(g0) == 0.0


def test_pytree_params_bf16_grads_fp32():
    params = {"a": jnp.ones((3,), jnp.bfloat16), "b": jnp.float32(2)}

    def loss_fn(p, m):
        tok = jnp.sum(p["a"].astype(jnp.float32)) * m["x"] * p["b"]
        tok = jnp.where(m["mask"], tok, jnp.float32(0))
        return jnp.sum(tok), jnp.sum(m["mask"].astype(jnp.int32))

    mbs = stack(mb([1.0, 1.0], [1, 1]), mb([2.0, 0.0], [1, 0]))
    loss, g = ga.accumulate_gradients(loss_fn, params, mbs, total_valid=jnp.int32(4))  # explicit N (e.g. global count)
    assert g["a"].dtype == jnp.float32 and g["a"].shape == (3,)
    np.testing.assert_allclose(g["a"], np.full((3,), 2.0, np.float32))  # bf16 per-micro-batch grads, exact here
    assert float(g["b"]) == 3.0
    assert float(loss) == 6.0


def test_bad_microbatches():
    with pytest.raises(ValueError, match="leading"):
        ga.accumulate_gradients(linear_loss, jnp.float32(1), {"x": jnp.zeros((2, 3), jnp.float32), "mask": jnp.zeros((3, 3), jnp.bool_)})


def test_empty_microbatch_axis_raises():
    """M = 0 micro-batches: the scan would never run and the delayed-scaling leaves would keep their -inf start."""
    with pytest.raises(ValueError, match=r"empty micro-batch axis \(M = 0\)"):
        ga.accumulate_gradients(linear_loss, jnp.float32(1),
                                {"x": jnp.zeros((0, 2), jnp.float32), "mask": jnp.zeros((0, 2), jnp.bool_)})


def test_integer_parameter_leaves():
    """An int leaf (a step counter) in params: a float32 zero gradient of its shape, the float ones as usual; and
    unscale_grads passes jax.vjp's float0 gradients of int leaves through."""

    def loss(p, m):
        s, n = linear_loss(p["w"], m)
        return s + 0.0 * p["step"].astype(jnp.float32), n

    params = {"w": jnp.float32(1.0), "step": jnp.int32(7)}
    ls = lsm.DynamicLossScale.create(8.0)
    mean, grads = jax.jit(lambda p, m: ga.accumulate_gradients(loss, p, m, loss_scale=ls))(params, SEED)
    assert float(mean) == 5.0 and float(grads["w"]) == 5.0
    assert grads["step"].dtype == jnp.float32 and float(grads["step"]) == 0.0
    _, vjp = jax.vjp(lambda p: loss(p, jax.tree_util.tree_map(lambda v: v[0], SEED))[0], params)
    (g,) = vjp(jnp.float32(8.0))
    un = lsm.unscale_grads(g, ls)
    assert un["step"].dtype == jax.dtypes.float0 and float(un["w"]) == 1.0


def test_throughput():
    assert ga.throughput(80, 100, 1.0) == {"useful_tokens_per_s": 80.0, "positions_per_s": 100.0}
    with pytest.raises(ValueError, match="seconds must be > 0, got 0"):
        ga.throughput(80, 100, 0)
    with pytest.raises(ValueError, match="valid_tokens=120"):
        ga.throughput(120, 100, 1.0)


def test_delayed_scaling_state_is_max_combined_across_microbatches():
    import flax.linen as nn
    from jax import lax

    import mxprec

    r = mxprec.recipes.get("fp8_delayed")
    model = nn.Dense(128, dot_general_cls=r.dot_general_cls())
    xs = jax.random.normal(jax.random.key(0), (3, 32, 128), jnp.float32)
    xs = xs * jnp.asarray([1.0, 5.0, 2.0], jnp.float32)[:, None, None]
    variables = model.init(jax.random.key(1), xs[0])

    def loss_fn(v, x):
        y = model.apply(v, x).astype(jnp.float32)
        return jnp.sum(y * y), jnp.float32(x.shape[0])

    loss, grads = mxprec.training.accumulate_gradients(loss_fn, variables, xs)
    hist = grads[mxprec.flax.OVERWRITE_WITH_GRADIENT]["MxDotGeneral_0"]["input_amax_history"]
    want = max(float(jnp.max(jnp.abs(xs[i]))) for i in range(3))
    assert float(hist[0]) == want  # max over micro-batches, not the sum
    assert float(lax.stop_gradient(hist[1])) == 0.0
    assert bool(jnp.isfinite(loss))


def test_nnx_delayed_scaling_state_is_max_combined_and_not_unscaled():
    """An ``nnx.split`` state: its OverwriteWithGradient variables' paths name the attribute, not linen's collection;
    they still combine by max across micro-batches and are not divided by the loss scale."""
    from flax import nnx

    import mxprec
    from mxprec.flax import DelayedDotGeneral

    lin = nnx.Linear(128, 128, dot_general=DelayedDotGeneral(mxprec.recipes.get("fp8_delayed")), rngs=nnx.Rngs(0))
    graph, state = nnx.split(lin)
    xs = jax.random.normal(jax.random.key(0), (3, 32, 128), jnp.float32) * jnp.asarray([1.0, 5.0, 2.0])[:, None, None]

    def loss_fn(st, x):
        y = nnx.merge(graph, st)(x).astype(jnp.float32)
        return jnp.sum(y * y), jnp.float32(x.shape[0])

    _, grads = ga.accumulate_gradients(loss_fn, state, xs, loss_scale=lsm.DynamicLossScale.create(8.0))
    hist = grads["dot_general"]["lhs_amax_history"][...]
    assert float(hist[0]) == max(float(jnp.max(jnp.abs(xs[i]))) for i in range(3))
    assert bool(jnp.all(jnp.isfinite(grads["kernel"][...])))


def test_nnx_module_applied_twice_combines_by_max():
    from flax import nnx

    import mxprec
    from mxprec.flax import DelayedDotGeneral, max_combine_owg_state

    lin = nnx.Linear(128, 128, dot_general=DelayedDotGeneral(mxprec.recipes.get("fp8_delayed")), rngs=nnx.Rngs(0))
    graph, state = nnx.split(lin)
    x = jax.random.normal(jax.random.key(0), (32, 128), jnp.float32)

    def loss(st, combine):
        m = nnx.merge(graph, max_combine_owg_state(st) if combine else st)
        return jnp.sum(m(m(x)).astype(jnp.float32))

    amaxes = (float(jnp.max(jnp.abs(x))), float(jnp.max(jnp.abs(lin(x)))))
    g = jax.jit(jax.grad(loss), static_argnums=1)(state, True)
    assert float(g["dot_general"]["lhs_amax_history"][...][0]) == max(amaxes)
    g = jax.jit(jax.grad(loss), static_argnums=1)(state, False)  # without it the two updates add up
    assert float(g["dot_general"]["lhs_amax_history"][...][0]) == pytest.approx(sum(amaxes))


def test_complex_parameters_are_refused():
    def loss_fn(p, mb):
        return jnp.real(p * mb), jnp.float32(1)

    with pytest.raises(ValueError, match="complex gradient leaf"):
        ga.accumulate_gradients(loss_fn, jnp.complex64(1 + 1j), jnp.ones((2,), jnp.complex64))
