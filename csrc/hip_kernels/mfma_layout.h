// gfx950 (MI355X) scaled-MFMA operand / scale / accumulator layout and tile index math.
//
// Plain C++17 (every function MXPREC_HD): the HIP kernels in gfx950_mx_gemm.hip call these same
// functions, and csrc/hip_kernels/tests/hip_host_test.cc runs them on the CPU against the numpy
// reference (tests/test_hip_host.py). Nothing here needs ROCm.
//
// The instructions (CDNA4 ISA, "V_MFMA_SCALE_F32_{16X16X128,32X32X64}_F8F6F4"):
//   D(MxN, f32) = (A(MxK) * 2^(scaleA - 127)) x (B(KxN) * 2^(scaleB - 127)) + C
// with one E8M0 scale byte per lane for A and one for B. Operand layout (one wave = 64 lanes):
//   16x16x128: lane l holds row (A: m, B: n) l % 16 and the 32 consecutive K elements
//              [32 * (l / 16), 32 * (l / 16) + 32) of the 128-K step -> 4 K groups.
//   32x32x64:  lane l holds row l % 32 and K elements [32 * (l / 32), +32) -> 2 K groups.
// So each lane's 32 elements are exactly one MX block of 32, and its scale byte is that block's
// E8M0 scale. The 32 elements occupy a v8i32 densely, element i at bits [i*bits, i*bits + bits)
// of the little-endian 256-bit value: FP8 -> 8 dwords, FP6 -> the low 6 dwords, FP4 -> the low 4
// (upper dwords ignored; we zero them). This is byte-for-byte the mxprec packed layout of 32
// consecutive K elements (FP4 element 2i in the low nibble, FP6 4-in-3 bytes LSB first), so a
// K-major packed row is loaded with plain dword loads, no repacking.
// Accumulator (4 / 16 f32 per lane):
//   16x16: register j of lane l = D[4 * (l / 16) + j][l % 16]
//   32x32: register j of lane l = D[8 * (j / 4) + 4 * (l / 32) + j % 4][l % 32]
// The format selectors (cbsz for A, blgp for B) use mxprec's ElemFormat numbering
// (0 E4M3, 1 E5M2, 2 E2M3, 3 E3M2, 4 E2M1).
//
// NOT verified on hardware (we have no AMD GPU): the layout above is the documented one (CDNA4
// ISA guide; the same mapping is used by LLVM/MLIR's amdgpu.scaled_mfma lowering, CK and Triton).
#ifndef MXPREC_CSRC_HIP_KERNELS_MFMA_LAYOUT_H_
#define MXPREC_CSRC_HIP_KERNELS_MFMA_LAYOUT_H_

#include <cstdint>
#include <cstring>

#include "formats.h"
#include "scaled_gemm.h"

namespace mxprec {
namespace hip {

constexpr int32_t kWaveSize = 64;        // gfx9 wave64
constexpr int32_t kMxBlock = 32;         // elements per lane fragment == MX block
constexpr int32_t kFragmentDwords = 8;   // v8i32 operand
constexpr int32_t kUnitScaleByte = 127;  // E8M0 2^0

enum class MfmaShape : int32_t {
  k16x16x128 = 0,  // __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4, v4f32 accumulator
  k32x32x64 = 1,   // __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4, v16f32 accumulator
};

struct MfmaGeom {
  int32_t m, n, k;   // instruction tile
  int32_t kgroups;   // 32-element K groups per instruction (= k / 32 = 64 / m)
  int32_t acc_regs;  // f32 accumulator registers per lane (= m * n / 64)
};

MXPREC_HD constexpr MfmaGeom mfma_geom(MfmaShape s) {
  return s == MfmaShape::k16x16x128 ? MfmaGeom{16, 16, 128, 4, 4} : MfmaGeom{32, 32, 64, 2, 16};
}

// cbsz / blgp value of a format (the MFMA's own numbering equals ElemFormat's).
MXPREC_HD constexpr int32_t mfma_format_code(ElemFormat f) { return static_cast<int32_t>(f); }
static_assert(mfma_format_code(ElemFormat::kE4M3) == 0 && mfma_format_code(ElemFormat::kE5M2) == 1 &&
                  mfma_format_code(ElemFormat::kE2M3) == 2 && mfma_format_code(ElemFormat::kE3M2) == 3 &&
                  mfma_format_code(ElemFormat::kE2M1) == 4,
              "MFMA cbsz/blgp numbering must equal mxprec's ElemFormat");

// Dwords of the v8i32 a format fills (32 elements * bits / 32).
MXPREC_HD constexpr int32_t fragment_dwords(ElemFormat f) { return format_bits(f); }
// Packed bytes of one 32-element fragment (FP8 32, FP6 24, FP4 16).
MXPREC_HD constexpr int32_t fragment_bytes(ElemFormat f) { return 4 * fragment_dwords(f); }

// ------------------------------------------------------------------------------ operand lanes

// Row of the operand tile (A: m, B: n) that lane `lane` holds.
MXPREC_HD constexpr int32_t lane_row(int32_t lane, MfmaShape s) { return lane % mfma_geom(s).m; }
// 32-element K group (0 .. kgroups-1) of the lane within one instruction's K.
MXPREC_HD constexpr int32_t lane_kgroup(int32_t lane, MfmaShape s) { return lane / mfma_geom(s).m; }
// First K element (logical, unpacked) of the lane's fragment in K step `kstep`.
MXPREC_HD constexpr int64_t lane_k0(int32_t lane, int64_t kstep, MfmaShape s) {
  return kstep * mfma_geom(s).k + static_cast<int64_t>(kMxBlock) * lane_kgroup(lane, s);
}
// Number of K steps for a contraction of K elements (K a multiple of 32; a partial last step
// zero-fills the lanes whose fragment lies beyond K).
MXPREC_HD constexpr int64_t num_ksteps(int64_t K, MfmaShape s) {
  return (K + mfma_geom(s).k - 1) / mfma_geom(s).k;
}

// Byte offset of logical element k0 (a multiple of 32) in a K-major packed row.
MXPREC_HD constexpr int64_t packed_offset(int64_t k0, ElemFormat f) { return packed_len(k0, f); }

// Index of the E8M0 scale byte of (row, k0) in a K-major (rows, K/32) scale matrix, i.e. the
// contract's mx scale (B, rows, K/32) for *_contract = 2 with `row` counted across the batch.
MXPREC_HD constexpr int64_t scale_index(int64_t row, int64_t k0, int64_t K) {
  return row * (K / kMxBlock) + k0 / kMxBlock;
}

// The lane's fragment: 32 elements starting at logical k0 of a K-major packed row, loaded as
// little-endian dwords (the row's bytes are already in the MFMA order). Dwords past the format's
// fragment_dwords are zero. `row` must be 4-byte aligned at packed_offset(k0) (true for K % 32 ==
// 0 and a 4-byte aligned buffer: offsets are multiples of 32 / 24 / 16 bytes).
MXPREC_HD inline void load_fragment(const uint8_t* row, int64_t k0, ElemFormat f, uint32_t regs[kFragmentDwords]) {
  const uint8_t* p = row + packed_offset(k0, f);
  const int32_t nd = fragment_dwords(f);
#if defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
  const uint32_t* p32 = reinterpret_cast<const uint32_t*>(p);
  for (int32_t i = 0; i < kFragmentDwords; ++i) regs[i] = i < nd ? p32[i] : 0u;
#else
  for (int32_t i = 0; i < kFragmentDwords; ++i) {
    uint32_t w = 0;
    if (i < nd) std::memcpy(&w, p + 4 * i, 4);  // host: little-endian (x86-64 / aarch64)
    regs[i] = w;
  }
#endif
}

// The lane's operand for one K step, as the GEMM kernel loads it: the fragment of row
// `row_global` (batch folded into the row: b * rows + row) at logical k0, and its E8M0 scale byte
// from the K-major (rows, K/32) scale matrix when `scales` is non-null. A lane outside the
// operand (row_ok false, or k0 >= K in a partial last K step) gets zeros and the unit scale 127,
// contributing exactly 0.
MXPREC_HD inline void lane_fragment(const uint8_t* data, const uint8_t* scales, int64_t row_global, bool row_ok,
                                    int64_t k0, int64_t K, ElemFormat f, uint32_t regs[kFragmentDwords],
                                    int32_t* scale_byte) {
  *scale_byte = kUnitScaleByte;
  if (row_ok && k0 < K) {
    load_fragment(data + row_global * packed_len(K, f), k0, f, regs);
    if (scales != nullptr) *scale_byte = scales[scale_index(row_global, k0, K)];
  } else {
    for (int32_t i = 0; i < kFragmentDwords; ++i) regs[i] = 0u;
  }
}

// The same fragment built from 32 element codes with formats.h's packers (reference path).
MXPREC_HD inline void pack_fragment(const uint8_t codes[kMxBlock], ElemFormat f, uint32_t regs[kFragmentDwords]) {
  uint8_t bytes[4 * kFragmentDwords] = {};
  const int32_t bits = format_bits(f);
  if (bits == 8) {
    for (int32_t i = 0; i < kMxBlock; ++i) bytes[i] = codes[i];
  } else if (bits == 4) {
    for (int32_t i = 0; i < kMxBlock / 2; ++i) bytes[i] = pack_fp4(codes[2 * i], codes[2 * i + 1]);
  } else {
    for (int32_t g = 0; g < kMxBlock / 4; ++g) pack_fp6(codes + 4 * g, bytes + 3 * g);
  }
  for (int32_t i = 0; i < kFragmentDwords; ++i)
    regs[i] = static_cast<uint32_t>(bytes[4 * i]) | (static_cast<uint32_t>(bytes[4 * i + 1]) << 8) |
              (static_cast<uint32_t>(bytes[4 * i + 2]) << 16) | (static_cast<uint32_t>(bytes[4 * i + 3]) << 24);
}

// Code of element i (0..31) of a fragment: bits [i*bits, i*bits + bits) of the 256-bit value.
MXPREC_HD inline uint8_t fragment_code(const uint32_t regs[kFragmentDwords], int32_t i, ElemFormat f) {
  const int32_t bits = format_bits(f);
  const int32_t bit = i * bits;
  const int32_t d = bit / 32, o = bit % 32;
  uint64_t w = regs[d];
  if (d + 1 < kFragmentDwords) w |= static_cast<uint64_t>(regs[d + 1]) << 32;
  return static_cast<uint8_t>((w >> o) & ((1u << bits) - 1u));
}

// ------------------------------------------------------------------------------ accumulator

// Output element (row, col) of the instruction tile held by accumulator register j of lane.
MXPREC_HD constexpr int32_t acc_row(int32_t lane, int32_t j, MfmaShape s) {
  return s == MfmaShape::k16x16x128 ? 4 * (lane / 16) + j : 8 * (j / 4) + 4 * (lane / 32) + j % 4;
}
MXPREC_HD constexpr int32_t acc_col(int32_t lane, int32_t /*j*/, MfmaShape s) { return lane % mfma_geom(s).n; }

// ------------------------------------------------------------------------------ tiles

// One wave computes one (m x n) output tile of one batch index. Waves are numbered globally
// (workgroup * waves_per_group + wave); tiles are ordered batch-major, then tm, then tn (tn
// fastest, so the waves of one workgroup share A rows).
struct TileCoord {
  int64_t b, tm, tn;  // batch index, tile row, tile column
  bool valid;         // false for the padding waves of the last workgroup
};

MXPREC_HD constexpr int64_t tiles_m(int64_t M, MfmaShape s) { return (M + mfma_geom(s).m - 1) / mfma_geom(s).m; }
MXPREC_HD constexpr int64_t tiles_n(int64_t N, MfmaShape s) { return (N + mfma_geom(s).n - 1) / mfma_geom(s).n; }
MXPREC_HD constexpr int64_t num_tiles(int64_t batch, int64_t M, int64_t N, MfmaShape s) {
  return batch * tiles_m(M, s) * tiles_n(N, s);
}
// Workgroups to launch for `waves_per_group` waves (tiles) per workgroup.
MXPREC_HD constexpr int64_t num_workgroups(int64_t batch, int64_t M, int64_t N, MfmaShape s, int32_t waves_per_group) {
  return (num_tiles(batch, M, N, s) + waves_per_group - 1) / waves_per_group;
}

MXPREC_HD inline TileCoord tile_of_wave(int64_t wave_global, int64_t batch, int64_t M, int64_t N, MfmaShape s) {
  const int64_t tm_n = tiles_m(M, s), tn_n = tiles_n(N, s);
  TileCoord t{0, 0, 0, false};
  if (wave_global < 0 || tm_n == 0 || tn_n == 0 || wave_global >= batch * tm_n * tn_n) return t;
  t.b = wave_global / (tm_n * tn_n);
  const int64_t r = wave_global % (tm_n * tn_n);
  t.tm = r / tn_n;
  t.tn = r % tn_n;
  t.valid = true;
  return t;
}

// ------------------------------------------------------------------------------ 128-K tile scales

// Per-K-step FP32 scale lookup for TileScaling operands (1x128 / 128x128; contract kind "tile",
// blk == 128 == the 16x16x128 instruction's K): (B, rows / tr, K / 128) row-major.
MXPREC_HD constexpr int64_t tile_scale_index(int64_t b, int64_t row, int64_t kstep, int64_t rows, int64_t K, int32_t tr) {
  return (b * (rows / tr) + row / tr) * (K / 128) + kstep;
}

}  // namespace hip
}  // namespace mxprec

#endif  // MXPREC_CSRC_HIP_KERNELS_MFMA_LAYOUT_H_
