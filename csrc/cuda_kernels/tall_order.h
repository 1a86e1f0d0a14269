// The work order of cuda_quantize.cu's tall_col_kernel (row scaling along axis 1 in one launch): the work each ticket
// names (tall_work, host and device) and the lag between a tile's two reads (tall_lag, host), in plain C++ so that
// csrc/cuda_kernels/tests/tall_order_host_test.cc checks them on the CPU.
//
// A unit is one group row's 128-column strip of `tiles` 128 x 128 tiles, units u = group_row * strips + strip. Every
// tile is read twice: for its column keys (pass 1) and for its codes (pass 2, after every pass-1 tile of its unit).
// Ticket t (0 <= t < (units + lag) tiles) does pass 1 of tile t % tiles of unit t / tiles (if that unit exists) and
// pass 2 of the same tile of unit t / tiles - lag (if that one exists). So pass 1 of (u, i) is ticket u tiles + i and
// pass 2 of it ticket (u + lag) tiles + i: every pass-1 ticket of a unit lies before all its pass-2 tickets (lag >= 1),
// and lag tiles tickets (about lag tiles newly read tiles of x) lie between a tile's two reads.
#ifndef MXPREC_CSRC_CUDA_KERNELS_TALL_ORDER_H_
#define MXPREC_CSRC_CUDA_KERNELS_TALL_ORDER_H_

#include <algorithm>
#include <cstdint>

#ifdef __CUDACC__
#define MXPREC_TALL_HD __host__ __device__ __forceinline__
#else
#define MXPREC_TALL_HD inline
#endif

namespace mxprec {
namespace cuda {
namespace tall {

struct TallWork {
  int64_t keys_unit;   // the unit whose tile `tile` this ticket keys (pass 1), or -1
  int64_t codes_unit;  // the unit whose tile `tile` this ticket codes (pass 2), or -1
  int64_t tile;        // 0 .. tiles - 1 down the unit
};

// The work of ticket t (0 <= t < (units + lag) tiles), for 1 <= lag <= units.
MXPREC_TALL_HD TallWork tall_work(int64_t t, int64_t units, int64_t tiles, int64_t lag) {
  const int64_t u = t / tiles;
  return {u < units ? u : -1, u >= lag ? u - lag : -1, t % tiles};
}

// The lag in units (1 .. units): `override_lag` where positive, else the smallest with lag * tiles >= ctas (the
// resident CTAs of the kernel), so that a GPU's worth of tickets lies between a tile's two reads (its unit's pass 1
// is finished by then) while about ctas tiles of x are read in between (~17 MB of bf16 on an H100 / H200, within the
// 50 MB L2).
inline int64_t tall_lag(int64_t ctas, int64_t tiles, int64_t units, int64_t override_lag) {
  const int64_t lag = override_lag > 0 ? override_lag : (ctas + tiles - 1) / tiles;
  return std::max<int64_t>(1, std::min(lag, units));
}

}  // namespace tall
}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_TALL_ORDER_H_
