"""Compile check of the HIP (ROCm) host side: libmxprec_hip.so and mxprec.kernels.hip.

We have no AMD GPU and no ROCm runtime that could drive one. What is checked here:

* the FFI handlers (csrc/hip_kernels/gfx950_handlers.hip) compile warning-free as HIP host code
  against the HIP runtime headers (Debian's ROCm 5.2 ``libamdhip64-dev``) and the XLA FFI headers,
  and export ``MxprecScaledGemmHip`` / ``MxprecQuantizeHip``;
* ``csrc/hip_kernels/build_host.sh`` links libmxprec_hip.so (handlers + kernels, host + gfx950
  device code) with ``-Wl,--no-undefined``: every kernel the handlers launch exists;
* the handlers reference exactly the kernels the device units define (the names
  gfx950_kernels.h spells);
* on CPU, ``mxprec.kernels.hip`` is unavailable and ``require()`` names what to build; its operand
  checks; and its lowering for platform "rocm" (jax.export, no ROCm needed) passes K-major buffers
  with the contract's shapes and attributes.

Nothing here runs a handler or a kernel. Skips (with the reason) without clang-22 / llvm-nm-22 or
the HIP headers. Tools: $MXPREC_HIP_CLANG / $MXPREC_HIP_NM / $MXPREC_HIP_OBJDUMP; headers: $HIP_INCLUDE.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIPDIR = os.path.join(ROOT, "csrc", "hip_kernels")
CLANG = os.environ.get("MXPREC_HIP_CLANG", "clang-22")
NM = os.environ.get("MXPREC_HIP_NM", "llvm-nm-22")
OBJDUMP = os.environ.get("MXPREC_HIP_OBJDUMP", "llvm-objdump-22")
HIP_INCLUDE = os.environ.get("HIP_INCLUDE", "")
_hip_header = os.path.join(HIP_INCLUDE or "/usr/include", "hip", "hip_runtime.h")

_missing = [t for t in (CLANG, NM, OBJDUMP) if shutil.which(t) is None]
if not os.path.isfile(_hip_header):
    _missing.append(f"HIP runtime headers ({_hip_header})")
needs_toolchain = pytest.mark.skipif(
    bool(_missing),
    reason=f"{' and '.join(_missing)} missing: the HIP host compile check needs Debian's clang-22 / llvm-22 / "
    "lld-22 and the HIP headers (`apt-get install -y clang-22 llvm-22 lld-22 libamdhip64-dev`)",
)

OUTS = ["f32", "bf16", "f16"]
MX_PAIRS = [
    ("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2"),
    ("e2m3", "e2m3"), ("e2m3", "e3m2"), ("e3m2", "e2m3"), ("e3m2", "e3m2"),
    ("e2m1", "e2m1"),
]  # fmt: skip
FP8_PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]


def expected_kernels() -> set[str]:
    """The kernel names gfx950_kernels.h's gemm_kernel_name / quantize_kernel_name /
    scaled_quantize_kernel_name / amax_kernel_name spell."""
    k = set()
    for fa, fb in MX_PAIRS:
        for shape in ("16x16x128", "32x32x64"):
            k |= {f"mxprec_gfx950_mx_gemm_{shape}_{fa}_{fb}_{o}" for o in OUTS}
    for fa, fb in FP8_PAIRS:
        k |= {f"mxprec_gfx950_tensor_gemm_16x16x128_{fa}_{fb}_{o}" for o in OUTS}
        for tra, trb in ((1, 128), (128, 1), (1, 1)):
            k |= {f"mxprec_gfx950_tile_gemm_{tra}x128_{trb}x128_{fa}_{fb}_{o}" for o in OUTS}
    for f in ("e4m3", "e5m2", "e2m3", "e3m2", "e2m1"):
        for r in ("rceil", "floor"):
            k |= {f"mxprec_gfx950_mx_quantize_{f}_{r}_{i}" for i in ("f32", "bf16", "f16")}
    for i in ("f32", "bf16", "f16"):
        k |= {f"mxprec_gfx950_amax_{i}", f"mxprec_gfx950_nvfp4_quantize_{i}"}
        for f in ("e4m3", "e5m2"):
            k |= {f"mxprec_gfx950_{kind}_quantize_{f}_{i}" for kind in ("tensor", "row", "tile")}
    return k | {"mxprec_gfx950_quantize_init"}


def _nm(path: str, *args: str) -> list[tuple[str, str]]:
    out = subprocess.run([NM, *args, path], check=True, capture_output=True, text=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            syms.append((parts[-2], parts[-1]))
    return syms


@pytest.fixture(scope="module")
def handler_object(tmp_path_factory):
    """gfx950_handlers.hip compiled as HIP host code, -Wall -Werror (what build_host.sh compiles)."""
    out = str(tmp_path_factory.mktemp("hip_handlers") / "gfx950_handlers.o")
    inc = ["-isystem", HIP_INCLUDE] if HIP_INCLUDE else []
    cmd = [
        CLANG, "-x", "hip", "--offload-arch=gfx950", "--cuda-host-only", "-nogpulib",
        "-D__AMDGCN_WAVEFRONT_SIZE=64", *inc, "-std=c++17", "-O1", "-fPIC", "-fvisibility=hidden",
        "-Wall", "-Wextra", "-Werror", "-I" + os.path.join(ROOT, "csrc", "common"), "-I" + HIPDIR,
        "-isystem", jax.ffi.include_dir(), "-c", os.path.join(HIPDIR, "gfx950_handlers.hip"), "-o", out,
    ]  # fmt: skip
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-6000:]}"
    return out


@pytest.fixture(scope="module")
def hip_library(tmp_path_factory):
    """libmxprec_hip.so from csrc/hip_kernels/build_host.sh (host + gfx950 device code, ~20 s)."""
    out = tmp_path_factory.mktemp("hip_host_build")
    env = dict(os.environ, PYTHON=sys.executable, CLANG=CLANG, NM=NM)
    cmd = ["bash", os.path.join(HIPDIR, "build_host.sh"), str(out)]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return str(out / "libmxprec_hip.so")


@needs_toolchain
def test_handlers_compile_and_export_symbols(handler_object):
    syms = _nm(handler_object)
    defined = {n for t, n in syms if t == "T"}
    assert {"MxprecScaledGemmHip", "MxprecQuantizeHip"} <= defined
    # The handler table references exactly the kernels the device units define.
    used = {n for t, n in syms if t == "U" and n.startswith("mxprec_gfx950_")}
    assert used == expected_kernels()
    assert any(t == "U" and n == "hipLaunchKernel" for t, n in syms)


@needs_toolchain
def test_library_links_and_exports(hip_library):
    syms = _nm(hip_library, "-D", "--defined-only")
    text = {n for t, n in syms if t == "T"}
    assert text == {"MxprecScaledGemmHip", "MxprecQuantizeHip"}
    # Kernel handles (host-side symbols registered with the embedded gfx950 code object).
    handles = {n for t, n in syms if n.startswith("mxprec_gfx950_")}
    assert handles == expected_kernels()
    # The library embeds a gfx950 offload bundle.
    sections = subprocess.run([OBJDUMP, "-h", hip_library], check=True, capture_output=True, text=True).stdout
    assert ".hip_fatbin" in sections


# ----------------------------------------------------------------------------- Python wrapper


def test_unavailable_on_cpu():
    from mxprec.kernels import hip

    if jax.default_backend() != "cpu":
        pytest.skip("CPU-only check")
    assert hip.is_rocm() is False
    assert hip.available() is False
    with pytest.raises(RuntimeError, match=r"libmxprec_hip\.so.*build_host\.sh"):
        hip.require()


def _q(shape, spec, axis):
    """An abstract QTensor (ShapeDtypeStruct leaves): the checks and the lowering only need shapes."""
    import mxprec

    return jax.eval_shape(
        lambda x: mxprec.quantize(x, spec, axis=axis), jax.ShapeDtypeStruct(shape, jnp.float32)
    )


def test_why_unsupported():
    from mxprec.kernels import hip
    from mxprec.scaling import MXScaling, RowScaling, TensorScaling, TileScaling

    kw = {"check_library": False}
    mx8 = MXScaling(fmt="e4m3")
    assert hip.why_unsupported(_q((1, 32, 64), mx8, 2), _q((1, 64, 48), MXScaling(fmt="e5m2"), 1), **kw) == ""
    assert (
        hip.why_unsupported(
            _q((1, 32, 64), MXScaling(fmt="e2m1"), 2), _q((1, 48, 64), MXScaling(fmt="e2m1"), 2), **kw
        )
        == ""
    )
    assert "mixes element widths" in hip.why_unsupported(
        _q((1, 32, 64), mx8, 2), _q((1, 48, 64), MXScaling(fmt="e2m1"), 2), **kw
    )
    assert "mixed scaling kinds" in hip.why_unsupported(
        _q((1, 32, 64), mx8, 2), _q((1, 48, 64), TensorScaling(), 2), **kw
    )
    assert "RowScaling" in hip.why_unsupported(
        _q((1, 32, 64), RowScaling(), 2), _q((1, 48, 64), RowScaling(), 2), **kw
    )
    assert (
        hip.why_unsupported(
            _q((1, 32, 64), TensorScaling(), 2), _q((1, 64, 16), TensorScaling(fmt="e5m2"), 1), **kw
        )
        == ""
    )
    assert "multiple of 32" in hip.why_unsupported(
        _q((1, 32, 48), TensorScaling(), 2), _q((1, 16, 48), TensorScaling(), 2), **kw
    )
    t1, t128 = TileScaling(tile=(1, 128)), TileScaling(tile=(128, 128))
    assert hip.why_unsupported(_q((1, 16, 256), t1, 2), _q((1, 256, 128), t128, 1), **kw) == ""
    assert "not both 128x128" in hip.why_unsupported(
        _q((1, 128, 256), t128, 2), _q((1, 256, 128), t128, 1), **kw
    )
    assert "out_dtype" in hip.why_unsupported(
        _q((1, 32, 64), mx8, 2), _q((1, 48, 64), mx8, 2), out_dtype=jnp.int8, **kw
    )


def test_rocm_lowering_is_k_major(monkeypatch):
    """jax.export for platform "rocm" (no ROCm needed): contract-1 operands are transposed (data
    and scales) and the custom call gets the contract's K-major buffers and attributes."""
    from jax import export

    from mxprec.kernels import hip
    from mxprec.scaling import MXScaling, TileScaling

    monkeypatch.setitem(hip._state, "result", (object(), ""))  # pretend the library is registered
    checks = [export.DisabledSafetyCheck.custom_call(t) for t in ("mxprec_scaled_gemm", "mxprec_quantize")]

    def lower(f, *args):
        return export.export(jax.jit(f), platforms=["rocm"], disabled_checks=checks)(*args).mlir_module()

    lq = _q((2, 64, 128), MXScaling(fmt="e2m1"), 2)
    rq = _q((2, 128, 96), MXScaling(fmt="e2m1"), 1)
    text = lower(
        lambda a, b: hip.scaled_gemm(a, b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.bfloat16), lq, rq
    )
    call = next(line for line in text.splitlines() if "stablehlo.custom_call @mxprec_scaled_gemm" in line)
    assert (
        "lhs_contract = 2" in call
        and "rhs_contract = 2" in call
        and "lhs_kind = 4" in call
        and "rhs_fmt = 4" in call
    )
    assert "tensor<2x64x96xui8>) -> tensor<2x96x64xui8>" in text  # rhs FP4 data (B, K/2, N) -> (B, N, K/2)
    assert "tensor<2x4x96xf8E8M0FNU>) -> tensor<2x96x4xf8E8M0FNU>" in text  # rhs E8M0 scales
    assert re.search(r"-> tensor<2x64x96xbf16>", call)

    lt = _q((1, 16, 256), TileScaling(tile=(1, 128)), 2)
    rt = _q((1, 256, 128), TileScaling(tile=(128, 128)), 1)
    text = lower(
        lambda a, b: hip.scaled_gemm(a, b, lhs_contract=2, rhs_contract=1, out_dtype=jnp.float32), lt, rt
    )
    call = next(line for line in text.splitlines() if "stablehlo.custom_call @mxprec_scaled_gemm" in line)
    assert (
        "lhs_kind = 3" in call
        and "lhs_tile_rows = 1" in call
        and "rhs_tile_rows = 128" in call
        and "rhs_block = 128" in call
    )
    assert (
        "tensor<1x2x1xf32>) -> tensor<1x1x2xf32>" in text
    )  # rhs tile scales (B, K/128, N/128) -> (B, N/128, K/128)

    x = jax.ShapeDtypeStruct((3, 5, 64), jnp.bfloat16)
    text = lower(lambda v: hip.quantize(v, MXScaling(fmt="e3m2", scale_rule="floor")).data, x)
    call = next(line for line in text.splitlines() if "stablehlo.custom_call @mxprec_quantize" in line)
    assert "axis = 2" in call and "kind = 4" in call and "scale_rule = 1" in call and "fmt = 3" in call
    assert "tensor<3x5x48xui8>" in call and "tensor<3x5x2xf8E8M0FNU>" in call
