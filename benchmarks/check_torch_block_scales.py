"""Device check: the block-scaled FP8 GEMM (1x128 activations x 128x128 weights) of mxprec (CUDA kernels: auto,
CUTLASS's, the persistent one) and of torch._scaled_mm, against the FP32 oracle of the same operands, for K whose
K/128 is not a multiple of 4. torch gets B's (N/128, K/128) scales viewed as (K/128, N/128) with the pitch K/128
("unpadded") and with the pitch rounded up to a multiple of 4 ("padded").

    PYTHONPATH=src python3 benchmarks/check_torch_block_scales.py

Prints the relative Frobenius error of each. Result (H200, torch 2.11.0+cu130, thirty-seventh session):
benchmarks/results/h200_gemm_steady.md.
"""
import os
import sys

import jax
import jax.numpy as jnp
import torch

sys.path.insert(0, os.path.dirname(__file__))
import gemm as gemm_bench
import gemm_steady

import mxprec
from mxprec.kernels.scaled_gemm import reference_scaled_gemm

_, FORM, LHS, RHS = gemm_steady.FAMILIES["block"]


def rel(u, v) -> str:
    return f"{float(jnp.linalg.norm(u - v) / jnp.linalg.norm(v)):.2e}"


for m, k, n in [(512, 1024, 512), (512, 1152, 512), (512, 1280, 512), (512, 1408, 512), (512, 4224, 512),
                (512, 11008, 512), (16384, 11008, 4096)]:
    kx, kw = jax.random.split(jax.random.key(1))
    x = jax.random.normal(kx, (m, k), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(kw, (n, k), jnp.float32) * 0.02).astype(jnp.bfloat16)
    qx, qw = mxprec.quantize(x, LHS, axis=1), mxprec.quantize(w, RHS, axis=1)
    bx, bw = gemm_bench._b(qx), gemm_bench._b(qw)
    ref = reference_scaled_gemm(bx, bw, lhs_contract=2, rhs_contract=2, out_dtype=jnp.float32)[0]
    err = {}
    for kernel in ("auto", "cutlass", "persistent"):
        os.environ["MXPREC_SM90_BLOCKWISE_KERNEL"] = kernel
        out = mxprec.scaled_gemm(bx, bw, lhs_contract=2, rhs_contract=2, out_dtype=jnp.float32, backend="ffi")[0]
        err[f"mxprec {kernel}"] = rel(out, ref)
    for pad in (False, True):
        a, b, sa, sb = gemm_steady.torch_operands(qx, qw, FORM, pad_block_scales=pad)
        try:
            out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float32)
            err[f"torch {'padded' if pad else 'unpadded'}"] = rel(jnp.asarray(out.cpu().numpy()), ref)
        except RuntimeError as e:  # torch refuses the layout
            err[f"torch {'padded' if pad else 'unpadded'}"] = "error: " + str(e).splitlines()[0]
    print(f"{m}x{k}x{n} (K/128 = {k // 128}):", err, flush=True)
