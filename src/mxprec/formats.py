"""Element and scale number formats (one frozen object each).

Every format knows its bit layout and the landmarks of its grid. The constants follow the OCP
Microscaling Formats (MX) v1.0 specification and the FP8 formats of "FP8 Formats for Deep
Learning" (Micikevicius et al., 2022). See docs/numerics.md for the table.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import ml_dtypes
import numpy as np

__all__ = [
    "E2M1",
    "E2M3",
    "E3M2",
    "E4M3",
    "E4M3_SCALE",
    "E5M2",
    "E8M0",
    "ELEMENT_FORMATS",
    "FP32",
    "ElementFormat",
    "ScaleFormat",
    "element_format",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ElementFormat:
    """A signed minifloat element encoding (sign bit, ``ebits`` exponent, ``mbits`` mantissa).

    Attributes:
      name: short name, e.g. ``"e4m3"``.
      ebits, mbits: exponent and mantissa field widths; ``bits = 1 + ebits + mbits``.
      bias: exponent bias.
      max_finite: largest finite magnitude.
      has_nan, has_inf: whether the encoding reserves NaN / Inf codes.
      dtype: the ml_dtypes scalar type holding exactly this format.
    """

    name: str
    ebits: int
    mbits: int
    bias: int
    max_finite: float
    has_nan: bool
    has_inf: bool
    dtype: type

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def emax(self) -> int:
        """floor(log2(max_finite)): the exponent of the largest binade."""
        return math.floor(math.log2(self.max_finite))

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade (1 - bias)."""
        return 1 - self.bias

    @property
    def min_normal(self) -> float:
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mbits)

    @property
    def max_mantissa(self) -> float:
        """max_finite / 2**emax, in [1, 2): the significand of the largest finite value."""
        return self.max_finite / 2.0**self.emax

    @property
    def is_fp8(self) -> bool:
        return self.bits == 8

    @property
    def jnp_dtype(self):
        """The JAX dtype used to *store* this format (FP8 natively, FP6/FP4 as uint8 codes)."""
        return jnp.dtype(self.dtype) if self.is_fp8 else jnp.dtype(jnp.uint8)

    def grid(self) -> np.ndarray:
        """All non-negative finite values, ascending (float64)."""
        codes = np.arange(2 ** (self.bits - 1), dtype=np.uint8)
        vals = codes.view(self.dtype)  # ml_dtypes holds FP6/FP4 one per byte, code in the low bits
        vals = np.asarray(vals, dtype=np.float64)
        return np.unique(vals[np.isfinite(vals)])

    def __repr__(self) -> str:
        return f"formats.{self.name.upper()}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScaleFormat:
    """A scale encoding: E8M0 (power of two, bias 127, 0xFF = NaN), E4M3 or FP32."""

    name: str
    bits: int
    dtype: type
    bias: int = 0

    def __repr__(self) -> str:
        return f"formats.{self.name.upper()}"


E4M3 = ElementFormat(
    name="e4m3", ebits=4, mbits=3, bias=7, max_finite=448.0, has_nan=True, has_inf=False,
    dtype=ml_dtypes.float8_e4m3fn,
)
E5M2 = ElementFormat(
    name="e5m2", ebits=5, mbits=2, bias=15, max_finite=57344.0, has_nan=True, has_inf=True,
    dtype=ml_dtypes.float8_e5m2,
)
E2M3 = ElementFormat(
    name="e2m3", ebits=2, mbits=3, bias=1, max_finite=7.5, has_nan=False, has_inf=False,
    dtype=ml_dtypes.float6_e2m3fn,
)
E3M2 = ElementFormat(
    name="e3m2", ebits=3, mbits=2, bias=3, max_finite=28.0, has_nan=False, has_inf=False,
    dtype=ml_dtypes.float6_e3m2fn,
)
E2M1 = ElementFormat(
    name="e2m1", ebits=2, mbits=1, bias=1, max_finite=6.0, has_nan=False, has_inf=False,
    dtype=ml_dtypes.float4_e2m1fn,
)

E8M0 = ScaleFormat(name="e8m0", bits=8, dtype=ml_dtypes.float8_e8m0fnu, bias=127)
E4M3_SCALE = ScaleFormat(name="e4m3", bits=8, dtype=ml_dtypes.float8_e4m3fn, bias=7)
FP32 = ScaleFormat(name="fp32", bits=32, dtype=np.float32)

ELEMENT_FORMATS = {f.name: f for f in (E4M3, E5M2, E2M3, E3M2, E2M1)}


def element_format(fmt: ElementFormat | str) -> ElementFormat:
    """Accepts an ElementFormat or its name (``"e4m3"``); raises ValueError listing the names."""
    if isinstance(fmt, ElementFormat):
        return fmt
    if isinstance(fmt, str) and fmt.lower() in ELEMENT_FORMATS:
        return ELEMENT_FORMATS[fmt.lower()]
    raise ValueError(f"unknown element format {fmt!r}; known: {sorted(ELEMENT_FORMATS)}")


def __getattr__(name: str):
    # Named MX presets live in scaling.py (they are scaling specs); re-exported lazily here to
    # avoid an import cycle: formats.MXFP8 etc.
    from mxprec import scaling

    presets = {
        "MXFP8": scaling.MXScaling(E4M3),
        "MXFP8_E5M2": scaling.MXScaling(E5M2),
        "MXFP6_E2M3": scaling.MXScaling(E2M3),
        "MXFP6_E3M2": scaling.MXScaling(E3M2),
        "MXFP4": scaling.MXScaling(E2M1),
    }
    if name in presets:
        return presets[name]
    raise AttributeError(f"module 'mxprec.formats' has no attribute {name!r}")
