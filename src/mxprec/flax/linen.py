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
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from mxprec.dot_general import DotGeneralState, dot_general, max_combining
from mxprec.recipes import Recipe, get as get_recipe
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


def delayed_state_variables(module: nn.Module, recipe: Recipe) -> DotGeneralState | None:
    """Declares (or reads) ``recipe``'s delayed-scaling variables in ``module``'s OWG collection; None if stateless."""
    if not recipe.is_delayed:
        return None
    parts = {}
    for t, flax_name in _FLAX_NAMES.items():
        spec = recipe.delayed_spec(t)
        if spec is None:
            parts[t] = None
            continue
        hist = module.variable(OVERWRITE_WITH_GRADIENT, f"{flax_name}_amax_history", jnp.zeros, (spec.history_len,),
                               jnp.float32)
        scale = module.variable(OVERWRITE_WITH_GRADIENT, f"{flax_name}_scale", jnp.ones, (), jnp.float32)
        parts[t] = DelayedScalingState(amax_history=hist.value, scale=scale.value)
    return DotGeneralState(**parts)


class MxDotGeneral(nn.Module):
    """A linen module with ``lax.dot_general``'s call signature running ``recipe``."""

    recipe: Recipe

    @nn.compact
    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
        state = delayed_state_variables(self, self.recipe)
        # As a drop-in for lax.dot_general the output dtype follows the (Flax-promoted) inputs.
        out_dtype = preferred_element_type or lhs.dtype
        return dot_general(lhs, rhs, dimension_numbers, precision, out_dtype, out_sharding, recipe=self.recipe, state=state)


def make_dot_general_cls(recipe: Recipe):
    """A zero-argument module class (what ``dot_general_cls=`` expects) bound to ``recipe``."""
    return functools.partial(MxDotGeneral, recipe=recipe)


class _DelayedState(nn.Module):
    """Only the delayed-scaling variables of an :class:`MxDotGeneral` (same names, same collection)."""

    recipe: Recipe

    @nn.compact
    def __call__(self):
        return delayed_state_variables(self, self.recipe)


class _ProjectionVariables(nn.Module):
    """The variables ``nn.DenseGeneral(features, use_bias=False, dot_general_cls=recipe.dot_general_cls())`` declares
    (``kernel`` (in, features), lecun-normal, and ``MxDotGeneral_0``'s state), without its GEMM."""

    in_features: int
    features: int
    recipe: Recipe
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self):
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (self.in_features, self.features),
                            self.param_dtype)
        return kernel, _DelayedState(self.recipe, name="MxDotGeneral_0")()


def fused_swiglu_mlp_in(module: nn.Module, x, d_ff: int, recipe: Recipe | str, dtype, param_dtype=jnp.float32,
                        swiglu_kernel: str = "auto"):
    """:func:`mxprec.fused_mlp.swiglu_mlp` with its variables declared in ``module`` (call from a compact method):
    ``wi_0`` / ``wi_1`` / ``wo`` children with the tree of :class:`FusedSwiGLUMLP`."""
    from mxprec.fused_mlp import FusedMLPState, swiglu_mlp

    recipe = get_recipe(recipe)  # a preset name too, as swiglu_mlp takes
    d = x.shape[-1]
    shapes = {"wi_0": (d, d_ff), "wi_1": (d, d_ff), "wo": (d_ff, d)}
    kernels, states = {}, {}
    for name, (fan_in, features) in shapes.items():
        kernels[name], states[name] = _ProjectionVariables(fan_in, features, recipe, param_dtype, parent=module,
                                                           name=name)()
    state = FusedMLPState(**states) if recipe.is_delayed else None
    # DenseGeneral's promotion: input and kernel in the compute dtype
    return swiglu_mlp(x.astype(dtype), *(kernels[n].astype(dtype) for n in shapes), recipe=recipe, state=state,
                      swiglu_kernel=swiglu_kernel)


class FusedSwiGLUMLP(nn.Module):
    """``wo(silu(wi_0(x)) * wi_1(x))`` as :func:`mxprec.fused_mlp.swiglu_mlp`, with the variable tree of three
    ``nn.DenseGeneral`` projections named ``wi_0``, ``wi_1``, ``wo`` that use ``recipe.dot_general_cls()`` (so
    checkpoints move between the fused and the unfused block). ``x (..., D) -> (..., D)`` in ``dtype``."""

    d_ff: int
    recipe: Recipe | str
    dtype: Any = jnp.bfloat16
    param_dtype: Any = jnp.float32
    swiglu_kernel: str = "auto"

    @nn.compact
    def __call__(self, x):
        return fused_swiglu_mlp_in(self, x, self.d_ff, self.recipe, self.dtype, self.param_dtype, self.swiglu_kernel)
