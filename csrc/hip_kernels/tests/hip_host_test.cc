// CPU driver for the host-testable parts of the gfx950 kernels (mfma_layout.h, mx_block.h,
// gfx950_kernels.h). tests/test_hip_host.py builds it with g++ and compares its outputs with the
// numpy reference (tests/reference/quantizers.py). Raw little-endian binary files in / out.
//
//   hip_host_test frag FMT ROWS K IN OUT
//       IN: codes u8 (ROWS, K) then packed u8 (ROWS, K'). OUT per (row, 32-block):
//       load_fragment regs u32[8], pack_fragment regs u32[8], fragment_code u8[32].
//   hip_host_test lanes SHAPE OUT
//       OUT per lane: i32 lane_row, lane_kgroup, lane_k0(ks=0), lane_k0(ks=1); then per (lane, j):
//       i32 acc_row, acc_col.
//   hip_host_test gemm KIND FA FB SHAPE B M N K TRA TRB HAS_BIAS IN OUT
//       KIND mx | tensor | tile. IN: A packed (B, M, K'), A scales (mx u8 (B, M, K/32); tensor f32
//       (); tile f32 (B, M/TRA, K/128)), B packed (B, N, K'), B scales, bias f32 (N) if HAS_BIAS.
//       OUT: f64 (B, M, N): the GEMM kernel's wave loop (tile_of_wave, lane_fragment, scale
//       index math, accumulator scatter) run on the CPU, with the scaled MFMA emulated in FP64
//       from the ISA definition (A(i, k) in lane i + m * (k / 32), element k % 32).
//   hip_host_test quant FMT RULE ROWS L IN OUT
//       IN: f32 (ROWS, L). OUT: data u8 (ROWS, L'), scale u8 (ROWS, L/32), amax f32 (the
//       kernel's per-block quantize_mx_block + unsigned-bits atomic max).
//   hip_host_test squant KIND FMT ROWS L TR TC POW2 IN OUT
//       KIND tensor | delayed | row | tile | nvfp4 (FMT e2m1). IN: f32 (ROWS, L), then (delayed)
//       the f32 scale_in. OUT: data u8 (ROWS, L) FP8 codes / (ROWS, L/2) packed E2M1; scale
//       (tensor / delayed f32 (); row f32 (ROWS); tile f32 (ROWS/TR, L/TC); nvfp4 u8 (ROWS, L/16));
//       amax f32; tensor_scale f32: the gfx950_scaled_quantize.hip kernel bodies (scaled_group.h)
//       run on the CPU, thread by thread (grid-stride amax, per-workgroup LDS umax + atomic umax).
//   hip_host_test names
//       every kernel symbol the host selects (gemm_supported / gemm_kernel_name /
//       quantize_kernel_name), one per line.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "formats.h"
#include "gfx950_kernels.h"
#include "mfma_layout.h"
#include "mx_block.h"
#include "scaled_group.h"

using namespace mxprec;
using namespace mxprec::hip;

namespace {

[[noreturn]] void die(const std::string& m) {
  std::cerr << "hip_host_test: " << m << "\n";
  std::exit(2);
}

ElemFormat parse_fmt(const std::string& s) {
  for (int i = 0; i < kNumElemFormats; ++i)
    if (s == format_name(static_cast<ElemFormat>(i))) return static_cast<ElemFormat>(i);
  die("bad format " + s);
}
MfmaShape parse_shape(const std::string& s) {
  if (s == "16x16x128") return MfmaShape::k16x16x128;
  if (s == "32x32x64") return MfmaShape::k32x32x64;
  die("bad shape " + s);
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

struct Reader {
  const std::vector<uint8_t>& buf;
  size_t pos = 0;
  const uint8_t* take(size_t n) {
    if (pos + n > buf.size()) die("input too short");
    const uint8_t* p = buf.data() + pos;
    pos += n;
    return p;
  }
};

struct Writer {
  std::vector<uint8_t> out;
  template <class T>
  void put(const T& v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void save(const std::string& path) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (!f) die("cannot write " + path);
  }
};

int cmd_frag(char** a) {
  const ElemFormat f = parse_fmt(a[0]);
  const int64_t rows = std::atoll(a[1]), K = std::atoll(a[2]);
  const auto in = read_all(a[3]);
  Reader r{in};
  const uint8_t* codes = r.take(rows * K);
  const uint8_t* packed = r.take(rows * packed_len(K, f));
  Writer w;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t k0 = 0; k0 < K; k0 += kMxBlock) {
      uint32_t regs[kFragmentDwords], regs2[kFragmentDwords];
      load_fragment(packed + row * packed_len(K, f), k0, f, regs);
      pack_fragment(codes + row * K + k0, f, regs2);
      for (uint32_t v : regs) w.put(v);
      for (uint32_t v : regs2) w.put(v);
      for (int i = 0; i < kMxBlock; ++i) w.put(fragment_code(regs, i, f));
    }
  w.save(a[4]);
  return 0;
}

int cmd_lanes(char** a) {
  const MfmaShape s = parse_shape(a[0]);
  Writer w;
  for (int32_t l = 0; l < kWaveSize; ++l) {
    w.put(lane_row(l, s));
    w.put(lane_kgroup(l, s));
    w.put(static_cast<int32_t>(lane_k0(l, 0, s)));
    w.put(static_cast<int32_t>(lane_k0(l, 1, s)));
  }
  for (int32_t l = 0; l < kWaveSize; ++l)
    for (int32_t j = 0; j < mfma_geom(s).acc_regs; ++j) {
      w.put(acc_row(l, j, s));
      w.put(acc_col(l, j, s));
    }
  w.save(a[1]);
  return 0;
}

// The scaled MFMA from the ISA definition, in FP64 (exact products, FP64 sums).
void emulate_mfma(MfmaShape s, ElemFormat fa, ElemFormat fb, const uint32_t (*ra)[kFragmentDwords],
                  const int32_t* sa, const uint32_t (*rb)[kFragmentDwords], const int32_t* sb, double* d /* m x n */) {
  const MfmaGeom g = mfma_geom(s);
  auto scale = [](int32_t byte) { return byte == 0xFF ? NAN : std::ldexp(1.0, byte - 127); };
  for (int i = 0; i < g.m; ++i)
    for (int j = 0; j < g.n; ++j) {
      double acc = 0.0;
      for (int k = 0; k < g.k; ++k) {
        const int la = i + g.m * (k / 32), lb = j + g.n * (k / 32);
        const double av = decode_code(fragment_code(ra[la], k % 32, fa), fa) * scale(sa[la]);
        const double bv = decode_code(fragment_code(rb[lb], k % 32, fb), fb) * scale(sb[lb]);
        acc += av * bv;
      }
      d[i * g.n + j] += acc;
    }
}

int cmd_gemm(char** a) {
  const std::string kind = a[0];
  const GemmScaling sc = kind == "mx" ? GemmScaling::kMX : (kind == "tensor" ? GemmScaling::kTensor : GemmScaling::kTile);
  const ElemFormat fa = parse_fmt(a[1]), fb = parse_fmt(a[2]);
  const MfmaShape s = parse_shape(a[3]);
  const int64_t B = std::atoll(a[4]), M = std::atoll(a[5]), N = std::atoll(a[6]), K = std::atoll(a[7]);
  const int32_t tra = std::atoi(a[8]), trb = std::atoi(a[9]);
  const bool has_bias = std::atoi(a[10]) != 0;
  if (!gemm_supported(sc, fa, fb, s, tra, trb)) die("unsupported configuration");
  const auto in = read_all(a[11]);
  Reader r{in};
  auto scale_bytes = [&](int64_t rows, int32_t tr) -> size_t {
    if (sc == GemmScaling::kMX) return B * rows * (K / kMxBlock);
    if (sc == GemmScaling::kTensor) return 4;
    return 4 * B * (rows / tr) * (K / 128);
  };
  const uint8_t* A = r.take(B * M * packed_len(K, fa));
  const uint8_t* SA = r.take(scale_bytes(M, tra));
  const uint8_t* Bm = r.take(B * N * packed_len(K, fb));
  const uint8_t* SB = r.take(scale_bytes(N, trb));
  std::vector<float> bias(N, 0.0f);
  if (has_bias) std::memcpy(bias.data(), r.take(4 * N), 4 * N);
  std::vector<float> sta, stb;  // f32 scales (tensor / tile)
  if (sc != GemmScaling::kMX) {
    sta.resize(scale_bytes(M, tra) / 4);
    stb.resize(scale_bytes(N, trb) / 4);
    std::memcpy(sta.data(), SA, 4 * sta.size());
    std::memcpy(stb.data(), SB, 4 * stb.size());
  }
  const MfmaGeom g = mfma_geom(s);
  std::vector<double> out(B * M * N, std::nan(""));  // NaN marks an element no wave wrote
  const int64_t groups = num_workgroups(B, M, N, s, kGemmWavesPerGroup);
  for (int64_t wg = 0; wg < groups; ++wg)
    for (int32_t wv = 0; wv < kGemmWavesPerGroup; ++wv) {
      const TileCoord t = tile_of_wave(wg * kGemmWavesPerGroup + wv, B, M, N, s);
      if (!t.valid) continue;
      std::vector<double> acc(g.m * g.n, 0.0);  // indexed by (row, col) of the instruction tile
      for (int64_t ks = 0; ks < num_ksteps(K, s); ++ks) {
        uint32_t ra[kWaveSize][kFragmentDwords], rb[kWaveSize][kFragmentDwords];
        int32_t sa[kWaveSize], sb[kWaveSize];
        for (int32_t lane = 0; lane < kWaveSize; ++lane) {  // the kernel's per-lane loads
          const int64_t k0 = lane_k0(lane, ks, s);
          const int64_t rra = t.tm * g.m + lane_row(lane, s), rrb = t.tn * g.n + lane_row(lane, s);
          lane_fragment(A, sc == GemmScaling::kMX ? SA : nullptr, t.b * M + rra, rra < M, k0, K, fa, ra[lane], &sa[lane]);
          lane_fragment(Bm, sc == GemmScaling::kMX ? SB : nullptr, t.b * N + rrb, rrb < N, k0, K, fb, rb[lane], &sb[lane]);
        }
        if (sc == GemmScaling::kTile) {
          std::vector<double> part(g.m * g.n, 0.0);
          emulate_mfma(s, fa, fb, ra, sa, rb, sb, part.data());
          for (int32_t lane = 0; lane < kWaveSize; ++lane)  // the kernel's promotion, per lane
            for (int32_t j = 0; j < g.acc_regs; ++j) {
              const int32_t i = acc_row(lane, j, s), c = acc_col(lane, j, s);
              const int64_t row = t.tm * g.m + i, col = t.tn * g.n + c;
              const double s_a = row < M ? sta[tile_scale_index(t.b, row, ks, M, K, tra)] : 0.0;
              const double s_b = col < N ? stb[tile_scale_index(t.b, col, ks, N, K, trb)] : 0.0;
              acc[i * g.n + c] += part[i * g.n + c] * (s_a * s_b);
            }
        } else {
          emulate_mfma(s, fa, fb, ra, sa, rb, sb, acc.data());
        }
      }
      const double st = sc == GemmScaling::kTensor ? static_cast<double>(sta[0]) * stb[0] : 1.0;
      for (int32_t lane = 0; lane < kWaveSize; ++lane)  // the kernel's epilogue scatter
        for (int32_t j = 0; j < g.acc_regs; ++j) {
          const int32_t i = acc_row(lane, j, s), c = acc_col(lane, j, s);
          const int64_t row = t.tm * g.m + i, col = t.tn * g.n + c;
          if (row < M && col < N) out[(t.b * M + row) * N + col] = acc[i * g.n + c] * st + bias[col];
        }
    }
  Writer w;
  for (double v : out) w.put(v);
  w.save(a[12]);
  return 0;
}

int cmd_quant(char** a) {
  const ElemFormat f = parse_fmt(a[0]);
  const ScaleRule rule = std::string(a[1]) == "floor" ? ScaleRule::kFloor : ScaleRule::kRceil;
  const int64_t rows = std::atoll(a[2]), L = std::atoll(a[3]);
  const auto in = read_all(a[4]);
  Reader r{in};
  const uint8_t* xb = r.take(4 * rows * L);
  std::vector<float> x(rows * L);
  std::memcpy(x.data(), xb, 4 * x.size());
  std::vector<uint8_t> data(rows * packed_len(L, f)), scale(rows * (L / kMxBlock));
  uint32_t amax_bits = 0;  // mxprec_gfx950_quantize_init: +0
  for (int64_t blk = 0; blk < rows * (L / kMxBlock); ++blk) {
    const int64_t row = blk / (L / kMxBlock), kb = blk % (L / kMxBlock);
    const MxBlockResult res =
        quantize_mx_block(x.data() + row * L + kb * kMxBlock, f, rule,
                          data.data() + row * packed_len(L, f) + kb * fragment_bytes(f));
    scale[blk] = res.scale_byte;
    amax_bits = std::max(amax_bits, f32_bits(res.amax));  // the kernel's global_atomic_umax
  }
  Writer w;
  for (uint8_t v : data) w.put(v);
  for (uint8_t v : scale) w.put(v);
  w.put(amax_bits);
  w.save(a[5]);
  return 0;
}

// The amax pass (mxprec_gfx950_amax_*): `threads` grid-stride threads, each amax_combine over its
// elements, finished, then max of the keys (LDS ds_max_u32 + global_atomic_umax).
uint32_t emulate_amax_pass(const std::vector<float>& x, int64_t threads) {
  uint32_t key = 0;  // mxprec_gfx950_quantize_init: +0
  for (int64_t t = 0; t < threads; ++t) {
    float acc = 0.0f;
    for (int64_t i = t; i < static_cast<int64_t>(x.size()); i += threads) acc = amax_combine(acc, x[i]);
    key = std::max(key, amax_key(amax_finish(acc)));
  }
  return key;
}

int cmd_squant(char** a) {
  const std::string kind = a[0];
  const ElemFormat f = parse_fmt(a[1]);
  const int64_t rows = std::atoll(a[2]), L = std::atoll(a[3]), tr = std::atoll(a[4]), tc = std::atoll(a[5]);
  const bool pow2 = std::atoi(a[6]) != 0;
  const auto in = read_all(a[7]);
  Reader r{in};
  const int64_t n = rows * L;
  std::vector<float> x(n);
  std::memcpy(x.data(), r.take(4 * n), 4 * n);
  Writer w;
  float tensor_scale_out = 1.0f;
  if (kind == "tensor" || kind == "delayed") {
    float scale_in = 0.0f;
    if (kind == "delayed") std::memcpy(&scale_in, r.take(4), 4);
    const uint32_t amax = emulate_amax_pass(x, 3 * kScaledGroupSize);
    // tensor_body: s from scale_src (delayed) or the amax; every thread encodes its elements
    const float s = kind == "delayed" ? scale_in : tensor_scale(bits_f32(amax), f);
    for (int64_t i = 0; i < n; ++i) w.put(encode_scaled(x[i], s, f));
    w.put(s);
    w.put(amax);
  } else if (kind == "row" || kind == "tile") {
    const bool tile = kind == "tile";
    const int64_t gtr = tile ? tr : 1, gtc = tile ? tc : L;
    const int64_t ngroups = tile ? (rows / tr) * (L / tc) : rows;
    std::vector<uint8_t> data(n, 0xAA);
    std::vector<float> scale(ngroups);
    uint32_t amax = 0;
    for (int64_t g = 0; g < ngroups; ++g) {  // group_body, one workgroup per group
      const int64_t ng = gtr * gtc;
      uint32_t red = 0;
      for (int64_t t = 0; t < kScaledGroupSize; ++t) {
        float acc = 0.0f;
        for (int64_t j = t; j < ng; j += kScaledGroupSize) acc = amax_combine(acc, x[tile_elem_offset(g, j, L, gtr, gtc)]);
        red = std::max(red, amax_key(amax_finish(acc)));
      }
      const float s = group_scale(bits_f32(red), f, tile && pow2);
      scale[g] = s;
      amax = std::max(amax, red);
      for (int64_t j = 0; j < ng; ++j) {
        const int64_t off = tile_elem_offset(g, j, L, gtr, gtc);
        data[off] = encode_scaled(x[off], s, f);
      }
    }
    for (uint8_t v : data) w.put(v);
    for (float v : scale) w.put(v);
    w.put(amax);
  } else if (kind == "nvfp4") {
    const uint32_t amax = emulate_amax_pass(x, 2 * kScaledGroupSize + 5);
    const float ts = nvfp4_tensor_scale(bits_f32(amax));
    const int64_t nb = n / kNvfp4Block;
    std::vector<uint8_t> data(n / 2), sbytes(nb);
    for (int64_t blk = 0; blk < nb; ++blk) {  // nvfp4_body, one thread per block
      const float* xb = x.data() + blk * kNvfp4Block;
      sbytes[blk] = quantize_nvfp4_block_load([xb](int32_t i) { return xb[i]; }, ts, data.data() + blk * 8).scale_byte;
    }
    for (uint8_t v : data) w.put(v);
    for (uint8_t v : sbytes) w.put(v);
    w.put(amax);
    tensor_scale_out = ts;
  } else {
    die("bad kind " + kind);
  }
  w.put(tensor_scale_out);
  w.save(a[8]);
  return 0;
}

int cmd_names() {
  const ElemFormat all[] = {ElemFormat::kE4M3, ElemFormat::kE5M2, ElemFormat::kE2M3, ElemFormat::kE3M2,
                            ElemFormat::kE2M1};
  const OutType outs[] = {OutType::kF32, OutType::kBF16, OutType::kF16};
  const MfmaShape shapes[] = {MfmaShape::k16x16x128, MfmaShape::k32x32x64};
  for (ElemFormat fa : all)
    for (ElemFormat fb : all)
      for (OutType o : outs) {
        for (MfmaShape s : shapes) {
          if (gemm_supported(GemmScaling::kMX, fa, fb, s)) std::cout << gemm_kernel_name(GemmScaling::kMX, fa, fb, s, o) << "\n";
          if (gemm_supported(GemmScaling::kTensor, fa, fb, s))
            std::cout << gemm_kernel_name(GemmScaling::kTensor, fa, fb, s, o) << "\n";
        }
        for (int tra : {1, 128})
          for (int trb : {1, 128})
            if (gemm_supported(GemmScaling::kTile, fa, fb, MfmaShape::k16x16x128, tra, trb))
              std::cout << gemm_kernel_name(GemmScaling::kTile, fa, fb, MfmaShape::k16x16x128, o, tra, trb) << "\n";
      }
  for (ElemFormat f : all)
    for (ScaleRule r : {ScaleRule::kRceil, ScaleRule::kFloor})
      for (int i = 0; i < 3; ++i) std::cout << quantize_kernel_name(f, r, i) << "\n";
  std::cout << "mxprec_gfx950_quantize_init\n";
  for (int i = 0; i < 3; ++i) {
    std::cout << amax_kernel_name(i) << "\n";
    for (ScalingKind k : {ScalingKind::kTensor, ScalingKind::kRow, ScalingKind::kTile, ScalingKind::kNVFP4})
      for (ElemFormat f : all)
        if (scaled_quantize_supported(k, f)) std::cout << scaled_quantize_kernel_name(k, f, i) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: see the header of hip_host_test.cc");
  const std::string cmd = argv[1];
  if (cmd == "frag" && argc == 7) return cmd_frag(argv + 2);
  if (cmd == "lanes" && argc == 4) return cmd_lanes(argv + 2);
  if (cmd == "gemm" && argc == 15) return cmd_gemm(argv + 2);
  if (cmd == "quant" && argc == 8) return cmd_quant(argv + 2);
  if (cmd == "squant" && argc == 11) return cmd_squant(argv + 2);
  if (cmd == "names") return cmd_names();
  die("bad arguments for " + cmd);
}
