"""How fast can one kernel do fp8_delayed's SwiGLU backward with its FP8 casts and amaxes? (a Pallas prototype)

    PYTHONPATH=src:benchmarks python3 benchmarks/swiglu_backward_pallas.py [--shape 16384x14336] [--out f.json]

``benchmarks/swiglu_backward_forms.py`` found XLA's fusion of this work at 1.6 TB/s (1315 µs on the H200 at the
step's shape, against 543 µs for BF16's backward). This is the same work as one Pallas (Triton) kernel: each
program reads a (bm, bn) block of gate, up and dh, computes h = silu(gate) * up and the two gradients in FP32
(rounded to BF16 as the model's tensors are), writes the three FP8 code blocks (division by the scale, clamp,
RNE convert) and its block's three amaxes; a jnp.max reduces the per-block amaxes. Timed by GPU kernel time
from a profiler trace against XLA's forms in the same process. A prototype for sizing a fused MLP block, not
used by the library: it computes in FP32 with one BF16 rounding per tensor, where XLA's backward of the model
keeps BF16 intermediates, so a few percent of the codes differ from XLA's (the fraction is printed).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

F32 = jnp.float32
SCALES = (3 / 448, 5 / 57344, 7 / 57344)  # h (E4M3), d_gate and d_up (E5M2): not powers of two


def _kernel(g_ref, u_ref, dh_ref, h_ref, dg_ref, du_ref, ah_ref, adg_ref, adu_ref, *t_refs, s, exact=True):
    g = g_ref[...].astype(F32)
    u = u_ref[...].astype(F32)
    dh = dh_ref[...].astype(F32)
    sig = 1.0 / (1.0 + jnp.exp(-g))
    silu = g * sig
    h = (silu * u).astype(jnp.bfloat16).astype(F32)
    du = (dh * silu).astype(jnp.bfloat16).astype(F32)
    dg = (dh * u * sig * (1.0 + g * (1.0 - sig))).astype(jnp.bfloat16).astype(F32)  # d silu(g) / dg = this / u / dh

    def scaled(x, si):  # exact: x / s as the reference writes it; else x * (1 / s) (a timing variant)
        return x / s[si] if exact else x * (1.0 / s[si])

    vals = (jnp.clip(scaled(h, 0), -448.0, 448.0), jnp.clip(scaled(dg, 1), -57344.0, 57344.0),
            jnp.clip(scaled(du, 2), -57344.0, 57344.0))
    for ref, v in zip((h_ref, dg_ref, du_ref), vals):
        ref[...] = v.astype(ref.dtype)
    for ref, v in zip(t_refs, vals):  # Wgrad's K-major copies: the same codes, transposed
        ref[...] = v.T.astype(ref.dtype)
    ah_ref[...] = jnp.full(ah_ref.shape, jnp.max(jnp.abs(h)), F32)
    adg_ref[...] = jnp.full(adg_ref.shape, jnp.max(jnp.abs(dg)), F32)
    adu_ref[...] = jnp.full(adu_ref.shape, jnp.max(jnp.abs(du)), F32)


def swiglu_bwd_fp8(gate, up, dh, s=SCALES, bm=16, bn=512, interpret=False, num_warps=4, exact=True,
                   transposed=False):
    """(h E4M3 codes, d_gate E5M2, d_up E5M2, amax h, amax d_gate, amax d_up) from bf16 (M, N) gate, up, dh;
    ``transposed`` appends the three code tensors transposed, (N, M), as Wgrad takes them.

    The scales ``s`` are compile-time constants here (the step reads them from the delayed-scaling state)."""
    m, n = gate.shape
    grid = (m // bm, n // bn)
    blk = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    ablk = pl.BlockSpec((1, 1), lambda i, j: (i, j))
    out_shape = (jax.ShapeDtypeStruct((m, n), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((m, n), jnp.float8_e5m2),
                 jax.ShapeDtypeStruct((m, n), jnp.float8_e5m2)) + (jax.ShapeDtypeStruct(grid, F32),) * 3
    out_specs = (blk, blk, blk, ablk, ablk, ablk)
    if transposed:
        out_shape += tuple(jax.ShapeDtypeStruct((n, m), o.dtype) for o in out_shape[:3])
        out_specs += (pl.BlockSpec((bn, bm), lambda i, j: (j, i)),) * 3
    kw = {}
    if not interpret:
        from jax.experimental.pallas import triton as plgpu
        kw["compiler_params"] = plgpu.CompilerParams(num_warps=num_warps)
    outs = pl.pallas_call(functools.partial(_kernel, s=s, exact=exact), grid=grid, in_specs=[blk] * 3,
                          out_specs=out_specs, out_shape=out_shape, interpret=interpret, **kw)(gate, up, dh)
    return outs[:3] + tuple(jnp.max(a) for a in outs[3:6]) + tuple(outs[6:])


def reference(gate, up, dh, s=SCALES):
    """The same outputs from the model's own SwiGLU and its autodiff backward, as XLA computes them."""
    h, vjp = jax.vjp(lambda g, u: (jax.nn.silu(g) * u).astype(jnp.bfloat16), gate, up)
    dg, du = vjp(dh)

    def cast(x, sc, mx, dt):
        return jnp.clip(x.astype(F32) / sc, -mx, mx).astype(dt)

    return (cast(h, s[0], 448.0, jnp.float8_e4m3fn), cast(dg, s[1], 57344.0, jnp.float8_e5m2),
            cast(du, s[2], 57344.0, jnp.float8_e5m2)) + tuple(jnp.max(jnp.abs(t.astype(F32))) for t in (h, dg, du))


def _library_row(g, u, d, reps, forms):
    """The library's CUDA kernel's time, and how many of its codes differ from XLA's (same formula, same GPU)."""
    from mxprec import formats
    from mxprec.fused_mlp import swiglu_backward, swiglu_forward
    from mxprec.kernels import cuda
    from mxprec.quantize import quantize
    from mxprec.scaling import DelayedScaling, DelayedScalingState

    fmts = (formats.E4M3, formats.E5M2, formats.E5M2)
    s = jnp.array(SCALES, F32)
    f = jax.jit(lambda g, u, d, s: cuda.swiglu_backward_fp8(g, u, d, s, fmts))

    def xla(g, u, d, s):
        h = swiglu_forward(g, u)
        dg, du = swiglu_backward(g, u, d)
        return tuple(quantize(t, DelayedScaling(fm), axis=1,
                              state=DelayedScalingState(amax_history=jnp.zeros((4,), F32), scale=s[i])).data
                     for i, (t, fm) in enumerate(zip((h, dg, du), fmts)))

    ms, kernels = forms._kernel_time(f, (g, u, d, s), reps)
    xla_ms, _ = forms._kernel_time(jax.jit(xla), (g, u, d, s), reps)
    got, want = f(g, u, d, s), jax.jit(xla)(g, u, d, s)
    pairs = ((got[0].T, want[0]), (got[1], want[1]), (got[3], want[2]), (got[2].T, want[1]), (got[4].T, want[2]))
    diff, step = [], []
    for a, b in pairs:
        ia = jax.lax.bitcast_convert_type(a, jnp.uint8).astype(jnp.int32)
        ib = jax.lax.bitcast_convert_type(b, jnp.uint8).astype(jnp.int32)
        diff.append(round(float(jnp.mean((ia != ib).astype(F32))), 6))
        step.append(int(jnp.max(jnp.abs(ia - ib))))
    m, n = g.shape
    return dict(form="library_cuda_swiglu_backward_fp8", us=round(ms * 1e3, 1), tb_s=round(11 * m * n / (ms * 1e-3) / 1e12, 3),
                xla_same_formula_us=round(xla_ms * 1e3, 1), codes_differing_from_xla_formula=diff,
                max_code_step=step, kernels=kernels)


def main(argv=None):
    sys.path.insert(0, "benchmarks")
    import swiglu_backward_forms as forms

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="16384x14336")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--configs", default="16x512x4,32x256x4,8x1024x4,32x512x8,64x256x8",
                   help="bm x bn x num_warps of the Pallas kernel; a trailing 'r' multiplies by 1 / s instead of "
                        "dividing (e.g. 32x256x4r), a trailing 't' also writes the transposed codes (12 bytes per "
                        "element move instead of 9)")
    p.add_argument("--library", action="store_true",
                   help="also time mxprec.kernels.cuda.swiglu_backward_fp8 (the library's CUDA kernel: h's K-major codes, d_gate's "
                        "and d_up's codes and K-major copies, runtime scales) and count its codes that differ from "
                        "XLA's computation of the same formula (mxprec.fused_mlp.swiglu_backward + quantize)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    m, n = (int(v) for v in args.shape.split("x"))
    k = jax.random.split(jax.random.key(0), 3)
    g, u, d = (jax.random.normal(ki, (m, n), F32).astype(jnp.bfloat16) for ki in k)
    s = jnp.array(SCALES, F32)
    ref = jax.jit(reference)(g, u, d)
    rows = []
    copy_ms, _ = forms._kernel_time(jax.jit(lambda x: x * jnp.bfloat16(1)), (g,), args.reps)
    for name in ("bf16", "delayed"):
        ms, kernels = forms._kernel_time(jax.jit(forms.FORMS[name]), (g, u, d, s), args.reps)
        rows.append(dict(form="xla_" + name, us=round(ms * 1e3, 1), kernels=kernels))
        print(json.dumps(rows[-1]), flush=True)
    for cfg in filter(None, args.configs.split(",")):
        bm, bn, nw = (int(v) for v in cfg.rstrip("rt").split("x"))
        f = jax.jit(functools.partial(swiglu_bwd_fp8, bm=bm, bn=bn, num_warps=nw, exact="r" not in cfg,
                                      transposed="t" in cfg))
        try:
            out = f(g, u, d)
            ms, kernels = forms._kernel_time(f, (g, u, d), args.reps)
        except Exception as e:  # noqa: BLE001 - a config Triton cannot build is reported, the others still run
            rows.append(dict(form=f"pallas_{cfg}", error=f"{type(e).__name__}: {e}"[:300]))
            print(json.dumps(rows[-1]), flush=True)
            continue
        diff = [float(jnp.mean((a.astype(F32) != b.astype(F32)).astype(F32))) for a, b in zip(out[:3], ref[:3])]
        if "t" in cfg:  # the transposed copies hold the same codes
            assert all(bool(jnp.all(t.T.astype(F32) == a.astype(F32))) for t, a in zip(out[6:], out[:3]))
        bpe = 12 if "t" in cfg else 9
        rows.append(dict(form=f"pallas_{cfg}", us=round(ms * 1e3, 1), tb_s=round(bpe * m * n / (ms * 1e-3) / 1e12, 3),
                         codes_differing=[round(x, 4) for x in diff], kernels=kernels))
        print(json.dumps(rows[-1]), flush=True)
    if args.library:
        rows.append(_library_row(g, u, d, args.reps, forms))
        print(json.dumps(rows[-1]), flush=True)
    result = dict(device=jax.devices()[0].device_kind, date=datetime.date.today().isoformat(),
                  command="python3 benchmarks/swiglu_backward_pallas.py " + " ".join(argv or sys.argv[1:]),
                  shape=[m, n], copy_bf16_us=round(copy_ms * 1e3, 1), rows=rows)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
