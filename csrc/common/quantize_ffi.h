// Host-side validation of one `mxprec_quantize` call (contract: quantize.h): attributes, x, the
// optional scale_in / amax_in buffers and the four results. Returns ffi::Error (never aborts) and,
// on success, the decoded QuantizeDesc and x's (B, R, C). The messages are the CPU handler's
// (csrc/cpu_kernels/quantize_cpu.cc), so every backend rejects a malformed call the same way.
// Used by the CUDA handler (csrc/cuda_kernels/cuda_quantize.cu).
#ifndef MXPREC_CSRC_COMMON_QUANTIZE_FFI_H_
#define MXPREC_CSRC_COMMON_QUANTIZE_FFI_H_

#include <cstdint>
#include <sstream>
#include <string>

#include "ffi_helpers.h"
#include "formats.h"
#include "quantize.h"
#include "scaled_gemm.h"
#include "xla/ffi/api/ffi.h"

namespace mxprec {

inline std::string describe_quantize(const QuantizeDesc& d) {
  std::ostringstream os;
  os << scaling_kind_name(d.kind) << " " << format_name(d.fmt) << " block " << d.block << " tile_rows "
     << d.tile_rows << " axis " << d.axis;
  return os.str();
}

struct QuantizeCall {
  QuantizeDesc desc;
  int64_t b, r, c;  // x's shape
};

inline ffi::Error validate_quantize(const char* op, const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale_in,
                                    const ffi::AnyBuffer& amax_in, const ffi::AnyBuffer& data,
                                    const ffi::AnyBuffer& scale, const ffi::AnyBuffer& amax_out,
                                    const ffi::AnyBuffer& tensor_scale_out, int32_t kind, int32_t fmt, int32_t block,
                                    int32_t tile_rows, int32_t scale_rule, int32_t power_of_two, int32_t axis,
                                    int32_t delayed, int32_t amax_mode, QuantizeCall* call) {
  const std::string o(op);
  if (kind == static_cast<int32_t>(ScalingKind::kNone))
    return invalid(o + ": kind=0 (none) does not quantize; use kind 1..5");
  {
    std::string err = check_operand_attrs("quantize", kind, fmt, block, tile_rows, axis);
    if (!err.empty()) return invalid(o + ": " + err);
  }
  if (scale_rule != 0 && scale_rule != 1)
    return invalid(o + ": scale_rule=" + std::to_string(scale_rule) + " must be 0 (rceil) or 1 (floor)");
  if ((power_of_two != 0 && power_of_two != 1) || (delayed != 0 && delayed != 1))
    return invalid(o + ": power_of_two and delayed must be 0 or 1");
  if (amax_mode < 0 || amax_mode > 3)
    return invalid(o + ": amax_mode=" + std::to_string(amax_mode) + " must be 0, 1, 2 or 3");
  const QuantizeDesc d{static_cast<ScalingKind>(kind), static_cast<ElemFormat>(fmt),
                       (kind == 3 || kind == 4 || kind == 5) ? block : 1, kind == 3 ? tile_rows : 1,
                       static_cast<ScaleRule>(scale_rule), power_of_two == 1, axis, delayed == 1,
                       static_cast<AmaxMode>(amax_mode)};
  if (d.delayed && d.kind != ScalingKind::kTensor)
    return invalid(o + ": delayed=1 needs kind 1 (tensor), got " + describe_quantize(d));
  if (d.amax_mode == AmaxMode::kTensor && !(d.kind == ScalingKind::kTensor || d.kind == ScalingKind::kNVFP4))
    return invalid(o + ": amax_mode=1 (tensor amax) needs kind tensor or nvfp4, got " + describe_quantize(d));
  if (d.amax_mode == AmaxMode::kPerGroup && !(d.kind == ScalingKind::kRow || d.kind == ScalingKind::kTile))
    return invalid(o + ": amax_mode=2 (per-group amax) needs kind row or tile, got " + describe_quantize(d));
  if (d.amax_mode == AmaxMode::kUnwanted &&
      !(d.kind == ScalingKind::kRow || d.kind == ScalingKind::kTile || d.kind == ScalingKind::kMX))
    return invalid(o + ": amax_mode=3 (no amax result) needs kind row, tile or mx (the others scale by the tensor "
                   "amax), got " + describe_quantize(d));

  const auto xd = x.dimensions();
  if (xd.size() != 3 || !is_wide_float(x.element_type()))
    return invalid(o + ": x must be a 3-D float32/bfloat16/float16 array, got shape " + dims_str(xd) + " dtype " +
                   dtype_name(x.element_type()));
  const int64_t B = xd[0], R = xd[1], C = xd[2];
  const int64_t L = axis == 2 ? C : R;
  const int64_t rows = axis == 2 ? R : C;  // the tile row axis extent
  if (L % d.block != 0 || L % pack_unit(d.fmt) != 0) {
    std::ostringstream os;
    os << o << ": x " << dims_str(xd) << " axis " << axis << " has size " << L << ", not a multiple of the block "
       << d.block << " / packing unit " << pack_unit(d.fmt) << " (" << describe_quantize(d) << ")";
    return invalid(os.str());
  }
  if (rows % d.tile_rows != 0) {
    std::ostringstream os;
    os << o << ": x " << dims_str(xd) << " row axis has size " << rows << ", not a multiple of tile_rows "
       << d.tile_rows;
    return invalid(os.str());
  }
  const Dims3 scalar{0, {0, 0, 0}};
  const Dims3 sdims = quantize_scale_dims(d, B, R, C);
  if (d.delayed) {
    if (auto e = check_buffer(op, "scale_in (delayed scale)", scale_in, scalar, ffi::DataType::F32); e.failure())
      return e;
  }
  if (d.amax_mode == AmaxMode::kTensor) {
    if (auto e = check_buffer(op, "amax_in (tensor amax)", amax_in, scalar, ffi::DataType::F32); e.failure())
      return e;
  } else if (d.amax_mode == AmaxMode::kPerGroup) {
    if (auto e = check_buffer(op, "amax_in (per-group amax)", amax_in, sdims, ffi::DataType::F32); e.failure())
      return e;
  }
  if (auto e = check_buffer(op, "data result", data, quantize_data_dims(d, B, R, C), data_dtype(d.fmt)); e.failure())
    return e;
  if (auto e = check_buffer(op, "scale result", scale, sdims, scale_dtype(d.kind)); e.failure()) return e;
  if (auto e = check_buffer(op, "amax result", amax_out, scalar, ffi::DataType::F32); e.failure()) return e;
  if (auto e = check_buffer(op, "tensor_scale result", tensor_scale_out, scalar, ffi::DataType::F32); e.failure())
    return e;
  *call = QuantizeCall{d, B, R, C};
  return ffi::Error::Success();
}

}  // namespace mxprec

#endif  // MXPREC_CSRC_COMMON_QUANTIZE_FFI_H_
