"""The SwiGLU backward with its per-tensor FP8 casts, amaxes and Wgrad's K-major copies, as one Pallas kernel.

In a Llama MLP block with per-tensor delayed scaling, the backward pass needs from ``gate``, ``up`` (the two
input projections' outputs) and ``dh`` (the cotangent of ``h = silu(gate) * up``):

* h's codes, K-major for wo's Wgrad (h is recomputed; its forward codes were transposed copies otherwise),
* d_gate's and d_up's codes along F for wi_0's / wi_1's Dgrad, and K-major (transposed) for their Wgrad,
* the amaxes of d_gate and d_up for their delayed-scaling states.

XLA runs that as two fusions plus three FP8 transposes (~2.4 ms per layer at Llama-3-8B widths, batch 4 × 4096
on the H200). This kernel reads gate, up and dh once (6 bytes per element) and writes the five code tensors
(5 bytes), with the arithmetic of :func:`mxprec.fused_mlp.swiglu_backward` (FP32, one rounding to the model's
dtype per tensor) and the library's cast (IEEE division by the scale, clamp to ±max_finite, round to nearest
even). Divisions use ``div.rn.f32`` (Triton's own ``/`` is ``div.full.f32``, up to 2 ulp off); the exponential is
libdevice's ``__nv_expf`` (Pallas' lowering of ``exp``).

``interpret=True`` runs the same kernel body with XLA's ops (CPU tests: bit-identical to the XLA formula there).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

F32 = jnp.float32

BLOCK_M = 32  # rows of gate / up / dh per program (H200: 32 x 128 x 4 warps was the fastest transposing form)
BLOCK_F = 128
NUM_WARPS = 4


def _div(a, b, interpret: bool):
    """IEEE ``a / b`` in FP32 (``b`` broadcast to ``a``'s shape)."""
    b = jnp.broadcast_to(b, a.shape)
    if interpret:
        return a / b
    from jax.experimental.pallas import triton as plgpu

    return plgpu.elementwise_inline_asm("div.rn.f32 $0, $1, $2;", args=[a, b], constraints="=r,r,r", pack=1,
                                        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, F32)])[0]


def _kernel(s_ref, g_ref, u_ref, dh_ref, ht_ref, dg_ref, dgt_ref, du_ref, dut_ref, adg_ref, adu_ref, *,
            model_dtype, maxes, interpret):
    div = functools.partial(_div, interpret=interpret)
    g = g_ref[...].astype(F32)
    u = u_ref[...].astype(F32)
    dh = dh_ref[...].astype(F32)
    sig = div(jnp.ones_like(g), 1.0 + jnp.exp(-g))
    silu = g * sig
    h = (silu * u).astype(model_dtype).astype(F32)
    du = (dh * silu).astype(model_dtype).astype(F32)
    dg = (dh * u * sig * (1.0 + g * (1.0 - sig))).astype(model_dtype).astype(F32)

    def codes(x, i):
        return jnp.clip(div(x, s_ref[i]), -maxes[i], maxes[i])

    ch, cdg, cdu = codes(h, 0), codes(dg, 1), codes(du, 2)
    ht_ref[...] = ch.T.astype(ht_ref.dtype)
    dg_ref[...] = cdg.astype(dg_ref.dtype)
    dgt_ref[...] = cdg.T.astype(dgt_ref.dtype)
    du_ref[...] = cdu.astype(du_ref.dtype)
    dut_ref[...] = cdu.T.astype(dut_ref.dtype)
    # amax over FP32 bit patterns of |v| (order-preserving; NaN above Inf), as mxprec.quantize.tensor_amax
    adg_ref[...] = jnp.full(adg_ref.shape, jnp.max(jax.lax.bitcast_convert_type(jnp.abs(dg), jnp.uint32)))
    adu_ref[...] = jnp.full(adu_ref.shape, jnp.max(jax.lax.bitcast_convert_type(jnp.abs(du), jnp.uint32)))


def why_not(m: int, f: int, dtype) -> str | None:
    """Why the kernel cannot take (M, F) tensors of ``dtype``, or None."""
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return f"dtype {jnp.dtype(dtype)} (bfloat16 / float16 only)"
    if m % BLOCK_M or f % BLOCK_F:
        return f"shape ({m}, {f}) is not a multiple of the ({BLOCK_M}, {BLOCK_F}) block"
    return None


def swiglu_backward_fp8(gate, up, dh, scales, fmts, *, interpret: bool = False):
    """FP8 codes and amax bits of the SwiGLU backward, per-tensor scaled by ``scales``.

    Args:
      gate, up, dh: (M, F) bfloat16 / float16.
      scales: float32 (3,): the dequantization scales of h, d_gate, d_up (codes = x / scale, clamped).
      fmts: the three mxprec ElementFormats (FP8: E4M3 / E5M2).
    Returns:
      ``(h_t, d_gate, d_gate_t, d_up, d_up_t, amax_bits_d_gate, amax_bits_d_up)``: codes in the formats'
      float8 dtypes, ``*_t`` of shape (F, M) and the others (M, F); amax bits uint32 () (the FP32 bit pattern
      of max |x|, before mxprec.quantize's subnormal flush and NaN canonicalization).
    """
    m, f = gate.shape
    why = why_not(m, f, gate.dtype)
    if why:
        raise ValueError(f"swiglu_backward_fp8: {why}")
    for name, t in (("up", up), ("dh", dh)):
        if t.shape != gate.shape or t.dtype != gate.dtype:
            raise ValueError(f"swiglu_backward_fp8: {name} {t.dtype}{t.shape} differs from gate {gate.dtype}{gate.shape}")
    if any(not fmt.is_fp8 for fmt in fmts):
        raise ValueError(f"swiglu_backward_fp8: FP8 formats only, got {[fmt.name for fmt in fmts]}")
    grid = (m // BLOCK_M, f // BLOCK_F)
    blk = pl.BlockSpec((BLOCK_M, BLOCK_F), lambda i, j: (i, j))
    blk_t = pl.BlockSpec((BLOCK_F, BLOCK_M), lambda i, j: (j, i))
    ablk = pl.BlockSpec((1, 1), lambda i, j: (i, j))
    sblk = pl.BlockSpec((4,), lambda i, j: (0,))
    s4 = jnp.concatenate([jnp.asarray(scales, F32).reshape(3), jnp.ones((1,), F32)])
    dt = [fmt.dtype for fmt in fmts]
    sd = jax.ShapeDtypeStruct
    out_shape = (sd((f, m), dt[0]), sd((m, f), dt[1]), sd((f, m), dt[1]), sd((m, f), dt[2]), sd((f, m), dt[2]),
                 sd(grid, jnp.uint32), sd(grid, jnp.uint32))
    kw = {}
    if not interpret:
        from jax.experimental.pallas import triton as plgpu

        kw["compiler_params"] = plgpu.CompilerParams(num_warps=NUM_WARPS)
    body = functools.partial(_kernel, model_dtype=gate.dtype, maxes=tuple(float(fmt.max_finite) for fmt in fmts),
                             interpret=interpret)
    outs = pl.pallas_call(body, grid=grid, in_specs=[sblk, blk, blk, blk],
                          out_specs=(blk_t, blk, blk_t, blk, blk_t, ablk, ablk), out_shape=out_shape,
                          interpret=interpret, name="mxprec_swiglu_backward_fp8", **kw)(s4, gate, up, dh)
    return outs[:5] + (jnp.max(outs[5]), jnp.max(outs[6]))
