"""fp8_block's fused SwiGLU kernels (1 x 128 tiles) against the unfused work they replace, at the Llama step's shape.

    PYTHONPATH=src:benchmarks python3 benchmarks/swiglu_tile_kernels.py [--shape 16384x14336] [--out f.json]

GPU kernel time per call from a profiler trace (``swiglu_backward_forms._kernel_time``) of:

* ``h_rows``: ``mxprec.kernels.cuda.swiglu_h_tiles`` (h's E4M3 1 x 128 copy along F: wo's Fprop operand), against
  XLA's ``swiglu_forward`` + the CUDA quantize kernel (``ffi.quantize`` along F), what the unfused MLP runs;
* ``h_t``: ``swiglu_h_tiles(transposed=True)`` (h's K-major copy, groups of 128 along M: wo's Wgrad operand), against
  XLA's ``swiglu_forward`` + ``cuda.quantize_transposed``;
* ``grads``: ``swiglu_grad_tiles`` (d_gate's and d_up's E5M2 row and K-major copies), against XLA's
  ``swiglu_backward`` + ``cuda.quantize_rows_and_transposed`` of each;

with a bf16 copy of gate (``x * 1``) as the bandwidth yardstick, and checks that both forms give the same codes and
scales (fraction differing: 0 is expected). ``--out`` appends the row to the JSON file's ``rows``.
"""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np


def _differing(a, b) -> float:
    ia = np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8 if a.dtype.itemsize == 1 else jnp.uint32))
    ib = np.asarray(jax.lax.bitcast_convert_type(b, jnp.uint8 if b.dtype.itemsize == 1 else jnp.uint32))
    return float(np.mean(ia != ib))


def main(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import swiglu_backward_forms as forms
    import swiglu_kernels

    from mxprec import formats
    from mxprec.fused_mlp import swiglu_backward, swiglu_forward
    from mxprec.kernels import cuda, ffi
    from mxprec.scaling import TileScaling

    args = swiglu_kernels.parse_args(__doc__, argv)
    m, n = (int(v) for v in args.shape.split("x"))
    k = jax.random.split(jax.random.key(0), 3)
    gate, up, dh = (jax.random.normal(ki, (m, n), jnp.float32).astype(jnp.bfloat16) * 4 for ki in k)
    act = TileScaling(formats.E4M3, tile=(1, 128))
    grad = TileScaling(formats.E5M2, tile=(1, 128))

    def rows(q):
        return q.data.reshape(m, n), q.scale.reshape(m, n // 128)

    def cols(q):
        return q.data.reshape(n, m), q.scale.reshape(n, m // 128)

    forms_ = {
        "h_rows": (jax.jit(lambda g, u: cuda.swiglu_h_tiles(g, u, act)),
                   jax.jit(lambda g, u: rows(ffi.quantize(swiglu_forward(g, u), act, 1, amax=False))), (gate, up)),
        "h_t": (jax.jit(lambda g, u: cuda.swiglu_h_tiles(g, u, act, transposed=True)),
                jax.jit(lambda g, u: cols(cuda.quantize_transposed(swiglu_forward(g, u)[None], act, amax=False))),
                (gate, up)),
        "grads": (jax.jit(lambda g, u, d: cuda.swiglu_grad_tiles(g, u, d, grad)),
                  jax.jit(lambda g, u, d: tuple(
                      t for x in swiglu_backward(g, u, d)
                      for q in [cuda.quantize_rows_and_transposed(x[None], grad, grad, amax=False)]
                      for t in (*rows(q[0]), *cols(q[1])))), (gate, up, dh)),
    }
    copy_ms, _ = forms._kernel_time(jax.jit(lambda x: x * jnp.bfloat16(1)), (gate,), args.reps)
    row = dict(label=args.label, shape=[m, n], copy_us=round(copy_ms * 1e3, 1),
               copy_tb_s=round(4 * m * n / (copy_ms * 1e-3) / 1e12, 3))
    for name, (fused, unfused, ops) in forms_.items():
        f_ms, f_k = forms._kernel_time(fused, ops, args.reps)
        u_ms, u_k = forms._kernel_time(unfused, ops, args.reps)
        got, want = fused(*ops), unfused(*ops)
        row[name] = dict(fused_us=round(f_ms * 1e3, 1), unfused_us=round(u_ms * 1e3, 1),
                         fused_over_unfused=round(f_ms / u_ms, 3),
                         differing=[_differing(a, b) for a, b in zip(got, want)],
                         fused_kernels=f_k, unfused_kernels=u_k)
    print(json.dumps(row))
    if args.out:
        swiglu_kernels.append_row(args.out, row)


if __name__ == "__main__":
    main()
