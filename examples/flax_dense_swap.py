"""Swap mxprec into an existing Flax model: train it under bf16, fp8_delayed and mxfp8.

The model is an ordinary linen MLP classifier; the only change is ``dot_general_cls=`` on its
Dense layers. Delayed scaling state rides in the ``_overwrite_with_gradient`` collection and is
handled by ``flax.training.train_state.TrainState.apply_gradients`` (no custom loop code).

    python examples/flax_dense_swap.py --steps 300
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

import mxprec


class MLP(nn.Module):
    """An existing model: the ``dot_general_cls`` argument is the only mxprec-specific line."""

    hidden: int = 256
    classes: int = 16
    dot_general_cls: object = None

    @nn.compact
    def __call__(self, x):
        for i in range(2):
            x = nn.Dense(self.hidden, dot_general_cls=self.dot_general_cls, name=f"hidden_{i}")(x)
            x = nn.gelu(x)
        return nn.Dense(self.classes, name="head")(x)  # small head left in BF16/FP32


def make_data(key, n=4096, dim=128, classes=16):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (n, dim), jnp.float32)
    w = jax.random.normal(kw, (dim, classes), jnp.float32)
    return x, jnp.argmax(x @ w + 0.5 * jnp.sin(3 * x[:, :classes]), axis=-1)


def train(recipe_name: str, steps: int, batch: int = 256, seed: int = 0):
    recipe = mxprec.recipes.get(recipe_name)
    model = MLP(dot_general_cls=recipe.dot_general_cls())
    x, y = make_data(jax.random.key(seed))
    variables = model.init(jax.random.key(1), x[:batch])
    # TrainState.apply_gradients overwrites the _overwrite_with_gradient collection with its
    # "gradient" (the updated delayed-scaling state), as Flax's own FP8 ops require.
    state = train_state.TrainState.create(apply_fn=model.apply, params=variables, tx=optax.adamw(3e-3))

    @jax.jit
    def step(state, xb, yb):
        def loss_fn(params):
            logits = state.apply_fn(params, xb)
            return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), yb).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    losses = []
    for i in range(steps):
        lo = (i * batch) % (x.shape[0] - batch)
        state, loss = step(state, x[lo:lo + batch], y[lo:lo + batch])
        losses.append(float(loss))
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--recipes", default="bf16,fp8_delayed,mxfp8")
    args = p.parse_args(argv)
    for name in args.recipes.split(","):
        losses = train(name, args.steps)
        marks = [0, len(losses) // 4, len(losses) // 2, len(losses) - 1]
        print(f"{name:12s} " + "  ".join(f"step {i}: {losses[i]:.4f}" for i in marks))


if __name__ == "__main__":
    main()
