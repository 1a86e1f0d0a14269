"""Training utilities: loss scaling and token-weighted gradient accumulation."""

from mxprec.training.grad_accum import accumulate_gradients, count_valid_tokens, microbatch_grads, throughput
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
]
