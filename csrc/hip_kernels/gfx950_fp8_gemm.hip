// gfx950 per-tensor and 1x128 / 128x128 tile FP8 GEMM kernels for mxprec_scaled_gemm (K-major
// operands). Same kernel body as the MX kernels (gfx950_gemm_impl.h, design notes in
// gfx950_mx_gemm.hip): the scaled MFMA runs with unit scale bytes (127); per-tensor scaling
// multiplies the FP32 accumulator by s_a * s_b in the epilogue; tile scaling promotes every 128-K
// partial sum into the FP32 accumulator with its tiles' f32 scales. Compiled and ISA-checked only.
#include "gfx950_gemm_impl.h"

// Per-tensor and 1x128 / 128x128 tile FP8.
MXPREC_FP8_PAIR(e4m3, e4m3)
MXPREC_FP8_PAIR(e4m3, e5m2)
MXPREC_FP8_PAIR(e5m2, e4m3)
MXPREC_FP8_PAIR(e5m2, e5m2)
