"""Flax integration: linen ``dot_general_cls`` modules, NNX helpers, OWG state helpers."""

from mxprec.flax.linen import (
    OVERWRITE_WITH_GRADIENT,
    FusedSwiGLUMLP,
    MxDotGeneral,
    make_dot_general_cls,
    max_combine_owg,
)
from mxprec.flax.nnx import (
    PARAMS_AND_STATE,
    DelayedDotGeneral,
    max_combine_owg_state,
    split_owg_state,
    stateless_dot_general,
)
from mxprec.flax.owg import apply_updates_with_owg, split_owg

__all__ = [
    "OVERWRITE_WITH_GRADIENT",
    "PARAMS_AND_STATE",
    "DelayedDotGeneral",
    "FusedSwiGLUMLP",
    "MxDotGeneral",
    "apply_updates_with_owg",
    "make_dot_general_cls",
    "max_combine_owg",
    "max_combine_owg_state",
    "split_owg",
    "split_owg_state",
    "stateless_dot_general",
]
