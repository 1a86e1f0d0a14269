"""Rematerialization policies that treat mxprec's custom GEMMs deliberately.

``mxprec.dot_general`` tags each GEMM output with ``checkpoint_name(y, "mxprec_gemm")``.
Under ``jax.checkpoint``:

* ``remat_policy(save_gemm_outputs=False)`` (= ``nothing_saveable``): full remat, every GEMM
  (quantization included) is recomputed in the backward pass. Least memory.
* ``remat_policy(save_gemm_outputs=True)``: keep the GEMM outputs, recompute only the cheap
  elementwise work around them (norms, activations). The custom_vjp's own residuals (wide or
  quantized X/W, per ``Recipe.residuals``) are saved whenever the forward runs.
"""

from __future__ import annotations

import jax

from mxprec.dot_general import CHECKPOINT_NAME


def remat_policy(save_gemm_outputs: bool = False):
    """A ``jax.checkpoint`` policy: full remat, or save only mxprec's GEMM outputs."""
    if save_gemm_outputs:
        return jax.checkpoint_policies.save_only_these_names(CHECKPOINT_NAME)
    return jax.checkpoint_policies.nothing_saveable
