"""``mxprec.dot_general``: a drop-in for ``lax.dot_general`` that runs a recipe's three GEMMs.

Any ``dimension_numbers`` are canonicalized to one batched GEMM ``(B, M, K) · (B, K, N)``
(batch dims, then free dims, then contracting dims in the order ``dimension_numbers`` gives
them; the transposes are identities for the usual ``x @ W`` layouts). A ``jax.custom_vjp`` then
runs

* Fprop ``Y  = Q(X) · Q(W)``     (X along K, W along K),
* Dgrad ``dX = Q(dY) · Q(W)ᵀ``   (dY along N, W along N),
* Wgrad ``dW = Q(X)ᵀ · Q(dY)``   (X along M, dY along M),

each operand quantized from its *wide* source along that GEMM's contraction axis, all through
:func:`mxprec.kernels.scaled_gemm` with FP32 accumulation. Where quantizing along the other axis gives exactly
the same codes and scales, the Fprop copy is reused instead (:func:`_reusable`): per-tensor scaled X and W, and
square FP8 tiles such as fp8_block's 128x128 W (one weight quantization fewer per dot_general; bit-identical).
On the CUDA kernels, Wgrad's 1 x G tiled X and dY come from the quantize kernel already K-major (the QTensor of
their transpose along its last axis, :func:`mxprec.kernels.cuda.quantize_transposed`): the same codes and
scales, without the transpose of the FP8 codes in front of the GEMM (:func:`_transposed_wgrad_quantize`); dY's
Dgrad copy (1 x 128 tiles along N) then comes from the same call, which reads dY once for both
(:func:`_rows_and_transposed_grad`).

Delayed scaling: pass ``state=DotGeneralState`` (see :meth:`DotGeneralState.init`). The forward
uses the scales in ``state``; the backward returns the *updated* state as the cotangent of
``state`` (the Flax ``_overwrite_with_gradient`` convention). When one state is used several
times in a differentiated function (a layer applied twice, ``lax.scan`` gradient accumulation),
wrap it once at the top of that function with :func:`max_combining`: its leaves then travel in
Flax's ``fp32_max_grad`` dtype and the per-use updates combine by ``max``, not by sum.
Not supported: differentiating ``jax.vmap(dot_general)`` with one *unbatched* delayed-scaling state (vmap sums the
state's per-example cotangents, which fails in that dtype with ``TypeError: Cannot interpret 'fp8_meta32'``, and a
sum would be the wrong combine anyway): fold the mapped axis into a batch or M dimension, or map a batched state.

Remat: the output is tagged ``checkpoint_name(y, "mxprec_gemm")``; see
:func:`mxprec.training.remat_policy`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax.linen.fp8_ops import fp32_max_grad
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from mxprec import kernels
from mxprec.kernels.scaled_gemm import scaled_gemm_deferred
from mxprec.quantize import SUPPORTED_INPUT_DTYPES, QTensor, quantize, tensor_amax
from mxprec.recipes import Recipe, get as get_recipe
from mxprec.scaling import (
    DelayedScaling,
    DelayedScalingState,
    TensorScaling,
    TileScaling,
    update_delayed_state,
)

__all__ = ["CHECKPOINT_NAME", "DotGeneralState", "canonicalize", "dot_general", "max_combining"]

CHECKPOINT_NAME = "mxprec_gemm"


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DotGeneralState:
    """Delayed-scaling state of X (``lhs``), W (``rhs``) and dY (``grad``); None where unused."""

    lhs: DelayedScalingState | None = None
    rhs: DelayedScalingState | None = None
    grad: DelayedScalingState | None = None

    @classmethod
    def init(cls, recipe: Recipe) -> DotGeneralState | None:
        """Fresh float32 state for ``recipe`` (zeros history, scale 1), or None if stateless."""
        if not recipe.is_delayed:
            return None
        parts = {}
        for t in ("lhs", "rhs", "grad"):
            spec = recipe.delayed_spec(t)
            parts[t] = DelayedScalingState.init(spec) if spec is not None else None
        return cls(**parts)


class Canonical(NamedTuple):
    lhs_perm: tuple
    rhs_perm: tuple
    B: int
    M: int
    K: int
    N: int
    out_shape: tuple


def canonicalize(lhs_shape, rhs_shape, dimension_numbers) -> Canonical:
    """Validates ``dimension_numbers`` and returns the permutations to (B, M, K) / (B, K, N)."""
    try:
        (lc, rc), (lb, rb) = dimension_numbers
        lc, rc, lb, rb = (tuple(int(d) for d in ds) for ds in (lc, rc, lb, rb))
    except (TypeError, ValueError) as e:
        raise ValueError(f"dot_general: malformed dimension_numbers {dimension_numbers!r}") from e
    ln, rn = len(lhs_shape), len(rhs_shape)
    desc = f"lhs {tuple(lhs_shape)}, rhs {tuple(rhs_shape)}, dimension_numbers {dimension_numbers}"
    for dims, n, what in ((lc + lb, ln, "lhs"), (rc + rb, rn, "rhs")):
        if any(not 0 <= d < n for d in dims) or len(set(dims)) != len(dims):
            raise ValueError(f"dot_general: {what} dims out of range or repeated: {desc}")
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ValueError(f"dot_general: contracting/batch dims differ in count: {desc}")
    for a, b in zip(lc, rc):
        if lhs_shape[a] != rhs_shape[b]:
            raise ValueError(
                f"dot_general: contracting sizes differ (lhs dim {a} = {lhs_shape[a]}, "
                f"rhs dim {b} = {rhs_shape[b]}): {desc}"
            )
    for a, b in zip(lb, rb):
        if lhs_shape[a] != rhs_shape[b]:
            raise ValueError(f"dot_general: batch sizes differ (lhs dim {a}, rhs dim {b}): {desc}")
    lf = tuple(d for d in range(ln) if d not in lc and d not in lb)
    rf = tuple(d for d in range(rn) if d not in rc and d not in rb)
    size = lambda shape, dims: math.prod(shape[d] for d in dims)
    out_shape = tuple(lhs_shape[d] for d in lb + lf) + tuple(rhs_shape[d] for d in rf)
    return Canonical(
        lhs_perm=lb + lf + lc,
        rhs_perm=rb + rc + rf,
        B=size(lhs_shape, lb),
        M=size(lhs_shape, lf),
        K=size(lhs_shape, lc),
        N=size(rhs_shape, rf),
        out_shape=out_shape,
    )


# ----------------------------------------------------------------------------- the custom_vjp


class _Meta(NamedTuple):
    recipe: Recipe
    out_dtype: Any
    backend: str
    x_dtype: Any
    w_dtype: Any
    desc: str = ""  # the caller's operands and dimension_numbers, for the backward's errors


def _to_f32(tree):
    return jax.tree.map(lambda v: lax.convert_element_type(v, jnp.float32), tree)


def _to_max_grad(tree):
    return jax.tree.map(lambda v: v if v.dtype == fp32_max_grad else lax.convert_element_type(v, fp32_max_grad), tree)


def max_combining(tree):
    """Marks delayed-scaling state (a DotGeneralState or a Flax OWG collection) as max-combining.

    Call once, inside the differentiated function, before the state's first use: the cotangents
    (= updated states) of all its uses then combine by elementwise max instead of sum, and flow
    back to the float32 input unchanged. Mathematically: ``new_state = max_i update_i(state)``.

    Differentiate under ``jax.jit``: with two or more uses, an eager ``jax.grad`` (jax 0.10) fails adding the
    cotangents (``KeyError: EArray`` in JAX's ``add_jaxvals``: the max-combining dtype is Flax's
    ``fp32_max_grad``, whose eager addition JAX does not register). Under jit they combine as documented.
    """
    return _to_max_grad(tree)


def _q(t, spec, axis, recipe: Recipe, state: DelayedScalingState | None = None, key=None, backend="xla",
       weight: bool = False):
    """Quantize ``t`` along ``axis`` per ``spec``; an unquantized role is cast to compute_dtype.

    With ``backend="ffi"`` the ``mxprec_quantize`` custom call runs where a quantize kernel exists
    (the C++ lowering on CPU; the sm_90a kernels of libmxprec_cuda.so on CUDA; the gfx950 kernels on
    ROCm), bit-identical to the JAX quantizer; ``"auto"`` (resolved to "auto" only where the CUDA
    kernels are loaded) runs it for the kinds in ``mxprec.kernels.cuda.AUTO_QUANTIZE`` (and, for a
    ``weight`` operand, as ``cuda.auto_quantizes`` says). Stochastic rounding (a PRNG key) uses the JAX
    quantizer. The custom call computes the tensor amax only where a delayed-scaling ``state`` will read it
    (``ffi.quantize(amax=...)``); elsewhere the QTensor's amax is NaN.
    """
    if spec is None:
        return t if recipe.compute_dtype is None else t.astype(recipe.compute_dtype)
    delayed_state = state if isinstance(spec, DelayedScaling) else None
    native = backend == "ffi"
    if backend == "auto":  # "auto" survives resolve_backend only where the CUDA kernels are loaded
        from mxprec.kernels import cuda

        native = cuda.auto_quantizes(spec, weight=weight)
    if native and key is None:
        platform = jax.default_backend()
        if platform == "cpu":
            from mxprec.kernels import ffi

            return ffi.quantize(t, spec, axis, state=delayed_state, amax=state is not None)
        if platform == "gpu":
            from mxprec.kernels import cuda, ffi, hip

            if hip.is_rocm():
                if hip.available() and hip.supports_quantize(spec):
                    return hip.quantize(t, spec, axis, state=delayed_state)
            elif cuda.available():  # libmxprec_cuda.so: every kind (csrc/cuda_kernels/cuda_quantize.cu)
                return ffi.quantize(t, spec, axis, state=delayed_state, amax=state is not None)
    if isinstance(spec, DelayedScaling):
        return quantize(t, spec, axis=axis, state=state, key=key)
    return quantize(t, spec, axis=axis, key=key)


def _square_tiles_on_last_two_axes(q_prev: QTensor, axis: int) -> bool:
    """Square FP8 tiles (e.g. 128x128 weight tiles) of a tensor quantized along one of its last two axes: the
    tiles cover the same two axes whichever of them is the quantization axis (the row axis is the other one), so
    the codes and the scale array (in the source's axis order) are the same for both; FP8 codes are not packed."""
    spec, n = q_prev.spec, len(q_prev.shape)
    return (
        isinstance(spec, TileScaling)
        and spec.tile[0] == spec.tile[1]
        and spec.fmt.bits == 8
        and n >= 2
        and {q_prev.axis % n, axis % n} <= {n - 2, n - 1}
    )


def _reusable(q_prev, spec, key=None, axis=None) -> bool:
    """Whether quantizing the same source per ``spec`` (unkeyed) along ``axis`` gives exactly ``q_prev``'s codes
    and scale: per-tensor scaled copies are layout-free, so only the spec must match; square FP8 tiles are the
    same along either of the last two axes (the fp8_block weight's Fprop and Dgrad copies)."""
    return (
        isinstance(q_prev, QTensor)
        and spec == q_prev.spec
        and key is None
        and (
            isinstance(spec, (TensorScaling, DelayedScaling))
            or (axis is not None and _square_tiles_on_last_two_axes(q_prev, axis))
        )
    )


def _reuse_or_quantize(src, q_prev, spec, axis, recipe, state=None, key=None, backend="xla", weight=False):
    """Reuse the other GEMM's copy instead of requantizing where it is exactly the same (:func:`_reusable`)."""
    if _reusable(q_prev, spec, key, axis):
        return dataclasses.replace(q_prev, axis=axis)
    return _q(src, spec, axis, recipe, state, key, backend, weight)


def _transposed_wgrad_quantize(src, spec, key, backend) -> bool:
    """Whether Wgrad's operand ``src`` (B, M, F), quantized along M, comes from the CUDA kernel that writes the
    QTensor of ``src``'s transpose (B, F, M) along axis 2 (:func:`mxprec.kernels.cuda.quantize_transposed`): the
    same codes and scales as quantizing along axis 1, K-major for the GEMM, so the FP8 codes need no transpose.
    Where the CUDA kernels run this operand's quantization and its GEMM (ffi, or auto with the block family) and
    the kernel takes the spec and shape (a sharded X or dY keeps its sharding: the call's sharding rule).
    ``MXPREC_TRANSPOSED_QUANTIZE=0`` turns it off."""
    if key is not None or backend not in ("auto", "ffi") or jax.default_backend() != "gpu":
        return False
    from mxprec.kernels import cuda, hip

    if hip.is_rocm() or not cuda.quantizes_transposed():
        return False
    if backend == "auto" and not (cuda.auto_quantizes(spec) and "block" in cuda.auto_families()):
        return False
    return not cuda.why_not_quantize_transposed(src.shape, src.dtype, spec)


def _rows_and_transposed_grad(g, recipe: Recipe, keys, backend) -> bool:
    """Whether dY's Dgrad copy (along N) and Wgrad's K-major copy come from one call that reads dY once
    (:func:`mxprec.kernels.cuda.quantize_rows_and_transposed`, the same bits as the two calls): where Wgrad's copy
    comes from the transposed quantize (:func:`_transposed_wgrad_quantize`) and the Dgrad copy, FP8 1 x 128 tiles
    and unkeyed, from the CUDA quantize kernel. ``MXPREC_ROWS_TRANSPOSED_QUANTIZE=0`` turns it off."""
    (k_dgrad, k_wgrad), spec_d, spec_w = keys, recipe.dgrad_grad, recipe.wgrad_grad
    if k_dgrad is not None or spec_d is None or spec_w is None:
        return False
    if not _transposed_wgrad_quantize(g, spec_w, k_wgrad, backend):
        return False
    from mxprec.kernels import cuda

    if not cuda.quantizes_rows_and_transposed() or (backend == "auto" and not cuda.auto_quantizes(spec_d)):
        return False
    return not cuda.why_not_quantize_rows_and_transposed(g.shape, g.dtype, spec_d, spec_w)


def _q_wgrad(src, spec, recipe: Recipe, state=None, key=None, backend="xla", q_prev=None):
    """Wgrad's operand ``src`` (B, M, F) quantized along M (its contraction axis): Fprop's / Dgrad's copy
    ``q_prev`` where it is exactly that (:func:`_reusable`), else QTensor (B, M, F) along axis 1, or, where
    :func:`_transposed_wgrad_quantize` says so, the same codes as QTensor (B, F, M) along axis 2."""
    if _reusable(q_prev, spec, key, 1):
        return dataclasses.replace(q_prev, axis=1)
    if spec is not None and _transposed_wgrad_quantize(src, spec, key, backend):
        from mxprec.kernels import cuda

        return cuda.quantize_transposed(src, spec, amax=False)  # Wgrad's copies: their amax is never read
    return _q(src, spec, 1, recipe, state, key, backend)


def _wgrad_contract(q) -> int:
    """The contraction axis of a Wgrad operand from _q_wgrad (an unquantized operand: axis 1)."""
    return q.axis if isinstance(q, QTensor) else 1


def _reuse_or_keep(src, q_prev, spec, axis):
    """``residuals="wide"``: the wide source, unless the backward would requantize it to ``q_prev``'s
    exact codes (:func:`_reusable`); then the 1-byte copy (smaller, and no second quantize pass)."""
    return dataclasses.replace(q_prev, axis=axis) if _reusable(q_prev, spec, axis=axis) else src


def _amax_of(q, src):
    """The source's amax: already computed by quantize when ``q`` is a QTensor (no second pass)."""
    return q.amax if isinstance(q, QTensor) else tensor_amax(src)


def _grad_keys(recipe: Recipe, g):
    """Stochastic-rounding keys for dY, derived from dY's bits (deterministic, varies per step)."""
    if not recipe.stochastic_grad_rounding:
        return None, None
    h = jnp.sum(lax.bitcast_convert_type(g.astype(jnp.float32), jnp.uint32), dtype=jnp.uint32)
    base = jax.random.key(h)
    return jax.random.fold_in(base, 1), jax.random.fold_in(base, 2)


def _is_empty(x, w) -> bool:
    """A zero-size GEMM (B, M, K or N is 0, e.g. an MoE expert that got no tokens): nothing to quantize."""
    return 0 in tuple(x.shape) + tuple(w.shape)


def _fprop(meta: _Meta, x, w, state, gemm):
    """(Fprop output, X's and W's Fprop copies, the FP32 state); a zero-size GEMM's output is zeros (or empty)."""
    r = meta.recipe
    st = _to_f32(state)
    be = meta.backend
    if _is_empty(x, w):
        y = jnp.zeros((x.shape[0], x.shape[1], w.shape[2]), meta.out_dtype)
        return ((y, None) if gemm is scaled_gemm_deferred else y), None, None, st  # the gemm's output form
    qx = _q(x, r.fprop_lhs, 2, r, st.lhs if st else None, backend=be)
    qw = _q(w, r.fprop_rhs, 1, r, st.rhs if st else None, backend=be, weight=True)
    y = gemm(qx, qw, lhs_contract=2, rhs_contract=1, out_dtype=meta.out_dtype, backend=meta.backend)
    return y, qx, qw, st


def _fwd(meta: _Meta, x, w, state, gemm=kernels.scaled_gemm):
    """(Fprop output, residuals); ``gemm``: scaled_gemm or a function with its signature (mxprec.fused_mlp passes
    scaled_gemm_deferred, whose output is a (y, multiplier) pair). Runs only under differentiation, so it checks
    the backward GEMMs' block sizes first (the forward alone does not need them)."""
    r = meta.recipe
    _check_blocks(r, (x.shape[1], x.shape[2], w.shape[2]), _BACKWARD_ROLES, meta.desc)
    y, qx, qw, st = _fprop(meta, x, w, state, gemm)
    if qx is None:  # zero-size: the residuals are the (empty) operands
        return y, (x, w, None, st)
    be = meta.backend
    if r.residuals == "quantized":
        rx = _q_wgrad(x, r.wgrad_lhs, r, st.lhs if st else None, backend=be, q_prev=qx)
        rw = _reuse_or_quantize(w, qw, r.dgrad_rhs, 2, r, st.rhs if st else None, backend=be, weight=True)
    else:
        rx, rw = _reuse_or_keep(x, qx, r.wgrad_lhs, 1), _reuse_or_keep(w, qw, r.dgrad_rhs, 2)
    amax = None
    if state is not None:
        amax = (_amax_of(qx, x), _amax_of(qw, w))
    return y, (rx, rw, amax, st)


def _grad_copies(meta: _Meta, g, st_g):
    """dY's Dgrad copy (along N) and Wgrad copy (along M), from one read of dY where the CUDA kernels can."""
    r, be = meta.recipe, meta.backend
    k_dgrad, k_wgrad = _grad_keys(r, g)
    if _rows_and_transposed_grad(g, r, (k_dgrad, k_wgrad), be):
        from mxprec.kernels import cuda

        return cuda.quantize_rows_and_transposed(g, r.dgrad_grad, r.wgrad_grad, amax=st_g is not None)
    qg_d = _q(g, r.dgrad_grad, 2, r, st_g, k_dgrad, backend=be)
    return qg_d, _q_wgrad(g, r.wgrad_grad, r, st_g, k_wgrad, backend=be, q_prev=qg_d)


def _dgrad(meta: _Meta, qg_d, rw, st, gemm=None):
    """dX (B, M, K) = Q(dY) · Q(W)ᵀ from dY's Dgrad copy and W's residual (``gemm``: kernels.scaled_gemm, or a
    function of its signature such as scaled_gemm_deferred)."""
    r, be = meta.recipe, meta.backend
    qw_d = rw if isinstance(rw, QTensor) else _q(rw, r.dgrad_rhs, 2, r, st.rhs if st else None, backend=be,
                                                weight=True)
    gemm = kernels.scaled_gemm if gemm is None else gemm
    return gemm(qg_d, qw_d, lhs_contract=2, rhs_contract=2, out_dtype=meta.x_dtype, backend=be)


def _wgrad(meta: _Meta, rx, qg_w, st):
    """dW (B, K, N) = Q(X)ᵀ · Q(dY) from X's residual and dY's Wgrad copy."""
    r, be = meta.recipe, meta.backend
    qx_w = rx if isinstance(rx, QTensor) else _q_wgrad(rx, r.wgrad_lhs, r, st.lhs if st else None, backend=be)
    return kernels.scaled_gemm(qx_w, qg_w, lhs_contract=_wgrad_contract(qx_w), rhs_contract=_wgrad_contract(qg_w),
                               out_dtype=meta.w_dtype, backend=be)


def _state_cotangent(meta: _Meta, st, amax, amax_g):
    """The updated delayed-scaling state (the cotangent of ``state``), or None for a stateless recipe."""
    if st is None:
        return None
    new = {}
    for name, a in (("lhs", amax[0]), ("rhs", amax[1]), ("grad", amax_g)):
        sub = getattr(st, name)
        new[name] = None if sub is None else update_delayed_state(sub, a, meta.recipe.delayed_spec(name))
    return _to_max_grad(DotGeneralState(**new))


def _bwd(meta: _Meta, res, g):
    rx, rw, amax, st = res
    if _is_empty(rx, rw):  # zero-size: zero (or empty) gradients, the state unchanged
        dx, dw = jnp.zeros(rx.shape, meta.x_dtype), jnp.zeros(rw.shape, meta.w_dtype)
        return dx, dw, None if st is None else _to_max_grad(st)
    qg_d, qg_w = _grad_copies(meta, g, st.grad if st else None)
    dx = _dgrad(meta, qg_d, rw, st)
    dw = _wgrad(meta, rx, qg_w, st)
    return dx, dw, _state_cotangent(meta, st, amax, _amax_of(qg_d, g) if st is not None else None)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _gemm(meta: _Meta, x, w, state):
    return _fprop(meta, x, w, state, kernels.scaled_gemm)[0]


_gemm.defvjp(_fwd, _bwd)


# ----------------------------------------------------------------------------- public op


# Each GEMM operand's quantization: (contraction size, size along its tile rows), by name, of the canonical
# X (B, M, K), W (B, K, N), dY (B, M, N): Fprop contracts K, Dgrad N, Wgrad M.
_OPERAND_AXES = {
    "fprop_lhs": ("K", "M"),
    "fprop_rhs": ("K", "N"),
    "dgrad_grad": ("N", "M"),
    "dgrad_rhs": ("N", "K"),
    "wgrad_lhs": ("M", "K"),
    "wgrad_grad": ("M", "N"),
}
_FPROP_ROLES = ("fprop_lhs", "fprop_rhs")
_BACKWARD_ROLES = ("dgrad_grad", "dgrad_rhs", "wgrad_lhs", "wgrad_grad")


def _check_blocks(recipe: Recipe, mkn: tuple[int, int, int], roles, desc: str) -> None:
    """Block / tile divisibility of ``roles``' operands (``mkn``: the canonical M, K, N), checked before they are
    quantized. dot_general checks Fprop's; the backward's are checked when it is traced (a forward alone, e.g.
    inference with few tokens, does not need M to be a multiple of a block)."""
    size_of = dict(zip("MKN", mkn))
    for role in roles:
        spec = recipe.spec(role)
        if spec is None:
            continue
        (c_name, r_name), gemm = _OPERAND_AXES[role], role.split("_")[0].capitalize()
        size, rows = size_of[c_name], size_of[r_name]
        block = getattr(spec, "block", None) if spec.kind in ("mx", "nvfp4", "tile") else None
        if block and size % block:
            raise ValueError(
                f"dot_general: recipe {recipe.name!r} {role} ({spec.describe()}) needs {gemm}'s contraction "
                f"size {c_name}={size} to be a multiple of {block}: {desc}"
            )
        tr = spec.tile[0] if spec.kind == "tile" else 1
        if tr > 1 and rows % tr:
            raise ValueError(
                f"dot_general: recipe {recipe.name!r} {role} ({spec.describe()}) needs {gemm}'s non-contracted "
                f"size {r_name}={rows} to be a multiple of {tr}: {desc}"
            )


def _check_state(recipe: Recipe, state, desc: str, op: str = "dot_general") -> None:
    """``state`` is None for a recipe without delayed scaling (its cotangent would overwrite a Flax collection with
    zeros), and for a delayed recipe holds one DelayedScalingState of the recipe's history length per scaled
    operand. ``op`` names the caller in the errors."""
    if not recipe.is_delayed:
        if state is not None:
            raise ValueError(
                f"{op}: recipe {recipe.name!r} has no delayed scaling, so state must be None "
                f"(got {type(state).__name__}): {desc}"
            )
        return
    if state is None:
        raise ValueError(
            f"{op}: recipe {recipe.name!r} uses delayed scaling and needs "
            "state=DotGeneralState.init(recipe) (Flax modules from recipe.dot_general_cls() manage it)"
        )
    if not isinstance(state, DotGeneralState):
        raise TypeError(f"{op}: state must be a DotGeneralState, got {type(state).__name__}: {desc}")
    for t in ("lhs", "rhs", "grad"):
        spec, sub = recipe.delayed_spec(t), getattr(state, t)
        want = None if spec is None else ((spec.history_len,), ())
        got = None if sub is None else (tuple(jnp.shape(sub.amax_history)), tuple(jnp.shape(sub.scale)))
        if got != want:
            raise ValueError(
                f"{op}: recipe {recipe.name!r} state.{t} should have (amax_history, scale) shapes {want}, "
                f"got {got} (DotGeneralState.init(recipe) makes one): {desc}"
            )
        if sub is not None:
            dtypes = (jnp.result_type(sub.amax_history), jnp.result_type(sub.scale))
            # float32, or Flax's max-combining fp32_max_grad (mxprec.max_combining)
            if any(d != jnp.float32 and d != fp32_max_grad for d in dtypes):
                raise TypeError(f"{op}: state.{t} (amax_history, scale) must be float32, got dtypes "
                                f"({dtypes[0]}, {dtypes[1]}): {desc}")


def dot_general(
    lhs: jax.Array,
    rhs: jax.Array,
    dimension_numbers,
    precision=None,
    preferred_element_type=None,
    out_sharding=None,
    *,
    recipe: Recipe | str,
    state: DotGeneralState | None = None,
) -> jax.Array:
    """Drop-in ``lax.dot_general`` whose GEMMs follow ``recipe`` (see module docstring).

    Args:
      lhs, rhs: float32 / bfloat16 / float16 arrays (X and W).
      dimension_numbers: as for ``lax.dot_general``.
      precision: accepted for signature compatibility; the recipe decides the numerics.
      preferred_element_type: output dtype (else the recipe's output dtype, else lhs.dtype).
      out_sharding: as for ``lax.dot_general``; applied as a sharding constraint on the output.
      recipe: a Recipe or a preset name.
      state: DotGeneralState for delayed-scaling recipes (required for them).

    Returns:
      ``lax.dot_general``'s output shape: batch dims, lhs free dims, rhs free dims.
    """
    recipe = get_recipe(recipe)
    # numpy arrays and Python scalars as lax.dot_general takes them (float64 becomes float32 unless x64 is on)
    lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
    for name, t in (("lhs", lhs), ("rhs", rhs)):
        if not jnp.issubdtype(jnp.result_type(t), jnp.floating):
            raise TypeError(f"dot_general: {name} must be floating, got {jnp.result_type(t)} {jnp.shape(t)}")
    c = canonicalize(lhs.shape, rhs.shape, dimension_numbers)
    out_dtype = preferred_element_type or recipe.output_dtype or lhs.dtype
    desc = f"lhs {lhs.dtype}{tuple(lhs.shape)}, rhs {rhs.dtype}{tuple(rhs.shape)}, dimension_numbers {dimension_numbers}"
    _check_state(recipe, state, desc)

    if not recipe.quantized:
        # Nothing to quantize: XLA's own dot (and JAX's own transpose rules) are the exact answer.
        # The dot emits out_dtype directly (XLA accumulates in FP32 either way): an FP32 result
        # cast down would make the cotangent FP32, and JAX's transpose rule would then run the
        # Dgrad/Wgrad GEMMs as FP32 x BF16 -> FP32 GEMMs (measured: a 1.63x slower Llama step).
        cd = recipe.compute_dtype
        l, r_ = (lhs, rhs) if cd is None else (lhs.astype(cd), rhs.astype(cd))
        y = lax.dot_general(l, r_, dimension_numbers, precision=precision, preferred_element_type=out_dtype)
        return _finish(y, out_sharding)

    for name, t in (("lhs", lhs), ("rhs", rhs)):
        if jnp.dtype(t.dtype) not in SUPPORTED_INPUT_DTYPES:
            raise TypeError(
                f"dot_general: recipe {recipe.name!r} quantizes float32 / bfloat16 / float16 operands; {name} is "
                f"{t.dtype}: {desc}"
            )
    _check_blocks(recipe, (c.M, c.K, c.N), _FPROP_ROLES, desc)
    backend = kernels.resolve_backend(recipe.backend)
    x = jnp.transpose(lhs, c.lhs_perm).reshape(c.B, c.M, c.K)
    w = jnp.transpose(rhs, c.rhs_perm).reshape(c.B, c.K, c.N)
    meta = _Meta(recipe, jnp.dtype(out_dtype), backend, jnp.dtype(lhs.dtype), jnp.dtype(rhs.dtype), desc)
    st = _to_max_grad(state) if state is not None else None
    y = _gemm(meta, x, w, st)
    return _finish(y.reshape(c.out_shape), out_sharding)


def _finish(y, out_sharding):
    if out_sharding is not None:
        y = lax.with_sharding_constraint(y, out_sharding)
    return checkpoint_name(y, CHECKPOINT_NAME)
