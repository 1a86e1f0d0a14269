"""Reference models whose projections run mxprec recipes."""

from mxprec.models.llama import (
    CONFIGS,
    GROUPS,
    Llama,
    LlamaConfig,
    count_params,
    cross_entropy_loss,
    get_config,
    h200_large,
    llama3_8b_4layer,
    llama70b_layer,
    micro,
    tiny,
)

__all__ = [
    "CONFIGS",
    "GROUPS",
    "Llama",
    "LlamaConfig",
    "count_params",
    "cross_entropy_loss",
    "get_config",
    "h200_large",
    "llama3_8b_4layer",
    "llama70b_layer",
    "micro",
    "tiny",
]
