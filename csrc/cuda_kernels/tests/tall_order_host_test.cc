// CPU check of tall_col_kernel's work order (csrc/cuda_kernels/tall_order.h):
//   1. tall_lag: an override > 0 wins, else max(tiles + ctas / 4, ctas / 2); either clamped to tiles .. units tiles;
//   2. tall_work over (units, tiles, lag): the units tiles + lag tickets key and code every tile exactly once each,
//      every ticket has work, the last keys ticket of every unit lies before its first codes ticket (the no-deadlock
//      condition), and each tile's two tickets lie exactly lag apart;
//   3. tall_ring_lag: an override > 0 wins, else tiles + ctas * slots / 2; clamped as tall_lag;
//   4. tall_ring_kernel's schedule, simulated: CTAs (at most `resident` at once, the next starting as one ends) whose
//      producer claims tickets in order, pushes pass 1 and then, once its unit's keys are all counted, pass 2 into a
//      ring of `slots` items, and whose consumers pop the ring in order; random interleavings. Every run must end
//      (no state where work is left and no step can be taken) with every tile coded once, after its unit's keys.
// Prints "<check> <cases> <mismatches>" per line and the first mismatches; exit status 1 if any.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <vector>

#include "tall_order.h"

using mxprec::cuda::tall::tall_lag;
using mxprec::cuda::tall::tall_ring_lag;
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


// One random run of tall_ring_kernel's schedule (see the top); false (and a mismatch) on a deadlock or a wrong result.
bool simulate_ring(int64_t units, int64_t tiles, int64_t lag, int ctas, int resident, int slots, std::mt19937& rng) {
  const int64_t total = units * tiles + lag;
  struct Cta {
    std::deque<int64_t> ring;  // pushed items not yet consumed: tile (pass 1), -2 - tile (pass 2), -1 (the end)
    int stage = 0;             // producer: 0 claim, 1 push pass 1, 2 wait + push pass 2, 3 push the end, 4 done
    TallWork w{-1, -1};
    bool finished = false;
  };
  std::vector<Cta> cta(static_cast<size_t>(ctas));
  std::vector<int64_t> done(static_cast<size_t>(units), 0), coded(static_cast<size_t>(units * tiles), 0);
  int64_t ticket = 0;
  int started = std::min(resident, ctas), running = started;
  std::vector<int> steps;
  for (;;) {
    steps.clear();  // enabled steps: 2 c (producer of c), 2 c + 1 (consumers of c)
    for (int c = 0; c < started; ++c) {
      Cta& k = cta[static_cast<size_t>(c)];
      if (k.finished) continue;
      const bool room = static_cast<int>(k.ring.size()) < slots;
      const bool p = k.stage == 0 || (k.stage == 1 && room) || (k.stage == 3 && room) ||
                     (k.stage == 2 && room && done[static_cast<size_t>(k.w.codes_tile / tiles)] == tiles);
      if (p) steps.push_back(2 * c);
      if (!k.ring.empty()) steps.push_back(2 * c + 1);
    }
    if (steps.empty()) break;
    const int step = steps[std::uniform_int_distribution<size_t>(0, steps.size() - 1)(rng)];
    Cta& k = cta[static_cast<size_t>(step / 2)];
    if (step % 2 == 0) {
      if (k.stage == 0) {
        const int64_t t = ticket++;
        if (t >= total) {
          k.stage = 3;
        } else {
          k.w = tall_work(t, units, tiles, lag);
          k.stage = k.w.keys_tile >= 0 ? 1 : 2;
        }
      } else if (k.stage == 1) {
        k.ring.push_back(k.w.keys_tile);
        k.stage = k.w.codes_tile >= 0 ? 2 : 0;
      } else if (k.stage == 2) {
        k.ring.push_back(-2 - k.w.codes_tile);
        k.stage = 0;
      } else {
        k.ring.push_back(-1);
        k.stage = 4;
      }
    } else {
      const int64_t item = k.ring.front();
      k.ring.pop_front();
      if (item >= 0) {
        ++done[static_cast<size_t>(item / tiles)];
      } else if (item == -1) {
        k.finished = true;
        --running;
        if (started < ctas) ++started, ++running;
      } else {
        const int64_t tile = -2 - item;
        if (done[static_cast<size_t>(tile / tiles)] != tiles) fail("ring codes before keys", units, tiles, lag, tile);
        ++coded[static_cast<size_t>(tile)];
      }
    }
  }
  bool ok = running == 0 && started == ctas;
  if (!ok) fail("ring deadlock", units, tiles, lag, ticket);
  for (int64_t i = 0; i < units * tiles; ++i) {
    if (coded[static_cast<size_t>(i)] != 1) {
      fail("ring coded", units, tiles, lag, i);
      return false;
    }
  }
  return ok;
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
  {
    const int64_t before_ring = g_bad;
    struct Case {
      int64_t ctas, slots, tiles, units, override_lag, want;
    };
    const Case lags[] = {
        {264, 3, 128, 32, 0, 524}, {396, 2, 128, 32, 0, 524}, {264, 3, 128, 2, 0, 256},
        {264, 3, 128, 32, 300, 300}, {264, 3, 128, 32, 5, 128}, {132, 3, 8, 16, 0, 128}, {1, 3, 8, 16, 0, 9},
    };
    int64_t n = 0;
    for (const Case& c : lags) {
      ++n;
      if (tall_ring_lag(c.ctas, c.slots, c.tiles, c.units, c.override_lag) != c.want) {
        fail("ring lag", c.units, c.tiles, c.want, c.ctas);
      }
    }
    std::printf("ring_lags %lld %lld\n", static_cast<long long>(n), static_cast<long long>(g_bad - before_ring));
  }
  {
    const int64_t before_sim = g_bad;
    std::mt19937 rng(59);
    int64_t runs = 0;
    struct Shape {
      int64_t units, tiles;
    };
    for (const Shape sh : {Shape{1, 2}, Shape{3, 2}, Shape{4, 3}, Shape{2, 8}, Shape{6, 4}, Shape{16, 2}}) {
      for (int64_t lag : {sh.tiles, sh.tiles + 1, sh.tiles + 5, sh.units * sh.tiles}) {
        for (int ctas : {1, 2, 3, 7}) {
          for (int resident : {1, 2, ctas}) {
            for (int slots : {2, 3}) {
              for (int rep = 0; rep < 20; ++rep, ++runs) {
                if (!simulate_ring(sh.units, sh.tiles, std::min(lag, sh.units * sh.tiles), ctas,
                                   std::min(resident, ctas), slots, rng)) {
                  break;
                }
              }
            }
          }
        }
      }
    }
    std::printf("ring %lld %lld\n", static_cast<long long>(runs), static_cast<long long>(g_bad - before_sim));
  }
  return g_bad == 0 ? 0 : 1;
}
