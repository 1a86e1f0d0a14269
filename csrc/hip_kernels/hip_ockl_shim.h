// Host+device HIP builds without ROCm's device libraries (clang -nogpulib, e.g. Debian's clang-22
// with the ROCm 5.2 libamdhip64-dev headers; csrc/hip_kernels/build_host.sh): ROCm's
// <hip/hip_runtime.h> implements threadIdx / blockIdx with the device-library functions
// __ockl_get_local_id / __ockl_get_group_id, which -nogpulib leaves undefined at the device link.
// With -DMXPREC_HIP_OCKL_SHIM this header defines them (weak) from the amdgcn builtins. The
// gfx950 kernels themselves use the builtins directly (hip_compat.h), so the shim only matters for
// code that uses threadIdx / blockIdx. Not needed (leave the macro off) with a full ROCm install.
#ifndef MXPREC_CSRC_HIP_KERNELS_HIP_OCKL_SHIM_H_
#define MXPREC_CSRC_HIP_KERNELS_HIP_OCKL_SHIM_H_

#include <hip/hip_runtime.h>

#if defined(MXPREC_HIP_OCKL_SHIM) && defined(__HIP_DEVICE_COMPILE__)
extern "C" __device__ __attribute__((weak)) size_t __ockl_get_local_id(unsigned int d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : (d == 1 ? __builtin_amdgcn_workitem_id_y() : __builtin_amdgcn_workitem_id_z());
}
extern "C" __device__ __attribute__((weak)) size_t __ockl_get_group_id(unsigned int d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x()
                : (d == 1 ? __builtin_amdgcn_workgroup_id_y() : __builtin_amdgcn_workgroup_id_z());
}
#endif

#endif  // MXPREC_CSRC_HIP_KERNELS_HIP_OCKL_SHIM_H_
