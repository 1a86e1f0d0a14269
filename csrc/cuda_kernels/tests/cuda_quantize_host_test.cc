// CPU check of the CUDA quantize kernels' element fast path (csrc/common/quantize_math.h):
//   1. encode_rne(v, f) == encode_grid(round_to_grid(v, f), f) for non-NaN v: every grid point of
//      every format times 2**k (k in [-150, 150]), its FP32 neighbours, the midpoints between grid
//      points and their neighbours, +-0, +-Inf, FP32 subnormals, and a strided sweep of all FP32 bits;
//   2. encode_elem(x, scaled_elem_scale(s), f) == encode_scaled(x, s, f) (tensor / row / tile / NVFP4
//      eff scales): s normal, powers of two, tiny (< 2**-108), subnormal, 0, +-Inf, NaN, negative;
//      x random over the exponent range, division ties (grid midpoints * s), subnormals, +-NaN, +-Inf;
//   3. encode_elem(x, mx_elem_scale(m), f) == encode_mx(x, m, f) with m = mx_block_scale(amax), x in
//      [-amax, amax] (block amaxes over the whole FP32 exponent range: e = 127, e < -109, ...);
//   4. encode_elem(x, nvfp4_elem_scale(b)) == encode_nvfp4(x, b);
//   5. narrow2_bf16 (the bf16-pair MX FP6 / FP4 encoder) against encode_rne and encode_mx;
//   6. the NVFP4 reciprocal certificate (e2m1_near_boundary): where it is false, encode_rne(RN(x * RN(1 / s)))
//      == encode_scaled(x, s) for E2M1 (where it is true, after the kernels' Markstein steps), with x up to 40
//      FP32 steps either side of every E2M1 grid point and midpoint times s, random and tiny x, s over
//      [2**-80, 2**102); and the device's encoder of q0 (narrow2_bf16 of the round-to-odd bf16 pattern,
//      ro_bf16x2) against encode_rne, there and over a sweep of the FP32 patterns;
//   7. NVFP4's block scale through one multiply (nvfp4_block_certified): where certified, the E4M3 scale of
//      t1 = RN(amax * RN(1 / RN(6 ts))) equals nvfp4_block_scale's, amax around every E4M3 grid point and midpoint
//      times 6 ts, random, tiny, Inf, NaN, ts over [2**-100, 2**100] and outside;
//   8. NVFP4 codes by limits (nvfp4_limit, nvfp4_limit16, nvfp4_codes_by_limits, nvfp4_pack_pairs) against
//      encode_nvfp4: every bf16 and every f16 pattern (both signs, NaN excluded: a group holding one takes the exact
//      path), and FP32 x within 3 steps of every limit, for block scales eff over [2**-124, 2**120] (its ends, powers
//      of two, E4M3 grid values times tensor scales, random); and the range test (nvfp4_limits_apply).
// The host divides / multiplies in IEEE FP32 without FTZ, like the device's div.rn.f32 / mul.rn.
// Prints "<check> <cases> <mismatches>" per line and the first mismatches; exit status 1 if any.
// Not covered here (device-only): cvt.rn.satfinite.{e4m3,e5m2}x2.f32, which the kernels use for
// FP8 instead of encode_rne (tests/test_cuda_quantize.py checks it on the GPU).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "formats.h"
#include "quantize_math.h"

using namespace mxprec;

namespace {

const ElemFormat kFormats[] = {ElemFormat::kE4M3, ElemFormat::kE5M2, ElemFormat::kE2M3, ElemFormat::kE3M2,
                               ElemFormat::kE2M1};

struct Counter {
  const char* name;
  long cases = 0, bad = 0;
  void check(bool ok, float x, float s, ElemFormat f, int got, int want) {
    ++cases;
    if (ok) return;
    if (bad++ < 5)
      std::printf("MISMATCH %s fmt=%s x=%a (0x%08x) s=%a (0x%08x) got=0x%02x want=0x%02x\n", name, format_name(f), x,
                  f32_bits(x), s, f32_bits(s), got, want);
  }
  void report() const { std::printf("%s %ld %ld\n", name, cases, bad); }
};

std::vector<float> grid_values(ElemFormat f) {
  std::vector<float> g;
  const int bits = format_bits(f);
  for (uint32_t c = 0; c < (1u << (bits - 1)); ++c) {
    const float v = decode_code(static_cast<uint8_t>(c), f);
    if (std::isfinite(v)) g.push_back(v);
  }
  return g;
}

float next_up(float x) { return std::nextafter(x, INFINITY); }
float next_down(float x) { return std::nextafter(x, -INFINITY); }

// Values around every grid point / midpoint of f scaled by 2**k, both signs.
std::vector<float> edge_values(ElemFormat f, int kmin, int kmax) {
  std::vector<float> out;
  const std::vector<float> g = grid_values(f);
  std::vector<double> pts(g.begin(), g.end());
  for (size_t i = 1; i < g.size(); ++i) pts.push_back((static_cast<double>(g[i - 1]) + g[i]) / 2.0);
  pts.push_back(format_info(f).max_finite * 1.0625);
  for (double p : pts) {
    for (int k = kmin; k <= kmax; ++k) {
      const float v = static_cast<float>(std::ldexp(p, k));
      if (!std::isfinite(v) || v == 0.0f) continue;
      for (float w : {v, next_up(v), next_down(v), next_up(next_up(v)), next_down(next_down(v))}) {
        out.push_back(w);
        out.push_back(-w);
      }
    }
  }
  return out;
}

}  // namespace

int main() {
  std::mt19937_64 rng(1234);
  const float inf = INFINITY;
  const float nan_pos = bits_f32(0x7FC00000u), nan_neg = bits_f32(0xFFC12345u);

  // 1. encode_rne
  Counter c1{"encode_rne"};
  for (ElemFormat f : kFormats) {
    std::vector<float> vs = edge_values(f, -150, 150);
    for (float v : {0.0f, -0.0f, inf, -inf, bits_f32(1u), bits_f32(0x807FFFFFu), 3.4e38f, -3.4e38f}) vs.push_back(v);
    for (uint64_t u = 0; u < (1ull << 32); u += 65521) vs.push_back(bits_f32(static_cast<uint32_t>(u)));
    for (float v : vs) {
      if (is_nan(v)) continue;
      const int got = encode_rne(v, f), want = encode_grid(round_to_grid(v, f), f);
      c1.check(got == want, v, 0.0f, f, got, want);
    }
  }
  c1.report();

  // 2. scaled (tensor / row / tile / NVFP4 eff)
  Counter c2{"scaled"};
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-140, 127);
  std::vector<float> scales = {1.0f, 0.0371f, 3.0f / 448.0f, 0.5f, 0x1p-100f, 0x1p-108f, 0x1.8p-108f, 0x1p-109f,
                               0x1.fffffep-109f, 0x1p-126f, 0x1p-127f, 0x1p-149f, 0.0f, -0.0f, inf, -inf, nan_pos,
                               nan_neg, -0.25f, -0.0371f, 0x1p126f, 0x1p127f, 0x1.fffffep127f, 448.0f, 1.0f / 57344.0f};
  for (int i = 0; i < 300; ++i) scales.push_back(std::ldexp(1.0f + 0.5f * (unit(rng) + 1.0f), expo(rng)));
  for (int k = -130; k <= 128; ++k) scales.push_back(std::ldexp(1.0f, k));
  for (ElemFormat f : kFormats) {
    const std::vector<float> edges = edge_values(f, -4, 4);
    for (float s : scales) {
      std::vector<float> xs = {0.0f, -0.0f, inf, -inf, nan_pos, nan_neg, bits_f32(1u), bits_f32(0x80400000u)};
      for (int i = 0; i < 200; ++i) xs.push_back(std::ldexp(unit(rng), expo(rng)));
      for (size_t i = 0; i < edges.size(); i += 7) xs.push_back(edges[i] * s);  // division ties (and near)
      for (float x : xs) {
        const ElemScale es = scaled_elem_scale(s);
        const int got = encode_elem(x, es, f), want = encode_scaled(x, s, f);
        c2.check(got == want, x, s, f, got, want);
      }
    }
  }
  c2.report();

  // 3. MX
  Counter c3{"mx"};
  for (ElemFormat f : kFormats) {
    for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      for (int k = -126; k <= 127; ++k) {
        for (float mant : {1.0f, 1.5f, 1.75f, 1.875f, 1.9999999f, 1.25f, 1.0000001f}) {
          const float amax = std::ldexp(mant, k);
          if (!std::isfinite(amax)) continue;
          const MxScale m = mx_block_scale(amax, f, rule);
          const ElemScale es = mx_elem_scale(m);
          std::vector<float> xs = {amax, -amax, 0.0f, -0.0f, bits_f32(1u), bits_f32(0x80000123u), bits_f32(0x007FFFFFu)};
          for (int i = 0; i < 40; ++i) xs.push_back(amax * unit(rng));
          for (int i = 0; i < 20; ++i) xs.push_back(std::ldexp(amax * unit(rng), -std::uniform_int_distribution<int>(0, 40)(rng)));
          for (float x : xs) {
            const int got = encode_elem(x, es, f), want = encode_mx(x, m, f);
            c3.check(got == want, x, amax, f, got, want);
          }
        }
      }
      for (float amax : {0.0f, inf, nan_pos}) {
        const MxScale m = mx_block_scale(amax, f, rule);
        for (float x : {1.0f, -2.0f, 0.0f, inf, nan_neg}) {
          const int got = encode_elem(x, mx_elem_scale(m), f), want = encode_mx(x, m, f);
          c3.check(got == want, x, amax, f, got, want);
        }
      }
    }
  }
  c3.report();

  // 4. NVFP4
  Counter c4{"nvfp4"};
  std::vector<float> tss = {1.0f, 448.0f / 2688.0f, 0x1p-120f, 0x1p-130f, 3.0e38f / 2688.0f, inf, nan_pos, 0.0371f};
  for (int i = 0; i < 50; ++i) tss.push_back(std::ldexp(1.0f + 0.5f * (unit(rng) + 1.0f), expo(rng)));
  for (float ts : tss) {
    for (int i = 0; i < 400; ++i) {
      const float amax = std::abs(std::ldexp(unit(rng), expo(rng)));
      const Nvfp4Scale b = nvfp4_block_scale(amax_finish(amax), ts);
      const ElemScale es = nvfp4_elem_scale(b);
      for (int j = 0; j < 16; ++j) {
        const float x = j == 0 ? amax : (j == 1 ? bits_f32(0x80000042u) : amax * unit(rng));
        const int got = encode_elem(x, es, ElemFormat::kE2M1), want = encode_nvfp4(x, b);
        c4.check(got == want, x, ts, ElemFormat::kE2M1, got, want);
      }
    }
  }
  c4.report();

  // 5. narrow2_bf16 (the bf16-pair MX FP6 / FP4 encoder): every finite bf16 x, every kMul block scale
  // 2**e (e in [-109, 126]), against the FP32 path encode_rne(x * 2**-e) and the exact encode_mx. Lane 1
  // holds another value, so a lane that leaked into its neighbour shows.
  Counter c5{"bf16_pairs"};
  for (ElemFormat f : {ElemFormat::kE2M3, ElemFormat::kE3M2, ElemFormat::kE2M1}) {
    for (int e = -109; e <= 126; ++e) {
      const float p = exp2i(-e);
      const uint32_t p2 = (f32_bits(p) >> 16) * 0x00010001u;
      for (uint32_t h = 0; h < 0x10000u; ++h) {
        const uint32_t h1 = (h * 40503u + 0x3F80u) & 0xFFFFu;  // a different value in lane 1
        const float x0 = bf16_to_f32(static_cast<uint16_t>(h)), x1 = bf16_to_f32(static_cast<uint16_t>(h1));
        if (!std::isfinite(x0) || !std::isfinite(x1)) continue;
        uint32_t got2 = 0;
        switch (f) {
          case ElemFormat::kE2M3: got2 = narrow2_bf16<ElemFormat::kE2M3>(h | (h1 << 16), p2); break;
          case ElemFormat::kE3M2: got2 = narrow2_bf16<ElemFormat::kE3M2>(h | (h1 << 16), p2); break;
          default: got2 = narrow2_bf16<ElemFormat::kE2M1>(h | (h1 << 16), p2); break;
        }
        const MxScale m{e, static_cast<uint8_t>(e + 127), false};
        for (int lane = 0; lane < 2; ++lane) {
          const float x = lane == 0 ? x0 : x1;
          const int got = static_cast<int>((got2 >> (16 * lane)) & 0xFFFFu);
          const int fast = encode_rne(x * p, f), exact = encode_mx(x, m, f);
          c5.check(got == fast && got == exact, x, p, f, got, exact);
        }
      }
    }
  }
  c5.report();

  // 6. NVFP4's certificate. Counts the certified cases; the refused ones (exact division in the kernels) must be
  // rare on random x, and the edges must reach into the refused window from both sides.
  Counter c6{"nvfp4_certificate"};
  long refused = 0, refused_random = 0, random_cases = 0, max_dist = 0;
  std::vector<float> divisors = {0x1p-80f, 0x1.fffffep101f, 1.0f / 2688.0f, 0.0371f, 3.0f, 448.0f / 2688.0f};
  for (int i = 0; i < 400; ++i) {
    divisors.push_back(std::ldexp(1.0f + 0.5f * (unit(rng) + 1.0f), std::uniform_int_distribution<int>(-80, 101)(rng)));
  }
  std::vector<double> points;  // E2M1 grid points and midpoints, and beyond the largest
  const std::vector<float> g = grid_values(ElemFormat::kE2M1);
  for (size_t i = 0; i < g.size(); ++i) {
    points.push_back(g[i]);
    if (i > 0) points.push_back((static_cast<double>(g[i - 1]) + g[i]) / 2.0);
  }
  for (double p : {7.0, 8.0, 12.0, 0.125, 0.1875}) points.push_back(p);
  for (float s : divisors) {
    if (!std::isfinite(s) || s == 0.0f) continue;
    const float r = 1.0f / s;
    std::vector<float> xs = {0.0f, -0.0f, bits_f32(1u), bits_f32(0x80400000u), inf, -inf};
    for (double p : points) {
      float v = static_cast<float>(p * s);
      for (int k = 0; k < 40; ++k) v = next_down(v);
      for (int k = -40; k <= 40; ++k, v = next_up(v)) {
        xs.push_back(v);
        xs.push_back(-v);
      }
    }
    const size_t edges_end = xs.size();
    for (int i = 0; i < 400; ++i) xs.push_back(8.0f * s * unit(rng));
    for (int i = 0; i < 40; ++i) {
      xs.push_back(std::ldexp(s * unit(rng), -std::uniform_int_distribution<int>(3, 60)(rng)));
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      const float x = xs[i];
      const bool random = i >= edges_end;
      random_cases += random;
      const float q0 = x * r;
      // The device's E2M1 encoder of q0: narrow2_bf16 of its round-to-odd bf16 pattern (lane 1: -q0).
      if (!is_nan(q0)) {
        const uint32_t pair = narrow2_bf16<ElemFormat::kE2M1, false>(ro_bf16x2(q0, -q0), 0u);
        const int want0 = encode_rne(q0, ElemFormat::kE2M1), want1 = encode_rne(-q0, ElemFormat::kE2M1);
        c6.check(static_cast<int>(pair & 0xFFFFu) == want0 && static_cast<int>(pair >> 16) == want1, x, s,
                 ElemFormat::kE2M1, static_cast<int>(pair & 0xFFFFu), want0);
      }
      // The lemma the certificate rests on: q0 within 5 bit steps of RN(x / s) (|q0| >= 2**-3, finite).
      const float q = x / s;
      if (std::isfinite(q) && std::abs(q0) >= 0.125f) {
        const long dist =
            std::labs(static_cast<long>(f32_bits(std::abs(q0))) - static_cast<long>(f32_bits(std::abs(q))));
        max_dist = dist > max_dist ? dist : max_dist;
        c6.check(dist <= 5, x, s, ElemFormat::kE2M1, static_cast<int>(dist), 5);
      }
      float qk = q0;  // the kernels' quotient
      if (e2m1_near_boundary(q0)) {  // the kernels' division of a refused chunk: Markstein's steps in the band
        ++refused;
        refused_random += random;
        const float q1 = std::fma(-std::fma(q0, s, -x), r, q0), q2 = std::fma(-std::fma(q1, s, -x), r, q1);
        qk = (std::abs(q0) >= 0x1p-20f && std::abs(q0) <= 0x1p20f) ? q2 : q0;
      }
      const int got = encode_rne(qk, ElemFormat::kE2M1), want = encode_scaled(x, s, ElemFormat::kE2M1);
      c6.check(got == want, x, s, ElemFormat::kE2M1, got, want);
    }
  }
  // The pair encoder on round-to-odd patterns over a strided sweep of all FP32 bits (E2M1, E3M2, E2M3).
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float v = bits_f32(static_cast<uint32_t>(u)), w = bits_f32(static_cast<uint32_t>(u * 2654435761u));
    if (is_nan(v) || is_nan(w)) continue;
    const uint32_t ro = ro_bf16x2(v, w);
    const uint32_t got[3] = {narrow2_bf16<ElemFormat::kE2M1, false>(ro, 0u),
                             narrow2_bf16<ElemFormat::kE3M2, false>(ro, 0u),
                             narrow2_bf16<ElemFormat::kE2M3, false>(ro, 0u)};
    const ElemFormat fs[3] = {ElemFormat::kE2M1, ElemFormat::kE3M2, ElemFormat::kE2M3};
    for (int i = 0; i < 3; ++i) {
      const int want0 = encode_rne(v, fs[i]), want1 = encode_rne(w, fs[i]);
      c6.check(static_cast<int>(got[i] & 0xFFFFu) == want0 && static_cast<int>(got[i] >> 16) == want1, v, w, fs[i],
               static_cast<int>(got[i] & 0xFFFFu), want0);
    }
  }
  if (refused_random * 1000 > random_cases || refused < 10000 || max_dist < 1) {
    std::printf("MISMATCH nvfp4_certificate refused %ld (%ld of %ld random), max distance %ld\n", refused,
                refused_random, random_cases, max_dist);
    ++c6.bad;
  }
  c6.report();

  // 7. NVFP4's block scale through t1 = RN(amax * c) (nvfp4_block_multiplier, e4m3_boundary_key,
  // nvfp4_block_certified): where certified, t1's E4M3 code (round_to_grid(min(t1, 448)), what the kernels'
  // cvt.rn.satfinite gives) is nvfp4_block_scale's; amax up to 40 FP32 steps either side of every E4M3 grid point and
  // midpoint times 6 ts, random and tiny amax, Inf / NaN / 0; ts over [2**-100, 2**100] and outside (c = NaN).
  Counter c7{"nvfp4_block_certificate"};
  long refused7 = 0, refused7_random = 0, random7 = 0, max_dist7 = 0;
  std::vector<float> tss7 = {1.0f, 448.0f / 2688.0f, 1.0f / 2688.0f, 0x1p-100f, 0x1p100f, 0x1.fffffep99f,
                             0x1p-101f, 0x1p101f, 0.0f, inf, nan_pos, 3.0e38f / 2688.0f, 1.0e-30f / 2688.0f};
  for (int i = 0; i < 300; ++i) {
    tss7.push_back(std::ldexp(1.0f + 0.5f * (unit(rng) + 1.0f), std::uniform_int_distribution<int>(-100, 99)(rng)));
  }
  std::vector<double> e4m3_points;  // E4M3 grid points and midpoints (normal and subnormal), 0 .. 480
  const std::vector<float> g7 = grid_values(ElemFormat::kE4M3);
  for (size_t i = 0; i < g7.size(); ++i) {
    e4m3_points.push_back(g7[i]);
    if (i > 0) e4m3_points.push_back((static_cast<double>(g7[i - 1]) + g7[i]) / 2.0);
  }
  for (double p : {464.0, 480.0, 0x1p-11, 0x1p-12, 0x1.04p-12}) e4m3_points.push_back(p);
  for (float ts : tss7) {
    const float c = nvfp4_block_multiplier(ts);
    std::vector<float> amaxes = {0.0f, inf, bits_f32(kCanonicalNan), 0x1p-120f, 0x1.fffffep-121f, 0x1p-126f,
                                 std::numeric_limits<float>::max()};
    for (double p : e4m3_points) {
      float v = static_cast<float>(p * 6.0 * static_cast<double>(ts));
      if (!std::isfinite(v) || v == 0.0f) continue;
      for (int k = 0; k < 40; ++k) v = next_down(v);
      for (int k = -40; k <= 40; ++k, v = next_up(v)) amaxes.push_back(v);
    }
    for (int i = 0; i < 300; ++i) amaxes.push_back(std::abs(std::ldexp(unit(rng), expo(rng))));
    const size_t wide_end = amaxes.size();
    // Block amaxes of a tensor whose amax gives this ts: 2688 ts * u, u in (2**-24, 1] (log-uniform exponent).
    for (int i = 0; i < 300; ++i) {
      amaxes.push_back(std::ldexp(2688.0f * ts * (0.5f + 0.25f * (unit(rng) + 1.0f)),
                                  -std::uniform_int_distribution<int>(0, 24)(rng)));
    }
    for (size_t i = 0; i < amaxes.size(); ++i) {
      const float amax = amax_finish(amaxes[i]);
      const bool random = i >= wide_end && std::isfinite(c) && std::isfinite(amax * c) && amax >= 0x1p-120f;
      random7 += random;
      const float t1 = amax * c;
      const Nvfp4Scale want = nvfp4_block_scale(amax, ts);
      if (!nvfp4_block_certified(amax, t1)) {  // the kernels divide: nvfp4_block_scale itself
        ++refused7;
        refused7_random += random;
        continue;
      }
      const float t = div_f32(div_f32(amax, 6.0f), ts);  // the lemma: t1 within 6 bit steps of t (t normal)
      if (t >= 0x1p-126f && std::isfinite(t)) {
        const long dist = std::labs(static_cast<long>(f32_bits(t1)) - static_cast<long>(f32_bits(t)));
        max_dist7 = dist > max_dist7 ? dist : max_dist7;
        c7.check(dist <= 6, amax, ts, ElemFormat::kE4M3, static_cast<int>(dist), 6);
      }
      const float sb = round_to_grid(xla_min(t1, 448.0f), ElemFormat::kE4M3);
      const Nvfp4Scale got{sb, mul_f32(sb, ts), encode_grid(sb, ElemFormat::kE4M3)};
      c7.check(got.byte == want.byte && f32_bits(got.sb) == f32_bits(want.sb) && f32_bits(got.eff) == f32_bits(want.eff),
               amax, ts, ElemFormat::kE4M3, got.byte, want.byte);
    }
  }
  if (refused7_random * 1000 > random7 || refused7 < 1000 || max_dist7 < 1) {
    std::printf("MISMATCH nvfp4_block_certificate refused %ld (%ld of %ld random), max distance %ld\n", refused7,
                refused7_random, random7, max_dist7);
    ++c7.bad;
  }
  c7.report();

  // 8. NVFP4 codes by limits
  Counter c8{"nvfp4_limits"};
  std::vector<float> effs = {0x1p-124f, 0x1p120f, 1.0f, 0x1.fffffep-1f, 0x1.000002p-124f, 0x1.fffffep119f};
  for (int e = -124; e <= 120; e += 7) effs.push_back(std::ldexp(1.0f, e));
  for (float ts : {1.0f, 1.0f / 2688.0f, 3.7e-5f, 0x1p-126f, 123.456f}) {
    for (float sb : grid_values(ElemFormat::kE4M3)) {
      const float eff = mul_f32(sb, ts);
      if (nvfp4_limits_apply(eff)) effs.push_back(eff);
    }
  }
  for (int i = 0; i < 120; ++i) {
    effs.push_back(std::ldexp(1.0f + 0.5f * (unit(rng) + 1.0f), std::uniform_int_distribution<int>(-124, 119)(rng)));
  }
  for (float eff : effs) {
    c8.check(nvfp4_limits_apply(eff), 1.0f, eff, ElemFormat::kE2M1, 0, 1);
    const Nvfp4Scale b{1.0f, eff, 0};
    float lim[7];
    uint32_t lim_bf16[7], lim_f16[7];
    for (int k = 0; k < 7; ++k) {
      lim[k] = nvfp4_limit(eff, k);
      lim_bf16[k] = nvfp4_limit16<InType::kBF16>(lim[k]) * 0x10001u;
      lim_f16[k] = nvfp4_limit16<InType::kF16>(lim[k]) * 0x10001u;
    }
    for (int k = 0; k < 7; ++k) {  // FP32 x around each limit: the count of limits passed is the code magnitude
      float x = lim[k];
      for (int j = 0; j < 3; ++j) x = next_down(x);
      for (int j = -3; j <= 3; ++j, x = next_up(x)) {
        int n = 0;
        for (int i = 0; i < 7; ++i) n += x >= lim[i];
        const int want = encode_nvfp4(x, b);
        c8.check(n == want, x, eff, ElemFormat::kE2M1, n, want);
        c8.check((8 | n) == encode_nvfp4(-x, b), -x, eff, ElemFormat::kE2M1, 8 | n, encode_nvfp4(-x, b));
      }
    }
    for (int t = 0; t < 2; ++t) {  // every bf16 / f16 pattern, four per packed word
      const uint32_t(&l16)[7] = t == 0 ? lim_bf16 : lim_f16;
      for (uint32_t h = 0; h < 0x10000u; h += 4) {
        uint32_t c[2];
        float xs[4];
        for (int p = 0; p < 2; ++p) {
          const uint32_t w = (h + 2 * p) | ((h + 2 * p + 1) << 16);
          c[p] = t == 0 ? nvfp4_codes_by_limits<InType::kBF16>(w, l16) : nvfp4_codes_by_limits<InType::kF16>(w, l16);
          for (int q = 0; q < 2; ++q) {
            const uint16_t hv = static_cast<uint16_t>(h + 2 * p + q);
            xs[2 * p + q] = t == 0 ? bf16_to_f32(hv) : f16_to_f32(hv);
          }
        }
        const uint32_t packed = nvfp4_pack_pairs(c[0], c[1], 0u, 0u);
        for (int q = 0; q < 4; ++q) {
          if (std::isnan(xs[q])) continue;
          const int got = (packed >> (4 * q)) & 0xF, want = encode_nvfp4(xs[q], b);
          c8.check(got == want, xs[q], eff, ElemFormat::kE2M1, got, want);
        }
      }
    }
  }
  for (float eff : {0.0f, 0x1.fffffep-125f, 0x1.000002p120f, inf, bits_f32(kCanonicalNan), 0x1p-126f}) {
    c8.check(!nvfp4_limits_apply(eff), 1.0f, eff, ElemFormat::kE2M1, 1, 0);
  }
  {  // nvfp4_pack_pairs: element i (lane i & 1 of pair i / 2) in nibble i
    const uint32_t got = nvfp4_pack_pairs(0x00010000u, 0x00030002u, 0x00050004u, 0x00070006u);
    c8.check(got == 0x76543210u, 0.0f, 0.0f, ElemFormat::kE2M1, static_cast<int>(got & 0xFF), 0x10);
  }
  c8.report();

  return (c1.bad || c2.bad || c3.bad || c4.bad || c5.bad || c6.bad || c7.bad || c8.bad) ? 1 : 0;
}
