// CPU check of the persistent GEMM's split last wave plan and work list (csrc/cuda_kernels/split_tail.h):
//   1. split_tail_pieces: unknown modes ("", "1", "0", "4097", "2x", "on", "-3") are -1; "off" is 0; auto splits
//      exactly a last wave of 1 .. clusters / 2 tiles after a full wave, into min(clusters / tail, k blocks / 4) >= 2
//      pieces, so that tail * pieces <= clusters; a forced count N splits the last wave (or the whole grid when it
//      is one partial wave, or the last full wave) into min(N, k blocks) pieces;
//   2. work_item over every plan: the items cover each (cluster tile, k block) exactly once, every item's k range is
//      nonempty, the units are 0 .. tail * pieces - 1 in order and belong to the last `tail` tiles; under auto no
//      cluster takes more than one item beyond ceil(full tiles / clusters).
// Prints "<check> <cases> <mismatches>" per line and the first mismatches; exit status 1 if any.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "split_tail.h"

using mxprec::cuda::persistent::split_tail_pieces;
using mxprec::cuda::persistent::SplitTail;
using mxprec::cuda::persistent::work_item;
using mxprec::cuda::persistent::WorkItem;

namespace {

int64_t g_bad = 0;
void fail(const char* what, int64_t tiles, int64_t clusters, int64_t kb, const std::string& mode) {
  if (g_bad++ < 20) {
    std::printf("MISMATCH %s tiles=%lld clusters=%lld kb=%lld mode=%s\n", what, static_cast<long long>(tiles),
                static_cast<long long>(clusters), static_cast<long long>(kb), mode.c_str());
  }
}

// Checks the plan's formula and its work list; returns false on the first violation.
bool check_plan(const std::string& mode, int64_t tiles, int64_t clusters, int64_t kb) {
  int64_t tail = -1;
  const int pieces = split_tail_pieces(mode, tiles, clusters, kb, &tail);
  const int64_t rem = tiles % clusters;
  if (mode == "off") {
    if (pieces != 0 || tail != 0) return fail("off", tiles, clusters, kb, mode), false;
  } else if (mode == "auto") {
    const int64_t want = std::min(rem == 0 ? 0 : clusters / rem, kb / 4);
    const bool split = tiles >= clusters && rem > 0 && 2 * rem <= clusters && want >= 2;
    if (split ? (pieces != want || tail != rem || tail * pieces > clusters) : (pieces != 0 || tail != 0)) {
      return fail("auto plan", tiles, clusters, kb, mode), false;
    }
  } else {
    const int64_t n = std::stoll(mode), want = std::min(n, kb);
    const int64_t want_tail = rem != 0 ? rem : std::min(tiles, clusters);
    if (want < 2 ? (pieces != 0 || tail != 0) : (pieces != want || tail != want_tail)) {
      return fail("forced plan", tiles, clusters, kb, mode), false;
    }
  }
  const SplitTail split{nullptr, static_cast<int>(tail), pieces > 0 ? pieces : 1};
  const int num_full = static_cast<int>(tiles - split.tail_tiles);
  const int num_work = num_full + split.tail_tiles * split.pieces;
  std::vector<int> covered(static_cast<size_t>(tiles * kb), 0);
  std::vector<int> per_cluster(static_cast<size_t>(clusters), 0);
  int next_unit = 0;
  for (int w = 0; w < num_work; ++w) {
    const WorkItem it = work_item(w, num_full, static_cast<int>(kb), split);
    if (it.tile < 0 || it.tile >= tiles || it.kb_begin < 0 || it.kb_begin >= it.kb_end || it.kb_end > kb) {
      return fail("item range", tiles, clusters, kb, mode), false;
    }
    if ((w < num_full) != (it.unit < 0) || (it.unit >= 0 && (it.unit != next_unit++ || it.tile < num_full))) {
      return fail("unit", tiles, clusters, kb, mode), false;
    }
    for (int k = it.kb_begin; k < it.kb_end; ++k) ++covered[static_cast<size_t>(it.tile * kb + k)];
    ++per_cluster[static_cast<size_t>(w % clusters)];
  }
  for (int c : covered) {
    if (c != 1) return fail("coverage", tiles, clusters, kb, mode), false;
  }
  if (mode == "auto") {
    const int64_t waves = (num_full + clusters - 1) / clusters;
    for (int n : per_cluster) {
      if (n > waves + 1) return fail("balance", tiles, clusters, kb, mode), false;
    }
  }
  return true;
}

}  // namespace

int main() {
  int64_t cases = 0;
  {
    const int64_t before = g_bad;
    int64_t n = 0;
    for (const char* bad : {"", "1", "0", "4097", "2x", "on", "-3", "auto "}) {
      int64_t tail = 7;
      ++n;
      if (split_tail_pieces(bad, 100, 66, 64, &tail) != -1 || tail != 0) fail("unknown mode", 100, 66, 64, bad);
    }
    std::printf("modes %lld %lld\n", static_cast<long long>(n), static_cast<long long>(g_bad - before));
  }
  const int64_t before = g_bad;
  const std::vector<std::string> modes = {"off", "auto", "2", "3", "7", "64", "4096"};
  for (int64_t clusters : {1, 2, 7, 33, 60, 66, 132}) {
    for (int64_t tiles = 1; tiles <= 600; tiles += (tiles < 140 ? 1 : 37)) {
      for (int64_t kb : {1, 2, 3, 7, 8, 9, 16, 64, 112, 224}) {
        for (const std::string& mode : modes) {
          ++cases;
          check_plan(mode, tiles, clusters, kb);
        }
      }
    }
  }
  // The H200's shapes: 2048 cluster tiles (8192^3, 128-column tiles, 2x1 clusters), 1408 (16384x14336x4096, 192
  // columns), 5504 (16384x4096x11008), on 66 clusters.
  for (int64_t tiles : {2048, 1408, 5504, 7168, 256, 512}) {
    for (int64_t kb : {32, 64, 86, 112, 224}) {
      ++cases;
      check_plan("auto", tiles, 66, kb);
    }
  }
  std::printf("plans %lld %lld\n", static_cast<long long>(cases), static_cast<long long>(g_bad - before));
  return g_bad == 0 ? 0 : 1;
}
