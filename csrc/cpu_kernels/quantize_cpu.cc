// CPU lowering of `mxprec_quantize` (contract: csrc/common/quantize.h).
//
// Bit-exact with mxprec.quantize (src/mxprec/quantize.py) for every scaling spec: the per-group
// amax, scale and element rounding run the same FP32 operations in the same order (see
// csrc/common/formats.h), under the FTZ/DAZ mode XLA's CPU runtime uses.
//
// Two passes over the input: (1) tensor amax and per-group amaxes; (2) per-group scale, then
// every element scaled, rounded to the grid, encoded, packed along the quantization axis.
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ffi_helpers.h"
#include "formats.h"
#include "quantize.h"
#include "quantize_ffi.h"
#include "quantize_math.h"
#include "xla/ffi/api/ffi.h"

namespace mxprec {
namespace {

constexpr const char* kOp = "mxprec_quantize";

// Per-group scale / exponent, computed once per group.
struct GroupScale {
  float s = 1.0f;     // tensor / row / tile: the f32 scale; nvfp4: eff = f32(s_b) * s_t
  int32_t e = 0;      // mx exponent
  uint8_t byte = 0;   // mx: E8M0 byte; nvfp4: E4M3 code of s_b
  bool zero = false;  // mx (bad | zero) / nvfp4 (eff == 0): element codes from g = 0
};

ffi::Error QuantizeImpl(ffi::AnyBuffer x, ffi::AnyBuffer scale_in, ffi::AnyBuffer amax_in,
                        ffi::Result<ffi::AnyBuffer> data, ffi::Result<ffi::AnyBuffer> scale,
                        ffi::Result<ffi::AnyBuffer> amax_out, ffi::Result<ffi::AnyBuffer> tensor_scale_out,
                        int32_t kind, int32_t fmt, int32_t block, int32_t tile_rows, int32_t scale_rule,
                        int32_t power_of_two, int32_t axis, int32_t delayed, int32_t amax_mode) {
  // Attributes and buffers, validated as every backend does (csrc/common/quantize_ffi.h).
  QuantizeCall call{};
  if (auto e = validate_quantize(kOp, x, scale_in, amax_in, *data, *scale, *amax_out, *tensor_scale_out, kind, fmt,
                                 block, tile_rows, scale_rule, power_of_two, axis, delayed, amax_mode, &call);
      e.failure())
    return e;
  const QuantizeDesc& d = call.desc;
  const int64_t B = call.b, R = call.r, C = call.c;

  if (B * R * C == 0) {  // empty x: amax 0 and the scales of empty groups (as the CUDA handler writes them)
    const float amax = d.amax_mode == AmaxMode::kTensor ? *static_cast<const float*>(amax_in.untyped_data()) : 0.0f;
    *static_cast<float*>(amax_out->untyped_data()) = 0.0f;
    *static_cast<float*>(tensor_scale_out->untyped_data()) =
        d.kind == ScalingKind::kNVFP4 ? nvfp4_tensor_scale(amax) : 1.0f;
    const int64_t nscale = static_cast<int64_t>(scale->element_count());
    if (d.kind == ScalingKind::kTensor) {
      *static_cast<float*>(scale->untyped_data()) =
          d.delayed ? *static_cast<const float*>(scale_in.untyped_data()) : tensor_scale(amax, d.fmt);
    } else if (d.kind == ScalingKind::kMX || d.kind == ScalingKind::kNVFP4) {
      std::memset(scale->untyped_data(), 0, static_cast<size_t>(nscale));
    } else {
      for (int64_t i = 0; i < nscale; ++i) static_cast<float*>(scale->untyped_data())[i] = 1.0f;
    }
    return ffi::Error::Success();
  }

  ScopedFlushDenormal ftz;
  const GroupView v = group_view(d, B, R, C);
  const int64_t n = B * R * C;
  const int64_t ngroups = v.B * v.gP * v.gL * v.gQ;
  const FormatInfo fi = format_info(d.fmt);

  // ---------------------------------------------------------------- pass 1: amaxes
  std::vector<float> x32(static_cast<size_t>(n));
  const void* xp = x.untyped_data();
  for (int64_t i = 0; i < n; ++i) x32[i] = load_wide(xp, x.element_type(), i);

  std::vector<float> gamax(static_cast<size_t>(ngroups > 0 ? ngroups : 1), 0.0f);
  float amax_t = 0.0f;
  for (int64_t b = 0, i = 0; b < v.B; ++b)
    for (int64_t p = 0; p < v.P; ++p)
      for (int64_t l = 0; l < v.L; ++l) {
        const int64_t grow = ((b * v.gP + p / v.tp) * v.gL + l / v.bl) * v.gQ;
        for (int64_t q = 0; q < v.Q; ++q, ++i) {
          const float a = abs_f32(x32[i]);
          float& g = gamax[grow + q / v.tq];
          g = xla_max(g, a);
          amax_t = xla_max(amax_t, a);
        }
      }
  // As mxprec.quantize's _amax: a group holding a NaN has amax = the canonical quiet NaN; a
  // subnormal maximum reads as +0 (XLA's CPU runtime flushes it).
  const float canonical_nan = bits_f32(0x7FC00000u);
  amax_t = is_nan(amax_t) ? canonical_nan : flush_denormal(amax_t);
  for (auto& g : gamax) g = is_nan(g) ? canonical_nan : flush_denormal(g);
  if (d.amax_mode == AmaxMode::kPerGroup) {
    const float* ai = static_cast<const float*>(amax_in.untyped_data());
    for (int64_t g = 0; g < ngroups; ++g) gamax[g] = ai[g];
  }
  const float amax_tensor =
      d.amax_mode == AmaxMode::kTensor ? *static_cast<const float*>(amax_in.untyped_data()) : amax_t;

  // ---------------------------------------------------------------- per-group scales
  std::vector<GroupScale> gs(gamax.size());
  float ts = 1.0f;  // NVFP4 tensor scale
  switch (d.kind) {
    case ScalingKind::kTensor: {
      const float s =
          d.delayed ? *static_cast<const float*>(scale_in.untyped_data()) : tensor_scale(amax_tensor, d.fmt);
      for (auto& g : gs) g.s = s;
      break;
    }
    case ScalingKind::kRow:
    case ScalingKind::kTile:
      for (int64_t g = 0; g < ngroups; ++g)
        gs[g].s = group_scale(gamax[g], d.fmt, d.kind == ScalingKind::kTile && d.power_of_two);
      break;
    case ScalingKind::kMX:
      for (int64_t g = 0; g < ngroups; ++g) {
        const float a = gamax[g];
        const bool bad = !is_finite(a);
        const bool zero = a == 0.0f;
        const float safe = (bad || zero) ? 1.0f : a;
        gs[g].e = mx_exponent(safe, d.fmt, d.scale_rule);
        gs[g].zero = bad || zero;
        gs[g].byte = bad ? kE8M0Nan : (zero ? 0 : static_cast<uint8_t>(gs[g].e + 127));
      }
      break;
    case ScalingKind::kNVFP4: {
      ts = nvfp4_tensor_scale(amax_tensor);
      for (int64_t g = 0; g < ngroups; ++g) {
        const float sb = round_to_grid(xla_min(gamax[g] / 6.0f / ts, 448.0f), ElemFormat::kE4M3);
        gs[g].s = sb * ts;
        gs[g].zero = gs[g].s == 0.0f;
        gs[g].byte = encode_grid(sb, ElemFormat::kE4M3);
      }
      break;
    }
    default:
      break;
  }

  // ---------------------------------------------------------------- pass 2: elements
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  for (int64_t b = 0, i = 0; b < v.B; ++b)
    for (int64_t p = 0; p < v.P; ++p)
      for (int64_t l = 0; l < v.L; ++l) {
        const int64_t grow = ((b * v.gP + p / v.tp) * v.gL + l / v.bl) * v.gQ;
        for (int64_t q = 0; q < v.Q; ++q, ++i) {
          const GroupScale& g = gs[grow + q / v.tq];
          float r;
          if (d.kind == ScalingKind::kMX) {
            r = g.zero ? 0.0f : round_to_grid(mx_divide(x32[i], g.e), d.fmt);
          } else if (d.kind == ScalingKind::kNVFP4) {
            r = g.zero ? 0.0f : round_to_grid(x32[i] / g.s, d.fmt);
          } else {
            r = round_to_grid(x32[i] / g.s, d.fmt);
          }
          codes[i] = encode_grid(r, d.fmt);
        }
      }

  // ---------------------------------------------------------------- pack + write
  uint8_t* out = static_cast<uint8_t*>(data->untyped_data());
  if (fi.bits == 8) {
    if (n) std::memcpy(out, codes.data(), static_cast<size_t>(n));
  } else {
    const int64_t Lp = packed_len(v.L, d.fmt);
    for (int64_t b = 0; b < v.B; ++b)
      for (int64_t p = 0; p < v.P; ++p) {
        const uint8_t* src = codes.data() + (b * v.P + p) * v.L * v.Q;
        uint8_t* dst = out + (b * v.P + p) * Lp * v.Q;
        if (fi.bits == 4) {
          for (int64_t l = 0; l < v.L; l += 2)
            for (int64_t q = 0; q < v.Q; ++q)
              dst[(l / 2) * v.Q + q] = pack_fp4(src[l * v.Q + q], src[(l + 1) * v.Q + q]);
        } else {
          for (int64_t l = 0; l < v.L; l += 4)
            for (int64_t q = 0; q < v.Q; ++q) {
              const uint8_t c[4] = {src[l * v.Q + q], src[(l + 1) * v.Q + q], src[(l + 2) * v.Q + q],
                                    src[(l + 3) * v.Q + q]};
              uint8_t o[3];
              pack_fp6(c, o);
              for (int j = 0; j < 3; ++j) dst[(3 * (l / 4) + j) * v.Q + q] = o[j];
            }
        }
      }
  }
  if (d.kind == ScalingKind::kMX || d.kind == ScalingKind::kNVFP4) {
    uint8_t* sp = static_cast<uint8_t*>(scale->untyped_data());
    for (int64_t g = 0; g < ngroups; ++g) sp[g] = gs[g].byte;
  } else {
    float* sp = static_cast<float*>(scale->untyped_data());
    const int64_t ns = d.kind == ScalingKind::kTensor ? 1 : ngroups;
    for (int64_t g = 0; g < ns; ++g) sp[g] = gs[g].s;
  }
  *static_cast<float*>(amax_out->untyped_data()) = amax_t;
  *static_cast<float*>(tensor_scale_out->untyped_data()) = ts;
  return ffi::Error::Success();
}

}  // namespace
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecQuantizeCpu);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecQuantizeCpu, mxprec::QuantizeImpl,
                              MXPREC_QUANTIZE_BIND(xla::ffi::Ffi::Bind()));
