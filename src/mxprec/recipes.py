"""Recipes: which format and scaling each operand of a linear layer's three GEMMs uses.

A linear layer runs three GEMMs; each names its operands by role:

* Fprop  ``Y  = X · W``     — ``fprop_lhs`` (X), ``fprop_rhs`` (W)
* Dgrad  ``dX = dY · Wᵀ``   — ``dgrad_grad`` (dY), ``dgrad_rhs`` (W)
* Wgrad  ``dW = Xᵀ · dY``   — ``wgrad_lhs`` (X), ``wgrad_grad`` (dY)

Each role's spec quantizes along *that* GEMM's contraction axis; ``None`` leaves the operand
unquantized (cast to ``compute_dtype``). Presets (``recipes.get(name)``), with ``fwd`` = X and W
in Fprop/Dgrad/Wgrad and ``grad`` = dY:

========================  ==============================  ==============================  ========
preset                    fwd operands (X, W)             grad operand (dY)               rounding
========================  ==============================  ==============================  ========
bf16 / fp16               bf16 / fp16, unquantized        unquantized                     —
fp8_delayed               E4M3 per-tensor delayed (1024)  E5M2 per-tensor delayed         RNE
fp8_current               E4M3 per-tensor current         E5M2 per-tensor current         RNE
fp8_rowwise               E4M3 per-row                    E5M2 per-row                    RNE
fp8_block                 X: E4M3 1×128, W: E4M3 128×128  E5M2 1×128 (W in Dgrad 128×128) RNE
mxfp8 / mxfp8_floor       MX E4M3 /32 rceil / floor       MX E4M3 /32                     RNE
mxfp6                     MX E2M3 /32 rceil               MX E3M2 /32 rceil               RNE
mxfp4                     MX E2M1 /32 rceil               MX E2M1 /32 rceil               RNE
nvfp4                     NVFP4 (E2M1 /16, E4M3 scale)    NVFP4                           SR (dY)
========================  ==============================  ==============================  ========

Aliases (MaxText names): te_fp8_delayedscaling → fp8_delayed, te_fp8_currentscaling →
fp8_current, te_mxfp8 → mxfp8, te_nvfp4 → nvfp4, aiter_fp4 → mxfp4, fp8 → fp8_delayed.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax.numpy as jnp

from mxprec import formats
from mxprec.scaling import (
    DelayedScaling,
    MXScaling,
    NVFP4Scaling,
    RowScaling,
    ScalingSpec,
    TensorScaling,
    TileScaling,
)

__all__ = ["ROLES", "Recipe", "aliases", "get", "names"]

ROLES = ("fprop_lhs", "fprop_rhs", "dgrad_grad", "dgrad_rhs", "wgrad_lhs", "wgrad_grad")
# The two roles of each tensor: X ("lhs"), W ("rhs"), dY ("grad").
_TENSOR_ROLES = {"lhs": ("fprop_lhs", "wgrad_lhs"), "rhs": ("fprop_rhs", "dgrad_rhs"), "grad": ("dgrad_grad", "wgrad_grad")}
_GEMM_OF_ROLE = {
    "fprop_lhs": "fprop",
    "fprop_rhs": "fprop",
    "dgrad_grad": "dgrad",
    "dgrad_rhs": "dgrad",
    "wgrad_lhs": "wgrad",
    "wgrad_grad": "wgrad",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    """Per-role quantization specs for a linear layer's three GEMMs, and how to run them."""

    name: str = "custom"
    # Forward pass (fprop): Y = X · W, contracting K.
    fprop_lhs: ScalingSpec | None = None
    fprop_rhs: ScalingSpec | None = None
    # Backward pass (dgrad): dX = dY · Wᵀ, contracting N.
    dgrad_grad: ScalingSpec | None = None
    dgrad_rhs: ScalingSpec | None = None
    # Backward pass (wgrad): dW = Xᵀ · dY, contracting M (the tokens).
    wgrad_lhs: ScalingSpec | None = None
    wgrad_grad: ScalingSpec | None = None
    # Numerics.
    compute_dtype: jnp.dtype | None = jnp.bfloat16  # dtype of unquantized operands (None: keep)
    accumulation_dtype: jnp.dtype = jnp.float32
    output_dtype: jnp.dtype | None = jnp.bfloat16  # None: the lhs input dtype
    stochastic_grad_rounding: bool = False
    # Memory / execution.
    # What Fprop keeps for Dgrad / Wgrad: "quantized" = the backward's quantized copies (made in Fprop);
    # "wide" = X and W as given, requantized in the backward, except a per-tensor copy the backward would
    # requantize to the same codes (same TensorScaling / DelayedScaling spec): Fprop's copy is kept.
    residuals: Literal["wide", "quantized"] = "wide"
    backend: Literal["auto", "xla", "ffi"] = "auto"

    def __post_init__(self):
        if jnp.dtype(self.accumulation_dtype) != jnp.float32:
            raise ValueError(f"Recipe.accumulation_dtype must be float32, got {self.accumulation_dtype}")
        if self.residuals not in ("wide", "quantized"):
            raise ValueError(f"Recipe.residuals must be 'wide' or 'quantized', got {self.residuals!r}")
        if self.backend not in ("auto", "xla", "ffi"):
            raise ValueError(f"Recipe.backend must be 'auto', 'xla' or 'ffi', got {self.backend!r}")
        for role in ROLES:
            spec = getattr(self, role)
            if spec is not None and not hasattr(spec, "kind"):
                raise TypeError(f"Recipe.{role} must be a scaling spec or None, got {spec!r}")
        # One delayed-scaling state per tensor (delayed_spec): its two roles' DelayedScaling specs must agree, or
        # the second role would quantize with a scale made for the first one's format.
        for a, b in _TENSOR_ROLES.values():
            sa, sb = getattr(self, a), getattr(self, b)
            if isinstance(sa, DelayedScaling) and isinstance(sb, DelayedScaling) and sa != sb:
                raise ValueError(f"Recipe.{a} and Recipe.{b} quantize the same tensor with one delayed-scaling state, "
                                 f"so their DelayedScaling specs must be equal: {sa!r} vs {sb!r}")

    # ------------------------------------------------------------------ queries
    def spec(self, role: str) -> ScalingSpec | None:
        return getattr(self, role)

    @property
    def quantized(self) -> bool:
        """Whether any operand of any GEMM is quantized."""
        return any(getattr(self, r) is not None for r in ROLES)

    @property
    def is_delayed(self) -> bool:
        """Whether any role uses delayed scaling (the recipe then needs state)."""
        return any(isinstance(getattr(self, r), DelayedScaling) for r in ROLES)

    def delayed_spec(self, tensor: Literal["lhs", "rhs", "grad"]) -> DelayedScaling | None:
        """The DelayedScaling of X ("lhs"), W ("rhs") or dY ("grad"), if any."""
        for r in _TENSOR_ROLES[tensor]:
            if isinstance(getattr(self, r), DelayedScaling):
                return getattr(self, r)
        return None

    def replace(self, **changes) -> Recipe:
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """One line per GEMM operand: format, scaling, rounding; and the backend that will run."""
        from mxprec.kernels import backend_report

        lines = [(f"Recipe {self.name!r}: accumulate {jnp.dtype(self.accumulation_dtype).name}, "
                  f"output {'input dtype' if self.output_dtype is None else jnp.dtype(self.output_dtype).name}, "
                  f"residuals {self.residuals}")]
        for role in ROLES:
            spec = getattr(self, role)
            what = spec.describe() if spec is not None else (
                f"unquantized ({jnp.dtype(self.compute_dtype).name})" if self.compute_dtype else "unquantized")
            sr = " SR" if (spec is not None and self.stochastic_grad_rounding and role.endswith("grad")) else ""
            lines.append(f"  {_GEMM_OF_ROLE[role]:5s} {role:10s}: {what}{sr}")
        lines.append("  " + backend_report(self))
        return "\n".join(lines)

    # ------------------------------------------------------------------ Flax
    def dot_general_cls(self):
        """A Flax linen module class usable as ``nn.DenseGeneral(..., dot_general_cls=...)``."""
        from mxprec.flax.linen import make_dot_general_cls

        return make_dot_general_cls(self)

    def dot_general(self):
        """A plain callable with lax.dot_general's signature (stateless recipes; NNX ``dot_general=``)."""
        from mxprec.flax.nnx import stateless_dot_general

        return stateless_dot_general(self)


def _uniform(name, fwd: ScalingSpec | None, grad: ScalingSpec | None, **kw) -> Recipe:
    return Recipe(name=name, fprop_lhs=fwd, fprop_rhs=fwd, dgrad_grad=grad, dgrad_rhs=fwd,
                  wgrad_lhs=fwd, wgrad_grad=grad, **kw)


def _fp8_block() -> Recipe:
    act = TileScaling(formats.E4M3, tile=(1, 128))
    wgt = TileScaling(formats.E4M3, tile=(128, 128))
    grad = TileScaling(formats.E5M2, tile=(1, 128))
    return Recipe(name="fp8_block", fprop_lhs=act, fprop_rhs=wgt, dgrad_grad=grad, dgrad_rhs=wgt,
                  wgrad_lhs=act, wgrad_grad=grad)


def _mx(name, fwd_fmt, grad_fmt, rule="rceil") -> Recipe:
    return _uniform(name, MXScaling(fwd_fmt, scale_rule=rule), MXScaling(grad_fmt, scale_rule=rule))


_PRESETS = {
    "bf16": lambda: Recipe(name="bf16", compute_dtype=jnp.bfloat16, output_dtype=None),
    "fp16": lambda: Recipe(name="fp16", compute_dtype=jnp.float16, output_dtype=None),
    "fp8_delayed": lambda: _uniform("fp8_delayed", DelayedScaling(formats.E4M3), DelayedScaling(formats.E5M2)),
    "fp8_current": lambda: _uniform("fp8_current", TensorScaling(formats.E4M3), TensorScaling(formats.E5M2)),
    "fp8_rowwise": lambda: _uniform("fp8_rowwise", RowScaling(formats.E4M3), RowScaling(formats.E5M2)),
    "fp8_block": _fp8_block,
    "mxfp8": lambda: _mx("mxfp8", formats.E4M3, formats.E4M3),
    "mxfp8_floor": lambda: _mx("mxfp8_floor", formats.E4M3, formats.E4M3, rule="floor"),
    "mxfp6": lambda: _mx("mxfp6", formats.E2M3, formats.E3M2),
    "mxfp4": lambda: _mx("mxfp4", formats.E2M1, formats.E2M1),
    "nvfp4": lambda: _uniform("nvfp4", NVFP4Scaling(), NVFP4Scaling(), stochastic_grad_rounding=True),
}

aliases = {
    "te_fp8_delayedscaling": "fp8_delayed",
    "te_fp8_currentscaling": "fp8_current",
    "te_mxfp8": "mxfp8",
    "te_nvfp4": "nvfp4",
    "aiter_fp4": "mxfp4",
    "fp8": "fp8_delayed",
}


def names() -> list[str]:
    """All preset names and aliases."""
    return sorted(_PRESETS) + sorted(aliases)


def get(name: str, **overrides) -> Recipe:
    """A preset recipe by name or alias, with optional field overrides (e.g. ``backend="ffi"``)."""
    if isinstance(name, Recipe):
        return name.replace(**overrides) if overrides else name
    key = aliases.get(name, name)
    if key not in _PRESETS:
        raise ValueError(f"unknown recipe {name!r}; known recipes: {', '.join(names())}")
    recipe = _PRESETS[key]()
    return recipe.replace(**overrides) if overrides else recipe
