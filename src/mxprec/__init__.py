"""mxprec: FP8 and OCP microscaling (MXFP8/MXFP6/MXFP4) mixed-precision GEMMs for JAX."""

from mxprec import formats
from mxprec.quantize import QTensor, bits_per_value, dequantize, nbytes, quantize
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

from mxprec import recipes  # noqa: E402
from mxprec.dot_general import DotGeneralState, dot_general  # noqa: E402
from mxprec.recipes import Recipe  # noqa: E402
from mxprec.kernels import scaled_gemm  # noqa: E402
