"""Training utilities: loss scaling, token-weighted gradient accumulation, remat policies."""

from mxprec.training.grad_accum import accumulate_gradients, count_valid_tokens, microbatch_grads, throughput
from mxprec.training.loss_scaling import (
    DynamicLossScale,
    LossScale,
    NoOpLossScale,
    StaticLossScale,
    all_finite,
    masked_update,
    overwrite_with_gradient_mask,
    scale_loss,
    unscale_grads,
    update,
)
from mxprec.training.remat import remat_policy

__all__ = [
    "DynamicLossScale",
    "LossScale",
    "NoOpLossScale",
    "StaticLossScale",
    "accumulate_gradients",
    "all_finite",
    "count_valid_tokens",
    "masked_update",
    "microbatch_grads",
    "overwrite_with_gradient_mask",
    "remat_policy",
    "scale_loss",
    "throughput",
    "unscale_grads",
    "update",
]
