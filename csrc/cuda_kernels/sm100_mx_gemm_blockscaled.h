// Light C-ABI interface of the sm_100a (Blackwell) block-scaled MX GEMM (CUTLASS 4.2, tcgen05
// `kind::mxf8f6f4.block_scale` / `kind::mxf4.block_scale`). No CUTLASS headers here; the kernels live
// in sm100_mx_gemm_blockscaled.cu. STATUS: compiled for sm_100a and the SASS/PTX checked
// (docs/backends/cuda.md), never run (no Blackwell GPU available).
//
//   D[l, m, n] = alpha * sum_k (SA[l, m, k/32] * A[l, m, k]) * (SB[l, n, k/32] * B[l, n, k])  (+ bias[n])
//
// A: (L, M, K) K contiguous; B: (L, N, K) K contiguous ("TN"); D: (L, M, N) bf16, N contiguous.
// Sub-byte operands are packed densely along K (FP4: 2 per byte, low nibble first; FP6: 4 per 3 bytes,
// LSB first) -- mxprec.quantize.pack's layout, and CUTLASS's little-endian sub-byte packing as we read
// it (the TMA "16U4"/"16U6" formats); unverified on hardware, like everything here.
// SA / SB: one E8M0 byte (2^(e-127), 0xFF = NaN) per 32 consecutive K elements of a row, NOT row-major:
// CUTLASS's interleaved "128x4" layout (Sm1xxBlockScaledConfig<32>::tile_atom_to_shape_SF{A,B}):
//
//   rows padded to R = 128 * ceil(rows / 128), scale columns padded to C = 4 * ceil(K / 128)
//   (K / 32 scale columns rounded up to a multiple of 4); bytes per batch entry = R * C.
//   offset(l, r, c) = ((l * R/128 + r/128) * C/4 + c/4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4
//
// i.e. 512-byte atoms (128 rows x 4 scale columns), atoms ordered K-block fastest, then row-block, then L;
// inside an atom row r sits at 16*(r%32) + 4*(r/32). Padding bytes must not be 0xFF (NaN): TMA zero-fills
// the out-of-range data, and 0 * NaN = NaN; 0x7F (1.0) is a safe filler. From a row-major uint8 array
// s[L, rows, K/32] the Python side reorders with (numpy/jnp):
//
//   s = pad(s, ((0,0), (0, R-rows), (0, C-K/32)), constant_values=0x7F)
//   s = s.reshape(L, R//128, 4, 32, C//4, 4).transpose(0, 1, 4, 3, 2, 5).reshape(L, R*C)
//
// mxprec_sm100_sf_offset() below is that formula in C (checked against the CuTe layout).
#ifndef MXPREC_CSRC_CUDA_KERNELS_SM100_MX_GEMM_BLOCKSCALED_H_
#define MXPREC_CSRC_CUDA_KERNELS_SM100_MX_GEMM_BLOCKSCALED_H_

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MXPREC_SM100_EXPORT __attribute__((visibility("default")))  // the .so is built -fvisibility=hidden
#else
#define MXPREC_SM100_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Operand formats (both operands the same format; E8M0 scales per 32 along K).
enum MxprecSm100MxFormat {
  MXPREC_SM100_MXFP8_E4M3 = 1,  // mx_float8_t<float_e4m3_t>, tcgen05 kind::mxf8f6f4, 2-SM 256x256x128 tile
  MXPREC_SM100_MXFP6_E2M3 = 2,  // mx_float6_t<float_e2m3_t>, tcgen05 kind::mxf8f6f4, 2-SM 256x256x128 tile
  MXPREC_SM100_MXFP4_E2M1 = 3,  // mx_float4_t<float_e2m1_t>, tcgen05 kind::mxf4 (2x the mxf8f6f4 rate), 256x256x256
};

typedef struct MxprecSm100MxGemmArgs {
  const void* a;        // (L, M, K) operand data, K contiguous (packed for FP6 / FP4)
  const void* b;        // (L, N, K) operand data, K contiguous
  const uint8_t* sfa;   // E8M0 scales of A, interleaved layout above, L * R(M) * C(K) bytes
  const uint8_t* sfb;   // E8M0 scales of B, interleaved layout above, L * R(N) * C(K) bytes
  void* d;              // (L, M, N) bf16, N contiguous
  const float* alpha;   // device pointer to one float, or NULL (alpha = 1)
  const float* bias;    // device pointer to N floats, or NULL (no bias)
  int m, n, k, l;
  int sm_count;         // multiprocessors of the stream's device (0: queried by CUTLASS)
} MxprecSm100MxGemmArgs;

// Shape constraints of a format (TMA: 16-byte rows; FP6 needs 96-byte K rows in the f8f6f4 path):
// K % 32 == 0 (MXFP8, MXFP4) / K % 128 == 0 (MXFP6); N % 8 == 0 (bf16 D). Returns 1 if supported.
MXPREC_SM100_EXPORT int mxprec_sm100_mx_gemm_supported(int format, int64_t m, int64_t n, int64_t k);

// 1 if `format` is a format this library provides (a build links all three; see build_sm100.sh).
MXPREC_SM100_EXPORT int mxprec_sm100_mx_gemm_compiled(int format);

// Bytes of device workspace the kernel needs (may be 0); (size_t)-1 if the format is not compiled.
MXPREC_SM100_EXPORT size_t mxprec_sm100_mx_gemm_workspace(int format, const MxprecSm100MxGemmArgs* args);

// Launches the GEMM on `stream`. NULL on success, else a static error string.
MXPREC_SM100_EXPORT const char* mxprec_sm100_mx_gemm_run(int format, const MxprecSm100MxGemmArgs* args,
                                                         void* workspace, cudaStream_t stream);

// Byte offset of the scale of (batch l, row r, scale column c = k / 32) in the interleaved layout,
// for a matrix of `rows` rows and K = 32 * `scale_cols` (scale_cols = K / 32).
static inline int64_t mxprec_sm100_sf_offset(int64_t l, int64_t r, int64_t c, int64_t rows, int64_t scale_cols) {
  const int64_t row_blocks = (rows + 127) / 128, col_blocks = (scale_cols + 3) / 4;
  return ((l * row_blocks + r / 128) * col_blocks + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

// Bytes of one operand's scale buffer: L * R * C.
static inline int64_t mxprec_sm100_sf_bytes(int64_t l, int64_t rows, int64_t scale_cols) {
  return l * ((rows + 127) / 128) * 128 * ((scale_cols + 3) / 4) * 4;
}

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // MXPREC_CSRC_CUDA_KERNELS_SM100_MX_GEMM_BLOCKSCALED_H_
