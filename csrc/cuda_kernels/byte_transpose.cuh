// 4 x 4 byte block transpose in registers (device code shared by cuda_transpose.cu and cuda_swiglu.cu).
#ifndef MXPREC_CSRC_CUDA_KERNELS_BYTE_TRANSPOSE_CUH_
#define MXPREC_CSRC_CUDA_KERNELS_BYTE_TRANSPOSE_CUH_

#include <cstdint>

namespace mxprec {

// Rows w[0..3] of a 4 x 4 byte block -> its columns: col[c] byte i = w[i] byte c (8 byte permutes).
__device__ __forceinline__ void transpose4x4(const uint32_t w[4], uint32_t col[4]) {
  const uint32_t t0 = __byte_perm(w[0], w[1], 0x5140);  // w0.0 w1.0 w0.1 w1.1
  const uint32_t t1 = __byte_perm(w[0], w[1], 0x7362);  // w0.2 w1.2 w0.3 w1.3
  const uint32_t t2 = __byte_perm(w[2], w[3], 0x5140);
  const uint32_t t3 = __byte_perm(w[2], w[3], 0x7362);
  col[0] = __byte_perm(t0, t2, 0x5410);
  col[1] = __byte_perm(t0, t2, 0x7632);
  col[2] = __byte_perm(t1, t3, 0x5410);
  col[3] = __byte_perm(t1, t3, 0x7632);
}

}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_BYTE_TRANSPOSE_CUH_
