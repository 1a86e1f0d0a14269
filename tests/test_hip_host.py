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
* the MX quantize kernel's per-block body is bit-exact with the reference quantizer + packing;
* the FP32-scaled quantize kernels' bodies (scaled_group.h: tensor, delayed, row, tile 1x128 /
  128x128 with plain / power-of-two scales, NVFP4), run thread by thread, are bit-exact with
  ref_tensor / ref_delayed / ref_row / ref_tile / ref_nvfp4 on random and adversarial inputs
  (round-half-even ties, zero groups, NaN / Inf).

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
from test_hip_isa import BITS, FP8_PAIRS, MX_PAIRS  # the gfx950 format tables, defined once

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "csrc", "hip_kernels", "tests", "hip_host_test.cc")
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ / c++ / clang++) on PATH")

FMTS = {"e4m3": R.E4M3, "e5m2": R.E5M2, "e2m3": R.E2M3, "e3m2": R.E3M2, "e2m1": R.E2M1}
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


# ------------------------------------------------------------------------------ FP32-scaled quantize

FP8 = ["e4m3", "e5m2"]


def _squant(exe, tmp_path, kind, fmt, x, tr=1, tc=1, pow2=False, scale_in=None):
    """Runs the gfx950_scaled_quantize.hip bodies on x (rows, L) -> (data, scale, amax, tensor_scale)."""
    rows, L = x.shape
    payload = x.astype(np.float32).tobytes() + (b"" if scale_in is None else np.float32(scale_in).tobytes())
    raw = _run(exe, tmp_path, ["squant", kind, fmt, rows, L, tr, tc, int(pow2)], payload)
    if kind == "nvfp4":
        nd, ns, sdt = rows * L // 2, rows * L // 16, np.uint8
    elif kind in ("tensor", "delayed"):
        nd, ns, sdt = rows * L, 1, np.float32
    elif kind == "row":
        nd, ns, sdt = rows * L, rows, np.float32
    else:
        nd, ns, sdt = rows * L, (rows // tr) * (L // tc), np.float32
    data = np.frombuffer(raw[:nd], np.uint8)
    sb = np.dtype(sdt).itemsize * ns
    scale = np.frombuffer(raw[nd : nd + sb], sdt)
    amax, ts = np.frombuffer(raw[nd + sb :], "<f4")
    assert len(raw) == nd + sb + 8
    return data, scale, amax, ts


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def _same_f32(a, b):
    """Bit-equal, or both NaN (NaN payload / sign are unspecified by the contract)."""
    a, b = np.asarray(a, np.float32).reshape(-1), np.asarray(b, np.float32).reshape(-1)
    return a.shape == b.shape and bool(np.all((_bits(a) == _bits(b)) | (np.isnan(a) & np.isnan(b))))


def _same_codes(got, want, fmt):
    """Equal codes, except that where the reference's code is a NaN any NaN code is accepted (its
    NaN code is 'the first NaN of the table', E5M2 0x7D; XLA's conversion, hence formats.h and
    the CPU lowering, writes 0x7E)."""
    got, want = np.asarray(got, np.uint8).reshape(-1), np.asarray(want, np.uint8).reshape(-1)
    if got.shape != want.shape:
        return False
    nan_w = np.isnan(R.decode(want, FMTS[fmt]))
    nan_g = np.isnan(R.decode(got, FMTS[fmt]))
    return bool(np.all(np.where(nan_w, nan_g, got == want)))


def _ties(fmt, n, rng):
    """n values exactly halfway between adjacent grid points (and the grid points), random signs:
    with a group amax of max_finite the scale is 1 and these are round-half-even ties."""
    g = R.grid(FMTS[fmt])
    g = np.unique(np.abs(g[np.isfinite(g)])).astype(np.float64)
    mids = (g[:-1] + g[1:]) / 2
    v = np.concatenate([mids, g])
    v = rng.choice(v, size=n) * rng.choice([-1.0, 1.0], size=n)
    return v.astype(np.float32)


def _adversarial(fmt, rows, L, rng):
    x = _x(rng, (rows, L))
    mf = np.float32(R.get_format(FMTS[fmt]).max_finite) if fmt in FMTS else np.float32(448)
    x[1] = _ties(fmt, L, rng)
    x[1, 3] = mf  # row amax == max_finite: scale 1, the ties stay ties
    x[2] = 0.0  # zero group
    x[2, 7] = -0.0
    x[3, :: L // 4] *= np.float32(2.0**60)  # saturating / wide-range values
    return x


def _amax_bits(x):
    a = R.ref_amax(x)
    return 0x7FC00000 if np.isnan(a) else int(_bits(a))


@pytest.mark.parametrize("fmt", FP8)
def test_tensor_quantize(exe, tmp_path, fmt):
    rng = np.random.default_rng(10)
    mf = np.float32(R.get_format(FMTS[fmt]).max_finite)
    cases = []
    x = _adversarial(fmt, 6, 96, rng)
    cases.append(x)
    t = _ties(fmt, 6 * 96, rng).reshape(6, 96)
    t[0, 0] = -mf  # tensor amax == max_finite: s = 1, every tie is a tie
    cases.append(t)
    cases.append(np.zeros((2, 32), np.float32))  # amax 0: s = 1, codes 0 (and -0)
    y = _x(rng, (3, 64))
    y[1, 9] = np.nan
    cases.append(y)  # NaN amax: s = NaN, every element NaN
    z = _x(rng, (3, 64))
    z[2, 4] = -np.inf
    cases.append(z)  # Inf amax: s = Inf, finite -> 0, Inf / Inf -> default NaN
    for x in cases:
        data, scale, amax, ts = _squant(exe, tmp_path, "tensor", fmt, x)
        codes, s = R.ref_tensor(x, FMTS[fmt])
        assert _same_codes(data, codes, fmt)
        assert _same_f32(scale, s)
        assert int(_bits(amax)) == _amax_bits(x) and ts == 1.0


@pytest.mark.parametrize("fmt", FP8)
def test_delayed_quantize(exe, tmp_path, fmt):
    rng = np.random.default_rng(11)
    x = _adversarial(fmt, 4, 64, rng)
    for s in [0.37, 1.0, 2.0**-10, 3.0e5, 0.0, np.inf, np.nan]:
        data, scale, amax, ts = _squant(exe, tmp_path, "delayed", fmt, x, scale_in=s)
        assert _same_codes(data, R.ref_delayed(x, FMTS[fmt], np.float32(s)), fmt), s
        assert _same_f32(scale, np.float32(s))  # the scale result is scale_in
        assert int(_bits(amax)) == _amax_bits(x) and ts == 1.0  # the amax pass still runs


@pytest.mark.parametrize("fmt", FP8)
def test_row_quantize(exe, tmp_path, fmt):
    rng = np.random.default_rng(12)
    x = _adversarial(fmt, 7, 160, rng)
    x[4, 11] = np.nan  # NaN row: s = NaN
    x[5, 20] = np.inf  # Inf row: s = Inf
    x[6] = _x(rng, 160) * np.float32(2.0**-20)
    data, scale, amax, ts = _squant(exe, tmp_path, "row", fmt, x)
    codes, s = R.ref_row(x, FMTS[fmt], axis=-1)
    assert _same_codes(data, codes, fmt)
    assert _same_f32(scale, s)
    assert int(_bits(amax)) == 0x7FC00000 and ts == 1.0


@pytest.mark.parametrize("pow2", [False, True])
@pytest.mark.parametrize("tr", [1, 128])
@pytest.mark.parametrize("fmt", FP8)
def test_tile_quantize(exe, tmp_path, fmt, tr, pow2):
    rng = np.random.default_rng(13)
    rows, L = (256, 384) if tr == 128 else (6, 384)
    x = _x(rng, (rows, L))
    mf = np.float32(R.get_format(FMTS[fmt]).max_finite)
    x[1, 128:256] = _ties(fmt, 128, rng)  # tile amax == max_finite (plain scale 1; rceil 2^0 too)
    x[1, 130] = mf
    x[2, 0:128] = 0.0  # zero tile (1x128); with 128x128 tiles x[0:128, 0:128] is not all zero
    if tr == 128:
        x[128:256, 256:384] = 0.0  # zero 128x128 tile
        x[130:256, 0:128] = _ties(fmt, 126 * 128, rng).reshape(126, 128)
        x[129, 5] = mf
    x[3, 300] = np.nan  # NaN tile: scale NaN (plain and power-of-two)
    x[4, 10] = -np.inf  # Inf amax: s = Inf, plain and power-of-two (the contract passes it through)
    data, scale, amax, ts = _squant(exe, tmp_path, "tile", fmt, x, tr=tr, tc=128, pow2=pow2)
    codes, s = R.ref_tile(x, FMTS[fmt], axis=-1, tile=(tr, 128), power_of_two=pow2)
    assert _same_codes(data, codes, fmt)
    assert _same_f32(scale, s)
    assert int(_bits(amax)) == 0x7FC00000 and ts == 1.0


def test_nvfp4_quantize(exe, tmp_path):
    rng = np.random.default_rng(14)
    rows, L = 6, 128
    x = _x(rng, (rows, L))
    x[0, 0:16] = 0.0  # zero block: s_b = 0, codes 0
    x[1, 16:32] *= np.float32(1e-6)  # s_b rounds to 0 in E4M3: eff == 0, codes 0
    x[2, 0:16] = _ties("e2m1", 16, rng)  # E2M1 ties (scale products are not powers of two here)
    x[3, :] = _ties("e2m1", L, rng) * np.float32(2.0**3)
    x[4, 32:48] = np.float32(-6.0 * 448.0)
    cases = [x]
    y = x.copy()
    y[5, 70] = np.nan  # s_t NaN
    cases.append(y)
    z = x.copy()
    z[5, 70] = np.inf  # s_t Inf
    cases.append(z)
    cases.append(np.zeros((2, 32), np.float32))
    # a tensor with amax 2688: s_t = 1, block scales are the E4M3 values of amax_b / 6 and
    # elements of blocks with amax 6 * 2^k are exact E2M1 ties
    w = (
        _ties("e2m1", 4 * 64, rng).reshape(4, 64) * np.exp2(rng.integers(0, 4, size=(4, 4)).repeat(16, 1))
    ).astype(np.float32)
    w[0, 0] = 2688.0
    cases.append(w)
    for x in cases:
        data, scale, amax, ts = _squant(exe, tmp_path, "nvfp4", "e2m1", x)
        codes, sbytes, s_t = R.ref_nvfp4(x, axis=-1)
        got = R.ref_unpack_fp4(data.reshape(x.shape[0], -1), axis=-1)
        # E2M1 has no NaN: where x / eff is NaN the code is unspecified (reference: 0; formats.h /
        # the CPU lowering: the sign alone). Those elements must still have zero magnitude.
        with np.errstate(all="ignore"):
            eff = (R.decode(sbytes, R.E4M3) * np.float32(s_t)).astype(np.float32)
            q = x.reshape(x.shape[0], -1, 16) / eff[..., None]
        nanq = np.isnan(q).reshape(x.shape) & (eff != 0).repeat(16, axis=-1)
        assert np.array_equal(np.where(nanq, 0, got), np.where(nanq, 0, codes))
        assert np.all((got[nanq] & 7) == 0)
        if not nanq.any():
            assert np.array_equal(data, R.ref_pack(codes, R.E2M1, axis=-1).reshape(-1).astype(np.uint8))
        assert _same_codes(scale, sbytes, "e4m3")  # E4M3 block scale codes
        assert _same_f32(ts, s_t)
        assert int(_bits(amax)) == _amax_bits(x)


# ------------------------------------------------------------------------------ kernel names


def test_kernel_names(exe):
    names = subprocess.run([exe, "names"], check=True, capture_output=True, text=True).stdout.split()
    assert len(names) == len(set(names)) == 9 * 2 * 3 + 4 * 4 * 3 + 5 * 2 * 3 + 1 + 3 * (2 + 3 * 2)
    from test_hip_isa import QUANT_KERNELS, _gemm_kernels  # the symbols the ISA test requires

    assert set(names) == {k[0] for k in _gemm_kernels()} | set(QUANT_KERNELS)
    assert "mxprec_gfx950_mx_gemm_16x16x128_e4m3_e5m2_bf16" in names
    assert "mxprec_gfx950_tile_gemm_1x128_128x128_e4m3_e4m3_f32" in names
    assert "mxprec_gfx950_mx_quantize_e2m1_rceil_bf16" in names
    assert "mxprec_gfx950_tile_quantize_e5m2_f16" in names and "mxprec_gfx950_nvfp4_quantize_f32" in names
