// Light interface of mxprec's own persistent block-scaled FP8 GEMM (sm90_fp8_gemm_persistent.cuh; no CUTLASS).
// Same arguments, scale layouts and semantics as sm90_blockwise_run (sm90_fp8_gemm_blockwise.h); needs no
// workspace. Selected at run time by MXPREC_SM90_BLOCKWISE_KERNEL (sm90_fp8_gemm_tensorwise.cu).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_
#define MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_

#include <cuda_runtime.h>

#include "sm90_fp8_gemm_blockwise.h"

namespace mxprec {
namespace cuda {

// Launches the GEMM on `stream`. Returns nullptr on success, else a static error string.
template <int kPair, int kOut, int kRowsB>
const char* sm90_blockwise_persistent_run(const BlockwiseGemmArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM90_FP8_GEMM_PERSISTENT_H_
