// Packed (dense, batch-outermost) CUTLASS strides with a 64-bit batch stride.
//
// cutlass::make_cute_packed_stride (CUTLASS 4.2, util/packed_stride.hpp) computes a batched stride's batch mode as
// the product of the two `int` extents, which wraps once an operand or output of one batch has 2^31 elements or
// more (e.g. A of 262144 x 16384 with L = 2 got batch stride 0: batch 1 read batch 0's A). packed_stride takes the
// inner strides from CUTLASS with L = 1 and sets the batch stride in 64 bits.
#pragma once

#include <cstdint>

#include "cute/layout.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace mxprec {
namespace cuda {
namespace sm90 {

// Stride: a CUTLASS batched stride type (Stride<int64_t, Int<1>, int64_t> or Stride<Int<1>, int64_t, int64_t>) of
// a rows x cols matrix (cols contiguous for the first, rows for the second) repeated `batch` times.
template <class Stride>
Stride packed_stride(Stride s, int rows, int cols, int batch) {
  s = cutlass::make_cute_packed_stride(s, cute::make_shape(rows, cols, 1));
  cute::get<2>(s) = batch > 1 ? static_cast<int64_t>(rows) * cols : 0;
  return s;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mxprec
