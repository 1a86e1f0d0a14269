"""Loss scaling: seed 003 worked examples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mxprec.training import loss_scaling as lsm


def test_scaled_microbatch_grads_unscale_to_five():
    ls = lsm.DynamicLossScale.create(8.0)
    theta = jnp.float32(1.0)
    # micro-batch losses with gradients 0.5 and 4.5 w.r.t. theta
    g1 = jax.grad(lambda t: lsm.scale_loss(jnp.float32(0.5) * t, ls))(theta)
    g2 = jax.grad(lambda t: lsm.scale_loss(jnp.float32(4.5) * t, ls))(theta)
    assert float(g1) == 4.0 and float(g2) == 36.0
    grads = lsm.unscale_grads(g1 + g2, ls)
    assert float(grads) == 5.0
    assert grads.dtype == jnp.float32
    theta_new = theta - jnp.float32(0.1) * grads
    assert float(theta_new) == pytest.approx(0.5)


def test_overflow_skips_update_and_halves_scale():
    ls = lsm.DynamicLossScale.create(8.0, growth_interval=3)
    params = {"w": jnp.array([1.0, 2.0], jnp.float32)}
    opt = {"mu": jnp.array([0.1, 0.2], jnp.float32), "count": jnp.int32(7)}
    grads = {"w": jnp.array([jnp.inf, 1.0], jnp.float32)}
    finite = lsm.all_finite(grads)
    assert not bool(finite)
    new_params = {"w": params["w"] - grads["w"]}
    new_opt = {"mu": opt["mu"] + jnp.float32(1), "count": opt["count"] + jnp.int32(1)}
    kept_p, kept_o = lsm.masked_update(finite, (new_params, new_opt), (params, opt))
    np.testing.assert_array_equal(kept_p["w"], params["w"])
    np.testing.assert_array_equal(kept_o["mu"], opt["mu"])
    assert int(kept_o["count"]) == 7
    ls2 = lsm.update(ls, finite)
    assert float(ls2.scale) == 4.0 and int(ls2.good_steps) == 0


def test_nan_also_overflow_and_finite_applies():
    assert not bool(lsm.all_finite({"a": jnp.float32(1), "b": jnp.array([jnp.nan], jnp.float32)}))
    assert bool(lsm.all_finite({}))
    finite = lsm.all_finite({"a": jnp.ones((2,), jnp.bfloat16)})
    new = lsm.masked_update(finite, jnp.float32(3), jnp.float32(1))
    assert float(new) == 3.0


def test_growth_after_interval():
    ls = lsm.DynamicLossScale.create(8.0, growth_interval=3)
    t = jnp.asarray(True)
    ls = lsm.update(ls, t)
    ls = lsm.update(ls, t)
    assert float(ls.scale) == 8.0 and int(ls.good_steps) == 2
    ls = lsm.update(ls, t)
    assert float(ls.scale) == 16.0 and int(ls.good_steps) == 0
    # an overflow resets the counter
    ls = lsm.update(ls, t)
    ls = lsm.update(ls, jnp.asarray(False))
    assert float(ls.scale) == 8.0 and int(ls.good_steps) == 0


def test_clamping_and_jit():
    ls = lsm.DynamicLossScale.create(2.0, growth_interval=1, min_scale=1.0, max_scale=4.0)
    step = jax.jit(lsm.update)
    ls = step(ls, jnp.asarray(True))
    ls = step(ls, jnp.asarray(True))
    assert float(ls.scale) == 4.0
    ls = step(ls, jnp.asarray(False))
    ls = step(ls, jnp.asarray(False))
    ls = step(ls, jnp.asarray(False))
    assert float(ls.scale) == 1.0
    assert ls.growth_interval == 1  # static field survives jit


def test_static_and_noop():
    ls = lsm.NoOpLossScale()
    loss = jnp.float32(2.5)
    assert float(lsm.scale_loss(loss, ls)) == 2.5
    assert lsm.update(ls, jnp.asarray(False)) is ls
    s = lsm.StaticLossScale.create(4.0)
    assert float(lsm.unscale_grads(jnp.float32(8), s)) == 2.0


def test_bad_config():
    with pytest.raises(ValueError, match="backoff_factor"):
        lsm.DynamicLossScale.create(8.0, backoff_factor=2.0)
    with pytest.raises(ValueError, match="initial_scale=0.5"):
        lsm.DynamicLossScale.create(0.5)
    with pytest.raises(ValueError, match="-1"):
        lsm.StaticLossScale.create(-1.0)
    with pytest.raises(ValueError, match="leaf mismatch"):
        lsm.masked_update(jnp.asarray(True), jnp.zeros((2,), jnp.float32), jnp.zeros((3,), jnp.float32))
    with pytest.raises(ValueError, match="max_scale must be a finite float32, got inf"):
        lsm.DynamicLossScale.create(8.0, max_scale=float("inf"))
    with pytest.raises(ValueError, match="max_scale must be a finite float32"):
        lsm.DynamicLossScale.create(8.0, max_scale=1e39)
    for bad in (lambda f: lsm.masked_update(f, jnp.zeros(()), jnp.ones(())),
                lambda f: lsm.DynamicLossScale.create(8.0).update(f)):
        with pytest.raises(ValueError, match=r"finite must be a bool scalar .* shape \(1,\)"):
            bad(jnp.asarray([True]))
    # limits that would leave the scale Inf / 0 (every gradient NaN from then on) or overflow good_steps' int32
    for bad in (float("inf"), 1e39, 0.0):
        with pytest.raises(ValueError, match="scale must be a positive finite float32"):
            lsm.StaticLossScale.create(bad)
    with pytest.raises(ValueError, match="min_scale must be a normal float32"):
        lsm.DynamicLossScale.create(8.0, min_scale=1e-46)
    with pytest.raises(ValueError, match="growth_interval"):
        lsm.DynamicLossScale.create(8.0, growth_interval=2**31)
    # a NaN (or any number) passed as the flag would read as True ("finite")
    for bad in (lambda f: lsm.masked_update(f, jnp.zeros(()), jnp.ones(())),
                lambda f: lsm.DynamicLossScale.create(8.0).update(f)):
        with pytest.raises(ValueError, match="finite must be a bool scalar .* dtype float32"):
            bad(jnp.float32(float("nan")))


def test_complex_gradients_are_refused():
    with pytest.raises(ValueError, match="complex gradient leaf"):
        lsm.unscale_grads(jnp.complex64(2 + 4j), lsm.StaticLossScale.create(2.0))


def _fp16_delayed_layer_grads(x, ls):
    """A linen fp8_delayed Dense in float16: its variables and the loss-scaled gradients of a mean-square loss."""
    import flax.linen as nn

    from mxprec import recipes

    layer = nn.Dense(128, dot_general_cls=recipes.get("fp8_delayed").dot_general_cls(), dtype=jnp.float16)
    v = layer.init(jax.random.key(0), x)

    def loss(v, x):
        return lsm.scale_loss(jnp.mean(layer.apply(v, x).astype(jnp.float32) ** 2), ls)

    return v, jax.jit(jax.grad(loss))(v, x)


def test_delayed_scaling_state_is_not_unscaled_nor_checked():
    """The OWG collection's "gradient" is the new delayed-scaling state: unscale_grads leaves it as it is (it divided
    the scale and amax history by the loss scale until the fiftieth session), and all_finite does not read it (an
    overflow's Inf amax stays in the history for history_len steps and would fail every one of them)."""
    ls = lsm.DynamicLossScale.create(2.0**15)
    x = jax.random.normal(jax.random.key(1), (64, 128), jnp.float32).astype(jnp.float16)
    _, g = _fp16_delayed_layer_grads(x, ls)
    owg = g["_overwrite_with_gradient"]
    u = lsm.unscale_grads(g, ls)
    for a, b in zip(jax.tree.leaves(owg), jax.tree.leaves(u["_overwrite_with_gradient"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    state = owg["MxDotGeneral_0"]
    assert float(state["input_amax_history"][0]) == float(jnp.max(jnp.abs(x.astype(jnp.float32))))
    np.testing.assert_array_equal(np.asarray(u["params"]["kernel"]), np.asarray(g["params"]["kernel"]) / 2.0**15)
    assert bool(lsm.all_finite(u))
    # an Inf left in the history by an earlier overflow: not a gradient, not checked; an Inf gradient still is
    hist = state["input_amax_history"]
    poisoned = jax.tree.map(lambda t: t, u)
    poisoned["_overwrite_with_gradient"]["MxDotGeneral_0"]["input_amax_history"] = hist.at[1].set(jnp.inf)
    assert bool(lsm.all_finite(poisoned))
    poisoned["params"]["kernel"] = poisoned["params"]["kernel"].at[0, 0].set(jnp.nan)
    assert not bool(lsm.all_finite(poisoned))


def test_overflowed_step_with_the_state_masked_records_nothing():
    """The documented loop: masked_update over the whole variables (OWG state included) keeps the old state on
    overflow, so the Inf amax never enters the history, and the next clean step is finite and applied."""
    import optax

    from mxprec.flax import apply_updates_with_owg, split_owg

    ls = lsm.DynamicLossScale.create(2.0**15)
    x = jax.random.normal(jax.random.key(1), (64, 128), jnp.float32).astype(jnp.float16)
    v, _ = _fp16_delayed_layer_grads(x, ls)
    tx = optax.sgd(1e-3)
    opt = tx.init(split_owg(v)[0])
    _, g_bad = _fp16_delayed_layer_grads(x.at[0, 0].set(jnp.inf), ls)
    g_bad = lsm.unscale_grads(g_bad, ls)
    finite = lsm.all_finite(g_bad)
    assert not bool(finite)
    new_v, new_opt = apply_updates_with_owg(v, g_bad, opt, tx)
    v2, _ = lsm.masked_update(finite, (new_v, new_opt), (v, opt))
    hist = v2["_overwrite_with_gradient"]["MxDotGeneral_0"]["input_amax_history"]
    assert bool(jnp.all(jnp.isfinite(hist)))
    _, g2 = _fp16_delayed_layer_grads(x, ls)
    assert bool(lsm.all_finite(lsm.unscale_grads(g2, ls)))
