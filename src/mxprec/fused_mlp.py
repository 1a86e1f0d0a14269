"""``mxprec.fused_mlp``: the SwiGLU MLP block ``y = (silu(x·W0) ⊙ (x·W1))·Wo`` as one ``custom_vjp``.

The three projections run exactly the GEMMs, quantizations and delayed-scaling updates that three
:func:`mxprec.dot_general` calls would (each with its own state; ``wi_0`` / ``wi_1`` / ``wo``), and the
activation has a specified arithmetic (:func:`swiglu_forward`, :func:`swiglu_backward`: FP32, one rounding to the
model's dtype per tensor). What the block adds is the backward's schedule: with per-tensor FP8 scaling (delayed or
current) on a CUDA GPU, one kernel (:func:`mxprec.kernels.cuda.swiglu_backward_fp8`) turns ``gate``, ``up`` and ``dh``
into h's K-major codes (wo's Wgrad), d_gate's and d_up's codes along F (Dgrad) and K-major (Wgrad) and their amaxes,
where the unfused model runs XLA's fusions and three FP8 transposes for the same work; in the forward one kernel
(:func:`mxprec.kernels.cuda.swiglu_forward_fp8`) writes h's codes, h itself never leaves registers. Current scaling
needs each tensor's amax before its first code: a first kernel computes the amaxes alone
(:func:`mxprec.kernels.cuda.swiglu_backward_amax` / ``swiglu_forward_amax``, reading the inputs once more and
writing nothing else), and the cast kernel then runs with the scales ``amax / max_finite``. With FP8 1 x 128 tiles
(fp8_block) the forward writes h's two copies with :func:`mxprec.kernels.cuda.swiglu_h_tiles` (along F for wo's
Fprop, K-major for its Wgrad; h itself is never written), and the backward runs XLA's SwiGLU backward with one
``quantize_rows_and_transposed`` per gradient (``MXPREC_SWIGLU_GRAD_TILES=1``: the slower one-kernel form,
:func:`mxprec.kernels.cuda.swiglu_grad_tiles`).

Semantics: bit-identical to the composition ``dot_general(swiglu(dot_general(x, W0), dot_general(x, W1)), Wo)``
with :func:`swiglu` and the same recipe and states on XLA's path (``swiglu_kernel="xla"``; CPU tests); the CUDA
kernel computes the same formula with IEEE FP32 steps (``tests/test_fused_mlp.py`` checks it against XLA's
evaluation on the GPU and states the measured agreement).

Shapes: ``x (..., D)``, ``wi_0, wi_1 (D, F)``, ``wo (F, D)`` -> ``(..., D)`` in ``x.dtype``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from mxprec import kernels
from mxprec.dot_general import (
    _FPROP_ROLES,
    CHECKPOINT_NAME,
    DotGeneralState,
    _amax_of,
    _check_blocks,
    _check_state,
    _dgrad,
    _finish,
    _fwd as _gemm_fwd,
    _grad_copies,
    _is_empty,
    _Meta as _GemmMeta,
    _q,
    _reuse_or_keep,
    _reuse_or_quantize,
    _state_cotangent,
    _to_f32,
    _to_max_grad,
    _wgrad,
    max_combining,
)
from mxprec.kernels.scaled_gemm import scaled_gemm_deferred
from mxprec.quantize import (
    QTensor,
    _per_group_fp32_scale as _current_scale,  # TensorScaling's amax / max_finite (1 at 0)
)
from mxprec.recipes import Recipe, get as get_recipe
from mxprec.scaling import DelayedScaling, TensorScaling, TileScaling, delayed_scale_of

__all__ = ["SWIGLU_KERNELS", "FusedMLPState", "swiglu", "swiglu_backward", "swiglu_forward", "swiglu_mlp"]

F32 = jnp.float32
SWIGLU_KERNELS = ("auto", "cuda", "xla")
PROJECTIONS = ("wi_0", "wi_1", "wo")


# ----------------------------------------------------------------------------- the activation's arithmetic


def _round(x32, dtype):
    """x32 rounded to ``dtype`` (RNE) as a value XLA keeps: ``reduce_precision`` first, which XLA's GPU compiler
    does not drop the way it drops a convert pair to f32 and back inside a fusion (xla_allow_excess_precision)."""
    fi = jnp.finfo(dtype)
    if fi.nexp == 8:  # bfloat16 (float16: XLA's reduce_precision would flush its subnormals; a plain convert)
        x32 = lax.reduce_precision(x32, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)
    return x32.astype(dtype)


def _sigmoid_parts(gate):
    g = _round(gate.astype(F32), gate.dtype).astype(F32)
    sig = 1.0 / (1.0 + jnp.exp(-g))
    return g, sig, g * sig


def swiglu_forward(gate, up):
    """``h = silu(gate) * up``: FP32 ``g * (1 / (1 + exp(-g))) * u``, rounded once to ``gate.dtype``."""
    _, _, silu = _sigmoid_parts(gate)
    return _round(silu * _round(up.astype(F32), up.dtype).astype(F32), gate.dtype)


def swiglu_backward(gate, up, dh):
    """``(d_gate, d_up)`` of :func:`swiglu_forward`: FP32, each rounded once to its operand's dtype.

    ``d_up = dh * silu(g)``; ``d_gate = dh * u * sig * (1 + g * (1 - sig))`` (evaluated left to right).
    """
    g, sig, silu = _sigmoid_parts(gate)
    u, d = (_round(t.astype(F32), t.dtype).astype(F32) for t in (up, dh))
    d_up = _round(d * silu, up.dtype)
    d_gate = _round(d * u * sig * (1.0 + g * (1.0 - sig)), gate.dtype)
    return d_gate, d_up


@jax.custom_vjp
def swiglu(gate, up):
    """:func:`swiglu_forward` with :func:`swiglu_backward` as its VJP (the fused block's activation, unfused)."""
    return swiglu_forward(gate, up)


swiglu.defvjp(lambda g, u: (swiglu_forward(g, u), (g, u)), lambda res, dh: swiglu_backward(*res, dh))


# ----------------------------------------------------------------------------- state


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FusedMLPState:
    """Delayed-scaling states of the three projections (each a :class:`mxprec.dot_general.DotGeneralState`)."""

    wi_0: DotGeneralState | None = None
    wi_1: DotGeneralState | None = None
    wo: DotGeneralState | None = None

    @classmethod
    def init(cls, recipe: Recipe) -> FusedMLPState | None:
        recipe = get_recipe(recipe)
        if not recipe.is_delayed:
            return None
        return cls(*(DotGeneralState.init(recipe) for _ in PROJECTIONS))


# ----------------------------------------------------------------------------- the custom_vjp


class _Meta(NamedTuple):
    gemm: _GemmMeta  # the three GEMMs' meta (out dtype = the model's dtype, as the unfused block's)
    swiglu_kernel: str


def _part(state, name):
    return None if state is None else getattr(state, name)


class _TileOperands(NamedTuple):
    """The backward's gate and up where the 1 x 128 tile kernels run (their residual marks that path)."""

    gate: jax.Array
    up: jax.Array


def _tagged_gemm_fwd(*args, **kw):
    """dot_general's forward with its output tagged as dot_general's own (``CHECKPOINT_NAME``), so that
    ``remat="save_gemm"`` keeps gate and up here too instead of recomputing their GEMMs."""
    y, res = _gemm_fwd(*args, **kw)
    return checkpoint_name(y, CHECKPOINT_NAME), res


def _fwd(meta: _Meta, x, w0, w1, wo, state):
    if not _kernel_use(meta, x.shape[1], w0.shape[2]):
        gate, res0 = _tagged_gemm_fwd(meta.gemm, x, w0, _part(state, "wi_0"))
        up, res1 = _tagged_gemm_fwd(meta.gemm, x, w1, _part(state, "wi_1"))
        y, res2 = _gemm_fwd(meta.gemm, swiglu_forward(gate, up), wo, _part(state, "wo"))
        return y, (res0, res1, res2, (gate, None), (up, None))
    if _is_tiles(meta.gemm.recipe):
        gate, res0 = _tagged_gemm_fwd(meta.gemm, x, w0, None)
        up, res1 = _tagged_gemm_fwd(meta.gemm, x, w1, None)
        y, res2 = _wo_fwd_from_tiles(meta, gate, up, wo)
        return y, (res0, res1, res2, _TileOperands(gate, up))
    # the kernels apply XLA's per-tensor output scaling of gate and up themselves (scaled_gemm_deferred)
    gate, res0 = _tagged_gemm_fwd(meta.gemm, x, w0, _part(state, "wi_0"), gemm=scaled_gemm_deferred)
    up, res1 = _tagged_gemm_fwd(meta.gemm, x, w1, _part(state, "wi_1"), gemm=scaled_gemm_deferred)
    y, res2 = _wo_fwd_from_codes(meta, gate, up, wo, _part(state, "wo"))
    return y, (res0, res1, res2, gate, up)


def _wo_fwd_from_codes(meta: _Meta, gate, up, wo, state_wo):
    """wo's Fprop with h's codes and amax from the CUDA kernel (h itself is never written); the residuals of
    :func:`mxprec.dot_general._fwd` except h's Wgrad copy, which the backward's kernel writes. ``gate`` and ``up``:
    (unscaled GEMM output, multiplier or None) pairs from scaled_gemm_deferred."""
    from mxprec.kernels import cuda

    m = meta.gemm
    r, be = m.recipe, m.backend
    st = _to_f32(state_wo)
    (g, g_mult), (u, u_mult) = gate, up
    b, rows, f = g.shape
    g2, u2 = g.reshape(rows, f), u.reshape(rows, f)
    amax_first = None  # current scaling: h's amax from the first pass, before the cast
    if isinstance(r.fprop_lhs, TensorScaling):
        amax_first = cuda.swiglu_forward_amax(g2, u2, (g_mult, u_mult))
    s_h = _kernel_scale(r.fprop_lhs, _part(st, "lhs"), amax_first)
    codes, amax_h = cuda.swiglu_forward_fp8(g2, u2, s_h, r.fprop_lhs.fmt, (g_mult, u_mult))
    qh = _fp8_qtensor(codes, s_h, amax_h, r.fprop_lhs, (b, rows, f), g.dtype)
    st_rhs = _part(st, "rhs")
    qwo = _q(wo, r.fprop_rhs, 1, r, st_rhs, backend=be, weight=True)
    y = kernels.scaled_gemm(qh, qwo, lhs_contract=2, rhs_contract=1, out_dtype=m.out_dtype, backend=be)
    if r.residuals == "quantized":
        rw = _reuse_or_quantize(wo, qwo, r.dgrad_rhs, 2, r, st_rhs, backend=be, weight=True)
    else:
        rw = _reuse_or_keep(wo, qwo, r.dgrad_rhs, 2)
    # amax(h) is a residual only for a delayed state's update (else the forward kernels stay dead under remat)
    amax = None if st is None else (amax_h, _amax_of(qwo, wo))
    return y, (None, rw, amax, st)


def _tile_qtensor(codes, scale, spec, shape, dtype) -> QTensor:
    """A (1, M, F) or (1, F, M) copy from the tile kernels: 1 x 128 groups along its last axis, no amax."""
    return QTensor(data=codes.reshape(shape), scale=scale.reshape(shape[:-1] + (shape[-1] // 128,)),
                   amax=jnp.float32(jnp.nan), tensor_scale=None, spec=spec, axis=2, shape=shape,
                   dtype=jnp.dtype(dtype))


def _wo_fwd_from_tiles(meta: _Meta, gate, up, wo):
    """wo's Fprop with h's 1 x 128 row copy from the tile kernel (h itself is never written), and h's Wgrad copy
    (groups along M, K-major) from a second call as the residual. Under rematerialization each call is dead in one
    of the two forwards (the Fprop's output is not needed when the backward recomputes, the residual is not kept in
    the first forward), so XLA drops it there."""
    from mxprec.kernels import cuda

    m = meta.gemm
    r, be = m.recipe, m.backend
    b, rows, f = gate.shape
    g2, u2 = gate.reshape(rows, f), up.reshape(rows, f)
    qh = _tile_qtensor(*cuda.swiglu_h_tiles(g2, u2, r.fprop_lhs), r.fprop_lhs, (b, rows, f), gate.dtype)
    qwo = _q(wo, r.fprop_rhs, 1, r, None, backend=be, weight=True)
    y = kernels.scaled_gemm(qh, qwo, lhs_contract=2, rhs_contract=1, out_dtype=m.out_dtype, backend=be)
    qh_w = _tile_qtensor(*cuda.swiglu_h_tiles(g2, u2, r.wgrad_lhs, transposed=True), r.wgrad_lhs, (b, f, rows),
                         gate.dtype)
    if r.residuals == "quantized":
        rw = _reuse_or_quantize(wo, qwo, r.dgrad_rhs, 2, r, None, backend=be, weight=True)
    else:
        rw = _reuse_or_keep(wo, qwo, r.dgrad_rhs, 2)
    return y, (qh_w, rw, None, None)


def _swiglu_grads_from_tiles(meta: _Meta, gate, up, dh):
    """(d_gate's Dgrad copy, Wgrad copy), (d_up's ...) from the tile kernel (1 x 128 groups along F; groups of 128
    along M, K-major)."""
    from mxprec.kernels import cuda

    r = meta.gemm.recipe
    b, m, f = gate.shape
    out = cuda.swiglu_grad_tiles(gate.reshape(m, f), up.reshape(m, f), dh.reshape(m, f), r.dgrad_grad)
    dt = gate.dtype
    return tuple((_tile_qtensor(out[i], out[i + 1], r.dgrad_grad, (b, m, f), dt),
                  _tile_qtensor(out[i + 2], out[i + 3], r.wgrad_grad, (b, f, m), dt)) for i in (0, 4))


def _grad_tiles_kernel() -> bool:
    """Whether the tile path's backward runs :func:`mxprec.kernels.cuda.swiglu_grad_tiles` (``MXPREC_SWIGLU_GRAD_TILES``
    ``1``) or XLA's SwiGLU backward and a quantize_rows_and_transposed call per gradient (``0``, the default: the
    kernel took 1.51 ms against their 1.40 ms at 16384 x 14336 on the H200, benchmarks/results/h200_swiglu_tiles.md)."""
    mode = os.environ.get("MXPREC_SWIGLU_GRAD_TILES", "0")
    if mode not in ("0", "1"):
        raise ValueError(f"MXPREC_SWIGLU_GRAD_TILES must be 0 or 1, got {mode!r}")
    return mode == "1"


def _is_tiles(r: Recipe) -> bool:
    """Whether the recipe's h and dY copies are FP8 1 x 128 tiles (fp8_block): the tile kernels' path."""
    return all(isinstance(s, TileScaling) and s.tile == (1, 128) and s.fmt.is_fp8
               for s in (r.fprop_lhs, r.wgrad_lhs, r.dgrad_grad, r.wgrad_grad))


def _kernel_scale(spec, state, amax):
    """The per-tensor scale a SwiGLU kernel casts with: a delayed state's, or current scaling's from ``amax``."""
    if isinstance(spec, DelayedScaling):
        return delayed_scale_of(state, "fused MLP block")
    return _current_scale(amax, spec.fmt)


def _kernel_use(meta: _Meta, m: int, f: int) -> bool:
    """Whether the SwiGLU and h's cast (forward) and the SwiGLU backward with its casts and transposed copies run as
    the CUDA kernels (else XLA's fusions). Decided in the forward; the backward follows its residuals."""
    choice = meta.swiglu_kernel
    if choice == "xla":
        return False
    r = meta.gemm.recipe
    why = ""
    tiles = _is_tiles(r)
    if not tiles and not all(isinstance(s, (DelayedScaling, TensorScaling)) and s.fmt.is_fp8
                             for s in (r.fprop_lhs, r.wgrad_lhs, r.dgrad_grad, r.wgrad_grad)):
        why = f"recipe {r.name!r}: h / dY are neither per-tensor (delayed or current) FP8 nor FP8 1 x 128 tiles"
    elif r.dgrad_grad != r.wgrad_grad or r.stochastic_grad_rounding:
        why = f"recipe {r.name!r}: dY's Dgrad and Wgrad copies differ"
    elif tiles and r.is_delayed:
        why = f"recipe {r.name!r}: the 1 x 128 tile kernels' path takes no delayed-scaling state (its weights')"
    elif jax.default_backend() != "gpu":
        why = f"the kernel needs a CUDA GPU (JAX backend {jax.default_backend()})"
    else:
        from mxprec.kernels import cuda, hip

        if hip.is_rocm() or not cuda.available():
            why = "the CUDA kernels (libmxprec_cuda.so) are not loaded"
        else:
            why = (cuda.why_not_swiglu_tiles(m, f, meta.gemm.out_dtype, r.dgrad_grad) if tiles
                   else cuda.why_not_swiglu_backward(m, f, meta.gemm.out_dtype))
    if choice == "cuda" and why:
        raise ValueError(f"swiglu_mlp(swiglu_kernel='cuda'): {why}")
    # auto: the kernel wherever it applies; MXPREC_FUSED_SWIGLU_KERNEL=0 turns it off (a measurement knob)
    return not why and os.environ.get("MXPREC_FUSED_SWIGLU_KERNEL", "1") != "0"


def _fp8_qtensor(codes, scale, amax, spec, shape, dtype) -> QTensor:
    return QTensor(data=codes.reshape(shape), scale=jnp.asarray(scale, F32).reshape(()), amax=amax,
                   tensor_scale=None, spec=spec, axis=2, shape=shape, dtype=jnp.dtype(dtype))


def _swiglu_backward_quantized(meta: _Meta, gate, up, dh, st):
    """(h's Wgrad copy for wo, amax(h), (d_gate's Dgrad copy, Wgrad copy, amax), (d_up's ...)) from the CUDA kernel;
    ``gate``, ``up``, ``dh``: (unscaled GEMM output, multiplier or None) pairs (see _wo_fwd_from_codes).

    amax(h) is recomputed here (the same bits as the forward kernel's), so that under rematerialization the
    forward's recomputation needs no SwiGLU at all (its kernel call is dead and XLA drops it). A current-scaled
    tensor's scale comes from the amax-only first pass."""
    from mxprec.kernels import cuda

    r = meta.gemm.recipe
    (g, g_mult), (u, u_mult), (dh, d_mult) = gate, up, dh
    b, m, f = g.shape
    args = (g.reshape(m, f), u.reshape(m, f), dh.reshape(m, f))
    mult = (g_mult, u_mult, d_mult)
    specs = (r.wgrad_lhs, r.dgrad_grad, r.dgrad_grad)
    states = (_part(_part(st, "wo"), "lhs"), _part(_part(st, "wi_0"), "grad"), _part(_part(st, "wi_1"), "grad"))
    amax_first = (None,) * 3
    if any(isinstance(spec, TensorScaling) for spec in specs):
        amax_first = cuda.swiglu_backward_amax(*args, mult)
    s_h, s_dg, s_du = (_kernel_scale(*t) for t in zip(specs, states, amax_first))
    fmts = tuple(spec.fmt for spec in specs)
    ht, dgc, dgt, duc, dut, amax_h, amax_dg, amax_du = cuda.swiglu_backward_fp8(
        *args, jnp.stack([s_h, s_dg, s_du]), fmts, mult)
    nan = jnp.float32(jnp.nan)  # Wgrad copies: their amax is never read
    qh_w = _fp8_qtensor(ht, s_h, nan, r.wgrad_lhs, (b, f, m), g.dtype)
    grads = []
    for codes, codes_t, amax, s in ((dgc, dgt, amax_dg, s_dg), (duc, dut, amax_du, s_du)):
        grads.append((_fp8_qtensor(codes, s, amax, r.dgrad_grad, (b, m, f), g.dtype),
                      _fp8_qtensor(codes_t, s, nan, r.wgrad_grad, (b, f, m), g.dtype), amax))
    return qh_w, amax_h, grads[0], grads[1]


def _bwd(meta: _Meta, res, g):
    res0, res1, res2, *ops = res
    m = meta.gemm
    (rx0, rw0, amax0, st0), (rx1, rw1, amax1, st1), (rx2, rw2, amax2, st2) = res0, res1, res2
    st_all = None if st0 is None else FusedMLPState(st0, st1, st2)
    if _is_empty(rx0, rw0):  # M, D or F is 0, so every GEMM is empty: zero (or empty) gradients, the state unchanged
        zeros = tuple(jnp.zeros(t.shape, t.dtype) for t in (rx0, rw0, rw1, rw2))
        return (*zeros, None if st_all is None else _to_max_grad(st_all))
    qg_d, qg_w = _grad_copies(m, g, _part(st2, "grad"))
    if isinstance(ops[0], _TileOperands):  # the 1 x 128 tile kernels' path (no delayed state: amaxes unused)
        dh = _dgrad(m, qg_d, rw2, st2)
        if _grad_tiles_kernel():
            (qd0, qd0_w), (qd1, qd1_w) = _swiglu_grads_from_tiles(meta, ops[0].gate, ops[0].up, dh)
        else:  # XLA's SwiGLU backward, each gradient's two copies from one quantize call (the faster form)
            d_gate, d_up = swiglu_backward(ops[0].gate, ops[0].up, dh)
            (qd0, qd0_w), (qd1, qd1_w) = _grad_copies(m, d_gate, None), _grad_copies(m, d_up, None)
        amax_d0 = amax_d1 = None
    elif rx2 is None:  # the forward took the kernel path (_wo_fwd_from_codes leaves h's Wgrad copy to the backward)
        # the kernel applies the Dgrad's per-tensor output scaling of dh itself, as the gate's and up's
        dh = _dgrad(m, qg_d, rw2, st2, gemm=scaled_gemm_deferred)
        rx2, amax_h, (qd0, qd0_w, amax_d0), (qd1, qd1_w, amax_d1) = _swiglu_backward_quantized(meta, *ops, dh,
                                                                                               st_all)
        amax2 = None if amax2 is None else (amax_h, amax2[1])
    else:
        dh = _dgrad(m, qg_d, rw2, st2)
        d_gate, d_up = swiglu_backward(ops[0][0], ops[1][0], dh)
        qd0, qd0_w = _grad_copies(m, d_gate, _part(st0, "grad"))
        qd1, qd1_w = _grad_copies(m, d_up, _part(st1, "grad"))
        amax_d0 = _amax_of(qd0, d_gate) if st0 is not None else None
        amax_d1 = _amax_of(qd1, d_up) if st1 is not None else None
    dwo = _wgrad(m, rx2, qg_w, st2)
    dx = _dgrad(m, qd0, rw0, st0) + _dgrad(m, qd1, rw1, st1)
    dw0 = _wgrad(m, rx0, qd0_w, st0)
    dw1 = _wgrad(m, rx1, qd1_w, st1)
    ct = None
    if st_all is not None:
        amax_g = _amax_of(qg_d, g)
        ct = FusedMLPState(_state_cotangent(m, st0, amax0, amax_d0), _state_cotangent(m, st1, amax1, amax_d1),
                           _state_cotangent(m, st2, amax2, amax_g))
    return dx, dw0, dw1, dwo, ct


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _block(meta: _Meta, x, w0, w1, wo, state):
    return _fwd(meta, x, w0, w1, wo, state)[0]


_block.defvjp(_fwd, _bwd)


# ----------------------------------------------------------------------------- public op


def swiglu_mlp(x, wi_0, wi_1, wo, *, recipe: Recipe | str, state: FusedMLPState | None = None,
               swiglu_kernel: str = "auto"):
    """The SwiGLU MLP block with ``recipe``'s GEMMs, and its CUDA kernels where they apply (module docstring).

    Args:
      x: (..., D) float (the block's input, e.g. the pre-MLP RMSNorm's output).
      wi_0, wi_1: (D, F) gate and up projections; wo: (F, D). Same dtype as ``x`` (cast the FP32 master weights
        first, as ``nn.DenseGeneral`` does).
      recipe: a quantizing Recipe or preset name.
      state: :class:`FusedMLPState` for delayed-scaling recipes (its cotangent is the updated state, as for
        ``dot_general``; wrap with :func:`mxprec.dot_general.max_combining` when the block is applied several times).
      swiglu_kernel: "auto" (the CUDA kernel where the recipe, shapes and platform allow, else XLA's fusions),
        "cuda" (require it: ValueError where it cannot run), or "xla".
    Returns:
      (..., D) in ``x.dtype``.
    """
    recipe = get_recipe(recipe)
    if swiglu_kernel not in SWIGLU_KERNELS:
        raise ValueError(f"swiglu_mlp: swiglu_kernel must be one of {SWIGLU_KERNELS}, got {swiglu_kernel!r}")
    desc = (f"x {jnp.result_type(x)}{tuple(jnp.shape(x))}, wi_0 {jnp.result_type(wi_0)}{tuple(jnp.shape(wi_0))}, "
            f"wi_1 {jnp.result_type(wi_1)}{tuple(jnp.shape(wi_1))}, wo {jnp.result_type(wo)}{tuple(jnp.shape(wo))}")
    if not recipe.quantized:
        raise ValueError(f"swiglu_mlp: recipe {recipe.name!r} quantizes nothing; use the unfused MLP ({desc})")
    if any(not jnp.issubdtype(jnp.result_type(t), jnp.floating) for t in (x, wi_0, wi_1, wo)):
        raise TypeError(f"swiglu_mlp: floating inputs only: {desc}")
    if len({jnp.result_type(t) for t in (x, wi_0, wi_1, wo)}) != 1:
        raise TypeError(f"swiglu_mlp: x and the weights must share one dtype: {desc}")
    if x.ndim < 1 or wi_0.ndim != 2 or wi_0.shape != wi_1.shape or wo.shape != wi_0.shape[::-1] \
            or x.shape[-1] != wi_0.shape[0]:
        raise ValueError(f"swiglu_mlp: expected x (..., D), wi_0 / wi_1 (D, F), wo (F, D): {desc}")
    if recipe.is_delayed and state is None:
        raise ValueError(f"swiglu_mlp: recipe {recipe.name!r} uses delayed scaling and needs "
                         f"state=FusedMLPState.init(recipe): {desc}")
    if state is not None:
        if not recipe.is_delayed:
            raise ValueError(f"swiglu_mlp: recipe {recipe.name!r} has no delayed scaling, so state must be None "
                             f"(got {type(state).__name__}): {desc}")
        if not isinstance(state, FusedMLPState):
            raise TypeError(f"swiglu_mlp: state must be a FusedMLPState (FusedMLPState.init(recipe)), got "
                            f"{type(state).__name__}: {desc}")
        for part in PROJECTIONS:
            _check_state(recipe, getattr(state, part), desc, op=f"swiglu_mlp state.{part}")
    d, f = wi_0.shape
    m = math.prod(x.shape[:-1])
    # the backward's are checked where it is traced (dot_general._fwd)
    for mkn, proj in (((m, d, f), "wi_0 / wi_1 (K = D)"), ((m, f, d), "wo (K = F)")):
        _check_blocks(recipe, mkn, _FPROP_ROLES, f"swiglu_mlp's {proj} GEMM, {desc}")
    backend = kernels.resolve_backend(recipe.backend)
    dt = jnp.dtype(x.dtype)
    meta = _Meta(_GemmMeta(recipe, dt, backend, dt, dt, desc), swiglu_kernel)
    st = max_combining(state) if state is not None else None
    y = _block(meta, x.reshape(1, m, d), wi_0[None], wi_1[None], wo[None], st)
    return _finish(lax.convert_element_type(y.reshape(x.shape), dt), None)
