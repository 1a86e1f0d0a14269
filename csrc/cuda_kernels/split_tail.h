// The persistent GEMM's split last wave (sm90_fp8_gemm_persistent.cuh): its plan (split_tail_pieces, host) and its
// work list (work_item, host and device), in plain C++ so that csrc/cuda_kernels/tests/split_tail_host_test.cc checks
// them on the CPU.
//
// A persistent grid of C clusters over T cluster tiles runs ceil(T / C) waves; when the last one holds few tiles
// (T % C small: e.g. 2 of 66 at 8192^3) most clusters idle through it. Instead its `tail_tiles` cluster tiles are
// each cut into `pieces` k ranges (whole k blocks), one work unit each, taken by the clusters after their full tiles;
// a unit stores its FP32 sum (per-tensor / row-wise: unscaled; block-scaled: with its mainloop scales) to
// `partials` and split_tail_reduce_kernel (launched after the GEMM kernel) adds each tile's pieces in piece order
// and applies the epilogue (the scales, or the bias only). Deterministic (no atomics, a fixed order); the
// association differs from the one-pass k loop's (each piece starts from zero), so those tiles are not
// bit-identical to an unsplit run.
#ifndef MXPREC_CSRC_CUDA_KERNELS_SPLIT_TAIL_H_
#define MXPREC_CSRC_CUDA_KERNELS_SPLIT_TAIL_H_

#include <cstdint>
#include <cstdlib>
#include <string>

#ifdef __CUDACC__
#define MXPREC_SPLIT_TAIL_HD __host__ __device__ __forceinline__
#else
#define MXPREC_SPLIT_TAIL_HD inline
#endif

namespace mxprec {
namespace cuda {
namespace persistent {

struct SplitTail {
  float* partials;  // [tail_tiles * pieces units][kClusterSize CTAs][2 warpgroups][kBlockN / 2 registers][128 threads]
  int tail_tiles;   // 0: no split (every tile in one pass)
  int pieces;
};

// Work item w of a cluster: the full cluster tile w (w < num_full), or unit u = w - num_full of the split tail:
// k blocks [kb_begin, kb_end) of cluster tile num_full + u / pieces. The work list has
// num_full + tail_tiles * pieces items, num_full = tiles - tail_tiles; cluster c takes items c, c + clusters, ...
struct WorkItem {
  int tile;
  int kb_begin, kb_end;
  int unit;  // -1: a full tile
};
MXPREC_SPLIT_TAIL_HD WorkItem work_item(int w, int num_full, int num_kb, const SplitTail& split) {
  if (w < num_full) return WorkItem{w, 0, num_kb, -1};
  const int u = w - num_full, piece = u % split.pieces;
  return WorkItem{num_full + u / split.pieces, piece * num_kb / split.pieces, (piece + 1) * num_kb / split.pieces, u};
}

// The plan for `mode` ("off", "auto", or a piece count 2 .. 4096 that forces the split of the last wave, however
// full, into min(count, k blocks) pieces; for tests). auto splits the last wave's `tail` = tiles % clusters cluster
// tiles when it holds at most half the clusters and full waves precede it, into
// min(clusters / tail, k blocks / kMinSplitKBlocks) pieces (at least 2). Returns the pieces (0: no split) and sets
// *tail, or -1 for a mode it does not know. Thirty-eighth session (benchmarks/results/h200_gemm_split_tail.md, 66
// clusters of 2): +0.7 to +2.9 % against the unsplit kernel with a last wave of 2 (8192^3, 16384x11008x4096; 16 / 21
// pieces) or 22 (16384x14336x4096, 192-column tiles; 3 pieces); 26 of 66 in 2 pieces (16384x4096x11008): -0.5 /
// -0.1 %, within the method's noise (median +0.6 %, 0.992-1.041, between two identical configurations).
// Thirty-ninth session (h200_gemm_block_split.md): the block-scaled kernels +0.1 to +2.9 % (8192^3 in 2 calls,
// 16384x14336x4096, 8192x28672x8192); 26 of 66 in 2 pieces again +0.4 / +0.2 / -0.1 % (three families).
constexpr int64_t kMinSplitKBlocks = 4;
inline int split_tail_pieces(const std::string& mode, int64_t tiles, int64_t clusters, int64_t kb, int64_t* tail) {
  *tail = 0;
  if (mode == "off") return 0;
  const int64_t rem = tiles % clusters;
  if (mode == "auto") {
    if (tiles < clusters || rem == 0 || 2 * rem > clusters) return 0;
    const int64_t by_clusters = clusters / rem, by_k = kb / kMinSplitKBlocks;
    const int64_t pieces = by_clusters < by_k ? by_clusters : by_k;
    if (pieces < 2) return 0;
    *tail = rem;
    return static_cast<int>(pieces);
  }
  char* end = nullptr;
  const long forced = std::strtol(mode.c_str(), &end, 10);
  if (end == mode.c_str() || *end != '\0' || forced < 2 || forced > 4096) return -1;
  const int64_t pieces = forced < kb ? forced : kb;
  if (pieces < 2) return 0;
  *tail = rem != 0 ? rem : (tiles < clusters ? tiles : clusters);
  return static_cast<int>(pieces);
}

}  // namespace persistent
}  // namespace cuda
}  // namespace mxprec

#endif  // MXPREC_CSRC_CUDA_KERNELS_SPLIT_TAIL_H_
