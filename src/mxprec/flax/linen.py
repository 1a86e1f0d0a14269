"""Flax linen: ``recipe.dot_general_cls()`` for ``nn.Dense`` / ``nn.DenseGeneral``.

Delayed-scaling recipes keep ``{input,kernel,output_grad}_{amax_history,scale}`` in the
``_overwrite_with_gradient`` collection (the names Flax fp8_ops, Transformer Engine and MaxText
use), as float32. The backward pass returns the updated values as their "gradients"; the training loop
overwrites them (``flax.training.train_state.TrainState.apply_gradients`` does this, as does
:func:`mxprec.flax.apply_updates_with_owg`). A layer used several times in one step: wrap the
variables with :func:`max_combine_owg` inside the loss so its updates combine by max.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax.numpy as jnp

from mxprec.dot_general import DotGeneralState, dot_general, max_combining
from mxprec.recipes import Recipe
from mxprec.scaling import DelayedScalingState

OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"


def max_combine_owg(variables):
    """``variables`` with its OWG collection marked max-combining (see mxprec.dot_general.max_combining).

    Call at the top of the loss function, so a layer applied several times per step (or a
    ``lax.scan`` over micro-batches inside the loss) combines its state updates by max.
    """
    if OVERWRITE_WITH_GRADIENT not in variables:
        return variables
    out = dict(variables)
    out[OVERWRITE_WITH_GRADIENT] = max_combining(variables[OVERWRITE_WITH_GRADIENT])
    return out
_FLAX_NAMES = {"lhs": "input", "rhs": "kernel", "grad": "output_grad"}


class MxDotGeneral(nn.Module):
    """A linen module with ``lax.dot_general``'s call signature running ``recipe``."""

    recipe: Recipe

    @nn.compact
    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
        state = None
        if self.recipe.is_delayed:
            parts = {}
            for t, flax_name in _FLAX_NAMES.items():
                spec = self.recipe.delayed_spec(t)
                if spec is None:
                    parts[t] = None
                    continue
                hist = self.variable(OVERWRITE_WITH_GRADIENT, f"{flax_name}_amax_history",
                                     jnp.zeros, (spec.history_len,), jnp.float32)
                scale = self.variable(OVERWRITE_WITH_GRADIENT, f"{flax_name}_scale", jnp.ones, (), jnp.float32)
                parts[t] = DelayedScalingState(amax_history=hist.value, scale=scale.value)
            state = DotGeneralState(**parts)
        # As a drop-in for lax.dot_general the output dtype follows the (Flax-promoted) inputs.
        out_dtype = preferred_element_type or lhs.dtype
        return dot_general(lhs, rhs, dimension_numbers, precision, out_dtype, out_sharding, recipe=self.recipe, state=state)


def make_dot_general_cls(recipe: Recipe):
    """A zero-argument module class (what ``dot_general_cls=`` expects) bound to ``recipe``."""
    return functools.partial(MxDotGeneral, recipe=recipe)
