"""What holds back the Llama step's largest non-GEMM kernel, the SwiGLU backward with its FP8 casts?

    PYTHONPATH=src python3 benchmarks/swiglu_backward_forms.py [--shape 16384x14336] [--out f.json]

In fp8_delayed's H200 profile the fusion that XLA makes of one layer's SwiGLU backward
(``input_add_convert_reduce_fusion``: it reads the rematerialized gate / up GEMM outputs and the
down projection's Dgrad, and writes the E4M3 codes of h = silu(gate) * up for wo's Wgrad, the E5M2
codes of d_gate and d_up for wi_0 / wi_1, and their amaxes) takes ~1.6 ms per layer where the bytes
it must move take ~0.5 ms at copy speed. Each form below is that computation at the step's shape,
one jitted function (XLA fuses as it likes), timed by summed GPU kernel time from a jax.profiler
trace (benchmarks/cuda_quantize.py's timing), so the forms say which part costs the time:

* ``bf16``: the BF16 arm's backward (d_gate, d_up in BF16; no h);
* ``delayed``: the fp8_delayed arm's (mxprec's exact-division casts with given scales, and the three
  amaxes as mxprec computes them);
* ``delayed_no_amax``: without the amaxes; ``delayed_amax_h_only``: h's amax alone;
  ``delayed_amax_rows``: the same amaxes reduced per row first; ``delayed_amax_float``: a float max
  (NaN handling differs, timing only); ``delayed_reciprocal``: x * (1 / s) instead of the exact
  division (not the reference's rounding); ``cast_only``: no scale at all (the bare FP8 converts);
* ``silu_f32``: ``delayed`` with silu's sigmoid in FP32 instead of BF16 (a different rounding).

The row's ``kernels`` lists the kernels XLA ran (name, µs), i.e. how it split the work.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import sys
import tempfile

import jax
import jax.numpy as jnp

from mxprec import formats

Q = importlib.import_module("mxprec.quantize")  # the module (the package exports the function)


def _swiglu(gate, up):
    return (jax.nn.silu(gate) * up).astype(jnp.bfloat16)


def _swiglu_f32(gate, up):
    g = gate.astype(jnp.float32)
    return (g * jax.nn.sigmoid(g) * up.astype(jnp.float32)).astype(jnp.bfloat16)


def _grads(fwd, gate, up, dh):
    h, vjp = jax.vjp(fwd, gate, up)
    d_gate, d_up = vjp(dh)
    return h, d_gate, d_up


def _codes(x, s, fmt, how):
    x32 = x.astype(jnp.float32)
    if how == "exact":
        return Q._scaled_codes(x32, s, fmt, None)
    mx = jnp.float32(fmt.max_finite)
    v = x32 * (1 / s) if how == "reciprocal" else x32
    return jax.lax.bitcast_convert_type(jnp.clip(v, -mx, mx).astype(fmt.dtype), jnp.uint8)


def _amax_rows(t):
    """mxprec's amax (an integer max over |t|'s bits), reduced per row first, then over the rows."""
    bits = jax.lax.bitcast_convert_type(jnp.abs(t.astype(jnp.float32)), jnp.uint32)
    return Q._amax_from_bits(jnp.max(jnp.max(bits, axis=1), axis=0))


_AMAX = {
    "all": lambda ts: tuple(Q._amax(t.astype(jnp.float32)) for t in ts),
    "none": lambda ts: (),
    "h_only": lambda ts: (Q._amax(ts[0].astype(jnp.float32)),),
    "rows": lambda ts: tuple(_amax_rows(t) for t in ts),
    # a float max of |t| (NaN handling differs from mxprec's: for timing only)
    "float": lambda ts: tuple(jnp.max(jnp.abs(t)).astype(jnp.float32) for t in ts),
}


def _fp8_form(how="exact", amax="all", fwd=_swiglu):
    def f(gate, up, dh, s):
        h, d_gate, d_up = _grads(fwd, gate, up, dh)
        out = (_codes(h, s[0], formats.E4M3, how), _codes(d_gate, s[1], formats.E5M2, how),
               _codes(d_up, s[2], formats.E5M2, how))
        return out + _AMAX[amax]((h, d_gate, d_up))
    return f


FORMS = {
    "bf16": lambda gate, up, dh, s: _grads(_swiglu, gate, up, dh)[1:],
    "delayed": _fp8_form(),
    "delayed_no_amax": _fp8_form(amax="none"),
    "delayed_amax_h_only": _fp8_form(amax="h_only"),
    "delayed_amax_rows": _fp8_form(amax="rows"),
    "delayed_amax_float": _fp8_form(amax="float"),
    "delayed_reciprocal": _fp8_form("reciprocal"),
    "cast_only": _fp8_form("none"),
    "silu_f32": _fp8_form(fwd=_swiglu_f32),
}


def _kernel_time(fn, args, reps):
    """(ms per call, [(kernel, µs per call)]) from a profiler trace of ``reps`` calls."""
    from mxprec.bench.trace_summary import summarize_trace

    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            for _ in range(reps):
                out = fn(*args)
            jax.block_until_ready(out)
        s = summarize_trace(d, steps=reps, top=8)
    return s["gpu_kernel_ms"], [[k[:60], round(ms * 1e3, 1)] for k, _, ms in s["top_kernels_ms"]]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="16384x14336")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--forms", default=",".join(FORMS))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    m, n = (int(v) for v in args.shape.split("x"))
    k = jax.random.split(jax.random.key(0), 3)
    gate, up, dh = (jax.random.normal(ki, (m, n), jnp.float32).astype(jnp.bfloat16) for ki in k)
    s = jnp.array([3.0 / 448.0, 5.0 / 57344.0, 7.0 / 57344.0], jnp.float32)  # not powers of two
    copy_ms, _ = _kernel_time(jax.jit(lambda x: x * jnp.bfloat16(1)), (gate,), args.reps)
    rows = []
    for name in args.forms.split(","):
        ms, kernels = _kernel_time(jax.jit(FORMS[name]), (gate, up, dh, s), args.reps)
        # bytes that must move: 3 bf16 reads; bf16 form: 2 bf16 writes, FP8 forms: 3 one-byte writes
        bpe = 6 + (4 if name == "bf16" else 3)
        row = dict(form=name, us=round(ms * 1e3, 1), tb_s=round(bpe * m * n / (ms * 1e-3) / 1e12, 3),
                   kernels=kernels)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = dict(device=jax.devices()[0].device_kind, date=datetime.date.today().isoformat(),
                  command="python3 benchmarks/swiglu_backward_forms.py " + " ".join(argv or sys.argv[1:]),
                  shape=[m, n], copy_bf16_us=round(copy_ms * 1e3, 1),
                  copy_tb_s=round(4 * m * n / (copy_ms * 1e-3) / 1e12, 3), rows=rows)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
