// CPU check of tall_col_kernel's work order (csrc/cuda_kernels/tall_order.h):
//   1. tall_lag: an override > 0 wins, else max(tiles + ctas / 4, ctas / 2); either clamped to tiles .. units tiles;
//   2. tall_work over (units, tiles, lag): the units tiles + lag tickets key and code every tile exactly once each,
//      every ticket has work, the last keys ticket of every unit lies before its first codes ticket (the no-deadlock
//      condition), and each tile's two tickets lie exactly lag apart.
// Prints "<check> <cases> <mismatches>" per line and the first mismatches; exit status 1 if any.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "tall_order.h"

using mxprec::cuda::tall::tall_lag;
using mxprec::cuda::tall::tall_work;
using mxprec::cuda::tall::TallWork;

namespace {

int64_t g_bad = 0;
void fail(const char* what, int64_t units, int64_t tiles, int64_t lag, int64_t t) {
  if (g_bad++ < 20) {
    std::printf("MISMATCH %s units=%lld tiles=%lld lag=%lld t=%lld\n", what, static_cast<long long>(units),
                static_cast<long long>(tiles), static_cast<long long>(lag), static_cast<long long>(t));
  }
}

void check_order(int64_t units, int64_t tiles, int64_t lag) {
  const int64_t n = units * tiles + lag;
  std::vector<int64_t> keys(static_cast<size_t>(units * tiles), -1), codes(keys.size(), -1);  // tile -> ticket
  const auto take = [&](std::vector<int64_t>& seen, int64_t tile, int64_t t) {
    if (tile >= units * tiles) return fail("range", units, tiles, lag, t), false;
    int64_t& slot = seen[static_cast<size_t>(tile)];
    if (slot >= 0) return fail("twice", units, tiles, lag, t), false;
    slot = t;
    return true;
  };
  for (int64_t t = 0; t < n; ++t) {
    const TallWork w = tall_work(t, units, tiles, lag);
    if (w.keys_tile < 0 && w.codes_tile < 0) return fail("idle ticket", units, tiles, lag, t);
    if (w.keys_tile >= 0 && !take(keys, w.keys_tile, t)) return;
    if (w.codes_tile >= 0 && !take(codes, w.codes_tile, t)) return;
  }
  for (int64_t u = 0; u < units; ++u) {
    int64_t last_keys = -1, first_codes = n;
    for (int64_t i = u * tiles; i < (u + 1) * tiles; ++i) {
      const int64_t tk = keys[static_cast<size_t>(i)], tc = codes[static_cast<size_t>(i)];
      if (tk < 0 || tc < 0) return fail("missing", units, tiles, lag, u);
      last_keys = tk > last_keys ? tk : last_keys;
      first_codes = tc < first_codes ? tc : first_codes;
      if (tc - tk != lag) fail("gap", units, tiles, lag, tc);
    }
    if (last_keys >= first_codes) fail("keys before codes", units, tiles, lag, first_codes);
  }
}

}  // namespace

int main() {
  int64_t cases = 0;
  {
    const int64_t before = g_bad;
    struct Case {
      int64_t ctas, tiles, units, override_lag, want;
    };
    const Case lags[] = {
        {528, 128, 32, 0, 264},  {528, 128, 2, 0, 256},   {528, 128, 32, 300, 300}, {528, 128, 32, 99, 128},
        {528, 128, 32, 9999, 4096}, {528, 2, 4096, 0, 264}, {264, 8, 16, 0, 128},   {1, 8, 16, 0, 8},
        {528, 64, 64, 0, 264},   {528, 512, 8, 0, 644},   {132, 16, 8, 0, 66},      {132, 64, 1, 0, 64},
        {132, 64, 1, 5, 64},
    };
    for (const Case& c : lags) {
      ++cases;
      if (tall_lag(c.ctas, c.tiles, c.units, c.override_lag) != c.want) fail("lag", c.units, c.tiles, c.want, c.ctas);
    }
    std::printf("lags %lld %lld\n", static_cast<long long>(cases), static_cast<long long>(g_bad - before));
  }
  const int64_t before = g_bad;
  int64_t orders = 0;
  for (int64_t units = 1; units <= 40; units += (units < 12 ? 1 : 7)) {
    for (int64_t tiles : {2, 3, 4, 7, 8, 16, 128}) {
      for (int64_t lag = tiles; lag <= units * tiles; lag += (lag < tiles + 6 ? 1 : tiles + 5)) {
        ++orders;
        check_order(units, tiles, lag);
      }
    }
  }
  check_order(32, 128, 264);  // 16384 x 4096 bf16 on an H100 / H200 (528 resident CTAs)
  ++orders;
  std::printf("orders %lld %lld\n", static_cast<long long>(orders), static_cast<long long>(g_bad - before));
  return g_bad == 0 ? 0 : 1;
}
