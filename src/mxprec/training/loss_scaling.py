"""Loss scaling for FP16 training (dynamic) and a static / no-op scale for BF16.

Usage per optimizer step (one accumulation cycle of M micro-batches)::

    grads_scaled = sum_i grad(scale_loss(loss_i, ls))   # same ``ls`` for every micro-batch
    grads = unscale_grads(grads_scaled, ls)             # once per cycle
    finite = all_finite(grads)
    new_params, new_opt = optimizer_step(params, opt_state, grads)
    params, opt_state = masked_update(finite, (new_params, new_opt), (params, opt_state))
    ls = update(ls, finite)                             # once per cycle

The scale is fixed across the accumulation cycle; :func:`update` is called once per cycle.
On overflow the step is skipped (parameters and optimizer state kept) and the scale is
multiplied by ``backoff_factor``; after ``growth_interval`` consecutive finite cycles it is
multiplied by ``growth_factor`` (clamped to ``[min_scale, max_scale]``).

Delayed-scaling state (Flax linen's ``_overwrite_with_gradient`` collection, NNX ``OverwriteWithGradient``
variables): its "gradient" is the new state, not a derivative of the loss, so :func:`unscale_grads` leaves it as it
is and :func:`all_finite` does not look at it (an overflowed step's Inf amax would otherwise stay in the amax history
and fail the check for ``history_len`` steps, skipping every one of them). Keep the state in the tree that
:func:`masked_update` restores, so an overflowed step does not record its amax either.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

__all__ = [
    "DynamicLossScale",
    "LossScale",
    "NoOpLossScale",
    "StaticLossScale",
    "all_finite",
    "masked_update",
    "overwrite_with_gradient_mask",
    "scale_loss",
    "unscale_grads",
    "update",
]


def _check_real(g) -> None:
    """Gradients come back float32: a complex leaf would lose its imaginary part (with only a warning)."""
    if jnp.iscomplexobj(g):
        raise ValueError(f"complex gradient leaf (dtype {jnp.asarray(g).dtype}, shape {jnp.shape(g)}): the float32 "
                         "gradient path supports real parameters only")


def _finite_flag(finite) -> jax.Array:
    """``finite`` as a bool ``()`` (all_finite's result); a shaped flag would broadcast the state's scalars."""
    finite = jnp.asarray(finite)
    if finite.dtype != jnp.bool_:
        # a float NaN (or any number) converted to bool would read as True: "finite"
        raise ValueError(f"finite must be a bool scalar (all_finite's result), got dtype {finite.dtype}")
    if finite.shape != ():
        raise ValueError(f"finite must be a bool scalar (all_finite's result), got shape {finite.shape}")
    return finite


@struct.dataclass(kw_only=True)
class DynamicLossScale:
    """Dynamic loss-scale state (a pytree; ``scale`` float32 ``()``, ``good_steps`` int32 ``()``).

    Build with :meth:`create`. Static fields are hyper-parameters (not traced).
    """

    scale: jax.Array
    good_steps: jax.Array
    growth_interval: int = struct.field(pytree_node=False, default=2000)
    growth_factor: float = struct.field(pytree_node=False, default=2.0)
    backoff_factor: float = struct.field(pytree_node=False, default=0.5)
    min_scale: float = struct.field(pytree_node=False, default=1.0)
    max_scale: float = struct.field(pytree_node=False, default=float(2**24))

    def __post_init__(self) -> None:
        if int(self.growth_interval) != self.growth_interval or not 1 <= self.growth_interval <= 2**31 - 1:
            # good_steps is int32
            raise ValueError(f"growth_interval must be an integer in [1, 2**31 - 1], got {self.growth_interval}")
        if not self.growth_factor >= 1.0:
            raise ValueError(f"growth_factor must be >= 1, got {self.growth_factor}")
        if not 0.0 < self.backoff_factor <= 1.0:
            raise ValueError(f"backoff_factor must be in (0, 1], got {self.backoff_factor}")
        if not 0.0 < self.min_scale <= self.max_scale:
            raise ValueError(f"need 0 < min_scale <= max_scale, got {self.min_scale}, {self.max_scale}")
        if not np.float32(self.min_scale) >= np.finfo(np.float32).tiny:
            # backoffs would reach a float32 0 (or subnormal) scale: every gradient NaN / Inf from then on
            raise ValueError(f"min_scale must be a normal float32 (>= {np.finfo(np.float32).tiny}), got {self.min_scale}")
        if not self.max_scale <= float(np.finfo(np.float32).max):
            # an Inf scale never backs off (Inf * backoff = Inf): every later step would be skipped
            raise ValueError(f"max_scale must be a finite float32, got {self.max_scale}")

    @classmethod
    def create(
        cls,
        initial_scale: float = float(2**15),
        *,
        growth_interval: int = 2000,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        min_scale: float = 1.0,
        max_scale: float = float(2**24),
    ) -> DynamicLossScale:
        """Fresh state with ``scale = initial_scale`` and ``good_steps = 0``."""
        if not min_scale <= initial_scale <= max_scale:
            raise ValueError(
                f"initial_scale={initial_scale} must lie in [min_scale={min_scale}, max_scale={max_scale}]"
            )
        return cls(
            scale=jnp.asarray(initial_scale, jnp.float32),
            good_steps=jnp.asarray(0, jnp.int32),
            growth_interval=growth_interval,
            growth_factor=float(growth_factor),
            backoff_factor=float(backoff_factor),
            min_scale=float(min_scale),
            max_scale=float(max_scale),
        )

    def update(self, finite: jax.Array) -> DynamicLossScale:
        """New state after one cycle; ``finite`` is a bool ``()`` (see :func:`all_finite`)."""
        finite = _finite_flag(finite)
        next_good = self.good_steps + jnp.int32(1)
        grow = jnp.logical_and(finite, next_good >= jnp.int32(self.growth_interval))
        grown = jnp.minimum(self.scale * jnp.float32(self.growth_factor), jnp.float32(self.max_scale))
        backed = jnp.maximum(self.scale * jnp.float32(self.backoff_factor), jnp.float32(self.min_scale))
        scale = jnp.where(finite, jnp.where(grow, grown, self.scale), backed)
        good = jnp.where(jnp.logical_and(finite, jnp.logical_not(grow)), next_good, jnp.int32(0))
        return self.replace(scale=scale, good_steps=good)


@struct.dataclass(kw_only=True)
class StaticLossScale:
    """Fixed loss scale (``scale`` float32 ``()``); :meth:`update` is the identity."""

    scale: jax.Array

    @classmethod
    def create(cls, scale: float = 1.0) -> StaticLossScale:
        if not 0.0 < scale <= float(np.finfo(np.float32).max):
            raise ValueError(f"scale must be a positive finite float32, got {scale}")
        return cls(scale=jnp.asarray(scale, jnp.float32))

    def update(self, finite: jax.Array) -> StaticLossScale:
        del finite
        return self


def NoOpLossScale() -> StaticLossScale:
    """Scale of 1 (BF16 training): scaling and unscaling are exact no-ops."""
    return StaticLossScale.create(1.0)


LossScale = DynamicLossScale | StaticLossScale


def scale_loss(loss: jax.Array, ls: LossScale) -> jax.Array:
    """``float32(loss) * ls.scale`` (float32, shape of ``loss``)."""
    return jnp.asarray(loss).astype(jnp.float32) * ls.scale


def overwrite_with_gradient_mask(tree: Any) -> Any:
    """``tree``'s structure with True at delayed-scaling state leaves: under linen's ``_overwrite_with_gradient``
    collection, or in an NNX ``OverwriteWithGradient`` variable (an ``nnx.split`` / ``nnx.grad`` state, whose paths
    name the attribute, not the collection). Their "gradients" are the new state (Flax's OWG convention)."""
    from flax import nnx

    from mxprec.flax.linen import OVERWRITE_WITH_GRADIENT
    from mxprec.flax.nnx import OverwriteWithGradient

    def is_variable(x) -> bool:
        return isinstance(x, nnx.Variable)

    def is_owg(path, leaf):
        if is_variable(leaf):  # the mask keeps the variable's structure
            return jax.tree_util.tree_map(lambda _: isinstance(leaf, OverwriteWithGradient), leaf)
        return any(getattr(k, "key", None) == OVERWRITE_WITH_GRADIENT for k in path)

    return jax.tree_util.tree_map_with_path(is_owg, tree, is_leaf=is_variable)


def unscale_grads(grads: Any, ls: LossScale) -> Any:
    """Divide every gradient leaf by ``ls.scale``, in float32 (leaves come back float32). ``float0`` leaves (the
    gradients ``jax.vjp`` / ``jax.grad(allow_int=True)`` give integer parameters) and delayed-scaling state leaves
    (:func:`overwrite_with_gradient_mask`: their "gradient" is the new state) pass through unchanged."""

    def unscale(g, owg):
        if owg or getattr(g, "dtype", None) == jax.dtypes.float0:
            return g
        _check_real(g)
        return jnp.asarray(g).astype(jnp.float32) / ls.scale

    return jax.tree_util.tree_map(unscale, grads, overwrite_with_gradient_mask(grads))


def all_finite(tree: Any) -> jax.Array:
    """Bool ``()``: True iff every gradient leaf of ``tree`` is free of NaN/Inf (True for an empty tree). Delayed-
    scaling state leaves (:func:`overwrite_with_gradient_mask`) are not gradients and are not checked: an amax
    history may hold an Inf for ``history_len`` steps after one overflow (that state keeps its previous scale
    meanwhile, ``mxprec.scaling.update_delayed_state``), and the step that overflowed has non-finite gradients of
    its own."""
    leaves = jax.tree_util.tree_leaves(tree)
    owg = jax.tree_util.tree_leaves(overwrite_with_gradient_mask(tree))  # same structure, same leaf order
    result = jnp.asarray(True)
    for leaf, skip in zip(leaves, owg, strict=True):
        if not skip:
            result = jnp.logical_and(result, jnp.all(jnp.isfinite(leaf)))
    return result


def update(ls: LossScale, finite: jax.Array) -> LossScale:
    """New loss-scale state after one accumulation cycle (identity for a static scale)."""
    return ls.update(finite)


def masked_update(finite: jax.Array, new: Any, old: Any) -> Any:
    """``new`` where ``finite`` else ``old``, leaf-wise (skip params + optimizer state on overflow).

    ``finite`` is a bool ``()``; ``new`` and ``old`` must have the same structure, shapes, dtypes.
    """
    new_leaves, new_def = jax.tree_util.tree_flatten(new)
    old_leaves, old_def = jax.tree_util.tree_flatten(old)
    if new_def != old_def:
        raise ValueError(f"new and old trees differ: {new_def} vs {old_def}")
    finite = _finite_flag(finite)
    out = []
    for n, o in zip(new_leaves, old_leaves):
        n, o = jnp.asarray(n), jnp.asarray(o)
        if n.shape != o.shape or n.dtype != o.dtype:
            raise ValueError(f"leaf mismatch: new {n.shape} {n.dtype} vs old {o.shape} {o.dtype}")
        out.append(jnp.where(finite, n, o))
    return jax.tree_util.tree_unflatten(new_def, out)
