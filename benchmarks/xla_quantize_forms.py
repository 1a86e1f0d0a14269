"""Which HLO form of the XLA per-tensor FP8 quantizer runs at memory speed on the GPU?

    PYTHONPATH=src python3 benchmarks/xla_quantize_forms.py [--shape 16384x14336] [--out f.json]

The Llama step's profile showed XLA's quantize fusions (cast to FP8 after dividing by the scale)
reaching ~0.9 TB/s on the H200 while Flax's reached ~2.6 TB/s. Each form below is one jitted
bf16 (M, N) -> float8_e4m3fn cast (or one amax), timed by summed GPU kernel time from a
jax.profiler trace (benchmarks/cuda_quantize.py's timing), with the bytes it must move, so the
forms compare as fractions of a plain bf16 copy. ``exact`` marks the forms whose codes equal
the reference (correctly rounded x / s, then RNE to FP8) for every input; the run also checks
each exact form's codes against ``mxprec.scaling.exact_div``'s on the timed input.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import sys

import jax
import jax.numpy as jnp

from mxprec import formats
from mxprec.scaling import exact_div

Q = importlib.import_module("mxprec.quantize")  # the module (the package exports the function)

MAX = 448.0


def _clip_cast(v):
    return jnp.clip(v, -MAX, MAX).astype(jnp.float8_e4m3fn)


def _packed(codes):
    """FP8 codes (M, N) as uint32 words (M, N / 4): the same bytes, written four to a store."""
    m, n = codes.shape
    return jax.lax.bitcast_convert_type(codes.reshape(m, n // 4, 4), jnp.uint32)


def _shifted_words(codes):
    """The same words as :func:`_packed`, assembled with shifts (one output element per four codes)."""
    m, n = codes.shape
    b = jax.lax.bitcast_convert_type(codes, jnp.uint8).reshape(m, n // 4, 4).astype(jnp.uint32)
    return b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)


FORMS = {
    # name: (fn(x, s), exact?, bytes moved per element (read + write))
    "copy_bf16": (lambda x, s: x * jnp.bfloat16(1), True, 4),
    "cast_only": (lambda x, s: _clip_cast(x.astype(jnp.float32)), False, 3),
    "exact_div": (lambda x, s: _clip_cast(exact_div(x.astype(jnp.float32), s)), True, 3),
    "plain_div": (lambda x, s: _clip_cast(x.astype(jnp.float32) / s), False, 3),
    "reciprocal": (lambda x, s: _clip_cast(x.astype(jnp.float32) * (1 / s)), False, 3),
    # mxprec.quantize's own code path: today the same HLO as exact_div; timed so that a change in the
    # library's quantizer shows up here against the hand-written form.
    "quantize_codes": (lambda x, s: Q._scaled_codes(x.astype(jnp.float32), s, formats.E4M3, None), True, 3),
    # Is the 1-byte store or the convert what holds XLA's cast below copy speed? A byte per element with no
    # convert (the bf16's high byte), and the casts above with their codes bitcast to 4-byte words.
    "high_byte": (lambda x, s: (jax.lax.bitcast_convert_type(x, jnp.uint16) >> 8).astype(jnp.uint8), False, 3),
    "cast_only_u32": (lambda x, s: _packed(_clip_cast(x.astype(jnp.float32))), False, 3),
    "exact_div_u32": (lambda x, s: _packed(_clip_cast(exact_div(x.astype(jnp.float32), s))), True, 3),
    "exact_div_words": (lambda x, s: _shifted_words(_clip_cast(exact_div(x.astype(jnp.float32), s))), True, 3),
    "amax_bits": (lambda x, s: Q._amax(x.astype(jnp.float32)), True, 2),
    "amax_float": (lambda x, s: jnp.max(jnp.abs(x.astype(jnp.float32))), False, 2),
}


def main(argv=None):
    sys.path.insert(0, "benchmarks")
    from cuda_quantize import _time

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="16384x14336")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--forms", default=",".join(FORMS))
    p.add_argument("--timing", default="kernel", choices=["kernel", "wall"])
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    m, n = (int(v) for v in args.shape.split("x"))
    x = jax.random.normal(jax.random.key(0), (m, n), jnp.float32).astype(jnp.bfloat16)
    s = jnp.float32(3.0 / 448.0)  # not a power of two: the division must round
    ref = jax.jit(FORMS["exact_div"][0])(x, s)
    rows = []
    for name in args.forms.split(","):
        fn, exact, bpe = FORMS[name]
        f = jax.jit(fn)
        out = jax.block_until_ready(f(x, s))
        if out.dtype == jnp.uint32:  # codes packed four to a word
            out = jax.lax.bitcast_convert_type(out, jnp.uint8).reshape(ref.shape)
        t = _time(f, (x, s), args.reps, args.timing)
        row = dict(form=name, exact=exact, us=round(t * 1e6, 1), tb_s=round(bpe * m * n / t / 1e12, 3))
        if out.shape == ref.shape and out.dtype in (ref.dtype, jnp.uint8):
            codes = out if out.dtype == jnp.uint8 else jax.lax.bitcast_convert_type(out, jnp.uint8)
            row["codes_equal_exact_div"] = bool(jnp.all(codes == jax.lax.bitcast_convert_type(ref, jnp.uint8)))
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = dict(device=jax.devices()[0].device_kind, date=datetime.date.today().isoformat(),
                  command="python3 benchmarks/xla_quantize_forms.py " + " ".join(argv or sys.argv[1:]),
                  shape=[m, n], timing=args.timing, rows=rows)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
