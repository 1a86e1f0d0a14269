"""csrc/common/bf16_mul_certificate.h: the bf16 amaxes whose current scale lets one multiply give every FP8 code.

For a bf16 amax a and s = RN(a / max_finite), the CUDA per-tensor kernel (onchip_kernel) codes every bf16 x with
|x| <= a as fp8(RN(x * RN(1 / s))) instead of fp8(RN(x / s)) where bf16_mul_exact(a) holds. Here the masks are
proved again on the CPU, exhaustively: every bf16 x below a (both signs, 44 binades, down to where every code is a
signed zero), every significand of a, at several exponents of a (the masks must not depend on it). A compiled copy
of bf16_mul_exact is then checked against the masks for every bf16 pattern. The kernel path itself is checked on the
GPU (tests/test_cuda_quantize.py::test_current_scaling_every_bf16_value).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "csrc", "common", "bf16_mul_certificate.h")
FORMATS = {"E4M3": (ml_dtypes.float8_e4m3fn, 448.0), "E5M2": (ml_dtypes.float8_e5m2, 57344.0)}


def _header_masks() -> tuple[dict[str, int], int, int]:
    with open(HEADER) as f:
        text = f.read()
    masks = {}
    for name in FORMATS:
        lo = re.search(rf"kBf16MulExact{name}Lo = 0x([0-9a-f]+)ULL", text)
        hi = re.search(rf"kBf16MulExact{name}Hi = 0x([0-9a-f]+)ULL", text)
        assert lo and hi, f"{name}'s mask not found in {HEADER}"
        masks[name] = int(lo.group(1), 16) | (int(hi.group(1), 16) << 64)
    lo_e = int(re.search(r"kBf16MulExactMinExp = (-?\d+)", text).group(1))
    hi_e = int(re.search(r"kBf16MulExactMaxExp = (-?\d+)", text).group(1))
    return masks, lo_e, hi_e


def _codes(q: np.ndarray, dtype, fmax: float) -> np.ndarray:
    return np.clip(q, -fmax, fmax).astype(np.float32).astype(dtype).view(np.uint8)


def _proved_mask(name: str, exponent: int) -> int:
    """Bit m set where, for a = (1 + m / 128) * 2**exponent, fp8(RN(x * RN(1 / s))) == fp8(RN(x / s)) for every
    bf16 x with |x| <= a (s = RN(a / max_finite); numpy's float32 arithmetic is IEEE, round to nearest even)."""
    dtype, fmax = FORMATS[name]
    sig = 1 + np.arange(128, dtype=np.float64) / 128
    xs = np.concatenate([sig * 2.0 ** (exponent - k) for k in range(44)]).astype(np.float32)
    xs = np.concatenate([xs, -xs, np.zeros(1, np.float32), -np.zeros(1, np.float32)])
    assert np.array_equal(xs, xs.astype(ml_dtypes.bfloat16).astype(np.float32))  # bf16 values, all normal
    mask = 0
    for m in range(128):
        a = np.float32((1 + m / 128) * 2.0**exponent)
        s = a / np.float32(fmax)
        r = np.float32(1) / s
        x = xs[np.abs(xs) <= a]
        if np.array_equal(_codes(x * r, dtype, fmax), _codes(x / s, dtype, fmax)):
            mask |= 1 << m
    return mask


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_masks_are_the_proved_ones_at_every_exponent(name):
    masks, lo_e, hi_e = _header_masks()
    for exponent in (lo_e, -37, -1, 0, 1, 29, hi_e):
        assert _proved_mask(name, exponent) == masks[name], f"{name} at amax exponent {exponent}"
    assert 90 < masks[name].bit_count() < 128  # most significands, not all (m = 4 fails for both)


def test_proof_sees_a_wrong_code():
    """The check is not vacuous: a = 1.03125 (m = 4) has a bf16 x whose multiply code differs from the division's."""
    dtype, fmax = FORMATS["E4M3"]
    a = np.float32(1.03125)
    s = a / np.float32(fmax)
    x = (np.arange(1 << 15, dtype=np.uint32) << 16).view(np.float32)
    x = x[np.isfinite(x) & (x <= a)]
    assert (_codes(x * (np.float32(1) / s), dtype, fmax) != _codes(x / s, dtype, fmax)).sum() == 1
    assert not (_header_masks()[0]["E4M3"] >> 4) & 1


def test_compiled_predicate_matches_the_masks(tmp_path):
    """bf16_mul_exact (host build) for every 16-bit pattern as a bf16 amax, E4M3 / E5M2 / E2M3, and for amaxes
    that are not bf16 values."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    src = tmp_path / "check.cc"
    src.write_text(
        '#include <cstdio>\n#include "bf16_mul_certificate.h"\n'
        "int main() {\n"
        "  using mxprec::ElemFormat;\n"
        "  for (unsigned p = 0; p < 65536; ++p) {\n"
        "    const unsigned b = p << 16;\n"
        "    std::printf(\"%d%d%d\", mxprec::bf16_mul_exact(b, ElemFormat::kE4M3),\n"
        "                mxprec::bf16_mul_exact(b, ElemFormat::kE5M2), mxprec::bf16_mul_exact(b, ElemFormat::kE2M3));\n"
        "  }\n"
        "  std::printf(\"\\n%d\\n\", mxprec::bf16_mul_exact(0x3F800001u, ElemFormat::kE4M3));\n"
        "}\n"
    )
    exe = tmp_path / "check"
    subprocess.run([cxx, "-std=c++17", "-O1", "-I", os.path.dirname(HEADER), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    masks, lo_e, hi_e = _header_masks()
    got = np.frombuffer(out[0].encode(), np.uint8).reshape(65536, 3) - ord("0")
    p = np.arange(65536)
    e = ((p >> 7) & 0xFF) - 127
    ok_range = ((p >> 15) == 0) & (e >= lo_e) & (e <= hi_e)
    for col, name in enumerate(("E4M3", "E5M2")):
        bits = np.array([(masks[name] >> m) & 1 for m in range(128)])
        assert np.array_equal(got[:, col], (ok_range & (bits[p & 0x7F] == 1)).astype(np.uint8)), name
    assert not got[:, 2].any()  # other formats: never
    assert out[1] == "0"  # not a bf16 value
