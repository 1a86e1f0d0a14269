"""Sanity tests of the numpy reference alone (tests/reference), against hand-computed values and
an independent bit-formula construction of each grid. No mxprec, no jax."""

import math
import os
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import reference as R

ALL = [R.E4M3, R.E5M2, R.E2M3, R.E3M2, R.E2M1]


def formula_grid(f):
    """Non-negative finite values from (ebits, mbits, bias), independent of ml_dtypes."""
    vals = []
    for e in range(2**f.ebits):
        for m in range(2**f.mbits):
            if e == 0:
                v = m / 2**f.mbits * 2.0 ** (1 - f.bias)
            else:
                v = (1 + m / 2**f.mbits) * 2.0 ** (e - f.bias)
            vals.append(v)
    vals = np.array(vals)
    if f.name == "E4M3":
        vals = vals[:-1]  # 0x7F is NaN
    if f.name == "E5M2":
        vals = vals[:-4]  # exponent 31: Inf / NaN
    return vals


@pytest.mark.parametrize("f", ALL, ids=repr)
def test_grid_matches_bit_formula(f):
    g = R.grid(f)
    np.testing.assert_array_equal(g, formula_grid(f))
    assert g[-1] == f.max_finite
    assert g[1] == f.min_subnormal
    assert g[2**f.mbits] == f.min_normal
    assert f.emax == math.floor(math.log2(f.max_finite))


def test_spec_table_constants():
    assert [f.max_finite for f in ALL] == [448, 57344, 7.5, 28, 6]
    assert [f.emax for f in ALL] == [8, 15, 2, 4, 2]
    assert [f.min_subnormal for f in ALL] == [2**-9, 2**-16, 0.125, 0.0625, 0.5]


def test_e2m1_grid_and_codes():
    np.testing.assert_array_equal(R.grid(R.E2M1), [0, 0.5, 1, 1.5, 2, 3, 4, 6])
    assert R.decode(np.array([0b0111]), R.E2M1)[0] == 6.0
    v = R.decode(np.array([0b1000]), R.E2M1)[0]
    assert v == 0 and np.signbit(v)


@pytest.mark.parametrize(
    "v,code",
    [
        (0.25, 0),  # tie 0 / 0.5 -> 0 (even)
        (0.75, 2),  # tie 0.5 / 1 -> 1.0
        (1.25, 2),  # tie 1 / 1.5 -> 1.0
        (1.75, 4),  # tie 1.5 / 2 -> 2.0
        (2.5, 4),  # tie 2 / 3 -> 2.0
        (3.5, 6),  # tie 3 / 4 -> 4.0
        (5.0, 6),  # tie 4 / 6 -> 4.0
        (5.0001, 7),
        (7.0, 7),  # saturate
        (1e30, 7),
        (-5.0, 0xE),
        (-0.1, 0x8),
        (-0.0, 0x8),
        (0.0, 0),
    ],
)
def test_e2m1_encode(v, code):
    assert R.encode(np.array([v]), R.E2M1)[0] == code


def test_e4m3_encode_hand():
    cases = {
        448.0: 0x7E,
        464.0: 0x7E,  # would round to 480 unclipped; clip first
        1e6: 0x7E,
        -1e6: 0xFE,
        np.inf: 0x7E,
        -np.inf: 0xFE,
        1.0: 0x38,
        1.0625: 0x38,  # tie 1 / 1.125 -> even (1.0)
        1.1875: 0x3A,  # tie 1.125 / 1.25 -> even (1.25)
        2.0**-9: 0x01,
        2.0**-10: 0x00,  # tie 0 / min_sub -> 0
        3 * 2.0**-10: 0x02,  # tie 2^-9 / 2^-8 -> 2^-8 (code 2)
        2.0**-10 * 1.0001: 0x01,
        256.0: 0x78,
        250.0: 0x78,
    }
    for v, c in cases.items():
        assert R.encode(np.array([v]), R.E4M3)[0] == c, v
    nan = R.encode(np.array([np.nan]), R.E4M3)[0]
    assert nan & 0x7F == 0x7F


def test_e5m2_encode_hand():
    assert R.encode(np.array([57344.0, 61440.0, 1e9, np.inf]), R.E5M2).tolist() == [0x7B] * 4
    assert R.encode(np.array([2.0**-16, 2.0**-17, 3 * 2.0**-17]), R.E5M2).tolist() == [1, 0, 2]


@pytest.mark.parametrize("f", ALL, ids=repr)
def test_encode_matches_ml_dtypes_cast_after_clip(f):
    """ml_dtypes float32 -> fmt casts are RNE; after clipping they must agree with the grid
    enumeration. Includes all midpoints (exact ties) and random values."""
    rng = np.random.default_rng(0)
    g = R.grid(f)
    mids = (g[1:] + g[:-1]) / 2
    near = np.concatenate([mids * (1 + 2.0**-20), mids * (1 - 2.0**-20)])
    rand = rng.standard_normal(20000) * np.exp2(rng.integers(-20, 18, 20000))
    v = np.concatenate([g, mids, near, rand, [0.0, 1e30]]).astype(np.float32)
    v = np.concatenate([v, -v])
    ours = R.encode(v, f)
    clipped = np.clip(v, -f.max_finite, f.max_finite)
    theirs = clipped.astype(f.dtype).view(np.uint8)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("f", ALL, ids=repr)
def test_ties_go_to_even_code(f):
    g = R.grid(f)
    mids = (g[1:] + g[:-1]) / 2
    codes = R.encode(mids, f)
    assert np.all(codes % 2 == 0)
    np.testing.assert_array_equal(np.abs(codes.astype(int) - np.arange(len(mids))) <= 1, True)


def test_decode_roundtrip():
    for f in ALL:
        codes = np.arange(2**f.bits, dtype=np.uint8)
        vals = R.decode(codes, f)
        ok = np.isfinite(vals)
        np.testing.assert_array_equal(R.encode(vals[ok], f), codes[ok])


# ----------------------------------------------------------------------------- scalings


def test_tensor_hand():
    x = np.array([896.0, -1.0, 0.0, 3.0], np.float32)
    codes, s = R.ref_tensor(x, R.E4M3)
    assert s == np.float32(2.0)
    np.testing.assert_array_equal(R.decode(codes, R.E4M3), [448, -0.5, 0, 1.5])
    codes, s = R.ref_tensor(np.zeros(4, np.float32), R.E4M3)
    assert s == 1 and np.all(codes == 0)
    codes, s = R.ref_tensor(np.array([1.0, np.nan], np.float32), R.E4M3)
    assert np.isnan(s)
    codes, s = R.ref_tensor(np.array([1.0, np.inf], np.float32), R.E5M2)
    assert np.isinf(s)
    assert np.all(np.isnan(R.ref_dequant_scaled(codes, R.E5M2, s)))


def test_tensor_scale_is_fp32_division():
    amax = np.float32(1000.1)
    x = np.array([amax, 1.0], np.float32)
    _, s = R.ref_tensor(x, R.E4M3)
    assert s == np.float32(amax / np.float32(448))
    assert s.dtype == np.float32


def test_delayed_update_hand():
    h = np.zeros(4, np.float32)
    s = np.float32(1)
    h, s = R.ref_delayed_update(h, s, 896.0, R.E4M3, "max", 0)
    assert h.tolist() == [896, 0, 0, 0] and s == 2
    h, s = R.ref_delayed_update(h, s, 448.0, R.E4M3, "max", 0)
    assert h.tolist() == [448, 896, 0, 0] and s == 2
    h2, s2 = R.ref_delayed_update(h, s, 224.0, R.E4M3, "most_recent", 1)
    assert h2.tolist() == [224, 448, 896, 0] and s2 == 1.0  # 224/448*2
    # zero / non-finite amax keep the previous scale
    for bad in (0.0, np.inf, np.nan):
        hh, ss = R.ref_delayed_update(np.zeros(3, np.float32), np.float32(5), bad, R.E4M3, "most_recent", 0)
        assert ss == 5
    hh, ss = R.ref_delayed_update(np.array([1, 2, 3], np.float32), np.float32(5), np.nan, R.E4M3, "max", 0)
    assert ss == 5 and np.isnan(hh[0]) and hh[1:].tolist() == [1, 2]
    # history roll drops the oldest
    hh, _ = R.ref_delayed_update(np.array([1, 2, 3], np.float32), np.float32(1), 7, R.E5M2, "max", 0)
    assert hh.tolist() == [7, 1, 2]


def test_row_hand():
    x = np.array([[448.0, 1.0], [0.0, 0.0], [1.0, -2.0]], np.float32)
    _codes, s = R.ref_row(x, R.E4M3, axis=-1)
    assert s.shape == (3, 1)
    np.testing.assert_array_equal(s[:, 0], np.array([1.0, 1.0, np.float32(2) / np.float32(448)], np.float32))
    _codes0, s0 = R.ref_row(x, R.E4M3, axis=0)
    assert s0.shape == (1, 2)


def test_tile_hand_loops():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 8)).astype(np.float32)
    # axis=-1, tile (2,4): row axis = 1
    codes, s = R.ref_tile(x, R.E4M3, axis=-1, tile=(2, 4))
    assert s.shape == (3, 2, 2)
    for b in range(3):
        for i in range(2):
            for j in range(2):
                blk = x[b, 2 * i : 2 * i + 2, 4 * j : 4 * j + 4]
                exp_s = np.float32(np.abs(blk).max()) / np.float32(448)
                assert s[b, i, j] == exp_s
                np.testing.assert_array_equal(
                    codes[b, 2 * i : 2 * i + 2, 4 * j : 4 * j + 4], R.encode(blk / exp_s, R.E4M3)
                )
    # axis=0: row axis = last axis (2)
    codes, s = R.ref_tile(x, R.E4M3, axis=0, tile=(4, 3))
    assert s.shape == (1, 4, 2)
    blk = x[:, 1, 4:8]
    assert s[0, 1, 1] == np.float32(np.abs(blk).max()) / np.float32(448)
    # power of two: rceil exponent
    codes, s = R.ref_tile(np.full((2, 4), 449.0, np.float32), R.E4M3, axis=-1, tile=(1, 4), power_of_two=True)
    assert np.all(s == 2.0)
    codes, s = R.ref_tile(np.full((2, 4), 448.0, np.float32), R.E4M3, axis=-1, tile=(1, 4), power_of_two=True)
    assert np.all(s == 1.0)
    codes, s = R.ref_tile(np.zeros((2, 4), np.float32), R.E4M3, axis=-1, tile=(1, 4), power_of_two=True)
    assert np.all(s == 1.0)


def test_mx_outlier_example():
    x = np.ones(32, np.float32)
    x[0] = 500
    codes, sb = R.ref_mx(x, R.E4M3, rule="floor")
    assert sb.tolist() == [127]
    assert R.decode(codes[:1], R.E4M3)[0] == 448
    codes, sb = R.ref_mx(x, R.E4M3, rule="rceil")
    assert sb.tolist() == [128]
    assert codes[0] == R.encode(np.array([250.0]), R.E4M3)[0]  # 250 -> 256 on the E4M3 grid
    assert R.decode(codes[1:2], R.E4M3)[0] == 0.5


@pytest.mark.parametrize(
    "f,amax,floor_byte,rceil_byte",
    [
        (R.E4M3, 1.0, 119, 119),
        (R.E4M3, 1.75, 119, 119),
        (R.E4M3, 1.875, 119, 120),
        (R.E4M3, 448.0, 127, 127),
        (R.E4M3, 449.0, 127, 128),
        (R.E5M2, 57344.0, 127, 127),
        (R.E5M2, 57345.0, 127, 128),
        (R.E2M1, 6.0, 127, 127),
        (R.E2M1, 7.0, 127, 128),
        (R.E2M1, 1.0, 125, 125),
        (R.E2M3, 7.5, 127, 127),
        (R.E2M3, 7.75, 127, 128),
        (R.E3M2, 28.0, 127, 127),
        (R.E3M2, 30.0, 127, 128),
        (R.E4M3, 2.0**-126, 0, 0),  # e = -134 clamps to -127
        (R.E4M3, 1e38, 126 - 8 + 127, 126 - 8 + 127),
    ],
)
def test_mx_scale_bytes_hand(f, amax, floor_byte, rceil_byte):
    x = np.zeros(32, np.float32)
    x[5] = -amax
    assert R.ref_mx(x, f, rule="floor")[1].tolist() == [floor_byte]
    assert R.ref_mx(x, f, rule="rceil")[1].tolist() == [rceil_byte]


@pytest.mark.parametrize("f", ALL, ids=repr)
def test_rceil_is_smallest_pow2(f):
    rng = np.random.default_rng(2)
    amax = (rng.random(2000) + 0.5) * np.exp2(rng.integers(-60, 60, 2000))
    amax = amax.astype(np.float32).astype(np.float64)
    e = R.mx_exponent(amax, f, "rceil")
    assert np.all(amax / np.exp2(e.astype(float)) <= f.max_finite)
    assert np.all(amax / np.exp2(e.astype(float) - 1) > f.max_finite)
    e0 = R.mx_exponent(amax, f, "floor")
    assert np.all((e - e0 >= 0) & (e - e0 <= 1))


def test_mx_special_blocks():
    x = np.ones((3, 32), np.float32)
    x[0, 3] = np.nan
    x[1, 7] = -np.inf
    x[2] = 0.0
    x[2, 4] = -0.0
    codes, sb = R.ref_mx(x, R.E4M3, axis=-1)
    assert sb[:, 0].tolist() == [255, 255, 0]
    assert np.all(codes == 0)
    d = R.ref_dequant_mx(codes, sb, R.E4M3)
    assert np.all(np.isnan(d[:2])) and np.all(d[2] == 0)


def test_mx_axis0_layout():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    c0, s0 = R.ref_mx(x, R.E2M1, axis=0)
    c1, s1 = R.ref_mx(x.T.copy(), R.E2M1, axis=-1)
    np.testing.assert_array_equal(c0, c1.T)
    np.testing.assert_array_equal(s0, s1.T)
    assert s0.shape == (2, 3)


def test_mx_dequant_close():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    c, s = R.ref_mx(x, R.E4M3, rule="rceil")
    d = R.ref_dequant_mx(c, s, R.E4M3)
    np.testing.assert_allclose(d, x, rtol=2**-3, atol=2.0**-9 * 4)


def test_nvfp4_hand():
    x = np.zeros(32, np.float32)
    x[0] = 2688.0  # s_t = 1
    x[16] = 3.0  # block amax 3 -> s_b = 0.5
    x[17] = -1.0
    codes, sb, ts = R.ref_nvfp4(x)
    assert ts == 1.0
    assert R.decode(sb, R.E4M3).tolist() == [448.0, 0.5]
    assert codes[0] == 7 and codes[16] == 7 and codes[17] == 0b1100  # -1/0.5 = -2 (code 4 | sign)
    d = R.ref_dequant_nvfp4(codes, sb, ts)
    assert d[0] == 2688 and d[16] == 3 and d[17] == -1
    codes, sb, ts = R.ref_nvfp4(np.zeros((2, 16), np.float32))
    assert ts == 1 and np.all(sb == 0) and np.all(codes == 0)


def test_nvfp4_tiny_block_scale_underflow():
    x = np.zeros(32, np.float32)
    x[0] = 1000.0
    x[16:] = -1e-6  # s_b underflows to 0 -> codes 0
    codes, sb, _ts = R.ref_nvfp4(x)
    assert sb[1] == 0 and np.all(codes[16:] == 0)


def test_pack_hand():
    assert R.ref_pack_fp4(np.array([1, 2, 3, 4], np.uint8)).tolist() == [0x21, 0x43]
    assert R.ref_pack_fp6(np.array([1, 2, 3, 4], np.uint8)).tolist() == [0x81, 0x30, 0x10]
    assert R.ref_pack_fp6(np.array([0x3F, 0, 0, 0], np.uint8)).tolist() == [0x3F, 0, 0]
    assert R.ref_pack_fp6(np.array([0, 0, 0, 0x3F], np.uint8)).tolist() == [0, 0, 0xFC]


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_pack_roundtrip(axis):
    rng = np.random.default_rng(5)
    c4 = rng.integers(0, 16, (8, 8, 8)).astype(np.uint8)
    c6 = rng.integers(0, 64, (8, 8, 8)).astype(np.uint8)
    p4 = R.ref_pack_fp4(c4, axis)
    p6 = R.ref_pack_fp6(c6, axis)
    assert p4.shape[axis] == 4 and p6.shape[axis] == 6
    np.testing.assert_array_equal(R.ref_unpack_fp4(p4, axis), c4)
    np.testing.assert_array_equal(R.ref_unpack_fp6(p6, axis), c6)


def test_sr_bounds():
    rng = np.random.default_rng(6)
    v = rng.standard_normal(10000) * 3
    u = rng.random(10000)
    c = R.encode_sr(v, R.E2M1, u)
    vals = R.decode(c, R.E2M1).astype(np.float64)
    g = R.grid(R.E2M1)
    a = np.minimum(np.abs(v), 6)
    lo = g[np.searchsorted(g, a, side="right") - 1]
    assert np.all((np.abs(vals) == lo) | (np.abs(vals) == g[np.minimum(np.searchsorted(g, a, side="right"), 7)]))
    # unbiased on average for a non-saturating value
    vv = np.full(200000, 2.3)
    cc = R.encode_sr(vv, R.E2M1, rng.random(vv.size))
    assert abs(R.decode(cc, R.E2M1).mean() - 2.3) < 0.01


def test_ml_dtypes_sanity():
    """Document the ml_dtypes behaviour the reference relies on / avoids."""
    assert np.array([1e9], np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)[0] & 0x7F == 0x7F  # NaN, not 448
    assert np.isinf(np.array([1e9], np.float32).astype(ml_dtypes.float8_e5m2).astype(np.float32)[0])
