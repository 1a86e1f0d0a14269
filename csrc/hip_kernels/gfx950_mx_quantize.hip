// gfx950 MX quantize kernels for mxprec_quantize (contract: csrc/common/quantize.h), kind mx,
// block 32, quantization axis = the last (contiguous) axis: x (rows, L) -> data (rows, L')
// packed (FP8 L, FP6 3L/4, FP4 L/2), scale (rows, L/32) E8M0, amax () f32. Bit-identical to the
// CPU lowering: each thread runs mx_block.h's quantize_mx_block_load (formats.h arithmetic) on one
// block of 32, which the CPU unit test (tests/test_hip_host.py) checks against the numpy
// reference. The tensor amax is an atomic max on the FP32 bits (amaxes are >= 0 and NaN is
// canonical 0x7FC00000, so unsigned order == XLA's NaN-wins max); launch
// mxprec_gfx950_quantize_init first (amax = +0, tensor_scale = 1).
// Not written: axis 1 (strided) quantization, tensor / row / tile / NVFP4 kinds, stochastic
// rounding. Compiled and ISA-checked only (no AMD GPU available).
#include "hip_compat.h"

#include "formats.h"
#include "gfx950_kernels.h"
#include "mfma_layout.h"
#include "mx_block.h"

namespace mxprec {
namespace hip {
namespace {

template <ElemFormat F, ScaleRule R, InType I>
__device__ inline void mx_quantize_body(const QuantizeArgs& args) {
  static_assert(valid_elem_format(static_cast<int32_t>(F)), "element format out of range");
  const int64_t nblk_row = args.l / kMxBlock;
  const int64_t blk = static_cast<int64_t>(block_id_x()) * kQuantizeGroupSize + thread_id_x();
  if (blk >= args.rows * nblk_row) return;
  const int64_t row = blk / nblk_row, kb = blk % nblk_row;
  const int64_t base = row * args.l + kb * kMxBlock;
  const void* x = args.x;
  uint8_t* dst = args.data + row * packed_len(args.l, F) + kb * fragment_bytes(F);
  const MxBlockResult r = quantize_mx_block_load([x, base](int32_t i) { return load_in<I>(x, base + i); }, F, R, dst);
  args.scale[blk] = r.scale_byte;
  __hip_atomic_fetch_max(reinterpret_cast<unsigned int*>(args.amax), f32_bits(r.amax), __ATOMIC_RELAXED,
                         __HIP_MEMORY_SCOPE_AGENT);
}

}  // namespace
}  // namespace hip
}  // namespace mxprec

MXPREC_KERNEL MXPREC_WG_SIZE(64) void mxprec_gfx950_quantize_init(float* amax, float* tensor_scale) {
  if (mxprec::hip::thread_id_x() == 0) {
    *amax = 0.0f;
    if (tensor_scale != nullptr) *tensor_scale = 1.0f;
  }
}

#define MXPREC_QE_e4m3 ::mxprec::ElemFormat::kE4M3
#define MXPREC_QE_e5m2 ::mxprec::ElemFormat::kE5M2
#define MXPREC_QE_e2m3 ::mxprec::ElemFormat::kE2M3
#define MXPREC_QE_e3m2 ::mxprec::ElemFormat::kE3M2
#define MXPREC_QE_e2m1 ::mxprec::ElemFormat::kE2M1
#define MXPREC_QR_rceil ::mxprec::ScaleRule::kRceil
#define MXPREC_QR_floor ::mxprec::ScaleRule::kFloor
#define MXPREC_QI_f32 ::mxprec::hip::InType::kF32
#define MXPREC_QI_bf16 ::mxprec::hip::InType::kBF16
#define MXPREC_QI_f16 ::mxprec::hip::InType::kF16

#define MXPREC_QUANT_KERNEL(fmt, rule, in)                                                                  \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_mx_quantize_##fmt##_##rule##_##in(                   \
      ::mxprec::hip::QuantizeArgs args) {                                                                   \
    ::mxprec::hip::mx_quantize_body<MXPREC_QE_##fmt, MXPREC_QR_##rule, MXPREC_QI_##in>(args);               \
  }
#define MXPREC_QUANT_INS(fmt, rule) \
  MXPREC_QUANT_KERNEL(fmt, rule, f32) MXPREC_QUANT_KERNEL(fmt, rule, bf16) MXPREC_QUANT_KERNEL(fmt, rule, f16)
#define MXPREC_QUANT_FMT(fmt) MXPREC_QUANT_INS(fmt, rceil) MXPREC_QUANT_INS(fmt, floor)

MXPREC_QUANT_FMT(e4m3)
MXPREC_QUANT_FMT(e5m2)
MXPREC_QUANT_FMT(e2m3)
MXPREC_QUANT_FMT(e3m2)
MXPREC_QUANT_FMT(e2m1)
