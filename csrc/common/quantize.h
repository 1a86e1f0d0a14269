// Contract of the `mxprec_quantize` custom call (every platform).
//
// Quantizes a 3-D tensor x (B, R, C) along `axis` (1 or 2) exactly as mxprec.quantize does (the
// pure-JAX oracle; rules in docs/numerics.md). Outputs are bit-identical to its QTensor fields.
// The Python wrapper mxprec.kernels.ffi.quantize views any-rank input as 3-D: quantization axis
// a of an n-D tensor -> (prod(shape[:a]), shape[a], prod(shape[a+1:])) with axis 1, or, for
// a = n - 1, (prod(shape[:-2]), shape[-2], shape[-1]) with axis 2. Then the tile "row axis" (the
// last axis that is not the quantization axis) is 3-D axis 2 when axis == 1, else axis 1.
//
// Notation: L = extent of `axis`; blk = `block` (mx block / nvfp4 16 / tile tc);
// tr = `tile_rows`; "x with L/blk" = x's shape with the axis extent divided by blk.
//
// Buffers, in order:
//   #  name       dtype               shape
//   0  x          f32 | bf16 | f16    (B, R, C)
//   1  scale_in   f32                 (): the delayed scale, used iff delayed=1 (kind tensor)
//   2  amax_in    f32                 amax_mode=0: ignored (f32 () by convention)
//                                     amax_mode=1: () the tensor amax to use (tensor / nvfp4;
//                                                  e.g. the pmax of the shards' amaxes)
//                                     amax_mode=2: the scale's shape, the per-group amax to use
//                                                  (row / tile; e.g. pmax across K shards)
//                                     amax_mode=3: ignored; the amax result is not computed (row,
//                                                  tile, mx: their scales come from their groups)
// Results, in order:
//   0  data          FP8: f8e4m3fn | f8e5m2, x's shape
//                    FP4: u8, x's shape with L/2 (element 2i low nibble)
//                    FP6: u8, x's shape with 3L/4 (4 codes in 3 bytes, little-endian)
//   1  scale         tensor: f32 (); row: f32 x with L=1; tile: f32 x with L/blk and the row
//                    axis /tr; mx: f8e8m0fnu x with L/blk; nvfp4: f8e4m3fn x with L/16
//   2  amax          f32 (): max |x| over this buffer (NaN if any NaN), the QTensor's amax;
//                    amax_mode=3: unspecified (a kernel may leave it unwritten)
//   3  tensor_scale  f32 (): NVFP4 s_t = amax / 2688 (1 if amax == 0); 1 for other kinds
//
// Attributes (int32): kind (ScalingKind, not none), fmt (ElemFormat; nvfp4: e2m1),
// block, tile_rows, scale_rule (ScaleRule: 0 rceil, 1 floor; mx only), power_of_two (0|1, tile),
// axis (1|2), delayed (0|1), amax_mode (0|1|2|3).
#ifndef MXPREC_CSRC_COMMON_QUANTIZE_H_
#define MXPREC_CSRC_COMMON_QUANTIZE_H_

#include <cstdint>

#include "formats.h"
#include "scaled_gemm.h"  // ScalingKind

namespace mxprec {

inline constexpr const char kQuantizeTarget[] = "mxprec_quantize";

enum class AmaxMode : int32_t {
  kLocal = 0,     // compute amaxes from x
  kTensor = 1,    // amax_in () is the tensor amax (tensor, nvfp4)
  kPerGroup = 2,  // amax_in has the scale's shape (row, tile)
  kUnwanted = 3,  // the caller does not read the amax result (row, tile, mx): no tensor amax
};

struct QuantizeDesc {
  ScalingKind kind;
  ElemFormat fmt;
  int32_t block;         // mx block / nvfp4 16 / tile tc; 1 otherwise
  int32_t tile_rows;     // tile tr; 1 otherwise
  ScaleRule scale_rule;  // mx
  bool power_of_two;     // tile
  int32_t axis;          // 1 or 2
  bool delayed;          // kind tensor: use scale_in
  AmaxMode amax_mode;
};

// The 3-D tensor seen as (B, P, L, Q) with the quantization axis L: axis 2 -> (B, R, C, 1),
// axis 1 -> (B, 1, R, C). Scales / groups use the same view with L/blk and the row axis / tr
// (the row axis is P for axis 2 and Q for axis 1).
struct GroupView {
  int64_t B, P, L, Q;  // element view
  int64_t gP, gL, gQ;  // group counts per view dim
  int64_t tp, bl, tq;  // group extent per view dim
};

MXPREC_HD inline GroupView group_view(const QuantizeDesc& d, int64_t b, int64_t r, int64_t c) {
  GroupView v{};
  v.B = b;
  if (d.axis == 2) {
    v.P = r; v.L = c; v.Q = 1;
  } else {
    v.P = 1; v.L = r; v.Q = c;
  }
  v.tp = 1; v.bl = 1; v.tq = 1;
  switch (d.kind) {
    case ScalingKind::kTensor:
      v.tp = v.P; v.bl = v.L; v.tq = v.Q;
      break;
    case ScalingKind::kRow:
      v.bl = v.L;
      break;
    case ScalingKind::kTile:
      v.bl = d.block;
      if (d.axis == 2) v.tp = d.tile_rows; else v.tq = d.tile_rows;
      break;
    case ScalingKind::kMX:
    case ScalingKind::kNVFP4:
      v.bl = d.block;
      break;
    default:
      break;
  }
  v.gP = v.tp ? v.P / v.tp : 0; v.gL = v.bl ? v.L / v.bl : 0; v.gQ = v.tq ? v.Q / v.tq : 0;
  // Whole-extent groups stay one group when the extent is 0 (an empty x): the tensor is one group,
  // and every row keeps its one row scale (scale shape x with L = 1, as mxprec.quantize).
  if (d.kind == ScalingKind::kTensor) { v.gP = 1; v.gL = 1; v.gQ = 1; }
  if (d.kind == ScalingKind::kRow) v.gL = 1;
  return v;
}

// Shape of the scale result (rank 0 for tensor).
MXPREC_HD inline Dims3 quantize_scale_dims(const QuantizeDesc& d, int64_t b, int64_t r, int64_t c) {
  if (d.kind == ScalingKind::kTensor) return Dims3{0, {0, 0, 0}};
  const GroupView v = group_view(d, b, r, c);
  if (d.axis == 2) return Dims3{3, {b, v.gP, v.gL}};
  return Dims3{3, {b, v.gL, v.gQ}};
}

// Shape of the data result.
MXPREC_HD inline Dims3 quantize_data_dims(const QuantizeDesc& d, int64_t b, int64_t r, int64_t c) {
  Dims3 out{3, {b, r, c}};
  out.d[d.axis] = packed_len(out.d[d.axis], d.fmt);
  return out;
}

// NVFP4 constants (docs/numerics.md 6.).
constexpr float kNvfp4TensorDivisor = 2688.0f;  // 6 * 448

}  // namespace mxprec

#endif  // MXPREC_CSRC_COMMON_QUANTIZE_H_
