"""Training-loop side of the ``_overwrite_with_gradient`` (OWG) convention.

``flax.training.train_state.TrainState.apply_gradients`` already overwrites the OWG collection
with its gradient. For hand-written loops use :func:`apply_updates_with_owg`.
"""

from __future__ import annotations

import optax
from flax.core import unfreeze

from mxprec.flax.linen import OVERWRITE_WITH_GRADIENT


def split_owg(tree):
    """Splits a variables/grads dict into (everything else, the OWG collection or {})."""
    tree = dict(unfreeze(tree))
    owg = tree.pop(OVERWRITE_WITH_GRADIENT, {})
    return tree, owg


def apply_updates_with_owg(params, grads, opt_state, tx: optax.GradientTransformation):
    """optax step on the trainable part; the OWG part is replaced by its 'gradient' (new state).

    Args:
      params: variables dict, possibly holding ``_overwrite_with_gradient``.
      grads: gradients of the same structure.
    Returns:
      (new params, new opt_state). ``opt_state`` must come from ``tx.init(split_owg(params)[0])``.
    """
    trainable, _ = split_owg(params)
    g_trainable, g_owg = split_owg(grads)
    updates, opt_state = tx.update(g_trainable, opt_state, trainable)
    new = dict(optax.apply_updates(trainable, updates))
    if g_owg:
        new[OVERWRITE_WITH_GRADIENT] = g_owg
    return new, opt_state
