"""Independent numpy + ml_dtypes reference of the mxprec numerics contract (docs/numerics.md).

Imports nothing from mxprec and nothing from jax.
"""

from .quantizers import *
from .quantizers import __all__  # noqa: F401
