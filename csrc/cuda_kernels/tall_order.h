// The work order of cuda_quantize.cu's tall_col_kernel (row scaling along axis 1 in one launch): the work each ticket
// names (tall_work, host and device) and the lag between a tile's two reads (tall_lag, host), in plain C++ so that
// csrc/cuda_kernels/tests/tall_order_host_test.cc checks them on the CPU.
//
// A unit is one group row's 128-column strip of `tiles` 128 x 128 tiles, units u = group_row * strips + strip; tile
// (u, i) is number u tiles + i. Every tile is read twice: for its column keys (pass 1) and for its codes (pass 2,
// after every pass-1 tile of its unit). Ticket t (0 <= t < units tiles + lag) does pass 1 of tile t (if t < units
// tiles) and pass 2 of tile t - lag (if t >= lag): so lag tickets (about lag newly read tiles of x) lie between a tile's
// two reads, and with lag >= tiles every pass-1 ticket of a unit lies before all its pass-2 tickets.
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
  int64_t keys_tile;   // the tile this ticket keys (pass 1), or -1
  int64_t codes_tile;  // the tile this ticket codes (pass 2), or -1
};

// The work of ticket t (0 <= t < units tiles + lag), for lag >= tiles.
MXPREC_TALL_HD TallWork tall_work(int64_t t, int64_t units, int64_t tiles, int64_t lag) {
  return {t < units * tiles ? t : -1, t >= lag ? t - lag : -1};
}

// The lag in tiles (tiles .. units tiles): `override_lag` where positive, else max(tiles + ctas / 4, ctas / 2) (ctas:
// the kernel's resident CTAs): a tile's codes wait for its whole unit's keys (lag >= tiles) and at least a quarter of a
// GPU's worth of CTAs beyond, and for half a GPU's worth of tickets where the unit is shorter, while only lag tiles of
// x are read in between (264 tiles, 8.7 MB of bf16, at 16384 x 4096 on an H100 / H200 with 4 CTAs per SM; 330 for the
// in-place instance's 5). Measured (H100, bf16, % of copy at 16384 x 4096 / 8192 x 8192 / 4096 x 4096,
// h100_quantize_l2.md call 11): this rule (264 / 264 / 264) 67.0-67.3 / 67.6-68.0 / 56.1-56.7; the earlier one,
// tiles + ctas / 2 (392 / 328 / 296), 66.0-66.2 / 67.6-67.8 / 56.6. H200 (h200_cuda_quantize_58.md): this rule
// (330 in place / 264 with the code tile) 54.5 / 55.2 / 45.0, lag 264 53.2 / 54.9 / 45.0, lag 200 52.8 / 54.7 / 44.2.
inline int64_t tall_lag(int64_t ctas, int64_t tiles, int64_t units, int64_t override_lag) {
  const int64_t lag = override_lag > 0 ? override_lag : std::max(tiles + ctas / 4, ctas / 2);
  return std::max(tiles, std::min(lag, units * tiles));
}

// tall_ring_kernel's lag (tiles .. units tiles): `override_lag` where positive, else tiles + ctas * slots / 2 (ctas:
// its resident CTAs, each with up to `slots` items, about slots / 2 tickets, between its producer and its
// consumers), so that a tile's codes wait for its whole unit's keys and for the tickets in flight on the whole GPU.
inline int64_t tall_ring_lag(int64_t ctas, int64_t slots, int64_t tiles, int64_t units, int64_t override_lag) {
  const int64_t lag = override_lag > 0 ? override_lag : tiles + ctas * slots / 2;
  return std::max(tiles, std::min(lag, units * tiles));
}

}  // namespace tall
}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_TALL_ORDER_H_
