"""Flax NNX: a stateless ``dot_general`` callable and a module carrying delayed-scaling state.

Stateless recipes: ``nnx.Linear(..., dot_general=recipe.dot_general())``.
Delayed scaling: ``nnx.Linear(..., dot_general=DelayedDotGeneral(recipe))``; its state lives in
``OverwriteWithGradient`` variables, which the training step overwrites with their gradient. ``nnx.grad``
differentiates only ``nnx.Param`` by default, which drops that gradient (the state then never updates and the scales
stay 1), so differentiate with :data:`PARAMS_AND_STATE` and write the new state back::

    grads = nnx.grad(loss_fn, argnums=nnx.DiffState(0, PARAMS_AND_STATE))(model)
    param_grads, new_state = split_owg_state(grads)
    optimizer.update(model, param_grads)   # an nnx.Optimizer(model, tx, wrt=nnx.Param)
    nnx.update(model, new_state)

A module applied
several times in one differentiated function: pass its ``nnx.split`` state through :func:`max_combine_owg_state`
first (inside the function, under ``jax.jit``), or the per-use updates add up (see
:func:`mxprec.dot_general.max_combining`). ``mxprec.training.accumulate_gradients`` combines these variables by max
across micro-batches and does not unscale them.
"""

from __future__ import annotations

import jax
from flax import nnx

from mxprec.dot_general import DotGeneralState, dot_general, max_combining
from mxprec.recipes import Recipe
from mxprec.scaling import DelayedScalingState


def stateless_dot_general(recipe: Recipe):
    """A ``lax.dot_general``-signature callable running ``recipe``; rejects delayed recipes.

    As a drop-in, its output dtype follows the inputs unless ``preferred_element_type`` is given.
    """
    if recipe.is_delayed:
        raise ValueError(
            f"recipe {recipe.name!r} uses delayed scaling and needs state: use "
            "mxprec.flax.DelayedDotGeneral(recipe) (NNX) or recipe.dot_general_cls() (linen)"
        )

    def call(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
        out_dtype = preferred_element_type or lhs.dtype
        return dot_general(lhs, rhs, dimension_numbers, precision, out_dtype, out_sharding, recipe=recipe)

    return call


class OverwriteWithGradient(nnx.Variable):
    """State whose 'gradient' is its new value (delayed-scaling amax history and scale)."""


PARAMS_AND_STATE = nnx.Any(nnx.Param, OverwriteWithGradient)
"""The ``nnx.grad`` filter for models with :class:`DelayedDotGeneral`: ``argnums=nnx.DiffState(0, PARAMS_AND_STATE)``
returns the Params' gradients and the delayed-scaling state's new values (see the module docstring)."""


def split_owg_state(grads: nnx.State) -> tuple[nnx.State, nnx.State]:
    """``(the other gradients, the OverwriteWithGradient values)`` of an ``nnx.grad`` result: the first for the
    optimizer, the second (the new delayed-scaling state) for ``nnx.update(model, ...)``."""
    return grads.filter(nnx.Not(OverwriteWithGradient)), grads.filter(OverwriteWithGradient)


class DelayedDotGeneral(nnx.Module):
    """An NNX module with ``lax.dot_general``'s call signature and delayed-scaling state (updated only where the
    training step differentiates :data:`PARAMS_AND_STATE` and writes the new state back; module docstring)."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        init = DotGeneralState.init(recipe)
        if init is None:
            raise ValueError(f"recipe {recipe.name!r} has no delayed scaling; use recipe.dot_general()")
        for t in ("lhs", "rhs", "grad"):
            sub = getattr(init, t)
            setattr(self, f"{t}_amax_history", OverwriteWithGradient(sub.amax_history) if sub else None)
            setattr(self, f"{t}_scale", OverwriteWithGradient(sub.scale) if sub else None)

    def state(self) -> DotGeneralState:
        parts = {}
        for t in ("lhs", "rhs", "grad"):
            h = getattr(self, f"{t}_amax_history")
            parts[t] = None if h is None else DelayedScalingState(
                amax_history=h[...], scale=getattr(self, f"{t}_scale")[...])
        return DotGeneralState(**parts)

    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
        out_dtype = preferred_element_type or lhs.dtype  # drop-in: output follows the inputs
        return dot_general(lhs, rhs, dimension_numbers, precision, out_dtype, out_sharding, recipe=self.recipe, state=self.state())


def max_combine_owg_state(state):
    """``state`` (an ``nnx.split`` state, or any pytree holding NNX variables) with every
    ``OverwriteWithGradient`` variable's value marked max-combining (:func:`mxprec.dot_general.max_combining`).
    Call inside the differentiated function, before ``nnx.merge``."""

    def mark(v):
        return jax.tree_util.tree_map(max_combining, v) if isinstance(v, OverwriteWithGradient) else v

    return jax.tree_util.tree_map(mark, state, is_leaf=lambda x: isinstance(x, nnx.Variable))
