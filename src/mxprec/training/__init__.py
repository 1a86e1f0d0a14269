"""Training utilities: loss scaling, token-weighted gradient accumulation, remat policies."""

from mxprec.training.grad_accum import accumulate_gradients, count_valid_tokens, microbatch_grads, throughput
from mxprec.training.remat import remat_policy
from mxprec.training.loss_scaling import (
    DynamicLossScale,
    LossScale,
    NoOpLossScale,
    StaticLossScale,
    all_finite,
    masked_update,
    scale_loss,
    unscale_grads,
    update,
)

__all__ = [
    "accumulate_gradients",
    "count_valid_tokens",
    "microbatch_grads",
    "throughput",
    "DynamicLossScale",
    "LossScale",
    "NoOpLossScale",
    "StaticLossScale",
    "all_finite",
    "masked_update",
    "scale_loss",
    "unscale_grads",
    "update",
    "remat_policy",
]
