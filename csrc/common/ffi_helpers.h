// Host-side helpers shared by the FFI handlers of every backend: dtype names, shape checks that
// return ffi::Error (never abort), attribute validation, and the FTZ/DAZ guard matching XLA's
// CPU runtime.
#ifndef MXPREC_CSRC_COMMON_FFI_HELPERS_H_
#define MXPREC_CSRC_COMMON_FFI_HELPERS_H_

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <xmmintrin.h>
#define MXPREC_HAVE_MXCSR 1
#endif

#include "formats.h"
#include "scaled_gemm.h"
#include "xla/ffi/api/ffi.h"

// The mxprec_scaled_gemm buffer and attribute order (csrc/common/scaled_gemm.h), appended to a
// backend's binder (which may first bind its own contexts, e.g. a stream). Written once so every
// backend's handler binds the same contract.
#define MXPREC_SCALED_GEMM_BIND(binder)                                                    \
  (binder)                                                                                 \
      .Arg<xla::ffi::AnyBuffer>() /* lhs data */                                           \
      .Arg<xla::ffi::AnyBuffer>() /* lhs scale */                                          \
      .Arg<xla::ffi::AnyBuffer>() /* lhs tensor_scale f32 () */                            \
      .Arg<xla::ffi::AnyBuffer>() /* rhs data */                                           \
      .Arg<xla::ffi::AnyBuffer>() /* rhs scale */                                          \
      .Arg<xla::ffi::AnyBuffer>() /* rhs tensor_scale f32 () */                            \
      .Arg<xla::ffi::AnyBuffer>() /* bias f32 (N,) when has_bias */                        \
      .Ret<xla::ffi::AnyBuffer>() /* out (B, M, N) f32|bf16|f16 */                         \
      .Attr<int32_t>("lhs_kind")                                                           \
      .Attr<int32_t>("lhs_fmt")                                                            \
      .Attr<int32_t>("lhs_block")                                                          \
      .Attr<int32_t>("lhs_tile_rows")                                                      \
      .Attr<int32_t>("lhs_contract")                                                       \
      .Attr<int32_t>("rhs_kind")                                                           \
      .Attr<int32_t>("rhs_fmt")                                                            \
      .Attr<int32_t>("rhs_block")                                                          \
      .Attr<int32_t>("rhs_tile_rows")                                                      \
      .Attr<int32_t>("rhs_contract")                                                       \
      .Attr<int32_t>("has_bias")

// The buffer/attribute list of `mxprec_quantize` (quantize.h), after the handler's context
// arguments, shared by every platform's handler.
#define MXPREC_QUANTIZE_BIND(binder)                                                       \
  (binder)                                                                                 \
      .Arg<xla::ffi::AnyBuffer>() /* x (B, R, C) f32|bf16|f16 */                           \
      .Arg<xla::ffi::AnyBuffer>() /* scale_in f32 () (delayed scale) */                    \
      .Arg<xla::ffi::AnyBuffer>() /* amax_in f32 () / scale-shaped */                      \
      .Ret<xla::ffi::AnyBuffer>() /* data (packed along axis) */                           \
      .Ret<xla::ffi::AnyBuffer>() /* scale */                                              \
      .Ret<xla::ffi::AnyBuffer>() /* amax f32 () */                                        \
      .Ret<xla::ffi::AnyBuffer>() /* tensor_scale f32 () */                                \
      .Attr<int32_t>("kind")                                                               \
      .Attr<int32_t>("fmt")                                                                \
      .Attr<int32_t>("block")                                                              \
      .Attr<int32_t>("tile_rows")                                                          \
      .Attr<int32_t>("scale_rule")                                                         \
      .Attr<int32_t>("power_of_two")                                                       \
      .Attr<int32_t>("axis")                                                               \
      .Attr<int32_t>("delayed")                                                            \
      .Attr<int32_t>("amax_mode")

// Handler symbols are looked up with ctypes / dlsym: export them from a -fvisibility=hidden build.
#if defined(_WIN32)
#define MXPREC_EXPORT __declspec(dllexport)
#else
#define MXPREC_EXPORT __attribute__((visibility("default")))
#endif
#define MXPREC_DECLARE_HANDLER_SYMBOL(name) extern "C" MXPREC_EXPORT XLA_FFI_Error* name(XLA_FFI_CallFrame* call_frame)

namespace mxprec {
namespace ffi = ::xla::ffi;

inline const char* dtype_name(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::F16: return "float16";
    case ffi::DataType::F64: return "float64";
    case ffi::DataType::U8: return "uint8";
    case ffi::DataType::S8: return "int8";
    case ffi::DataType::S32: return "int32";
    case ffi::DataType::F8E4M3FN: return "float8_e4m3fn";
    case ffi::DataType::F8E5M2: return "float8_e5m2";
    case ffi::DataType::F8E8M0FNU: return "float8_e8m0fnu";
    case ffi::DataType::PRED: return "bool";
    default: return "unsupported dtype";
  }
}

inline std::string dims_str(ffi::AnyBuffer::Dimensions dims) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  if (dims.size() == 1) os << ",";
  os << ")";
  return os.str();
}

inline std::string dims_str(const Dims3& d) {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < d.rank; ++i) os << (i ? ", " : "") << d.d[i];
  os << ")";
  return os.str();
}

inline bool dims_equal(ffi::AnyBuffer::Dimensions dims, const Dims3& want) {
  if (static_cast<int64_t>(dims.size()) != want.rank) return false;
  for (int i = 0; i < want.rank; ++i)
    if (dims[i] != want.d[i]) return false;
  return true;
}

inline ffi::Error invalid(const std::string& msg) { return ffi::Error::InvalidArgument(msg); }

// "<op>: <what> has shape S dtype T, expected shape S' [dtype T']".
inline ffi::Error check_buffer(std::string_view op, std::string_view what, const ffi::AnyBuffer& buf,
                               const Dims3& want_dims, ffi::DataType want_dtype) {
  const bool shape_ok = dims_equal(buf.dimensions(), want_dims);
  const bool dtype_ok = buf.element_type() == want_dtype;
  if (shape_ok && dtype_ok) return ffi::Error::Success();
  std::ostringstream os;
  os << op << ": " << what << " has shape " << dims_str(buf.dimensions()) << " dtype "
     << dtype_name(buf.element_type()) << ", expected shape " << dims_str(want_dims) << " dtype "
     << dtype_name(want_dtype);
  return invalid(os.str());
}

inline bool is_wide_float(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::BF16 || t == ffi::DataType::F16;
}

// The dtype of a quantized data buffer of format f.
inline ffi::DataType data_dtype(ElemFormat f) {
  switch (f) {
    case ElemFormat::kE4M3: return ffi::DataType::F8E4M3FN;
    case ElemFormat::kE5M2: return ffi::DataType::F8E5M2;
    default: return ffi::DataType::U8;
  }
}

// The dtype of the scale buffer of a scaling kind.
inline ffi::DataType scale_dtype(ScalingKind k) {
  switch (k) {
    case ScalingKind::kMX: return ffi::DataType::F8E8M0FNU;
    case ScalingKind::kNVFP4: return ffi::DataType::F8E4M3FN;
    default: return ffi::DataType::F32;
  }
}

// Loads element i of a f32 / bf16 / f16 buffer as f32 (exact).
inline float load_wide(const void* p, ffi::DataType t, int64_t i) {
  switch (t) {
    case ffi::DataType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case ffi::DataType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Validates the static attributes of one operand / quantizer; empty string when fine.
inline std::string check_operand_attrs(std::string_view who, int32_t kind, int32_t fmt, int32_t block,
                                       int32_t tile_rows, int32_t contract) {
  std::ostringstream os;
  if (!valid_scaling_kind(kind)) {
    os << who << "_kind=" << kind << " is not a ScalingKind (0 none, 1 tensor, 2 row, 3 tile, 4 mx, 5 nvfp4)";
  } else if (kind != 0 && !valid_elem_format(fmt)) {
    os << who << "_fmt=" << fmt << " is not an ElemFormat (0 e4m3, 1 e5m2, 2 e2m3, 3 e3m2, 4 e2m1)";
  } else if (contract != 1 && contract != 2) {
    os << who << " contraction / quantization axis=" << contract << " must be 1 or 2";
  } else {
    const auto k = static_cast<ScalingKind>(kind);
    const auto f = static_cast<ElemFormat>(fmt);
    if ((k == ScalingKind::kTensor || k == ScalingKind::kRow || k == ScalingKind::kTile) && !is_fp8(f)) {
      os << who << ": " << scaling_kind_name(k) << " scaling needs an FP8 format, got " << format_name(f);
    } else if (k == ScalingKind::kNVFP4 && (f != ElemFormat::kE2M1 || block != kNvfp4Block)) {
      os << who << ": nvfp4 needs fmt e2m1 and block 16, got " << format_name(f) << " block " << block;
    } else if ((k == ScalingKind::kMX || k == ScalingKind::kTile) &&
               (block < 1 || block % pack_unit(f) != 0)) {
      os << who << "_block=" << block << " is invalid for " << scaling_kind_name(k) << " " << format_name(f);
    } else if (k == ScalingKind::kTile && tile_rows < 1) {
      os << who << "_tile_rows=" << tile_rows << " must be >= 1";
    }
  }
  return os.str();
}

// Sets FTZ + DAZ for the handler's duration, as XLA's CPU runtime does for its own code
// (tsl::port::ScopedFlushDenormal), so native and XLA arithmetic agree bit for bit.
class ScopedFlushDenormal {
 public:
  ScopedFlushDenormal() {
#if defined(MXPREC_HAVE_MXCSR)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    saved_ = fpcr;
    fpcr |= (1ull << 24);  // FZ
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
#endif
  }
  ~ScopedFlushDenormal() {
#if defined(MXPREC_HAVE_MXCSR)
    _mm_setcsr(static_cast<unsigned int>(saved_));
#elif defined(__aarch64__)
    uint64_t fpcr = saved_;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
#endif
  }
  ScopedFlushDenormal(const ScopedFlushDenormal&) = delete;
  ScopedFlushDenormal& operator=(const ScopedFlushDenormal&) = delete;

 private:
  uint64_t saved_ = 0;
};

}  // namespace mxprec

#endif  // MXPREC_CSRC_COMMON_FFI_HELPERS_H_
