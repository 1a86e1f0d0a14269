// Minimal device-side environment for compiling the gfx950 kernels with a stock clang (Debian
// clang-22) and no ROCm: compile with
//   clang-22 -x hip --offload-arch=gfx950 --cuda-device-only -nogpulib -nogpuinc \
//            -include __clang_hip_runtime_wrapper.h ...
// The wrapper (shipped with clang) defines __host__/__device__/__global__ and the math
// functions formats.h uses (rintf -> v_rndne_f32); this header adds the two bit casts formats.h
// takes from ROCm's hip_runtime.h, vector types for the MFMA builtins, and wave/lane indices from
// amdgcn builtins. With ROCm's <hip/hip_runtime.h> included first, the bit casts come from there.
#ifndef MXPREC_CSRC_HIP_KERNELS_HIP_COMPAT_H_
#define MXPREC_CSRC_HIP_KERNELS_HIP_COMPAT_H_

#if !defined(__HIP__)
#error "hip_compat.h is for HIP compilation (clang -x hip)"
#endif

#include <cstdint>

#if !defined(__HIP_PLATFORM_AMD__)  // no ROCm headers: provide what formats.h needs
__device__ inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
__device__ inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
#endif

#define MXPREC_KERNEL extern "C" __attribute__((global)) __attribute__((visibility("default")))
#define MXPREC_WG_SIZE(n) __attribute__((amdgpu_flat_work_group_size(1, n)))

namespace mxprec {
namespace hip {

typedef int v8i32 __attribute__((ext_vector_type(8)));
typedef float v4f32 __attribute__((ext_vector_type(4)));
typedef float v16f32 __attribute__((ext_vector_type(16)));

__device__ inline uint32_t thread_id_x() { return __builtin_amdgcn_workitem_id_x(); }
__device__ inline uint32_t block_id_x() { return __builtin_amdgcn_workgroup_id_x(); }
__device__ inline uint32_t block_id_y() { return __builtin_amdgcn_workgroup_id_y(); }

}  // namespace hip
}  // namespace mxprec

#endif  // MXPREC_CSRC_HIP_KERNELS_HIP_COMPAT_H_
