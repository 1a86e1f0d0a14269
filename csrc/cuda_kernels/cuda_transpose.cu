// XLA FFI handler `mxprec_transpose_bytes` for platform "CUDA" (exported C symbol MxprecTransposeBytesCuda):
// y[..., c, r] = x[..., r, c] for a tensor of 1-byte elements (FP8 codes, uint8 / int8) of rank >= 2; the
// leading dimensions are a batch. The K-contiguous copy that cuBLASLt's and our "TN" FP8 GEMMs need of an
// operand contracted along its rows (Wgrad's X and dY, Fprop's W), which XLA's own transpose emitter ran at
// about 55 % of the device copy bandwidth in the H200 Llama step (benchmarks/results/h200_fp8_transpose.md).
//
// Kernel: a CTA of 256 threads moves a 128 x 128 byte tile through 16 KiB of shared memory.
//   load   thread t reads rows t / 8 + 32 k (k < 4), bytes 16 (t % 8) .. + 15 of each: 16-byte loads, 8 lanes
//          per 128-byte row; stored as 4 words at word column (4 (t % 8)) ^ swz(row), swz(row) =
//          ((row / 16) % 8) * 4, a whole 16-byte slot (conflict-free: 8 lanes of one row fill 32 banks);
//   store  thread t = 8 a + q owns input columns 4a .. 4a + 3 and input rows 16 q .. 16 q + 15: 16 word loads
//          (word a ^ swz: 32 distinct banks across a warp), four 4 x 4 byte transposes (8 byte permutes each),
//          then output rows 4a .. 4a + 3, bytes 16 q .. 16 q + 15: four 16-byte stores, 8 lanes per 128-byte
//          output row.
// Shapes whose rows or columns are not multiples of 128 (or buffers not 16-byte aligned) take the same kernel
// with guarded byte loads and stores throughout (kWhole = false).
#include <cuda_runtime.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "byte_transpose.cuh"
#include "cuda_status.h"
#include "ffi_helpers.h"

namespace mxprec {
namespace cuda_transpose {
namespace {

constexpr const char* kOp = "mxprec_transpose_bytes";
constexpr int kTile = 128;        // tile rows = tile cols (bytes)
constexpr int kThreads = 256;
constexpr int kWords = kTile / 4;  // 32-bit words per tile row
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ int swizzle(int row) { return ((row >> 4) & 7) << 2; }

// x, y: (batch, rows, cols) and (batch, cols, rows), row-major. kWhole: rows and cols are multiples of 128
// (every tile whole, 16-byte accesses); otherwise bytes are loaded and stored one at a time, bounds-checked.
template <bool kWhole>
__global__ void __launch_bounds__(kThreads) transpose_bytes_kernel(const uint8_t* __restrict__ x,
                                                                   uint8_t* __restrict__ y, int64_t rows,
                                                                   int64_t cols) {
  __shared__ __align__(16) uint32_t tile[kTile][kWords];
  const int64_t plane = rows * cols;
  const uint8_t* xb = x + static_cast<int64_t>(blockIdx.z) * plane;
  uint8_t* yb = y + static_cast<int64_t>(blockIdx.z) * plane;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int t = static_cast<int>(threadIdx.x);
  const int m = t & 7;  // load: 16-byte piece of the row
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int r = (t >> 3) + 32 * k;
    uint4 v;
    if constexpr (kWhole) {
      v = __ldg(reinterpret_cast<const uint4*>(xb + (r0 + r) * cols + c0 + 16 * m));
    } else {
      uint32_t w[4] = {0, 0, 0, 0};
      if (r0 + r < rows) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const int64_t c = c0 + 16 * m + j;
          if (c < cols) w[j >> 2] |= static_cast<uint32_t>(xb[(r0 + r) * cols + c]) << (8 * (j & 3));
        }
      }
      v = make_uint4(w[0], w[1], w[2], w[3]);
    }
    *reinterpret_cast<uint4*>(&tile[r][(4 * m) ^ swizzle(r)]) = v;
  }
  __syncthreads();
  const int q = t & 7, a = t >> 3;  // store: input rows 16 q .. 16 q + 15, input columns 4 a .. 4 a + 3
  const int sw = q << 2;            // swizzle(16 q + i) for every i < 16
  uint32_t out[4][4];               // out[c][g]: output row 4 a + c, bytes 4 g .. 4 g + 3 of the thread's 16
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    uint32_t w[4], col[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = tile[16 * q + 4 * g + i][a ^ sw];
    transpose4x4(w, col);
#pragma unroll
    for (int c = 0; c < 4; ++c) out[c][g] = col[c];
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int64_t orow = c0 + 4 * a + c;  // output row = input column
    const int64_t ocol = r0 + 16 * q;     // output column = input row
    if constexpr (kWhole) {
      *reinterpret_cast<uint4*>(yb + orow * rows + ocol) = make_uint4(out[c][0], out[c][1], out[c][2], out[c][3]);
    } else if (orow < cols) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        if (ocol + j < rows) yb[orow * rows + ocol + j] = static_cast<uint8_t>(out[c][j >> 2] >> (8 * (j & 3)));
      }
    }
  }
}

bool is_byte_type(ffi::DataType t) {
  return t == ffi::DataType::F8E4M3FN || t == ffi::DataType::F8E5M2 || t == ffi::DataType::U8 ||
         t == ffi::DataType::S8;
}

ffi::Error TransposeBytesImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y) {
  const auto xd = x.dimensions();
  const auto yd = y->dimensions();
  const size_t rank = xd.size();
  if (!is_byte_type(x.element_type()) || y->element_type() != x.element_type()) {
    std::ostringstream os;
    os << kOp << ": x has dtype " << dtype_name(x.element_type()) << " and y " << dtype_name(y->element_type())
       << "; both must be the same 1-byte type (float8_e4m3fn, float8_e5m2, uint8, int8)";
    return invalid(os.str());
  }
  bool ok = rank >= 2 && yd.size() == rank && yd[rank - 2] == xd[rank - 1] && yd[rank - 1] == xd[rank - 2];
  for (size_t i = 0; ok && i + 2 < rank; ++i) ok = yd[i] == xd[i];
  if (!ok) {
    std::ostringstream os;
    os << kOp << ": x has shape " << dims_str(xd) << " and y " << dims_str(yd)
       << "; expected rank >= 2 and y the shape of x with its last two dimensions swapped";
    return invalid(os.str());
  }
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < rank; ++i) batch *= xd[i];
  const int64_t rows = xd[rank - 2], cols = xd[rank - 1];
  if (batch == 0 || rows == 0 || cols == 0) return ffi::Error::Success();
  const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  if (gy > kMaxGridY || batch > kMaxGridY || gx > 2147483647) {
    std::ostringstream os;
    os << kOp << ": x of shape " << dims_str(xd) << " needs a grid of " << gx << " x " << gy << " x " << batch
       << " tiles of 128 x 128; the kernel takes at most 65535 row tiles and 65535 batch entries";
    return invalid(os.str());
  }
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(batch));
  const auto* src = static_cast<const uint8_t*>(x.untyped_data());
  auto* dst = static_cast<uint8_t*>(y->untyped_data());
  const bool whole = rows % kTile == 0 && cols % kTile == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (whole) transpose_bytes_kernel<true><<<grid, kThreads, 0, stream>>>(src, dst, rows, cols);
  else transpose_bytes_kernel<false><<<grid, kThreads, 0, stream>>>(src, dst, rows, cols);
  return cuda_status(kOp, "kernel launch", cudaGetLastError());
}

}  // namespace
}  // namespace cuda_transpose
}  // namespace mxprec

MXPREC_DECLARE_HANDLER_SYMBOL(MxprecTransposeBytesCuda);

XLA_FFI_DEFINE_HANDLER_SYMBOL(MxprecTransposeBytesCuda, mxprec::cuda_transpose::TransposeBytesImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
