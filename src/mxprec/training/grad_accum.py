"""Token-weighted gradient accumulation over micro-batches (``jax.lax.scan``).

A cycle has M micro-batches; every leaf of ``microbatches`` carries a leading axis of size M.
``loss_fn(params, mb) -> (sum_of_token_losses, n_valid)`` returns the *sum* of per-token losses
over the valid (non-padded, non-ignored) targets of one micro-batch and their count; it should
zero invalid positions with ``jnp.where(mask, loss, 0)``.

With ``N`` = total valid tokens of the whole cycle (computed up front), micro-batch i contributes
``sum_i / N``, so every valid token of the cycle has weight ``1/N`` whatever micro-batch it is in
(a mean of per-micro-batch means would over-weight short micro-batches). A micro-batch with no
valid token contributes exactly 0; a cycle with ``N = 0`` gives loss 0 and zero gradients.

Example: micro-batches with 3 and 1 valid tokens → each token weighted 1/4.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from mxprec.training.loss_scaling import LossScale, _check_real, overwrite_with_gradient_mask, unscale_grads

__all__ = ["accumulate_gradients", "count_valid_tokens", "microbatch_grads", "throughput"]

LossFn = Callable[[Any, Any], tuple[jax.Array, jax.Array]]


def _num_microbatches(microbatches: Any) -> int:
    leaves = jax.tree_util.tree_leaves(microbatches)
    if not leaves:
        raise ValueError("microbatches has no array leaves")
    sizes = {jnp.shape(leaf)[0] if jnp.ndim(leaf) else None for leaf in leaves}
    if None in sizes or len(sizes) != 1:
        raise ValueError(f"every microbatch leaf needs the same leading (micro-batch) axis; got sizes {sizes}")
    (m,) = sizes
    if m == 0:
        raise ValueError("microbatches has an empty micro-batch axis (M = 0): a cycle needs at least one micro-batch")
    return int(m)


def count_valid_tokens(loss_fn: LossFn, params: Any, microbatches: Any) -> jax.Array:
    """Total ``n_valid`` over the cycle (float32 ``()``), from ``loss_fn``'s second output.

    Under ``jit`` the loss computation is dead code here (only ``n_valid`` is used), so when
    ``n_valid`` depends only on the mask XLA drops the forward pass.
    """
    _num_microbatches(microbatches)

    def body(total, mb):
        _, n = loss_fn(params, mb)
        return total + jnp.asarray(n).astype(jnp.float32), None

    total, _ = jax.lax.scan(body, jnp.float32(0), microbatches)
    return total


def microbatch_grads(
    loss_fn: LossFn, params: Any, mb: Any, total_valid: jax.Array, loss_scale: LossScale | None = None
) -> tuple[jax.Array, Any]:
    """``(sum_i / N, grad(S · sum_i / N))`` of one micro-batch; gradients float32, still scaled by S.

    ``N = max(total_valid, 1)``; ``S`` = ``loss_scale.scale`` (1 if None).
    """
    denom = jnp.maximum(jnp.asarray(total_valid).astype(jnp.float32), jnp.float32(1))

    def contribution(p):
        s, n = loss_fn(p, mb)
        c = jnp.asarray(s).astype(jnp.float32) / denom
        scaled = c * loss_scale.scale if loss_scale is not None else c
        return scaled, (c, n)

    grads, (c, _) = jax.grad(contribution, has_aux=True, allow_int=True)(params)

    def to_f32(g):
        if g.dtype == jax.dtypes.float0:  # an integer parameter's gradient: a float32 zero, as the accumulator holds it
            return jnp.zeros(g.shape, jnp.float32)
        _check_real(g)
        return g.astype(jnp.float32)

    return c, jax.tree_util.tree_map(to_f32, grads)


def accumulate_gradients(
    loss_fn: LossFn,
    params: Any,
    microbatches: Any,
    *,
    loss_scale: LossScale | None = None,
    total_valid: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    """Token-weighted mean loss and gradients of one accumulation cycle.

    Args:
      loss_fn: ``(params, mb) -> (sum_of_token_losses, n_valid)``, both scalars.
      params: pytree of parameters.
      microbatches: pytree whose leaves have a leading micro-batch axis ``(M, ...)``.
      loss_scale: optional loss scale; the same scale is used for every micro-batch and the sum
        is unscaled once at the end (check :func:`~mxprec.training.loss_scaling.all_finite`).
      total_valid: total valid tokens ``N`` of the cycle; computed with
        :func:`count_valid_tokens` if None.

    Returns:
      ``(mean_loss float32 (), grads)``, grads float32 with the structure/shapes of ``params``.
      Leaves under the ``_overwrite_with_gradient`` collection (delayed-scaling state) are the
      elementwise max over micro-batches, not the sum, and are not unscaled.
    """
    _num_microbatches(microbatches)
    if total_valid is None:
        total_valid = count_valid_tokens(loss_fn, params, microbatches)
    owg = overwrite_with_gradient_mask(params)
    # Trainable gradients sum; delayed-scaling state "gradients" (the updated state, Flax's
    # _overwrite_with_gradient collection) combine by max and are never loss-scaled.
    init = (
        jnp.float32(0),
        jax.tree_util.tree_map(
            lambda p, o: jnp.full(jnp.shape(p), -jnp.inf if o else 0.0, jnp.float32), params, owg
        ),
    )

    def body(carry, mb):
        loss_acc, grad_acc = carry
        c, g = microbatch_grads(loss_fn, params, mb, total_valid, loss_scale)
        combined = jax.tree_util.tree_map(
            lambda a, b, o: jnp.maximum(a, b) if o else a + b, grad_acc, g, owg
        )
        return (loss_acc + c, combined), None

    (loss, grads), _ = jax.lax.scan(body, init, microbatches)
    if loss_scale is not None:
        grads = unscale_grads(grads, loss_scale)  # (the state leaves pass through)
    return loss, grads


def throughput(valid_tokens: float, positions: float, seconds: float) -> dict[str, float]:
    """``{"useful_tokens_per_s": valid_tokens/seconds, "positions_per_s": positions/seconds}``.

    ``positions`` counts every processed slot (padding included); ``valid_tokens <= positions``.
    """
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    if not 0 <= valid_tokens <= positions:
        raise ValueError(f"need 0 <= valid_tokens <= positions; got valid_tokens={valid_tokens}, positions={positions}")
    return {"useful_tokens_per_s": valid_tokens / seconds, "positions_per_s": positions / seconds}
