"""ISA check of the gfx950 (MI355X) HIP kernels in csrc/hip_kernels.

We have no AMD GPU: this compiles the device code for gfx950 with a stock clang (Debian
``clang-22``, no ROCm; ``apt-get install -y clang-22 llvm-22 lld-22``), disassembles it with
``llvm-objdump-22`` and checks, per kernel symbol, that the scaled MFMA is there with the right
shape and format selectors (cbsz = A's format, blgp = B's; FP6 / FP4 operands in 6 / 4 VGPRs).
It fails if the instruction disappears (e.g. a refactor that falls back to a dequantize loop).
Skips when the toolchain is absent. Tools: $MXPREC_HIP_CLANG / $MXPREC_HIP_OBJDUMP override the
names. The four translation units compile in parallel.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIPDIR = os.path.join(ROOT, "csrc", "hip_kernels")
CLANG = os.environ.get("MXPREC_HIP_CLANG", "clang-22")
OBJDUMP = os.environ.get("MXPREC_HIP_OBJDUMP", "llvm-objdump-22")
# Same flags as csrc/hip_kernels/build.sh and the CMake MXPREC_BUILD_HIP section.
FLAGS = [
    "-x",
    "hip",
    "--offload-arch=gfx950",
    "--cuda-device-only",
    "--no-gpu-bundle-output",
    "-nogpulib",
    "-nogpuinc",
    "-include",
    "__clang_hip_runtime_wrapper.h",
    "-std=c++17",
    "-O3",
    "-I" + os.path.join(ROOT, "csrc", "common"),
    "-I" + HIPDIR,
]
SOURCES = [
    "gfx950_mx_gemm.hip",
    "gfx950_fp8_gemm.hip",
    "gfx950_mx_quantize.hip",
    "gfx950_scaled_quantize.hip",
]

_missing = [t for t in (CLANG, OBJDUMP) if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(
    bool(_missing),
    reason=f"{' and '.join(_missing)} not on PATH: the gfx950 ISA check needs Debian's clang-22 / llvm-22 "
    "(`apt-get install -y clang-22 llvm-22 lld-22`)",
)

CODE = {"e4m3": 0, "e5m2": 1, "e2m3": 2, "e3m2": 3, "e2m1": 4}
BITS = {"e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4}
OUTS = ["f32", "bf16", "f16"]
MX_PAIRS = [
    ("e4m3", "e4m3"),
    ("e4m3", "e5m2"),
    ("e5m2", "e4m3"),
    ("e5m2", "e5m2"),
    ("e2m3", "e2m3"),
    ("e2m3", "e3m2"),
    ("e3m2", "e2m3"),
    ("e3m2", "e3m2"),
    ("e2m1", "e2m1"),
]
FP8_PAIRS = MX_PAIRS[:4]
INSN = {"16x16x128": "v_mfma_scale_f32_16x16x128_f8f6f4", "32x32x64": "v_mfma_scale_f32_32x32x64_f8f6f4"}


def _gemm_kernels():
    """(symbol, shape, fa, fb) of every GEMM kernel (gfx950_kernels.h gemm_kernel_name)."""
    ks = []
    for fa, fb in MX_PAIRS:
        for shape in INSN:
            ks += [(f"mxprec_gfx950_mx_gemm_{shape}_{fa}_{fb}_{o}", shape, fa, fb) for o in OUTS]
    for fa, fb in FP8_PAIRS:
        ks += [(f"mxprec_gfx950_tensor_gemm_16x16x128_{fa}_{fb}_{o}", "16x16x128", fa, fb) for o in OUTS]
        for tra, trb in [(1, 128), (128, 1), (1, 1)]:
            ks += [
                (f"mxprec_gfx950_tile_gemm_{tra}x128_{trb}x128_{fa}_{fb}_{o}", "16x16x128", fa, fb)
                for o in OUTS
            ]
    return ks


INS = ("f32", "bf16", "f16")
MX_QUANT_KERNELS = [
    f"mxprec_gfx950_mx_quantize_{f}_{r}_{i}" for f in CODE for r in ("rceil", "floor") for i in INS
]
# gfx950_scaled_quantize.hip (gfx950_kernels.h scaled_quantize_kernel_name / amax_kernel_name)
AMAX_KERNELS = [f"mxprec_gfx950_amax_{i}" for i in INS]
TENSOR_QUANT_KERNELS = [f"mxprec_gfx950_tensor_quantize_{f}_{i}" for f in ("e4m3", "e5m2") for i in INS]
GROUP_QUANT_KERNELS = [
    f"mxprec_gfx950_{k}_quantize_{f}_{i}" for k in ("row", "tile") for f in ("e4m3", "e5m2") for i in INS
]
NVFP4_QUANT_KERNELS = [f"mxprec_gfx950_nvfp4_quantize_{i}" for i in INS]
SCALED_QUANT_KERNELS = AMAX_KERNELS + TENSOR_QUANT_KERNELS + GROUP_QUANT_KERNELS + NVFP4_QUANT_KERNELS
QUANT_KERNELS = MX_QUANT_KERNELS + ["mxprec_gfx950_quantize_init"] + SCALED_QUANT_KERNELS


@pytest.fixture(scope="module")
def disasm(tmp_path_factory):
    """{symbol: disassembly text} over the code objects (the translation units compile in parallel)."""
    out = tmp_path_factory.mktemp("hip_isa")
    procs = []
    for src in SOURCES:
        co = str(out / (src.replace(".hip", ".co")))
        procs.append(
            (
                co,
                subprocess.Popen(
                    [CLANG] + FLAGS + ["-c", os.path.join(HIPDIR, src), "-o", co],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    funcs = {}
    for co, p in procs:
        _, err = p.communicate()
        assert p.returncode == 0, f"{CLANG} failed for {co}:\n{err}"
        text = subprocess.run([OBJDUMP, "-d", co], check=True, capture_output=True, text=True).stdout
        for m in re.finditer(
            r"^[0-9a-f]+ <([^>]+)>:\n(.*?)(?=^[0-9a-f]+ <|\Z)", text, re.DOTALL | re.MULTILINE
        ):
            funcs[m.group(1)] = m.group(2)
        nm = shutil.which(OBJDUMP.replace("objdump", "nm"))
        if nm:  # a code object with unresolved calls (e.g. a device-library math function) would not load
            undef = subprocess.run([nm, "-u", co], check=True, capture_output=True, text=True).stdout.strip()
            assert undef == "", f"undefined symbols in {co}: {undef}"
    return funcs


@pytest.mark.parametrize(
    "name,shape,fa,fb", [pytest.param(*k, id=k[0][len("mxprec_gfx950_") :]) for k in _gemm_kernels()]
)
def test_gemm_uses_scaled_mfma(disasm, name, shape, fa, fb):
    assert name in disasm, f"kernel {name} not in the code object"
    lines = [ln for ln in disasm[name].splitlines() if "v_mfma" in ln]
    assert lines, f"{name}: no MFMA instruction"
    for ln in lines:
        assert INSN[shape] in ln, f"{name}: expected {INSN[shape]}, got: {ln.strip()}"
        cbsz = re.search(r"cbsz:(\d+)", ln)
        blgp = re.search(r"blgp:(\d+)", ln)
        assert (int(cbsz.group(1)) if cbsz else 0) == CODE[fa], f"{name}: cbsz in {ln.strip()}"
        assert (int(blgp.group(1)) if blgp else 0) == CODE[fb], f"{name}: blgp in {ln.strip()}"
        # operands vdst, srcA, srcB, ...: a 32-element fragment is BITS dwords (FP8 8, FP6 6, FP4 4)
        regs = re.findall(r"v\[(\d+):(\d+)\]", ln)
        (a0, a1), (b0, b1) = regs[1], regs[2]
        assert int(a1) - int(a0) + 1 == BITS[fa], f"{name}: A operand {regs[1]} in {ln.strip()}"
        assert int(b1) - int(b0) + 1 == BITS[fb], f"{name}: B operand {regs[2]} in {ln.strip()}"


def test_quantize_kernels(disasm):
    for name in QUANT_KERNELS:
        assert name in disasm, f"kernel {name} not in the code object"
    for name in MX_QUANT_KERNELS:
        assert "global_atomic_umax" in disasm[name], f"{name}: tensor amax atomic missing"


def test_scaled_quantize_kernels(disasm):
    """tensor / row / tile / nvfp4 / amax kernels: present, amaxes reduced in LDS then one global
    atomic umax per workgroup, FP32 divisions correctly rounded (v_div_fixup_f32: the IEEE division
    the contract needs, not a reciprocal multiply)."""
    for name in SCALED_QUANT_KERNELS:
        assert name in disasm, f"kernel {name} not in the code object"
    for name in AMAX_KERNELS + GROUP_QUANT_KERNELS:
        assert "global_atomic_umax" in disasm[name], f"{name}: tensor amax atomic missing"
        assert "ds_max_u32" in disasm[name] or "ds_max_rtn_u32" in disasm[name], f"{name}: LDS amax missing"
        assert "s_barrier" in disasm[name], f"{name}: workgroup barrier missing"
    for name in TENSOR_QUANT_KERNELS + GROUP_QUANT_KERNELS + NVFP4_QUANT_KERNELS:
        assert "v_div_fixup_f32" in disasm[name], f"{name}: no IEEE FP32 division"
    for name in TENSOR_QUANT_KERNELS + NVFP4_QUANT_KERNELS:  # the amax comes from the amax pass
        assert "global_atomic" not in disasm[name], f"{name}: unexpected atomic"


def test_no_other_kernels(disasm):
    """The objects hold exactly the kernels listed here, which tests/test_hip_host.py checks are
    exactly the names the C++ host selector (gfx950_kernels.h) produces."""
    expected = {k[0] for k in _gemm_kernels()} | set(QUANT_KERNELS)
    kernels = {s for s in disasm if s.startswith("mxprec_gfx950_")}
    assert kernels == expected
