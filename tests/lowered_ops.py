"""Counting ops in a function's lowered (pre-optimization) StableHLO, for structural tests."""

import re

import jax

# FP8 converts (XLA's quantizers) and custom calls (the CUDA kernels' quantize and transposes)
QUANTIZE_OPS = r"stablehlo\.convert.*-> tensor<[0-9x]*xf8E[0-9A-Z]*>|stablehlo\.custom_call"


def count_ops(pattern: str, fn, *args) -> int:
    """Matches of ``pattern`` in ``jax.jit(fn).lower(*args)``'s text."""
    return len(re.findall(pattern, jax.jit(fn).lower(*args).as_text()))
