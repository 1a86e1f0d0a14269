// CUTLASS instantiations of the sm_90a per-tensor FP8 GEMM, bf16 output (3 operand pairs).
#include "sm90_fp8_gemm_tensorwise_impl.cuh"

namespace mxprec {
namespace cuda {
MXPREC_INSTANTIATE_SM90_TENSORWISE(0, 0)  // e4m3 x e4m3
MXPREC_INSTANTIATE_SM90_TENSORWISE(1, 0)  // e5m2 x e4m3
MXPREC_INSTANTIATE_SM90_TENSORWISE(2, 0)  // e4m3 x e5m2
}  // namespace cuda
}  // namespace mxprec
