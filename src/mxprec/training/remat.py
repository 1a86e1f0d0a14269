"""Rematerialization policies that treat mxprec's custom GEMMs deliberately.

``mxprec.dot_general`` tags each GEMM output with ``checkpoint_name(y, "mxprec_gemm")`` and each weight as its
GEMMs read it (quantized codes, scales and amax; an unquantized recipe's compute-dtype cast) with
``checkpoint_name(.., "mxprec_weight")``. Under ``jax.checkpoint``:

* ``remat_policy()`` (= ``nothing_saveable``): full remat, every GEMM (quantization included) is
  recomputed in the backward pass. Least memory.
* ``remat_policy(save_weights=True)``: full remat of the activations, but the quantized weights are
  kept (1 byte per FP8 weight value), so the recomputation does not quantize the weights again.
* ``remat_policy(save_gemm_outputs=True)``: keep the GEMM outputs, recompute only the cheap
  elementwise work around them (norms, activations). The custom_vjp's own residuals (wide or
  quantized X/W, per ``Recipe.residuals``) are saved whenever the forward runs.
"""

from __future__ import annotations

import jax

from mxprec.dot_general import CHECKPOINT_NAME, WEIGHT_CHECKPOINT_NAME


def remat_policy(save_gemm_outputs: bool = False, save_weights: bool = False):
    """A ``jax.checkpoint`` policy saving only mxprec's GEMM outputs and / or its GEMM-ready weights (neither:
    full remat)."""
    names = (CHECKPOINT_NAME,) * save_gemm_outputs + (WEIGHT_CHECKPOINT_NAME,) * save_weights
    if names:
        return jax.checkpoint_policies.save_only_these_names(*names)
    return jax.checkpoint_policies.nothing_saveable
