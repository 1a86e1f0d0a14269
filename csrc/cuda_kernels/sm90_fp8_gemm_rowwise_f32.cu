// CUTLASS instantiations of the sm_90a row-wise-scaled FP8 GEMM, f32 output (3 operand pairs).
#include "sm90_fp8_gemm_rowwise_impl.cuh"

namespace mxprec {
namespace cuda {
MXPREC_INSTANTIATE_SM90_ROWWISE(0, 1)  // e4m3 x e4m3
MXPREC_INSTANTIATE_SM90_ROWWISE(1, 1)  // e5m2 x e4m3
MXPREC_INSTANTIATE_SM90_ROWWISE(2, 1)  // e4m3 x e5m2
}  // namespace cuda
}  // namespace mxprec
