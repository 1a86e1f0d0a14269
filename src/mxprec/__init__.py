"""mxprec: FP8 and OCP microscaling (MXFP8/MXFP6/MXFP4) mixed-precision GEMMs for JAX.

Public API only (re-exports); logic lives in the modules named after each concept.
"""

from mxprec import xla_flags  # noqa: F401, I001 -- first: XLA_FLAGS must be set before any JAX backend starts
from mxprec import analysis, flax, formats, recipes, training
from mxprec.dot_general import DotGeneralState, dot_general, max_combining
from mxprec.info import info
from mxprec.kernels import scaled_gemm
from mxprec.quantize import QTensor, bits_per_value, dequantize, nbytes, quantize
from mxprec.recipes import Recipe
from mxprec.scaling import (
    DelayedScaling,
    DelayedScalingState,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    TensorScaling,
    TileScaling,
    update_delayed_state,
)

__version__ = "0.1.0"

__all__ = [
    "DelayedScaling",
    "DelayedScalingState",
    "DotGeneralState",
    "MXScaling",
    "NVFP4Scaling",
    "QTensor",
    "Recipe",
    "RowScaling",
    "TensorScaling",
    "TileScaling",
    "analysis",
    "bits_per_value",
    "dequantize",
    "dot_general",
    "flax",
    "formats",
    "info",
    "max_combining",
    "nbytes",
    "quantize",
    "recipes",
    "scaled_gemm",
    "training",
    "update_delayed_state",
]
