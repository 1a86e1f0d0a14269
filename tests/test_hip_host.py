"""Host-testable parts of the gfx950 HIP kernels (csrc/hip_kernels), run on the CPU.

We have no AMD GPU, so the kernels themselves are only compiled and ISA-checked
(tests/test_hip_isa.py). Their index math and numerics are plain C++ shared with the kernels
(mfma_layout.h, mx_block.h, gfx950_kernels.h); csrc/hip_kernels/tests/hip_host_test.cc drives
them, built here with g++, and this file compares the results with the numpy reference
(tests/reference, which imports nothing from mxprec):

* operand fragments: 32 packed FP8/FP6/FP4 codes loaded from a K-major packed row are the
  documented v8i32 MFMA register contents (element i at bits [i*bits, (i+1)*bits), FP4 low nibble
  first, FP6 4-in-3 LSB first), i.e. mxprec's packed layout needs no repacking;
* lane maps (operand row / K group per lane, accumulator row / column per register) are the
  documented ones and the accumulator map is a bijection onto the tile;
* the GEMM kernel's wave loop (tile assignment, per-lane fragment and scale-byte loads, partial
  K steps, M/N edges, epilogue scatter, tensor / tile scale application) with the scaled MFMA
  emulated in FP64 from its ISA definition equals the dequantized reference GEMM;
* the MX quantize kernel's per-block body is bit-exact with the reference quantizer + packing.

What this cannot show: that the hardware implements the documented layout (it is the CDNA4 ISA
guide's; see docs/backends/hip.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import reference as R

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "csrc", "hip_kernels", "tests", "hip_host_test.cc")
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ / c++ / clang++) on PATH")

FMTS = {"e4m3": R.E4M3, "e5m2": R.E5M2, "e2m3": R.E2M3, "e3m2": R.E3M2, "e2m1": R.E2M1}
BITS = {"e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4}
GEOM = {"16x16x128": (16, 16, 128), "32x32x64": (32, 32, 64)}


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hip_host") / "hip_host_test")
    cmd = [
        CXX,
        "-std=c++17",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-I" + os.path.join(ROOT, "csrc", "common"),
        "-I" + os.path.join(ROOT, "csrc", "hip_kernels"),
        SRC,
        "-o",
        out,
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def _run(exe, tmp_path, args, payload: bytes = b""):
    inp, outp = str(tmp_path / "in.bin"), str(tmp_path / "out.bin")
    with open(inp, "wb") as f:
        f.write(payload)
    a = [str(x) for x in args]
    if a[0] == "lanes":
        a = a + [outp]
    else:
        a = a + [inp, outp]
    r = subprocess.run([exe] + a, check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(outp, "rb") as f:
        return f.read()


def _packed(codes, fmt):
    return np.ascontiguousarray(R.ref_pack(codes, FMTS[fmt], axis=-1)).astype(np.uint8)


# ------------------------------------------------------------------------------ fragments


@pytest.mark.parametrize("fmt", list(FMTS))
def test_fragment_is_packed_layout(exe, tmp_path, fmt):
    rng = np.random.default_rng(0)
    bits = BITS[fmt]
    rows, K = 3, 128
    codes = rng.integers(0, 1 << bits, size=(rows, K), dtype=np.uint8)
    packed = _packed(codes, fmt)
    raw = _run(exe, tmp_path, ["frag", fmt, rows, K], codes.tobytes() + packed.tobytes())
    rec = np.frombuffer(raw, dtype=np.dtype([("load", "<u4", 8), ("pack", "<u4", 8), ("code", "u1", 32)]))
    assert rec.shape == (rows * K // 32,)
    for idx, (r, kb) in enumerate((r, kb) for r in range(rows) for kb in range(K // 32)):
        blk = codes[r, 32 * kb : 32 * kb + 32]
        # The documented MFMA operand: element i at bits [i*bits, (i+1)*bits) of a little-endian
        # 256-bit value; FP6 fills 6 dwords, FP4 4, the rest zero.
        word = sum(int(c) << (i * bits) for i, c in enumerate(blk))
        want = np.frombuffer(word.to_bytes(32, "little"), "<u4")
        # ... which is byte for byte mxprec's packed layout of those 32 elements.
        nbytes = 32 * bits // 8
        pb = packed[r, kb * nbytes : (kb + 1) * nbytes]
        assert np.array_equal(np.frombuffer(pb.tobytes() + bytes(32 - nbytes), "<u4"), want)
        assert np.array_equal(rec["load"][idx], want), (r, kb)
        assert np.array_equal(rec["pack"][idx], want), (r, kb)
        assert np.array_equal(rec["code"][idx], blk), (r, kb)


# ------------------------------------------------------------------------------ lane maps


@pytest.mark.parametrize("shape", list(GEOM))
def test_lane_maps(exe, tmp_path, shape):
    m, n, k = GEOM[shape]
    raw = _run(exe, tmp_path, ["lanes", shape])
    ops = np.frombuffer(raw[: 64 * 16], "<i4").reshape(64, 4)
    lanes = np.arange(64)
    assert np.array_equal(ops[:, 0], lanes % m)  # operand row
    assert np.array_equal(ops[:, 1], lanes // m)  # 32-element K group
    assert np.array_equal(ops[:, 2], 32 * (lanes // m))
    assert np.array_equal(ops[:, 3], k + 32 * (lanes // m))
    # every (row, 32-block) of the m x k operand tile is held by exactly one lane
    assert len({(r, c) for r, c in zip(ops[:, 0], ops[:, 2])}) == 64 == m * k // 32
    nreg = m * n // 64
    acc = np.frombuffer(raw[64 * 16 :], "<i4").reshape(64, nreg, 2)
    j = np.arange(nreg)[None, :]
    L = lanes[:, None]
    if shape == "16x16x128":
        want_row = 4 * (L // 16) + j
    else:
        want_row = 8 * (j // 4) + 4 * (L // 32) + j % 4
    assert np.array_equal(acc[..., 0], np.broadcast_to(want_row, (64, nreg)))
    assert np.array_equal(acc[..., 1], np.broadcast_to(L % n, (64, nreg)))
    cells = {(int(r), int(c)) for r, c in acc.reshape(-1, 2)}
    assert cells == {(r, c) for r in range(m) for c in range(n)}


# ------------------------------------------------------------------------------ GEMM wave loop


def _x(rng, shape):
    """Random values spread over many binades (several MX exponents per tensor)."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, size=shape))).astype(np.float32)


def _emulate(exe, tmp_path, kind, fa, fb, shape, B, M, N, K, a_parts, b_parts, bias=None, tra=1, trb=1):
    payload = b"".join(p.tobytes() for p in a_parts + b_parts)
    if bias is not None:
        payload += bias.astype(np.float32).tobytes()
    raw = _run(
        exe, tmp_path, ["gemm", kind, fa, fb, shape, B, M, N, K, tra, trb, int(bias is not None)], payload
    )
    return np.frombuffer(raw, "<f8").reshape(B, M, N)


def _check(out, a, b, bias, rtol):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.einsum("bmk,bnk->bmn", a64, b64)
    if bias is not None:
        ref = ref + bias.astype(np.float64)
    bound = rtol * np.einsum("bmk,bnk->bmn", np.abs(a64), np.abs(b64)) + 1e-300
    assert not np.isnan(out).any(), "an output element was not written (tile / scatter math)"
    err = np.abs(out - ref)
    assert (err <= bound).all(), (
        f"max err {err.max()} at {np.unravel_index(np.argmax(err - bound), err.shape)}"
    )


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


@pytest.mark.parametrize("shape", list(GEOM))
@pytest.mark.parametrize("fa,fb", MX_PAIRS)
def test_mx_gemm_wave_loop(exe, tmp_path, fa, fb, shape):
    # M, N not multiples of the tile; K = 160 leaves a partial last K step for both shapes.
    rng = np.random.default_rng(1)
    B, M, N, K = 2, 37, 21, 160
    ca, sa = R.ref_mx(_x(rng, (B, M, K)), FMTS[fa], axis=-1, rule="rceil")
    cb, sb = R.ref_mx(_x(rng, (B, N, K)), FMTS[fb], axis=-1, rule="floor")
    bias = rng.standard_normal(N).astype(np.float32)
    out = _emulate(
        exe, tmp_path, "mx", fa, fb, shape, B, M, N, K, [_packed(ca, fa), sa], [_packed(cb, fb), sb], bias
    )
    a = R.ref_dequant_mx(ca, sa, FMTS[fa], axis=-1)
    b = R.ref_dequant_mx(cb, sb, FMTS[fb], axis=-1)
    _check(out, a, b, bias, rtol=1e-12)  # power-of-two scales: exact products, FP64 sums


def test_mx_gemm_nan_scale(exe, tmp_path):
    rng = np.random.default_rng(2)
    B, M, N, K = 1, 16, 16, 128
    ca, sa = R.ref_mx(_x(rng, (B, M, K)), R.E4M3, axis=-1)
    cb, sb = R.ref_mx(_x(rng, (B, N, K)), R.E4M3, axis=-1)
    sa = sa.copy()
    sa[0, 5, 2] = 0xFF  # E8M0 NaN: row 5 of the output is NaN, nothing else
    out = _emulate(
        exe,
        tmp_path,
        "mx",
        "e4m3",
        "e4m3",
        "16x16x128",
        B,
        M,
        N,
        K,
        [_packed(ca, "e4m3"), sa],
        [_packed(cb, "e4m3"), sb],
    )
    assert np.isnan(out[0, 5]).all()
    assert not np.isnan(np.delete(out[0], 5, axis=0)).any()


FP8_PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]


@pytest.mark.parametrize("fa,fb", FP8_PAIRS)
def test_tensor_fp8_gemm_wave_loop(exe, tmp_path, fa, fb):
    rng = np.random.default_rng(3)
    B, M, N, K = 2, 19, 33, 256
    ca, sa = R.ref_tensor(_x(rng, (B, M, K)), FMTS[fa])
    cb, sb = R.ref_tensor(_x(rng, (B, N, K)), FMTS[fb])
    out = _emulate(
        exe, tmp_path, "tensor", fa, fb, "16x16x128", B, M, N, K, [ca, np.float32(sa)], [cb, np.float32(sb)]
    )
    a = R.ref_dequant_scaled(ca, FMTS[fa], sa)
    b = R.ref_dequant_scaled(cb, FMTS[fb], sb)
    _check(out, a, b, None, rtol=1e-6)  # epilogue (sum * s_a * s_b) vs rounded dequantized values


@pytest.mark.parametrize("tra,trb", [(1, 128), (128, 1), (1, 1)])
@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e5m2", "e4m3")])
def test_tile_fp8_gemm_wave_loop(exe, tmp_path, fa, fb, tra, trb):
    rng = np.random.default_rng(4)
    B, K = 1, 384
    M = 128 if tra == 128 else 40
    N = 128 if trb == 128 else 24
    ca, sa = R.ref_tile(_x(rng, (B, M, K)), FMTS[fa], axis=-1, tile=(tra, 128))
    cb, sb = R.ref_tile(_x(rng, (B, N, K)), FMTS[fb], axis=-1, tile=(trb, 128))
    out = _emulate(
        exe,
        tmp_path,
        "tile",
        fa,
        fb,
        "16x16x128",
        B,
        M,
        N,
        K,
        [ca, sa.astype(np.float32)],
        [cb, sb.astype(np.float32)],
        tra=tra,
        trb=trb,
    )
    a = R.ref_dequant_tile(ca, sa, FMTS[fa], axis=-1, tile=(tra, 128))
    b = R.ref_dequant_tile(cb, sb, FMTS[fb], axis=-1, tile=(trb, 128))
    _check(out, a, b, None, rtol=1e-6)


# ------------------------------------------------------------------------------ MX quantize


@pytest.mark.parametrize("rule", ["rceil", "floor"])
@pytest.mark.parametrize("fmt", list(FMTS))
def test_mx_quantize_block(exe, tmp_path, fmt, rule):
    rng = np.random.default_rng(5)
    rows, L = 6, 128
    x = _x(rng, (rows, L))
    x[0, 0:32] = 0.0  # all-zero block -> scale byte 0
    x[1, 32:64] *= np.float32(2.0**100)  # large exponents
    x[1, 64:96] *= np.float32(2.0**-100)  # small (normal) exponents
    x[2, 0:32] = np.float32(448.0)
    x[2, 5] = np.float32(500.0)  # the docs/numerics.md floor-vs-rceil example
    x[3, 40] = np.inf  # Inf block -> 0xFF, codes 0
    x[3, 100] = -np.inf
    x[4, 7] = -0.0
    x32 = x.astype(np.float32)
    raw = _run(exe, tmp_path, ["quant", fmt, rule, rows, L], x32.tobytes())
    codes, sbytes = R.ref_mx(x32, FMTS[fmt], axis=-1, rule=rule)
    want_data = _packed(codes, fmt)
    nd = want_data.size
    got_data = np.frombuffer(raw[:nd], np.uint8).reshape(want_data.shape)
    got_scale = np.frombuffer(raw[nd : nd + sbytes.size], np.uint8).reshape(sbytes.shape)
    got_amax = np.frombuffer(raw[nd + sbytes.size :], "<f4")[0]
    assert np.array_equal(got_scale, sbytes)
    assert np.array_equal(got_data, want_data)
    assert np.isinf(got_amax)  # Inf present
    # finite tensor: amax bits == reference amax
    x5 = x32[[0, 1, 2, 4, 5]]
    raw = _run(exe, tmp_path, ["quant", fmt, rule, 5, L], x5.tobytes())
    amax = np.frombuffer(raw[-4:], "<f4")[0]
    assert amax == R.ref_amax(x5)


def test_mx_quantize_nan(exe, tmp_path):
    x = np.ones((1, 64), np.float32)
    x[0, 40] = np.nan
    raw = _run(exe, tmp_path, ["quant", "e4m3", "rceil", 1, 64], x.tobytes())
    codes, sbytes = R.ref_mx(x, R.E4M3, axis=-1)
    assert np.array_equal(np.frombuffer(raw[:64], np.uint8), codes.reshape(-1))
    assert list(np.frombuffer(raw[64:66], np.uint8)) == [127 - 8, 0xFF] == list(sbytes.reshape(-1))
    assert np.frombuffer(raw[66:70], "<u4")[0] == 0x7FC00000  # canonical NaN amax


# ------------------------------------------------------------------------------ kernel names


def test_kernel_names(exe):
    names = subprocess.run([exe, "names"], check=True, capture_output=True, text=True).stdout.split()
    assert len(names) == len(set(names)) == 9 * 2 * 3 + 4 * 4 * 3 + 5 * 2 * 3 + 1
    from test_hip_isa import QUANT_KERNELS, _gemm_kernels  # the symbols the ISA test requires

    assert set(names) == {k[0] for k in _gemm_kernels()} | set(QUANT_KERNELS)
    assert "mxprec_gfx950_mx_gemm_16x16x128_e4m3_e5m2_bf16" in names
    assert "mxprec_gfx950_tile_gemm_1x128_128x128_e4m3_e4m3_f32" in names
    assert "mxprec_gfx950_mx_quantize_e2m1_rceil_bf16" in names
