"""The fused MLP block's two CUDA kernels alone, at the Llama step's shape, for one build of libmxprec_cuda.so.

    PYTHONPATH=src:benchmarks python3 benchmarks/swiglu_kernels.py [--shape 16384x14336] [--label new] [--out f.json]

Times ``mxprec.kernels.cuda.swiglu_forward_fp8`` (h's E4M3 codes + amax: 4 bytes read, 1 written per element) and
``swiglu_backward_fp8`` (h's K-major E4M3 codes, d_gate's and d_up's E5M2 codes in both layouts, three amaxes: 6 bytes
read, 5 written), and current scaling's amax-only first passes ``swiglu_forward_amax`` (4 bytes read) and
``swiglu_backward_amax`` (6 bytes read) where the library has them, by GPU kernel time from a profiler trace,
with a bf16 copy of gate (``x * 1``) as the bandwidth yardstick, and checks the codes against XLA's evaluation of
the same formula on the GPU (fraction differing: 0 is expected). The GEMM output multipliers are not 1, as in the
step (``scaled_gemm_deferred``; dh's since the thirty-fourth session's second change, the earlier rows had none). Pick the library with
``MXPREC_CUDA_LIBRARY`` to compare two builds in one device call; ``--out`` appends to the JSON file's ``rows``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

F32 = jnp.float32
SCALES = (3 / 448, 5 / 57344, 7 / 57344)  # h (E4M3), d_gate and d_up (E5M2): not powers of two
MULTS = (0.37, 3.1e-3, 0.77)  # gate / up / dh GEMM output scales


def _differing(a, b):
    ia = np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))
    ib = np.asarray(jax.lax.bitcast_convert_type(b, jnp.uint8))
    return float(np.mean(ia != ib))


def parse_args(doc: str, argv=None) -> argparse.Namespace:
    """The SwiGLU kernel benchmarks' arguments: --shape MxF, --reps, --label, --out."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--shape", default="16384x14336")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--label", default=os.environ.get("MXPREC_CUDA_LIBRARY", "built"))
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def append_row(path, row: dict) -> None:
    """Appends ``row`` to the ``rows`` of the JSON file at ``path`` (created with the device, command and date)."""
    doc = {"device": jax.devices()[0].device_kind, "command": " ".join(sys.argv),
           "date": datetime.date.today().isoformat(), "rows": []}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc["rows"].append(row)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def main(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import swiglu_backward_forms as forms

    from mxprec import formats
    from mxprec.fused_mlp import swiglu_backward, swiglu_forward
    from mxprec.kernels import cuda
    from mxprec.quantize import quantize
    from mxprec.scaling import DelayedScaling, DelayedScalingState

    args = parse_args(__doc__, argv)
    m, n = (int(v) for v in args.shape.split("x"))
    k = jax.random.split(jax.random.key(0), 3)
    gate, up, dh = (jax.random.normal(ki, (m, n), F32).astype(jnp.bfloat16) * 4 for ki in k)
    s = jnp.array(SCALES, F32)
    mult = tuple(jnp.float32(v) for v in MULTS)
    fmts = (formats.E4M3, formats.E5M2, formats.E5M2)

    fwd = jax.jit(lambda g, u, s: cuda.swiglu_forward_fp8(g, u, s[0], fmts[0], mult[:2]))
    bwd = jax.jit(lambda g, u, d, s: cuda.swiglu_backward_fp8(g, u, d, s, fmts, mult))

    def cast(t, i):
        st = DelayedScalingState(amax_history=jnp.zeros((4,), F32), scale=s[i])
        return quantize(t, DelayedScaling(fmts[i]), axis=1, state=st).data

    @jax.jit
    def xla(g, u, d, s):
        g, u, d = ((t.astype(F32) * mv).astype(jnp.bfloat16) for t, mv in zip((g, u, d), mult))
        h = swiglu_forward(g, u)
        dg, du = swiglu_backward(g, u, d)
        return cast(h, 0), cast(dg, 1), cast(du, 2)

    copy_ms, _ = forms._kernel_time(jax.jit(lambda x: x * jnp.bfloat16(1)), (gate,), args.reps)
    fwd_ms, fwd_k = forms._kernel_time(fwd, (gate, up, s), args.reps)
    bwd_ms, bwd_k = forms._kernel_time(bwd, (gate, up, dh, s), args.reps)
    xla_ms, _ = forms._kernel_time(xla, (gate, up, dh, s), args.reps)
    want = xla(gate, up, dh, s)
    h_codes, _ = fwd(gate, up, s)
    got = bwd(gate, up, dh, s)
    amax_rows = {}
    if hasattr(cuda, "swiglu_backward_amax"):  # since the thirty-fifth session (current scaling's first pass)
        famax = jax.jit(lambda g, u: cuda.swiglu_forward_amax(g, u, mult[:2]))
        bamax = jax.jit(lambda g, u, d: cuda.swiglu_backward_amax(g, u, d, mult))
        famax_ms, famax_k = forms._kernel_time(famax, (gate, up), args.reps)
        bamax_ms, bamax_k = forms._kernel_time(bamax, (gate, up, dh), args.reps)
        amax_rows = dict(forward_amax_us=round(famax_ms * 1e3, 1),
                         forward_amax_tb_s=round(4 * m * n / (famax_ms * 1e-3) / 1e12, 3),
                         backward_amax_us=round(bamax_ms * 1e3, 1),
                         backward_amax_tb_s=round(6 * m * n / (bamax_ms * 1e-3) / 1e12, 3),
                         amax_kernels={"forward_amax": famax_k, "backward_amax": bamax_k})
        # the first pass's amaxes are the cast kernels' (the same arithmetic): checked bit for bit
        fa, ba, bk = famax(gate, up), bamax(gate, up, dh), got[5:]
        pairs = zip((fa, *ba), (bk[0], *bk))
        amax_rows["amaxes_equal_cast_kernels"] = bool(
            all(np.asarray(a).view(np.uint32) == np.asarray(b).view(np.uint32) for a, b in pairs))
    differing = {"forward_h": _differing(h_codes, want[0]), "h_t": _differing(got[0].T, want[0]),
                 "d_gate": _differing(got[1], want[1]), "d_gate_t": _differing(got[2].T, want[1]),
                 "d_up": _differing(got[3], want[2]), "d_up_t": _differing(got[4].T, want[2])}
    copy_tb = 4 * m * n / (copy_ms * 1e-3) / 1e12
    row = dict(label=args.label, shape=[m, n], copy_us=round(copy_ms * 1e3, 1), copy_tb_s=round(copy_tb, 3),
               forward_us=round(fwd_ms * 1e3, 1), forward_tb_s=round(5 * m * n / (fwd_ms * 1e-3) / 1e12, 3),
               backward_us=round(bwd_ms * 1e3, 1), backward_tb_s=round(11 * m * n / (bwd_ms * 1e-3) / 1e12, 3),
               xla_formula_us=round(xla_ms * 1e3, 1), codes_differing_from_xla=differing,
               kernels={"forward": fwd_k, "backward": bwd_k}, **amax_rows)
    print(json.dumps(row))
    if args.out:
        append_row(args.out, row)


if __name__ == "__main__":
    main()
