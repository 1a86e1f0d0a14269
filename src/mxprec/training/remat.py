"""Rematerialization policies that treat mxprec's custom GEMMs deliberately.

``mxprec.dot_general`` tags each GEMM output with ``checkpoint_name(y, "mxprec_gemm")``.
Under ``jax.checkpoint``:

* ``remat_policy(save_gemm_outputs=False)`` (= ``nothing_saveable``): full remat, every GEMM
  (quantization included) is recomputed in the backward pass. Least memory.
* ``remat_policy(save_gemm_outputs=True)``: keep the GEMM outputs, recompute only the cheap
  elementwise work around them (norms, activations). The custom_vjp's own residuals (wide or
  quantized X/W, per ``Recipe.residuals``) are saved whenever the forward runs.
* ``remat_policy(save_quantized_weights=True)``: full remat, except Fprop's quantized weights
  (``"mxprec_weight_q"``: the 1-byte codes, scales and amax of each weight), which the backward
  pass reuses instead of quantizing the weights again (one cast pass of every weight fewer per
  step, for P bytes of FP8 codes held from the forward to each layer's backward). Per-tensor
  recipes with ``residuals="wide"`` also use that copy in Dgrad.
"""

from __future__ import annotations

import jax

from mxprec.dot_general import CHECKPOINT_NAME, WEIGHT_CHECKPOINT_NAME


def remat_policy(save_gemm_outputs: bool = False, save_quantized_weights: bool = False):
    """A ``jax.checkpoint`` policy: full remat (nothing saved), or save mxprec's GEMM outputs and / or
    its quantized weights (the named values above)."""
    names = [CHECKPOINT_NAME] * save_gemm_outputs + [WEIGHT_CHECKPOINT_NAME] * save_quantized_weights
    if names:
        return jax.checkpoint_policies.save_only_these_names(*names)
    return jax.checkpoint_policies.nothing_saveable
