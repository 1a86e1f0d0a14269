"""How the XLA path writes a per-tensor FP8 GEMM on GPU: which HLO form becomes one cuBLASLt call.

For each form of ``mxprec.kernels.scaled_gemm``'s per-tensor FP8 path (``MXPREC_XLA_FP8_FORM``):

* ``native``: ``dot(fp8, fp8) -> f32`` at DEFAULT precision (cuBLASLt fast accumulation), then
  ``* s_a * s_b`` and a cast (a separate pass over an FP32 product);
* ``direct``: ``dot(fp8, fp8) -> bf16`` with ``DotAlgorithmPreset.ANY_F8_ANY_F8_F32`` (FP32
  accumulation with promotion), the scales applied to the BF16 product in FP32;
* ``direct_fast``: the same with ``ANY_F8_ANY_F8_F32_FAST_ACCUM`` (what DEFAULT precision gives),

this compiles a whole ``mxprec.dot_general`` step (Fprop + Dgrad + Wgrad, fp8_current and
fp8_delayed) and one Fprop GEMM, reports the cuBLASLt FP8 custom calls and their result types in
the optimized HLO, the compile time and the step time, next to plain BF16 ``lax.dot_general``.

    python benchmarks/xla_fp8_forms.py --shapes 16384x4096x14336 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import jax
import jax.numpy as jnp
from gemm import bench  # benchmarks/gemm.py (this directory is on sys.path when run as a script)
from jax import lax

import mxprec
from mxprec.kernels.scaled_gemm import reference_scaled_gemm
from mxprec.quantize import quantize
from mxprec.scaling import TensorScaling

FORMS = ("native", "direct", "direct_fast")


def f8_calls(hlo: str) -> list[str]:
    """The result type of every cuBLASLt FP8 custom call in optimized HLO text."""
    out = []
    for line in hlo.splitlines():
        if "custom-call" in line and "f8" in line and "cublas" in line:
            m = re.search(r"=\s*\(?([a-z0-9]+)\[", line)
            out.append(m.group(1) if m else "?")
    return out


def measure(name, fn, args, reps, flops):
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    calls = f8_calls(compiled.as_text())
    s = bench(compiled, *args, iters=reps, warmup=1)  # mean over a pipelined loop, after one warm call
    row = dict(case=name, compile_s=round(compile_s, 2), ms=round(s * 1e3, 3), tflops=round(flops / s / 1e12, 1),
               f8_calls=calls)
    print(json.dumps(row), flush=True)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="16384x4096x14336", help="MxKxN[,MxKxN...]")
    p.add_argument("--forms", default=",".join(FORMS), help="forms to run (each in this process, in order)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--no-bf16", action="store_true", help="skip the BF16 reference row")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        kx, kw, kg = jax.random.split(jax.random.key(0), 3)
        x = jax.random.normal(kx, (m, k), jnp.bfloat16)
        w = jax.random.normal(kw, (k, n), jnp.float32) * 0.02
        g = jax.random.normal(kg, (m, n), jnp.bfloat16)
        dims = (((1,), (0,)), ((), ()))
        step = 6.0 * m * k * n

        def bf16_step(x, w, g, dims=dims):
            y, vjp = jax.vjp(lambda x, w: lax.dot_general(x, w.astype(jnp.bfloat16), dims), x, w)
            return y, vjp(g)

        if not args.no_bf16:
            rows.append(dict(shape=shape, **measure("bf16 step", bf16_step, (x, w, g), args.reps, step)))
        spec = TensorScaling(mxprec.formats.E4M3)
        ref = reference_scaled_gemm(quantize(x[None], spec, axis=2), quantize(w[None], spec, axis=1),
                                    lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32)[0]
        for form in args.forms.split(","):
            os.environ["MXPREC_XLA_FP8_FORM"] = form
            for recipe in ("fp8_current", "fp8_delayed"):
                st = mxprec.DotGeneralState.init(mxprec.recipes.get(recipe))

                def q_step(x, w, g, st=st, recipe=recipe, dims=dims):
                    y, vjp = jax.vjp(lambda x, w: mxprec.dot_general(x, w, dims, recipe=recipe, state=st), x, w)
                    return y, vjp(g)

                row = dict(shape=shape, form=form, **measure(f"{form} {recipe} step", q_step, (x, w, g), args.reps, step))
                if recipe == "fp8_current":  # forward output vs the FP32 product of the dequantized operands
                    y = jax.jit(q_step)(x, w, g)[0].astype(jnp.float32)
                    err = jnp.abs(y - ref)
                    row["max_err_rel_to_max"] = float(jnp.max(err) / jnp.max(jnp.abs(ref)))
                    row["max_err_rel_elem"] = float(jnp.max(err / jnp.maximum(jnp.abs(ref), 1e-30)))
                    print(json.dumps({k: row[k] for k in ("form", "max_err_rel_to_max", "max_err_rel_elem")}), flush=True)
                rows.append(row)
    os.environ.pop("MXPREC_XLA_FP8_FORM", None)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"xla_fp8_forms_{args.forms.replace(',', '_')}.json"), "w") as f:
            json.dump(dict(device=str(jax.devices()[0].device_kind), command=" ".join(sys.argv), rows=rows), f, indent=1)
    return rows


if __name__ == "__main__":
    main()
