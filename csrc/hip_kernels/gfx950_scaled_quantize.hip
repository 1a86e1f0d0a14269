// gfx950 FP32-scaled quantize kernels for mxprec_quantize (contract: csrc/common/quantize.h),
// quantization axis = the last (contiguous) axis, x viewed as (rows, L), rows = B * R:
//   tensor (current: amax pass, then cast pass; delayed: scale_in, the amax pass still fills the
//   amax result), row, tile 1x128 / 128x128 (plain or power-of-two FP32 scales), NVFP4 (amax pass,
//   then one thread per block of 16). Bit-identical to the CPU lowering: the per-element and
//   per-group arithmetic is scaled_group.h's (formats.h operations in quantize_cpu.cc's order, with
//   x86 FTZ/DAZ + NaN rules made explicit), which the CPU unit test (tests/test_hip_host.py) checks
//   against the numpy reference.
// Amaxes: each workgroup reduces in LDS with an unsigned max on the FP32 bits (amaxes are >= 0
// and NaN is canonical 0x7FC00000, so unsigned order == XLA's NaN-wins max), then one global
// atomic umax per workgroup; launch mxprec_gfx950_quantize_init first (amax = +0).
// Row / tile: one 256-thread workgroup per group (tile 1x128 leaves half the threads idle; row
// loops over L). Tensor / amax: grid-stride loops (ScaledQuantizeArgs::stride).
// Not written: axis 1 (strided) quantization, stochastic rounding. Compiled and ISA-checked only
// (no AMD GPU available).
#include "hip_compat.h"

#include "formats.h"
#include "gfx950_kernels.h"
#include "mx_block.h"  // InType, load_in
#include "scaled_group.h"

namespace mxprec {
namespace hip {
namespace {

__device__ inline void wg_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// Unsigned max of `key` over the workgroup through the LDS word `red` (every thread returns it).
__device__ inline uint32_t wg_umax(uint32_t* red, uint32_t key) {
  if (thread_id_x() == 0) *red = 0u;
  wg_barrier();
  __hip_atomic_fetch_max(red, key, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  wg_barrier();
  return *red;
}

__device__ inline void global_amax(float* amax, uint32_t key) {
  __hip_atomic_fetch_max(reinterpret_cast<unsigned int*>(amax), key, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}

__device__ inline int64_t global_thread() {
  return static_cast<int64_t>(block_id_x()) * kScaledGroupSize + thread_id_x();
}

template <InType I>
__device__ inline void amax_body(const ScaledQuantizeArgs& a) {
  __attribute__((shared)) static uint32_t red;
  const int64_t n = a.rows * a.l;
  float acc = 0.0f;
  for (int64_t i = global_thread(); i < n; i += a.stride) acc = amax_combine(acc, load_in<I>(a.x, i));
  const uint32_t m = wg_umax(&red, amax_key(amax_finish(acc)));
  if (thread_id_x() == 0) global_amax(a.amax, m);
}

template <ElemFormat F, InType I>
__device__ inline void tensor_body(const ScaledQuantizeArgs& a) {
  static_assert(is_fp8(F), "tensor scaling needs an FP8 format");
  const float s = a.scale_src != nullptr ? *a.scale_src : tensor_scale(*a.amax_src, F);
  const int64_t n = a.rows * a.l;
  const int64_t t = global_thread();
  if (t == 0) *static_cast<float*>(a.scale) = s;
  for (int64_t i = t; i < n; i += a.stride) a.data[i] = encode_scaled(load_in<I>(a.x, i), s, F);
}

template <ElemFormat F, InType I, bool kTile>
__device__ inline void group_body(const ScaledQuantizeArgs& a) {
  static_assert(is_fp8(F), "row / tile scaling needs an FP8 format");
  __attribute__((shared)) static uint32_t red;
  const int64_t g = block_id_x();
  const int64_t ng = a.tr * a.tc;
  float acc = 0.0f;
  for (int64_t j = thread_id_x(); j < ng; j += kScaledGroupSize)
    acc = amax_combine(acc, load_in<I>(a.x, tile_elem_offset(g, j, a.l, a.tr, a.tc)));
  const uint32_t m = wg_umax(&red, amax_key(amax_finish(acc)));
  const float s = group_scale(a.group_amax != nullptr ? a.group_amax[g] : bits_f32(m), F, kTile && a.power_of_two != 0);
  if (thread_id_x() == 0) {
    static_cast<float*>(a.scale)[g] = s;
    global_amax(a.amax, m);
  }
  for (int64_t j = thread_id_x(); j < ng; j += kScaledGroupSize) {
    const int64_t off = tile_elem_offset(g, j, a.l, a.tr, a.tc);
    a.data[off] = encode_scaled(load_in<I>(a.x, off), s, F);
  }
}

template <InType I>
__device__ inline void nvfp4_body(const ScaledQuantizeArgs& a) {
  const float ts = nvfp4_tensor_scale(*a.amax_src);
  const int64_t blk = global_thread();
  if (blk == 0) *a.tensor_scale = ts;
  if (blk >= a.rows * (a.l / kNvfp4Block)) return;
  const int64_t base = blk * kNvfp4Block;
  const void* x = a.x;
  const Nvfp4BlockResult r =
      quantize_nvfp4_block_load([x, base](int32_t i) { return load_in<I>(x, base + i); }, ts, a.data + blk * (kNvfp4Block / 2));
  static_cast<uint8_t*>(a.scale)[blk] = r.scale_byte;
}

}  // namespace
}  // namespace hip
}  // namespace mxprec

#define MXPREC_SQ_e4m3 ::mxprec::ElemFormat::kE4M3
#define MXPREC_SQ_e5m2 ::mxprec::ElemFormat::kE5M2
#define MXPREC_SI_f32 ::mxprec::hip::InType::kF32
#define MXPREC_SI_bf16 ::mxprec::hip::InType::kBF16
#define MXPREC_SI_f16 ::mxprec::hip::InType::kF16
#define MXPREC_SQ_ARGS ::mxprec::hip::ScaledQuantizeArgs args

#define MXPREC_SQ_PER_IN(in)                                                                          \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_amax_##in(MXPREC_SQ_ARGS) {                    \
    ::mxprec::hip::amax_body<MXPREC_SI_##in>(args);                                                   \
  }                                                                                                   \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_nvfp4_quantize_##in(MXPREC_SQ_ARGS) {          \
    ::mxprec::hip::nvfp4_body<MXPREC_SI_##in>(args);                                                  \
  }
#define MXPREC_SQ_FP8(fmt, in)                                                                        \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_tensor_quantize_##fmt##_##in(MXPREC_SQ_ARGS) { \
    ::mxprec::hip::tensor_body<MXPREC_SQ_##fmt, MXPREC_SI_##in>(args);                                \
  }                                                                                                   \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_row_quantize_##fmt##_##in(MXPREC_SQ_ARGS) {    \
    ::mxprec::hip::group_body<MXPREC_SQ_##fmt, MXPREC_SI_##in, false>(args);                          \
  }                                                                                                   \
  MXPREC_KERNEL MXPREC_WG_SIZE(256) void mxprec_gfx950_tile_quantize_##fmt##_##in(MXPREC_SQ_ARGS) {   \
    ::mxprec::hip::group_body<MXPREC_SQ_##fmt, MXPREC_SI_##in, true>(args);                           \
  }
#define MXPREC_SQ_IN(in) MXPREC_SQ_PER_IN(in) MXPREC_SQ_FP8(e4m3, in) MXPREC_SQ_FP8(e5m2, in)

MXPREC_SQ_IN(f32)
MXPREC_SQ_IN(bf16)
MXPREC_SQ_IN(f16)
