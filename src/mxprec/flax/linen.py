"""Flax linen: ``recipe.dot_general_cls()`` for ``nn.Dense`` / ``nn.DenseGeneral``.

Delayed-scaling recipes keep ``{input,kernel,output_grad}_{amax_history,scale}`` in the
``_overwrite_with_gradient`` collection (the names Flax fp8_ops, Transformer Engine and MaxText
use). The backward pass returns the updated values as their "gradients"; the training loop
overwrites them (``flax.training.train_state.TrainState.apply_gradients`` does this, as does
:func:`mxprec.flax.apply_updates_with_owg`).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax.numpy as jnp

from mxprec.dot_general import DotGeneralState, dot_general
from mxprec.recipes import Recipe
from mxprec.scaling import DelayedScalingState

OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"
_FLAX_NAMES = {"lhs": "input", "rhs": "kernel", "grad": "output_grad"}


class MxDotGeneral(nn.Module):
    """A linen module with ``lax.dot_general``'s call signature running ``recipe``."""

    recipe: Recipe

    @nn.compact
    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
        state = None
        if self.recipe.is_delayed:
            parts, variables = {}, {}
            for t, flax_name in _FLAX_NAMES.items():
                spec = self.recipe.delayed_spec(t)
                if spec is None:
                    parts[t] = None
                    continue
                hist = self.variable(OVERWRITE_WITH_GRADIENT, f"{flax_name}_amax_history",
                                     jnp.zeros, (spec.history_len,), jnp.float32)
                scale = self.variable(OVERWRITE_WITH_GRADIENT, f"{flax_name}_scale", jnp.ones, (), jnp.float32)
                parts[t] = DelayedScalingState(amax_history=hist.value, scale=scale.value)
                variables[t] = (hist, scale)
            state = DotGeneralState(**parts)
        return dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type,
                           recipe=self.recipe, state=state)


def make_dot_general_cls(recipe: Recipe):
    """A zero-argument module class (what ``dot_general_cls=`` expects) bound to ``recipe``."""
    return functools.partial(MxDotGeneral, recipe=recipe)
