"""CUDA (sm_90a) lowering of ``mxprec_scaled_gemm``: FP8 GEMMs through CUTLASS.

The native library ``libmxprec_cuda.so`` (csrc/cuda_kernels/, built with
``csrc/cuda_kernels/build.sh`` or the CMake option ``MXPREC_BUILD_CUDA=ON``) exports the C symbol
``MxprecScaledGemmCuda``, an XLA FFI handler for the custom-call target ``mxprec_scaled_gemm`` on
platform ``"CUDA"`` (the same target name and contract as the CPU handler,
csrc/common/scaled_gemm.h). It is loaded lazily with ctypes (one build serves every Python
version) the first time :func:`available` or :func:`scaled_gemm` is called on a machine whose JAX
has a GPU backend.

What the kernels implement (anything else: :func:`supports` is False; called anyway, the handler
returns an ``Unimplemented`` error). Three scaling families, both operands from the same family:

* **per-tensor**: ``TensorScaling`` or ``DelayedScaling`` on each operand (one f32 ``()``
  dequantization multiplier each; delayed scaling is the same GEMM, its scale is data);
* **row-wise**: ``RowScaling`` on both (one f32 scale per row of the free axis: per output row m
  for lhs, per output column n for rhs), applied in the epilogue: ``(acc * sa[m]) * sb[n]``;
* **block-scaled** (DeepSeek-V3 tiles): lhs ``TileScaling(tile=(1, 128))`` (activations), rhs
  ``TileScaling(tile=(128, 128))`` (weights); the kernel multiplies each 128-of-K partial sum by
  ``sa[m, kb] * sb[n // 128, kb]`` as it promotes it into FP32;

and for all of them:

* FP8 pairs e4m3 x e4m3, e5m2 x e4m3, e4m3 x e5m2 (lhs x rhs);
* 3-D operands ``(B, M, K)`` / ``(B, N, K)``; the kernels are "TN" (K contiguous in both). An
  operand whose contraction axis is 1 (``lhs (B, K, M)``, ``rhs (B, K, N)``) is **transposed by this
  wrapper** (one extra pass over its FP8 bytes; its scales are transposed too) before the call;
* output bfloat16 or float32 (``(B, M, N)``), optional f32 ``(N,)`` bias;
* ``K % 16 == 0`` (K > 0) and ``N % 8 == 0`` (bf16 output) / ``N % 4 == 0`` (f32 output); block-scaled:
  ``K % 128 == 0`` and ``N % 128 == 0`` (whole tiles; TileScaling quantization guarantees both). M is free.

Numerics: exact FP8 products, summed by the Hopper FP8 tensor cores (``QGMMA``) in their internal
accumulator over 128 of K, then promoted into FP32 registers (CUTLASS
``KernelTmaWarpSpecializedCooperative`` / ``...CooperativeFP8Blockwise``; never FP8FastAccum).
Per-tensor: one FP32 multiply by the scale product (computed on the device); row-wise: FP32
``fma(acc * sa[m], sb[n], bias[n])``; block-scaled: ``acc += partial * (sa * sb)`` per 128 of K.
Bias added in FP32, one rounding to the output dtype. The order of summation over K differs from
the CPU backend, so results agree with :func:`mxprec.kernels.reference_scaled_gemm` to a
tolerance, not bit for bit (tests/test_cuda.py documents it).

Sharding and vmap: the call goes through :mod:`mxprec.kernels.ffi`'s ``custom_partitioning`` and batching rule
for the same target (B, M and N shardings pass through, a sharded K runs the local GEMM to FP32 and ``psum`` s),
with the kernels' alignment as the shard units: a shard keeps K % 16 and N % 8 (N % 4 for f32 output) on top of
the scale tiles; a sharding that would break them is dropped for that dimension (XLA gathers it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P

from mxprec.kernels.ffi import (
    FMT,
    _axes_size,
    _bias_buffer,
    _dims_of,
    _gemm_vmappable,
    _GemmCfg,
    _nan_amax,
    _operand_desc,
    _partitioned,
    _pmax_nan,
    _pspec,
    _spec_axes,
)
from mxprec.kernels.native import NativeLibrary
from mxprec.quantize import QTensor
from mxprec.scaling import DelayedScaling, MXScaling, NVFP4Scaling, RowScaling, TensorScaling, TileScaling

__all__ = [
    "AUTO_FAMILIES",
    "AUTO_QUANTIZE",
    "AUTO_QUANTIZE_WEIGHTS",
    "LIBRARY_NAME",
    "QUANTIZE_ROWS_TRANSPOSED_TARGET",
    "QUANTIZE_TRANSPOSED_TARGET",
    "SYMBOL",
    "TARGET",
    "TRANSPOSE_TARGET",
    "auto_families",
    "auto_prefers",
    "auto_quantize_kinds",
    "auto_quantizes",
    "available",
    "library_search_paths",
    "quantize_rows_and_transposed",
    "quantize_transposed",
    "quantizes_rows_and_transposed",
    "quantizes_transposed",
    "require",
    "scaled_gemm",
    "supports",
    "transpose_codes",
    "transposes_codes",
    "why_not_quantize_rows_and_transposed",
    "why_not_quantize_transposed",
    "why_not_transpose_codes",
    "why_unsupported",
]

LIBRARY_NAME = "libmxprec_cuda.so"
SYMBOL = "MxprecScaledGemmCuda"
TARGET = "mxprec_scaled_gemm"
BUILD_HINT = (
    "`bash csrc/cuda_kernels/build.sh` (writes build-cuda/libmxprec_cuda.so; needs nvcc >= 12.4 and "
    "the nvidia-cutlass headers, see docs/backends/cuda.md) or `cmake -S . -B build -DMXPREC_BUILD_CUDA=ON`"
)

# (lhs fmt, rhs fmt) pairs the library is built for.
PAIRS = (("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e4m3", "e5m2"))
OUT_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32))
# TileScaling tiles (rows, K) of the block-scaled kernels: 1x128 lhs x 128x128 rhs (Fprop: X x W;
# Dgrad: dY x W) or 1x128 rhs (Wgrad: X^T x dY).
LHS_TILE = (1, 128)
RHS_TILES = ((128, 128), (1, 128))
_PER_TENSOR = (TensorScaling, DelayedScaling)


def _gpu_precondition():
    try:
        return None if jax.devices("gpu") else "JAX has no GPU backend here"
    except RuntimeError:
        return "JAX has no GPU backend here"


TRANSPOSE_TARGET = "mxprec_transpose_bytes"
QUANTIZE_TRANSPOSED_TARGET = "mxprec_quantize_transposed"
QUANTIZE_ROWS_TRANSPOSED_TARGET = "mxprec_quantize_rows_transposed"
SWIGLU_BACKWARD_TARGET = "mxprec_swiglu_backward_fp8"
SWIGLU_FORWARD_TARGET = "mxprec_swiglu_forward_fp8"
SWIGLU_FORWARD_AMAX_TARGET = "mxprec_swiglu_forward_amax"
SWIGLU_BACKWARD_AMAX_TARGET = "mxprec_swiglu_backward_amax"
SWIGLU_H_TILES_TARGET = "mxprec_swiglu_h_tiles"
SWIGLU_GRAD_TILES_TARGET = "mxprec_swiglu_grad_tiles"
_LIB = NativeLibrary(file=LIBRARY_NAME,
                     symbols={TARGET: SYMBOL, "mxprec_quantize": "MxprecQuantizeCuda",
                              TRANSPOSE_TARGET: "MxprecTransposeBytesCuda",
                              QUANTIZE_TRANSPOSED_TARGET: "MxprecQuantizeTransposedCuda",
                              QUANTIZE_ROWS_TRANSPOSED_TARGET: "MxprecQuantizeRowsTransposedCuda",
                              SWIGLU_BACKWARD_TARGET: "MxprecSwigluBackwardFp8Cuda",
                              SWIGLU_FORWARD_TARGET: "MxprecSwigluForwardFp8Cuda",
                              SWIGLU_FORWARD_AMAX_TARGET: "MxprecSwigluForwardAmaxCuda",
                              SWIGLU_BACKWARD_AMAX_TARGET: "MxprecSwigluBackwardAmaxCuda",
                              SWIGLU_H_TILES_TARGET: "MxprecSwigluHTilesCuda",
                              SWIGLU_GRAD_TILES_TARGET: "MxprecSwigluGradTilesCuda"},
                     platform="CUDA", build_hint=BUILD_HINT,
                     build_dirs=("build-cuda", "build"), precondition=_gpu_precondition,
                     env_var="MXPREC_CUDA_LIBRARY")
_load = _LIB.load
_state = _LIB.state
library_search_paths = _LIB.search_paths


def available() -> bool:
    """Whether the CUDA ``mxprec_scaled_gemm`` handler is loaded and registered (a GPU is present)."""
    return _LIB.available()


def require() -> None:
    _LIB.require("mxprec CUDA kernels")


def _contract_of(q: QTensor, contract: int | None) -> int:
    return q.axis if contract is None else contract


def _family(lspec, rspec) -> tuple[str, str]:
    """The kernel family of a pair of scaling specs: ``("tensor" | "row" | "block", "")`` or ``("", reason)``."""
    if isinstance(lspec, _PER_TENSOR) and isinstance(rspec, _PER_TENSOR):
        return "tensor", ""
    if isinstance(lspec, RowScaling) and isinstance(rspec, RowScaling):
        return "row", ""
    if isinstance(lspec, TileScaling) and isinstance(rspec, TileScaling):
        if lspec.tile != LHS_TILE or rspec.tile not in RHS_TILES:
            return "", (
                f"TileScaling tiles lhs {lspec.tile} x rhs {rspec.tile} are not built; the block-scaled "
                f"kernels take lhs {LHS_TILE} x rhs {' or '.join(map(str, RHS_TILES))}"
            )
        return "block", ""
    return "", (
        f"lhs {type(lspec).__name__} x rhs {type(rspec).__name__} is not implemented; the CUDA kernels take "
        f"TensorScaling/DelayedScaling on both operands, RowScaling on both, or TileScaling lhs {LHS_TILE} x "
        f"rhs {' or '.join(map(str, RHS_TILES))}"
    )


# Kernel families that backend="auto" runs here rather than on XLA's path, each because it measured
# faster on the H200 (benchmarks/results/h200_gemm.md, same run per shape, and h200_llama.md):
# * "block": CUTLASS's block-scaled GEMM 1138 TFLOP/s at 8192^3 against 674 for XLA's exact path
#   (dequantize to BF16 + BF16 dot), faster on all ten shapes; the fp8_block Llama step 227 ms on these
#   kernels against 273 ms on XLA's path (209 ms since its TileScaling quantization runs here too). Since the
#   twenty-first session each block GEMM runs, per shape, mxprec's own persistent kernel or CUTLASS's,
#   whichever measured faster (MXPREC_SM90_BLOCKWISE_KERNEL=auto; fp8_block 195.0 ms against bf16 228.6,
#   h200_blockwise_persistent.md); since the fortieth session the persistent one at every shape
#   (h200_gemm_block_rings.md).
# * "row" (ninth session): with the overlapped FP32 promotion, the row-wise GEMM is faster than XLA's
#   row-wise path (cuBLASLt FP8 dot + output scaling) on all ten shapes, 1353 vs 1227 TFLOP/s at 8192^3,
#   1264 vs 1085 at 16384x4096x14336 (+0.4 % to +16.5 %); tenth session, nine of ten (1260 vs 1329 at
#   8192x28672x8192, K = 28672).
# Per-tensor pairs stay on XLA: ours win on six shapes and lose on four in the ninth session's run (four win,
# two tie, four lose in the tenth's), and XLA fuses the per-tensor quantization into the producers, which a
# custom call cannot (h200_llama.md: fp8_current on XLA against fp8_current:ffi). Measured again with the
# persistent per-tensor kernel (twenty-second session, MXPREC_AUTO_FAMILIES=tensor,row,block): fp8_current 166.5
# against 165.6 ms on XLA, fp8_delayed 165.1 against 160.6 ms (h200_persistent_tensorwise.md).
AUTO_FAMILIES = ("block", "row")
_FAMILY_NAMES = ("tensor", "row", "block")


def auto_families() -> tuple[str, ...]:
    """The kernel families backend="auto" runs on the CUDA kernels: AUTO_FAMILIES, or as ``MXPREC_AUTO_FAMILIES``
    (comma-separated of tensor, row, block; a measurement knob like MXPREC_AUTO_QUANTIZE) names them."""
    env = os.environ.get("MXPREC_AUTO_FAMILIES")
    if env is None:
        return AUTO_FAMILIES
    names = tuple(n.strip() for n in env.split(",") if n.strip())
    unknown = sorted(set(names) - set(_FAMILY_NAMES))
    if unknown:
        raise ValueError(f"MXPREC_AUTO_FAMILIES names {unknown}; known: {list(_FAMILY_NAMES)}")
    return names


# Scaling kinds whose quantization backend="auto" runs on the CUDA kernels (mxprec_quantize) rather than
# XLA's fused quantizer, each because it measured faster on the H200:
# * TileScaling: the 1 x 128 tile kernels run at 68.1 % (rows) / 66.5 % (columns) of copy bandwidth
#   and the 128 x 128 tiles at 72.2 %, against XLA's 41.7 % / 14.8 % / 41.3 %
#   (benchmarks/results/h200_cuda_quantize.md); the fp8_block Llama step took 209.3 ms with them
#   against 221.8 ms with XLA's (h200_llama.md, sixth session).
# * MXScaling: MXFP8 at 55.9 % (rows) / 74.3 % (columns) of copy against XLA's 42.2 % / 19.5 %, MXFP4
#   40.1 % against 16.7 %; the Llama steps on Hopper's exact MX path (dequantize + BF16 dot) took
#   mxfp8 255.4 / mxfp6 288.2 / mxfp4 282.6 ms with them against 322.4 / 310.7 / 305.5 ms (seventh
#   session, same calls).
# Per-tensor, delayed and row-wise quantization of activations and gradients stays on XLA, which fuses it
# into the producer: the fp8_delayed step took 170.3 ms with our delayed cast on every operand feeding XLA's
# cuBLASLt FP8 dot against 164.6 ms with XLA's cast (seventh session, same call).
# * NVFP4Scaling (since the sixteenth session): 26.6 / 24.8 % of copy along rows / columns against XLA's
#   16.0 / 15.3 %; the nvfp4 Llama step (llama3_8b_4layer, H200, Hopper's exact dequantize + BF16 dot)
#   took 327.5 / 325.2 ms with them against 343.1 / 350.0 ms with XLA's (two interleaved pairs in one call),
#   peak 22.14 GB against 23.20 / 22.22 GB. Stochastic rounding (the recipe's dY) stays on the JAX path.
AUTO_QUANTIZE = (TileScaling, MXScaling, NVFP4Scaling)

# Weight operands (dot_general's rhs: Fprop's W and its reuse in Dgrad) of these kinds also run on the
# CUDA kernels under "auto". cuBLASLt's FP8 GEMM is TN-only, so Fprop wants W K-major; with XLA's cast,
# layout assignment carries that layout back through the cast fusion to the FP32 parameter stacks, which
# XLA then transposes once per step and keeps live (2.55 GB at the fp8_delayed step's peak, eleventh
# session). A custom call has a fixed row-major layout, so the transpose moves onto the 1-byte codes.
# Twelfth session, same call (llama3_8b_4layer, H200): fp8_delayed peak 24.31 -> 22.59 GB at 161.8 ->
# 162.1 ms, fp8_current 24.06 -> 21.61 GB at 164.8 -> 165.2 ms (Flax FP8: 24.32 GB, 153.8 ms).
AUTO_QUANTIZE_WEIGHTS = (TensorScaling, DelayedScaling)

# ``MXPREC_AUTO_QUANTIZE`` (comma-separated names) replaces AUTO_QUANTIZE and AUTO_QUANTIZE_WEIGHTS, a
# measurement knob for benchmarks/h200_session.sh (e.g. ``tile,delayed`` for the per-tensor cast on every
# operand): it only chooses which quantizer runs (both give the CPU oracle's codes, except that XLA's GPU
# quantizer keeps FP32 denormals the oracle flushes). The name ``weights`` adds every kind for weight
# operands only, e.g. ``tile,mx,weights`` (the default's routing, and row / NVFP4 weights too); without it
# (e.g. ``tile,mx``) weights follow the named kinds alone.
_WEIGHTS = "weights"
_QUANTIZE_KINDS = {
    "tile": TileScaling,
    "tensor": TensorScaling,
    "delayed": DelayedScaling,
    "row": RowScaling,
    "mx": MXScaling,
    "nvfp4": NVFP4Scaling,
}


def auto_quantize_kinds(weight: bool = False) -> tuple[type, ...]:
    """The scaling kinds backend="auto" quantizes with the CUDA kernels, for a weight operand if ``weight``:
    AUTO_QUANTIZE (+ AUTO_QUANTIZE_WEIGHTS), or as ``MXPREC_AUTO_QUANTIZE`` names them."""
    env = os.environ.get("MXPREC_AUTO_QUANTIZE")
    if env is None:
        return AUTO_QUANTIZE + (AUTO_QUANTIZE_WEIGHTS if weight else ())
    names = [n.strip() for n in env.split(",") if n.strip()]
    unknown = sorted(set(names) - set(_QUANTIZE_KINDS) - {_WEIGHTS})
    if unknown:
        known = sorted([*_QUANTIZE_KINDS, _WEIGHTS])
        raise ValueError(f"MXPREC_AUTO_QUANTIZE names {unknown}; known: {known}")
    if weight and _WEIGHTS in names:
        return tuple(_QUANTIZE_KINDS.values())
    return tuple(_QUANTIZE_KINDS[n] for n in names if n != _WEIGHTS)


def auto_quantizes(spec, weight: bool = False) -> bool:
    """Whether backend="auto" quantizes ``spec`` with the CUDA kernel (``weight``: the operand is a weight)."""
    return isinstance(spec, auto_quantize_kinds(weight))


def auto_prefers(lhs, rhs) -> bool:
    """Whether backend="auto" sends this operand pair to the CUDA kernels (its family is in auto_families())."""
    if not (isinstance(lhs, QTensor) and isinstance(rhs, QTensor)):
        return False
    return _family(lhs.spec, rhs.spec)[0] in auto_families()


# The kernels' alignment: K % 16 (16-byte rows of FP8 codes), N % 8 for bf16 / N % 4 for f32 output (16-byte rows).
_K_ALIGN = 16
_N_ALIGN = {"bfloat16": 8, "float32": 4}


def why_unsupported(
    lhs,
    rhs,
    *,
    lhs_contract: int | None = None,
    rhs_contract: int | None = None,
    out_dtype=jnp.bfloat16,
    check_library: bool = True,
) -> str:
    """Empty string when :func:`scaled_gemm` can run these operands, else the reason."""
    for name, q in (("lhs", lhs), ("rhs", rhs)):
        if not isinstance(q, QTensor):
            return f"{name} is not a QTensor"
        if len(q.shape) != 3:
            return f"{name} must be 3-D, got shape {q.shape}"
    family, reason = _family(lhs.spec, rhs.spec)
    if reason:
        return reason
    lc, rc = _contract_of(lhs, lhs_contract), _contract_of(rhs, rhs_contract)
    if lc not in (1, 2) or rc not in (1, 2):
        return f"contraction axes must be 1 or 2, got {lc} / {rc}"
    if lhs.axis != lc or rhs.axis != rc:
        return "operands must be quantized along their contraction axis"
    pair = (lhs.spec.fmt.name, rhs.spec.fmt.name)
    if pair not in PAIRS:
        return f"FP8 pair {pair[0]} x {pair[1]} is not built ({', '.join('x'.join(p) for p in PAIRS)})"
    od = jnp.dtype(out_dtype)
    if od not in OUT_DTYPES:
        return f"out_dtype {od} is not built (bfloat16, float32)"
    b, k = lhs.shape[0], lhs.shape[lc]
    n = rhs.shape[3 - rc]
    if rhs.shape[0] != b or rhs.shape[rc] != k:
        return f"lhs {lhs.shape} and rhs {rhs.shape} disagree on B or K"
    if k == 0 or k % _K_ALIGN:
        return f"K={k} must be a positive multiple of {_K_ALIGN}"
    align = _N_ALIGN[od.name]
    if n % align:
        return f"N={n} must be a multiple of {align} for {od} output"
    if family == "block" and (k % LHS_TILE[1] or n % 128):
        return f"block-scaled: K={k} and N={n} must be multiples of 128 (whole scale blocks and 128-row N tiles)"
    if max(lhs.shape + rhs.shape) >= 2**31:
        return "extents must be < 2**31"
    if family == "block" and b * max(-(-lhs.shape[3 - lc] // 4) * 4, n // rhs.spec.tile[0]) * (k // 128) >= 2**31:
        return "block-scaled: B * M * K/128 and B * N/tile_rows * K/128 (the scale counts) must be < 2**31"
    if check_library and not available():
        return _load()[1]
    return ""


def supports(
    lhs, rhs, *, lhs_contract=None, rhs_contract=None, out_dtype=jnp.bfloat16, check_library=True
) -> bool:
    """Whether :func:`scaled_gemm` runs these operands on the CUDA kernel (library loaded, GPU present)."""
    return not why_unsupported(
        lhs,
        rhs,
        lhs_contract=lhs_contract,
        rhs_contract=rhs_contract,
        out_dtype=out_dtype,
        check_library=check_library,
    )


# ----------------------------------------------------------------------------- FP8 code transposes

def transposes_codes(shape=None) -> bool:
    """Whether backend="auto" / "ffi" make K-contiguous copies of FP8 codes (of ``shape``, if given) with
    :func:`transpose_codes`: ``MXPREC_XLA_FP8_TRANSPOSE`` is ``cuda`` (the default; see mxprec.kernels.scaled_gemm),
    the library is loaded and the kernel takes the shape (:func:`why_not_transpose_codes`). Otherwise XLA
    transposes them. Same bits either way."""
    from mxprec.kernels.scaled_gemm import _gpu_fp8_transpose

    return _gpu_fp8_transpose() == "cuda" and available() and not (shape and why_not_transpose_codes(shape))


_TRANSPOSE_DTYPES = tuple(jnp.dtype(d) for d in (jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.uint8, jnp.int8))
_TRANSPOSE_MAX_GRID = 65535  # the kernel's grid: 128-row tiles along y, the batch along z (cuda_transpose.cu)


def why_not_transpose_codes(shape) -> str:
    """Empty string when :func:`transpose_codes` takes a tensor of ``shape`` (rank >= 2, at most 65535 tiles of 128
    rows and 65535 batch entries, its grid's y and z limits), else why not."""
    if len(shape) < 2:
        return f"shape {tuple(shape)}: rank >= 2 needed"
    batch, rows = math.prod(shape[:-2]), shape[-2]
    if -(-rows // 128) > _TRANSPOSE_MAX_GRID or batch > _TRANSPOSE_MAX_GRID:
        return (f"shape {tuple(shape)}: the kernel takes at most {_TRANSPOSE_MAX_GRID * 128} rows and "
                f"{_TRANSPOSE_MAX_GRID} batch entries (the product of the leading dimensions)")
    return ""


def _transpose_call(x: jax.Array) -> jax.Array:
    out = jax.ShapeDtypeStruct(x.shape[:-2] + (x.shape[-1], x.shape[-2]), x.dtype)
    return jax.ffi.ffi_call(TRANSPOSE_TARGET, out, vmap_method="broadcast_all")(x)


def _transpose_infer(mesh, arg_shapes, result_shape):
    """The result's sharding: the operand's with its last two axes swapped."""
    dims = _spec_axes(arg_shapes[0].sharding, len(arg_shapes[0].shape))
    return NamedSharding(mesh, _pspec(dims[:-2] + [dims[-1], dims[-2]]))


def _transpose_partition(mesh, arg_shapes, result_shape):
    x_sharding = NamedSharding(mesh, _pspec(_spec_axes(arg_shapes[0].sharding, len(arg_shapes[0].shape))))
    return mesh, _transpose_call, _transpose_infer(mesh, arg_shapes, result_shape), (x_sharding,)


_transpose_cp = custom_partitioning(_transpose_call)
_transpose_cp.def_partition(
    partition=_transpose_partition,
    infer_sharding_from_operands=_transpose_infer,
    sharding_rule="... r c -> ... c r",
)


@jax.custom_batching.custom_vmap
def _transpose_vmappable(x):
    return _transpose_cp(x)


@_transpose_vmappable.def_vmap
def _transpose_vmap_rule(axis_size, in_batched, x):
    # custom_partitioning has no batching rule; the kernel treats leading dimensions as a batch, so a
    # vmapped axis (moved to the front by custom_vmap) is one more of them.
    del axis_size
    return _transpose_vmappable(x), in_batched[0]


def transpose_codes(x: jax.Array) -> jax.Array:
    """``swapaxes(x, -1, -2)`` of a tensor of 1-byte codes (FP8 / uint8 / int8, rank >= 2) on the CUDA kernel.

    The custom call ``mxprec_transpose_bytes`` (csrc/cuda_kernels/cuda_transpose.cu): 128 x 128 byte tiles
    through shared memory, leading dimensions a batch. Shardings pass through with the last two axes swapped.
    Same bits as ``jnp.swapaxes``; raises ValueError for other dtypes or ranks, and for shapes past the kernel's
    grid (:func:`why_not_transpose_codes`).
    """
    if x.ndim < 2 or jnp.dtype(x.dtype) not in _TRANSPOSE_DTYPES:
        names = ", ".join(d.name for d in _TRANSPOSE_DTYPES)
        raise ValueError(f"transpose_codes: x must have rank >= 2 and dtype {names}; got shape {x.shape} dtype {x.dtype}")
    why = why_not_transpose_codes(x.shape)
    if why:
        raise ValueError(f"transpose_codes: {why}")
    require()
    return _transpose_vmappable(x)


# ----------------------------------------------------------------------------- quantize into the K-major layout

_TRANSPOSED_BLOCKS = (32, 64, 128)
_ROW_BLOCK = 128  # quantize_rows_and_transposed: the row copy's groups, one per row of a 128 x 128 tile
_WIDE_DTYPES = tuple(jnp.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16))


def why_not_quantize_transposed(shape, dtype, spec, *, check_library: bool = True) -> str:
    """Empty string when :func:`quantize_transposed` runs ``x`` of ``shape`` / ``dtype`` per ``spec``, else why not."""
    if not (isinstance(spec, TileScaling) and spec.tile[0] == 1 and spec.tile[1] in _TRANSPOSED_BLOCKS
            and spec.fmt.is_fp8):
        return (f"{spec!r}: the transposed quantize kernel takes FP8 TileScaling with tile (1, G), "
                f"G in {_TRANSPOSED_BLOCKS}")
    if len(shape) != 3 or jnp.dtype(dtype) not in _WIDE_DTYPES:
        return f"x must be a 3-D float32 / bfloat16 / float16 array, got shape {tuple(shape)} dtype {dtype}"
    b, r, c = shape
    if min(b, r, c) <= 0 or r % 128 or c % 128:
        return f"x {tuple(shape)}: needs R and C (axes 1, 2) positive multiples of 128 (the kernel's 128 x 128 tiles)"
    if b * r // 128 > 65535:
        return f"x {tuple(shape)}: B * R / 128 must be <= 65535 (grid rows)"
    if check_library and not available():
        return _load()[1]
    return ""


def _switch_on(var: str) -> bool:
    """A measurement switch's value: ``var`` is ``1`` (also when unset) or ``0``; anything else is an error."""
    mode = os.environ.get(var, "1")
    if mode not in ("0", "1"):
        raise ValueError(f"{var} must be 0 or 1, got {mode!r}")
    return mode == "1"


def quantizes_transposed() -> bool:
    """Whether dot_general's Wgrad operands use :func:`quantize_transposed` where it applies:
    ``MXPREC_TRANSPOSED_QUANTIZE`` (``1``, the default, or ``0``; a measurement knob: ``0`` quantizes along axis 1
    and transposes the codes for the GEMM, the same bits) and the library is loaded."""
    return _switch_on("MXPREC_TRANSPOSED_QUANTIZE") and available()


@dataclasses.dataclass(frozen=True)
class _TransposedQuantCfg:
    """The attributes of one ``mxprec_quantize_transposed`` call, or, with ``row_dtype``, of one
    ``mxprec_quantize_rows_transposed`` call (x's own 1 x 128 row groups too)."""

    fmt: int
    block: int
    power_of_two: int
    dtype: str  # the FP8 codes' dtype name
    no_amax: int = 0  # 1: amax_mode 3, the kernel computes no amax (QTensor.amax NaN), as ffi._QuantCfg's
    row_fmt: int = 0
    row_power_of_two: int = 0
    row_dtype: str = ""  # the row copy's FP8 codes' dtype name; "" = no row copy

    def attrs(self) -> dict:
        attrs = dict(fmt=np.int32(self.fmt), block=np.int32(self.block), power_of_two=np.int32(self.power_of_two),
                     amax_mode=np.int32(3 if self.no_amax else 0))
        if self.row_dtype:
            attrs.update(row_fmt=np.int32(self.row_fmt), row_power_of_two=np.int32(self.row_power_of_two))
        return attrs

    @property
    def n_results(self) -> int:
        return 6 if self.row_dtype else 4


def _transposed_cfg(spec: TileScaling, amax: bool, row_spec: TileScaling | None = None):
    """The call's attributes for the K-major copy per ``spec`` (and, with ``row_spec``, the row copy)."""
    rows = {}
    if row_spec is not None:
        rows = dict(row_fmt=FMT[row_spec.fmt.name], row_power_of_two=int(row_spec.power_of_two),
                    row_dtype=jnp.dtype(row_spec.fmt.jnp_dtype).name)
    return _TransposedQuantCfg(FMT[spec.fmt.name], spec.tile[1], int(spec.power_of_two),
                               jnp.dtype(spec.fmt.jnp_dtype).name, int(not amax), **rows)


def _quantize_transposed_call(cfg: _TransposedQuantCfg, x):
    """data (B, C, R), scale (B, C, R / G), amax, tensor_scale (+ row_data (B, R, C), row_scale (B, R, C / 128))."""
    b, r, c = x.shape
    outs = [
        jax.ShapeDtypeStruct((b, c, r), jnp.dtype(cfg.dtype)),
        jax.ShapeDtypeStruct((b, c, r // cfg.block), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.float32),
        jax.ShapeDtypeStruct((), jnp.float32),
    ]
    if cfg.row_dtype:
        outs += [jax.ShapeDtypeStruct((b, r, c), jnp.dtype(cfg.row_dtype)),
                 jax.ShapeDtypeStruct((b, r, c // _ROW_BLOCK), jnp.float32)]
    target = QUANTIZE_ROWS_TRANSPOSED_TARGET if cfg.row_dtype else QUANTIZE_TRANSPOSED_TARGET
    data, scale, amax, ts, *rows = jax.ffi.ffi_call(target, tuple(outs), vmap_method="sequential")(x, **cfg.attrs())
    # no_amax: the kernel leaves amax unwritten
    return (data, scale, _nan_amax() if cfg.no_amax else amax, ts, *rows)


_TRANSPOSED_TILE = 128  # the kernel's 128 x 128 tiles: a shard keeps R and C multiples of 128


def _quantize_transposed_dims(mesh, x) -> list[tuple]:
    """x's (B, R, C) mesh axes, R / C shardings that would cut a 128 x 128 tile dropped (XLA gathers those)."""
    units = (1, _TRANSPOSED_TILE, _TRANSPOSED_TILE)
    dims = _spec_axes(x.sharding, 3)
    return [a if a and x.shape[d] % (_axes_size(mesh, a) * units[d]) == 0 else () for d, a in enumerate(dims)]


def _quantize_transposed_results(cfg, mesh, dims):
    """data (B, C, R) and scale (B, C, R / G) take x's B, R, C shardings; amax and tensor_scale are replicated;
    row_data (B, R, C) and row_scale (B, R, C / 128) keep x's."""
    b, r, c = dims
    swapped = NamedSharding(mesh, _pspec([b, c, r]))
    rep = NamedSharding(mesh, P())
    rows = (NamedSharding(mesh, _pspec(dims)),) * 2 if cfg.row_dtype else ()
    return (swapped, swapped, rep, rep, *rows)


def _quantize_transposed_partition(cfg, mesh, arg_shapes, result_shape):
    dims = _quantize_transposed_dims(mesh, arg_shapes[0])
    axes = tuple(a for d in dims for a in d)

    def lower_fn(x):
        data, scale, amax, ts, *rows = _quantize_transposed_call(cfg, x)
        # QTensor.amax: the whole tensor's; no_amax: NaN, nothing to reduce
        return (data, scale, amax if cfg.no_amax else _pmax_nan(amax, axes), ts, *rows)

    return mesh, lower_fn, _quantize_transposed_results(cfg, mesh, dims), (NamedSharding(mesh, _pspec(dims)),)


def _quantize_transposed_infer(cfg, mesh, arg_shapes, result_shape):
    return _quantize_transposed_results(cfg, mesh, _quantize_transposed_dims(mesh, arg_shapes[0]))


def _quantize_transposed_rule(cfg, mesh, value_types, result_types):
    """Shardy rule: factors b, r, c in whole 128 x 128 tiles; the scale's R axis holds 128 / G groups per tile."""
    _, rows, cols = _dims_of(value_types[0])
    per_tile = _TRANSPOSED_TILE // cfg.block
    # Factors that sit only inside "(main sub)" need their sizes: c unless the row scale (one group per 128-column
    # tile) holds it alone, r unless the scale holds it alone.
    sizes = dict(rt=_TRANSPOSED_TILE, ct=_TRANSPOSED_TILE)
    if not cfg.row_dtype:
        sizes.update(c=cols // _TRANSPOSED_TILE)
    scale_r = "r"
    if per_tile > 1:
        sizes.update(r=rows // _TRANSPOSED_TILE, rg=per_tile)
        scale_r = "(r rg)"
    row_results = ", b (r rt) (c ct), b (r rt) c" if cfg.row_dtype else ""
    return f"b (r rt) (c ct) -> b (c ct) (r rt), b (c ct) {scale_r}, , {row_results}", sizes


_quantize_transposed_cp = _partitioned(
    _quantize_transposed_call, _quantize_transposed_partition, _quantize_transposed_infer, _quantize_transposed_rule
)


def _sequential_vmap(cp, cfg, n_results: int):
    """``cp(cfg, ...)`` with a batching rule (custom_partitioning has none): one call per example."""

    @jax.custom_batching.custom_vmap
    def f(*args):
        return cp(cfg, *args)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        args = [a if b else jnp.broadcast_to(a, (axis_size,) + a.shape) for a, b in zip(args, in_batched)]
        return lax.map(lambda t: f(*t), tuple(args)), (True,) * n_results

    return f


@functools.cache
def _quantize_transposed_vmappable(cfg: _TransposedQuantCfg):
    """The custom call with a batching rule: one call per example."""
    return _sequential_vmap(_quantize_transposed_cp, cfg, cfg.n_results)


def quantize_transposed(x: jax.Array, spec: TileScaling, amax: bool = True) -> QTensor:
    """``mxprec.quantize(swapaxes(x, 1, 2), spec, axis=2)`` on the CUDA kernel, reading ``x`` as it lies.

    Args:
      x: ``(B, R, C)`` float32 / bfloat16 / float16, R and C multiples of 128.
      spec: FP8 ``TileScaling`` with tile ``(1, G)``, G in 32 / 64 / 128 (groups of G consecutive R).
      amax: False skips the tensor amax (no zeroed result buffer, no atomics: the caller does not read it);
        QTensor.amax is then NaN.

    Returns:
      QTensor of shape ``(B, C, R)`` quantized along axis 2: data ``(B, C, R)`` FP8, scale f32 ``(B, C, R / G)``,
      amax, bit for bit those of ``mxprec.quantize`` (the CPU oracle's numerics). The same codes and scales as
      quantizing ``x`` along axis 1, already in the K-major layout that a GEMM contracting R takes (Wgrad's X and
      dY), so no transpose of the codes follows. The custom call ``mxprec_quantize_transposed``
      (csrc/cuda_kernels/cuda_quantize.cu, ``col_kernel`` storing each column's codes contiguously). Sharding: x's
      B, R and C shardings carry over to the codes and scales (R and C in whole 128-element tiles; a sharding that
      would cut one is dropped, XLA gathers it), the amax is ``pmax``-reduced over the sharded axes. vmap: one call
      per example. Raises ValueError where :func:`why_not_quantize_transposed` says no.
    """
    reason = why_not_quantize_transposed(x.shape, x.dtype, spec)
    if reason:
        raise ValueError(f"mxprec.kernels.cuda.quantize_transposed: {reason}")
    b, r, c = x.shape
    data, scale, amax_out, _ = _quantize_transposed_vmappable(_transposed_cfg(spec, amax))(x)
    return QTensor(data=data, scale=scale, amax=amax_out, tensor_scale=None, spec=spec, axis=2, shape=(b, c, r),
                   dtype=jnp.dtype(x.dtype))


def why_not_quantize_rows_and_transposed(shape, dtype, row_spec, spec, *, check_library: bool = True) -> str:
    """Empty string when :func:`quantize_rows_and_transposed` runs ``x`` of ``shape`` / ``dtype``, else why not."""
    if not (isinstance(row_spec, TileScaling) and row_spec.tile == (1, _ROW_BLOCK) and row_spec.fmt.is_fp8):
        return f"row_spec {row_spec!r}: the row copy takes FP8 TileScaling with tile (1, {_ROW_BLOCK})"
    return why_not_quantize_transposed(shape, dtype, spec, check_library=check_library)


def quantizes_rows_and_transposed() -> bool:
    """Whether dot_general quantizes dY for Dgrad and Wgrad in one call (:func:`quantize_rows_and_transposed`) where
    both copies would come from the CUDA kernels: ``MXPREC_ROWS_TRANSPOSED_QUANTIZE`` (``1``, the default, or ``0``;
    a measurement knob: ``0`` runs the two kernels, the same bits) and :func:`quantizes_transposed`."""
    return _switch_on("MXPREC_ROWS_TRANSPOSED_QUANTIZE") and quantizes_transposed()


def quantize_rows_and_transposed(x: jax.Array, row_spec: TileScaling, spec: TileScaling,
                                 amax: bool = True) -> tuple[QTensor, QTensor]:
    """``(mxprec.quantize(x, row_spec, axis=2), quantize_transposed(x, spec))`` from one read of ``x``.

    Args:
      x: ``(B, R, C)`` float32 / bfloat16 / float16, R and C multiples of 128.
      row_spec: FP8 ``TileScaling`` with tile ``(1, 128)``: x's own row groups (Dgrad's dY).
      spec: FP8 ``TileScaling`` with tile ``(1, G)``, G in 32 / 64 / 128: groups of G consecutive R, written as the
        ``(B, C, R)`` transpose (Wgrad's K-major dY), as :func:`quantize_transposed`.
      amax: False skips the tensor amax (QTensor.amax NaN in both), as :func:`quantize_transposed`.

    Returns:
      ``(rows, transposed)``: QTensor ``(B, R, C)`` along axis 2 (data FP8, scale f32 ``(B, R, C / 128)``) and the
      QTensor of :func:`quantize_transposed`, each bit for bit what the two calls return, with the same amax. One
      custom call, ``mxprec_quantize_rows_transposed`` (csrc/cuda_kernels/cuda_quantize.cu: ``col_kernel`` also
      quantizing the rows of each 128 x 128 tile it stages, ``tile_row_groups``): x is read once, not twice.
      Sharding and vmap as :func:`quantize_transposed` (the row copy keeps x's sharding). Raises ValueError where
      :func:`why_not_quantize_rows_and_transposed` says no.
    """
    reason = why_not_quantize_rows_and_transposed(x.shape, x.dtype, row_spec, spec)
    if reason:
        raise ValueError(f"mxprec.kernels.cuda.quantize_rows_and_transposed: {reason}")
    b, r, c = x.shape
    cfg = _transposed_cfg(spec, amax, row_spec)
    data, scale, amax_out, _, row_data, row_scale = _quantize_transposed_vmappable(cfg)(x)
    dtype = jnp.dtype(x.dtype)
    rows = QTensor(data=row_data, scale=row_scale, amax=amax_out, tensor_scale=None, spec=row_spec, axis=2,
                   shape=(b, r, c), dtype=dtype)
    transposed = QTensor(data=data, scale=scale, amax=amax_out, tensor_scale=None, spec=spec, axis=2,
                         shape=(b, c, r), dtype=dtype)
    return rows, transposed


def _to_tn(q: QTensor, contract: int) -> jax.Array:
    """The operand's FP8 data as (B, rows, K), K contiguous (transposes when contract == 1)."""
    if contract == 2:
        return q.data
    return transpose_codes(q.data) if transposes_codes(q.data.shape) else jnp.swapaxes(q.data, 1, 2)


def _scale_tn(q: QTensor, contract: int, family: str) -> jax.Array:
    """The operand's scales in the contract-2 layout of csrc/common/scaled_gemm.h (f32).

    tensor: ``()``; row: ``(B, rows, 1)`` (contract 1 holds ``(B, 1, rows)``: same bytes, reshaped);
    block: ``(B, rows / tr, K / 128)`` (contract 1 holds ``(B, K / 128, rows / tr)``: transposed).
    The handler re-lays block scales out for the kernel on the device.
    """
    s = jnp.asarray(q.scale, jnp.float32)
    if family == "tensor":
        return s.reshape(())
    if contract == 2:
        return s
    if family == "row":
        return s.reshape(s.shape[0], s.shape[2], 1)
    return jnp.swapaxes(s, 1, 2)


def gemm_shard_units(family: str, out_dtype) -> dict:
    """``{"k_unit", "n_unit"}``: what a shard's local K and N must be multiples of for the kernels (the partition
    rule gathers a dimension whose shards would break them). K % 16 and N % 8 (a K-sharded GEMM's local output is
    f32: N % 4); the block-scaled kernels need N % 128 with either rhs tile (a (1, 128) rhs's own tile rows, 1,
    would let fp8_block's Wgrad sharded over N fall to a local N of 8)."""
    n_unit = _N_ALIGN[jnp.dtype(out_dtype).name]
    return {"k_unit": _K_ALIGN, "n_unit": math.lcm(n_unit, 128) if family == "block" else n_unit}


def scaled_gemm(lhs: QTensor, rhs: QTensor, *, lhs_contract: int, rhs_contract: int, out_dtype, bias=None):
    """``out[b, m, n] = sum_k lhs[b, m, k] * rhs[b, k, n] (+ bias[n])`` on the sm_90a FP8 kernels.

    Args:
      lhs: FP8 QTensor ``(B, M, K)`` (lhs_contract=2) or ``(B, K, M)`` (=1): per-tensor / delayed,
        RowScaling, or TileScaling (1, 128).
      rhs: FP8 QTensor ``(B, N, K)`` (rhs_contract=2) or ``(B, K, N)`` (=1), of the same family
        (TileScaling (128, 128) or (1, 128) with a (1, 128) lhs).
      out_dtype: bfloat16 or float32.
      bias: optional float32 ``(N,)``, added in FP32 before the output cast.

    Operands with contraction axis 1 are transposed here (XLA transpose of the FP8 data and of
    the row / tile scales) so that the kernel sees K contiguous. Raises ValueError when
    :func:`supports` is False.
    """
    reason = why_unsupported(
        lhs, rhs, lhs_contract=lhs_contract, rhs_contract=rhs_contract, out_dtype=out_dtype
    )
    if reason:
        raise ValueError(f"mxprec.kernels.cuda.scaled_gemm: {reason}")
    out_dtype = jnp.dtype(out_dtype)
    a = _to_tn(lhs, lhs_contract)
    b = _to_tn(rhs, rhs_contract)
    n = b.shape[1]
    bias_buf = _bias_buffer(bias, n)
    one = jnp.ones((), jnp.float32)
    # Both operands are K-major after _to_tn: contract 2 on each.
    family = _family(lhs.spec, rhs.spec)[0]
    cfg = _GemmCfg(_operand_desc(lhs.spec, 2), _operand_desc(rhs.spec, 2), out_dtype.name, bias is not None,
                   **gemm_shard_units(family, out_dtype))
    ls = _scale_tn(lhs, lhs_contract, family)
    rs = _scale_tn(rhs, rhs_contract, family)
    return _gemm_vmappable(cfg)(a, ls, one, b, rs, one, bias_buf)


# ----------------------------------------------------------------------------- SwiGLU backward with its FP8 casts

SWIGLU_TILE = (64, 128)  # (M, F) tile of the kernel: M and F must be multiples


def why_not_swiglu_backward(m: int, f: int, dtype) -> str:
    """Empty string when :func:`swiglu_backward_fp8` takes (M, F) tensors of ``dtype``, else why not."""
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return f"dtype {jnp.dtype(dtype)} (the kernel takes bfloat16 / float16)"
    if m <= 0 or f <= 0 or m % SWIGLU_TILE[0] or f % SWIGLU_TILE[1] or m // SWIGLU_TILE[0] > 65535:
        return f"shape ({m}, {f}): M must be a positive multiple of {SWIGLU_TILE[0]} and F of {SWIGLU_TILE[1]}"
    return ""


def _why_not_multipliers(mult, n) -> str:
    return "" if mult is None or len(mult) == n else f"mult: {n} multipliers (or None) expected, got {len(mult)}"


def _multipliers(mult, n):
    """float32 (n,) of the n input multipliers ((m_g, m_u) or (m_g, m_u, m_d)); None, or a None entry, is 1 (read as
    is)."""
    mult = (None,) * n if mult is None else tuple(mult)
    return jnp.stack([jnp.float32(1) if v is None else jnp.asarray(v, jnp.float32).reshape(()) for v in mult])


def _why_not_swiglu_operands(gate, others, why_not_shape=None) -> str:
    """Why the SwiGLU kernels cannot take ``gate`` and the same-shaped ``others`` ({name: array}), or "";
    ``why_not_shape(m, f, dtype)``: the kernels' own shape / dtype rule (default :func:`why_not_swiglu_backward`)."""
    if gate.ndim != 2:
        return f"gate has rank {gate.ndim}, not 2"
    reason = (why_not_shape or why_not_swiglu_backward)(*gate.shape, gate.dtype)
    for name, t in others.items():
        if t.shape != gate.shape or t.dtype != gate.dtype:
            reason = reason or f"{name} {t.dtype}{tuple(t.shape)} differs from gate {gate.dtype}{tuple(gate.shape)}"
    return reason


# The SwiGLU kernels' custom calls under sharding and vmap. Both are elementwise over (M, F), so a shard runs the
# kernel on its own piece: the transposed copies take the transposed sharding, and the amaxes (FP32 bits, NaN
# canonical above +Inf) are pmax-reduced over the mesh axes that cut M or F.
_SWIGLU_UNITS = (64, 128)  # a shard keeps M a multiple of 64 and F of 128 (the backward kernel's 64 x 128 tiles)
_SWIGLU_TILES_UNITS = (128, 128)  # ... and of 128 both for the 1 x 128 tile kernels (col_kernel's 128 x 128 tiles)


def _swiglu_backward_local(dtypes, gate, up, dh, scales, mult):
    """``mxprec_swiglu_backward_fp8`` on one device's (M, F) pieces: h_t, d_gate, d_gate_t, d_up, d_up_t (codes in
    ``dtypes`` = (h, d_gate, d_up) dtype names), amax bits uint32 (3,)."""
    m, f = gate.shape
    sd = jax.ShapeDtypeStruct
    dt = [jnp.dtype(d) for d in dtypes]
    out = (sd((f, m), dt[0]), sd((m, f), dt[1]), sd((f, m), dt[1]), sd((m, f), dt[2]), sd((f, m), dt[2]),
           sd((3,), jnp.uint32))
    return jax.ffi.ffi_call(SWIGLU_BACKWARD_TARGET, out)(gate, up, dh, scales, mult)


def _swiglu_forward_local(dtype, gate, up, scale, mult):
    """``mxprec_swiglu_forward_fp8`` on one device's (M, F) pieces: h's codes (``dtype``), amax bits uint32 (1,)."""
    out = (jax.ShapeDtypeStruct(gate.shape, jnp.dtype(dtype)), jax.ShapeDtypeStruct((1,), jnp.uint32))
    return jax.ffi.ffi_call(SWIGLU_FORWARD_TARGET, out)(gate, up, scale, mult)


def _swiglu_amax_local(n, *args):
    """``mxprec_swiglu_forward_amax`` (n = 1: gate, up, mult) or ``mxprec_swiglu_backward_amax`` (n = 3: gate, up,
    dh, mult) on one device's (M, F) pieces: a 1-tuple of the amax bits uint32 (n,)."""
    target = SWIGLU_BACKWARD_AMAX_TARGET if n == 3 else SWIGLU_FORWARD_AMAX_TARGET
    return (jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((n,), jnp.uint32))(*args),)


def _swiglu_tiles_local(cfg, gate, up, *dh):
    """``mxprec_swiglu_h_tiles`` (gate, up) or ``mxprec_swiglu_grad_tiles`` (gate, up, dh) on one device's (M, F)
    pieces; cfg = (codes dtype name, fmt, power_of_two, transposed). h: (codes, scale), (M, F) and (M, F / 128), or
    transposed (F, M) and (F, M / 128); grads: d_gate's row codes, scale, transposed codes, scale, then d_up's."""
    dtype, fmt, pow2, transposed = cfg
    m, f = gate.shape
    sd = jax.ShapeDtypeStruct
    rows = (sd((m, f), jnp.dtype(dtype)), sd((m, f // _SWIGLU_TILES_UNITS[1]), jnp.float32))
    cols = (sd((f, m), jnp.dtype(dtype)), sd((f, m // _SWIGLU_TILES_UNITS[0]), jnp.float32))
    attrs = dict(fmt=np.int32(fmt), power_of_two=np.int32(pow2))
    if dh:
        return jax.ffi.ffi_call(SWIGLU_GRAD_TILES_TARGET, rows + cols + rows + cols)(gate, up, *dh, **attrs)
    return jax.ffi.ffi_call(SWIGLU_H_TILES_TARGET, cols if transposed else rows)(gate, up, transposed=np.int32(transposed),
                                                                                **attrs)


def _swiglu_dims(mesh, gate, units=_SWIGLU_UNITS) -> list[tuple]:
    """gate's (M, F) mesh axes; one that would leave a shard off the kernel's tiles (``units``) is dropped (XLA
    gathers it)."""
    dims = _spec_axes(gate.sharding, 2)
    return [a if a and gate.shape[d] % (_axes_size(mesh, a) * units[d]) == 0 else () for d, a in enumerate(dims)]


# The SwiGLU calls: (the (M, F) operands' count, the small replicated vectors that follow them (Shardy factor
# names: "s" the scales, "u" the multipliers), the results' layouts: "mf" row-major (M, F) codes, "fm" transposed
# (F, M) codes, "a" the amax vector (replicated after the pmax), "ms" / "fs" the 1 x 128 tiles' scales of "mf" /
# "fm" codes: (M, F / 128) / (F, M / 128)).
_SWIGLU_CALLS = {
    "backward": (3, ("s", "u"), ("fm", "mf", "fm", "mf", "fm", "a")),
    "forward": (2, ("s", "u"), ("mf", "a")),
    "backward_amax": (3, ("u",), ("a",)),
    "forward_amax": (2, ("u",), ("a",)),
    "h_tiles": (2, (), ("mf", "ms")),
    "h_tiles_t": (2, (), ("fm", "fs")),
    "grad_tiles": (3, (), ("mf", "ms", "fm", "fs") * 2),
}


def _swiglu_units(kind: str) -> tuple[int, int]:
    return _SWIGLU_TILES_UNITS if "tiles" in kind else _SWIGLU_UNITS


def _swiglu_shardings(mesh, dims, kind: str):
    """(result shardings, argument shardings) of call ``kind`` for gate's (M, F) mesh axes ``dims``: the (M, F)
    operands sharded as gate, the small vectors (scales, multipliers) replicated."""
    m, f = dims
    by_layout = {"mf": NamedSharding(mesh, _pspec([m, f])), "fm": NamedSharding(mesh, _pspec([f, m])),
                 "a": NamedSharding(mesh, P())}
    by_layout.update(ms=by_layout["mf"], fs=by_layout["fm"])
    n_mf, vectors, results = _SWIGLU_CALLS[kind]
    return (tuple(by_layout[r] for r in results),
            (by_layout["mf"],) * n_mf + (by_layout["a"],) * len(vectors))


def _swiglu_local(kind: str):
    """The per-device call, looked up when traced (tests run the partitioning on the CPU with an emulation)."""
    return {"backward": _swiglu_backward_local, "forward": _swiglu_forward_local,
            "backward_amax": _swiglu_amax_local, "forward_amax": _swiglu_amax_local,
            "h_tiles": _swiglu_tiles_local, "h_tiles_t": _swiglu_tiles_local, "grad_tiles": _swiglu_tiles_local}[kind]


def _swiglu_partition(kind: str):
    def impl(cfg, *args):
        return _swiglu_local(kind)(cfg, *args)

    units = _swiglu_units(kind)
    with_amax = _SWIGLU_CALLS[kind][2][-1] == "a"

    def partition(cfg, mesh, arg_shapes, result_shape):
        dims = _swiglu_dims(mesh, arg_shapes[0], units)
        axes = tuple(a for d in dims for a in d)

        def lower_fn(*args):
            out = _swiglu_local(kind)(cfg, *args)
            if not with_amax:
                return tuple(out)
            *codes, amax = out
            return (*codes, lax.pmax(amax, axes) if axes else amax)

        results, arg_shardings = _swiglu_shardings(mesh, dims, kind)
        return mesh, lower_fn, results, arg_shardings

    def infer(cfg, mesh, arg_shapes, result_shape):
        return _swiglu_shardings(mesh, _swiglu_dims(mesh, arg_shapes[0], units), kind)[0]

    def rule(cfg, mesh, value_types, result_types):
        """Shardy rule: factors m and f in whole tiles (64 x 128, or 128 x 128 for the 1 x 128 tile kernels, whose
        scales hold one factor each: one scale per tile row segment); the small vectors replicated."""
        rows, cols = _dims_of(value_types[0])
        layouts = {"mf": "(m mt) (f ft)", "fm": "(f ft) (m mt)", "a": "a", "ms": "(m mt) f", "fs": "(f ft) m"}
        sizes = dict(mt=units[0], ft=units[1], m=rows // units[0], f=cols // units[1])
        n_mf, vectors, results = _SWIGLU_CALLS[kind]
        for r in results:  # a tile scale's axis is a whole-dimension factor: it takes no size
            sizes.pop({"ms": "f", "fs": "m"}.get(r, ""), None)
        args = [layouts["mf"]] * n_mf + list(vectors)
        return f"{', '.join(args)} -> {', '.join(layouts[r] for r in results)}", sizes

    return impl, partition, infer, rule


_swiglu_cps = {kind: _partitioned(*_swiglu_partition(kind)) for kind in _SWIGLU_CALLS}


@functools.cache
def _swiglu_vmappable(kind: str, cfg):
    """Call ``kind`` (cfg: its static config: the codes' dtype name(s), or the amax count) with a batching rule."""
    return _sequential_vmap(_swiglu_cps[kind], cfg, len(_SWIGLU_CALLS[kind][2]))


def swiglu_backward_fp8(gate, up, dh, scales, fmts, mult=None):
    """The SwiGLU backward of :mod:`mxprec.fused_mlp` with its per-tensor FP8 casts, in one CUDA kernel.

    The custom call ``mxprec_swiglu_backward_fp8`` (csrc/cuda_kernels/cuda_swiglu.cu): reads gate, up and dh
    once; computes h, d_gate, d_up with :func:`mxprec.fused_mlp.swiglu_backward`'s arithmetic; writes their FP8
    codes (x / scale, saturating, RNE) row-major (d_gate, d_up: Dgrad) and transposed (all three: Wgrad), and the
    three amaxes.

    Args:
      gate, up, dh: (M, F) bfloat16 / float16 (M a multiple of 64, F of 128).
      scales: float32 (3,): the dequantization scales of h, d_gate, d_up.
      fmts: three FP8 ElementFormats (h, d_gate, d_up).
      mult: None, or float32 scalars (m_g, m_u, m_d), each may be None (= 1): the kernel reads ``R(gate * m_g)``,
        ``R(up * m_u)`` and ``R(dh * m_d)`` (R: round to gate's dtype), the results of XLA's per-tensor FP8 dots before
        their scaling passes (:func:`mxprec.kernels.scaled_gemm.scaled_gemm_deferred`), so that those passes need
        not be written to memory.
    Returns:
      ``(h_t, d_gate, d_gate_t, d_up, d_up_t, amax_h, amax_d_gate, amax_d_up)``: codes in the formats' float8 dtypes,
      ``*_t`` (F, M), the others (M, F); the amaxes float32 () as ``mxprec.quantize.tensor_amax`` gives them.
      Sharding: elementwise over M and F (the ``*_t`` copies take the transposed sharding; the amaxes are
      ``pmax``-reduced across shards); a mesh axis that would leave a shard's M off a multiple of 64 or its F off a
      multiple of 128 is gathered instead. vmap: one call per example. Raises ValueError for shapes / dtypes /
      formats / multipliers the kernel does not take.
    """
    reason = _why_not_swiglu_operands(gate, {"up": up, "dh": dh})
    if len(fmts) != 3 or any(not fm.is_fp8 for fm in fmts):
        reason = reason or f"formats {[fm.name for fm in fmts]}: three FP8 formats expected"
    reason = reason or _why_not_multipliers(mult, 3)
    if reason:
        raise ValueError(f"mxprec.kernels.cuda.swiglu_backward_fp8: {reason}")
    require()
    dtypes = tuple(jnp.dtype(fm.dtype).name for fm in fmts)
    *codes, amax = _swiglu_vmappable("backward", dtypes)(gate, up, dh, jnp.asarray(scales, jnp.float32).reshape(3),
                                                      _multipliers(mult, 3))
    amax = jax.lax.bitcast_convert_type(amax, jnp.float32)
    return (*codes, amax[0], amax[1], amax[2])


def swiglu_forward_fp8(gate, up, scale, fmt, mult=None):
    """``h = swiglu_forward(gate, up)`` of :mod:`mxprec.fused_mlp` as FP8 codes ``h / scale`` and ``amax(h)``, one
    CUDA kernel (``mxprec_swiglu_forward_fp8``, csrc/cuda_kernels/cuda_swiglu.cu; h itself is not written).

    Args: gate, up (M, F) bfloat16 / float16 (the backward's shape rules); scale float32 (); fmt an FP8 format;
    mult None or (m_g, m_u) as in :func:`swiglu_backward_fp8`.
    Returns: (codes (M, F) in ``fmt``'s float8 dtype, amax float32 ()). Raises ValueError as
    :func:`swiglu_backward_fp8`.
    """
    reason = _why_not_swiglu_operands(gate, {"up": up})
    if not fmt.is_fp8:
        reason = reason or f"format {fmt.name}: FP8 expected"
    reason = reason or _why_not_multipliers(mult, 2)
    if reason:
        raise ValueError(f"mxprec.kernels.cuda.swiglu_forward_fp8: {reason}")
    require()
    codes, amax = _swiglu_vmappable("forward", jnp.dtype(fmt.dtype).name)(
        gate, up, jnp.asarray(scale, jnp.float32).reshape(1), _multipliers(mult, 2))
    return codes, jax.lax.bitcast_convert_type(amax, jnp.float32)[0]


def swiglu_forward_amax(gate, up, mult=None):
    """``amax(swiglu_forward(gate, up))`` (float32 ()), one CUDA kernel reading gate and up once
    (``mxprec_swiglu_forward_amax``): current scaling's first pass, whose scale :func:`swiglu_forward_fp8` then casts
    with. Operands and ``mult`` as :func:`swiglu_forward_fp8`; sharding: the amax ``pmax``-reduced across shards."""
    reason = _why_not_swiglu_operands(gate, {"up": up}) or _why_not_multipliers(mult, 2)
    if reason:
        raise ValueError(f"mxprec.kernels.cuda.swiglu_forward_amax: {reason}")
    require()
    (amax,) = _swiglu_vmappable("forward_amax", 1)(gate, up, _multipliers(mult, 2))
    return jax.lax.bitcast_convert_type(amax, jnp.float32)[0]


def swiglu_backward_amax(gate, up, dh, mult=None):
    """``(amax_h, amax_d_gate, amax_d_up)`` (float32 () each) of :func:`swiglu_backward_fp8`'s tensors, one CUDA
    kernel reading gate, up and dh once (``mxprec_swiglu_backward_amax``), no codes: current scaling's first pass.
    Operands and ``mult`` as :func:`swiglu_backward_fp8`."""
    reason = _why_not_swiglu_operands(gate, {"up": up, "dh": dh}) or _why_not_multipliers(mult, 3)
    if reason:
        raise ValueError(f"mxprec.kernels.cuda.swiglu_backward_amax: {reason}")
    require()
    (amax,) = _swiglu_vmappable("backward_amax", 3)(gate, up, dh, _multipliers(mult, 3))
    amax = jax.lax.bitcast_convert_type(amax, jnp.float32)
    return amax[0], amax[1], amax[2]


def why_not_swiglu_tiles(m: int, f: int, dtype, spec) -> str:
    """Empty string when the 1 x 128 tile SwiGLU kernels (:func:`swiglu_h_tiles`, :func:`swiglu_grad_tiles`) take
    (M, F) tensors of ``dtype`` quantized per ``spec``, else why not."""
    if not (isinstance(spec, TileScaling) and spec.tile == (1, _ROW_BLOCK) and spec.fmt.is_fp8):
        return f"spec {spec!r}: the tile kernels write FP8 TileScaling with tile (1, {_ROW_BLOCK})"
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return f"dtype {jnp.dtype(dtype)} (the kernels take bfloat16 / float16)"
    um, uf = _SWIGLU_TILES_UNITS
    if m <= 0 or f <= 0 or m % um or f % uf or m // um > 65535:
        return f"shape ({m}, {f}): M and F must be positive multiples of {um} (M at most 65535 * {um})"
    return ""


def _tiles_cfg(spec, transposed=False):
    return (jnp.dtype(spec.fmt.jnp_dtype).name, FMT[spec.fmt.name], int(spec.power_of_two), int(transposed))


def _why_not_swiglu_tile_operands(name, spec, gate, others) -> str:
    reason = _why_not_swiglu_operands(gate, others, lambda m, f, dtype: why_not_swiglu_tiles(m, f, dtype, spec))
    return f"mxprec.kernels.cuda.{name}: {reason}" if reason else ""


def swiglu_h_tiles(gate, up, spec: TileScaling, transposed: bool = False):
    """``h = swiglu_forward(gate, up)`` of :mod:`mxprec.fused_mlp` quantized per ``spec`` (FP8 1 x 128 tiles), one
    CUDA kernel (``mxprec_swiglu_h_tiles``; csrc/cuda_kernels/cuda_quantize.cu ``swiglu_tile_kernel``): h is rounded
    to the model's dtype in shared memory and never written.

    Args:
      gate, up: (M, F) bfloat16 / float16, M and F multiples of 128.
      spec: FP8 ``TileScaling`` with tile (1, 128).
      transposed: False: h's groups along F (wo's Fprop copy); True: groups of 128 along M, written K-major (wo's
        Wgrad copy).
    Returns:
      ``(codes, scale)``: (M, F) codes and float32 (M, F / 128) scales, or transposed (F, M) and (F, M / 128): the
      bits of ``mxprec.quantize(h, spec, axis=1)`` / of ``quantize(h.T, spec, axis=1)`` for transposed. Sharding:
      elementwise over M and F in whole 128 x 128 tiles (a mesh axis that would cut one is gathered); vmap: one call
      per example. Raises ValueError for shapes / dtypes / specs the kernel does not take.
    """
    reason = _why_not_swiglu_tile_operands("swiglu_h_tiles", spec, gate, {"up": up})
    if reason:
        raise ValueError(reason)
    require()
    kind = "h_tiles_t" if transposed else "h_tiles"
    return tuple(_swiglu_vmappable(kind, _tiles_cfg(spec, transposed))(gate, up))


def swiglu_grad_tiles(gate, up, dh, spec: TileScaling):
    """The SwiGLU backward's d_gate and d_up (:func:`mxprec.fused_mlp.swiglu_backward`) quantized per ``spec`` (FP8
    1 x 128 tiles), each as Dgrad's copy (groups along F) and Wgrad's (groups of 128 along M, K-major), one CUDA
    kernel (``mxprec_swiglu_grad_tiles``; ``swiglu_tile_kernel``): one sigmoid per element, the products rounded to
    the model's dtype in shared memory and never written.

    Args: gate, up, dh (M, F) bfloat16 / float16, M and F multiples of 128; spec as :func:`swiglu_h_tiles`.
    Returns:
      ``(d_gate, d_gate_scale, d_gate_t, d_gate_t_scale, d_up, d_up_scale, d_up_t, d_up_t_scale)``: codes (M, F) with
      float32 scales (M, F / 128), and transposed codes (F, M) with scales (F, M / 128), the bits of
      ``mxprec.quantize`` of the rounded tensors and of their transposes. Sharding and vmap as
      :func:`swiglu_h_tiles`. Raises ValueError as :func:`swiglu_h_tiles`.
    """
    reason = _why_not_swiglu_tile_operands("swiglu_grad_tiles", spec, gate, {"up": up, "dh": dh})
    if reason:
        raise ValueError(reason)
    require()
    return tuple(_swiglu_vmappable("grad_tiles", _tiles_cfg(spec))(gate, up, dh))
