// upsample / upsample_backward and nll_loss / nll_loss_backward against nested-loop references of
// PyTorch's CPU semantics: nearest (with and without the equal/doubled-extent shortcuts),
// nearest-exact and linear in 1, 2 and 3 spatial dims, align_corners, down- and upsampling,
// NCHW and channels_last layouts, each floating dtype, grids of 1, 4 and 64 PEs, both
// local-store sizes; the loss per position and as per-PE sums, with weights, ignore_index, few
// and many classes (boxes and single elements), bad targets; and the error statuses.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "check.h"

using namespace kt;

namespace {

constexpr int64_t kNearest = 1, kExact = 2, kLinear = 3;
constexpr int64_t kAlign = 1, kShortcuts = 2;

// One axis: fp32 source positions and weights of output o (PyTorch's definitions).
struct Axis {
  int64_t in = 1, out = 1;
  float ratio = 0;
  bool real = false;
};
struct Corner {
  int64_t i0, i1;
  double l0, l1;
};
Corner corner(const Axis& a, int64_t mode, int64_t flags, int64_t o) {
  if (!a.real) return {0, 0, 1, 0};
  if (mode == kLinear) {
    if (a.in == a.out) return {o, o, 1, 0};
    float r = (flags & kAlign) ? a.ratio * float(o) : a.ratio * (float(o) + 0.5f) - 0.5f;
    if (r < 0) r = 0;
    const int64_t i0 = std::min<int64_t>(int64_t(std::floor(r)), a.in - 1);
    const float l1 = std::min(std::max(r - float(i0), 0.f), 1.f);
    return {i0, std::min(i0 + 1, a.in - 1), double(1.f - l1), double(l1)};
  }
  int64_t i;
  if (mode == kNearest && (flags & kShortcuts) && a.out == a.in) {
    i = o;
  } else if (mode == kNearest && (flags & kShortcuts) && a.out == 2 * a.in) {
    i = o >> 1;
  } else if (mode == kNearest) {
    i = std::min<int64_t>(int64_t(std::floor(float(o) * a.ratio)), a.in - 1);
  } else {
    i = std::min<int64_t>(int64_t(std::floor((float(o) + 0.5f) * a.ratio)), a.in - 1);
  }
  return {i, i, 1, 0};
}

struct Up {
  int64_t mode = kLinear, flags = 0, dims = 2;
  Axis ax[3];  // d, h, w
};

// The ratio the host passes (area_pixel_compute_scale / compute_scales_value, no scale given).
Up make_up(int64_t mode, int64_t flags, int64_t dims, Shape in3, Shape out3) {
  Up u;
  u.mode = mode;
  u.flags = flags;
  u.dims = dims;
  for (int a = 0; a < 3; ++a) {
    Axis& x = u.ax[a];
    x.in = in3[size_t(a)];
    x.out = out3[size_t(a)];
    x.real = a >= 3 - dims;
    if (!x.real) continue;
    if (mode == kLinear && (flags & kAlign)) {
      x.ratio = x.out > 1 ? float(x.in - 1) / float(x.out - 1) : 0.f;
    } else {
      x.ratio = float(x.in) / float(x.out);
    }
  }
  return u;
}

// Tensors are 4-D here: dims 3 views them as [c, d, h, w] (n = 1), dims 1 and 2 as
// [n, c, h, w] (d = 1).
std::vector<Arg> up_args(uint64_t dst, uint64_t src, uint8_t dt, const Up& u, int64_t n, int64_t c,
                         const Tensor& a, const Tensor& b) {
  std::vector<Arg> args{ptr(dst),
                        ptr(src),
                        dtype(dt),
                        i64(u.mode),
                        i64(u.flags),
                        i64(u.dims),
                        i64(n),
                        i64(c),
                        i64(u.ax[0].in),
                        i64(u.ax[1].in),
                        i64(u.ax[2].in),
                        i64(u.ax[0].out),
                        i64(u.ax[1].out),
                        i64(u.ax[2].out),
                        f32(u.ax[0].ratio),
                        f32(u.ax[1].ratio),
                        f32(u.ax[2].ratio)};
  for (const Tensor* t : {&a, &b}) {
    // [n, c, d, h, w] strides of a 4-D tensor: 3 dims -> [1, c, d, h, w], else d = 1.
    const Shape& s = t->stride;
    const std::array<int64_t, 5> st = u.dims == 3
                                          ? std::array<int64_t, 5>{0, s[0], s[1], s[2], s[3]}
                                          : std::array<int64_t, 5>{s[0], s[1], 0, s[2], s[3]};
    for (int64_t v : st) args.push_back(i64(v));
  }
  return args;
}

// Input/output index of a 4-D tensor element as (n, c, d, h, w).
std::array<int64_t, 5> nc5(const Up& u, const Shape& i) {
  if (u.dims == 3) return {0, i[0], i[1], i[2], i[3]};
  return {i[0], i[1], 0, i[2], i[3]};
}

void up_case(const Up& u, const Shape& in_size, const Shape& out_size, uint8_t dt, bool cl,
             uint32_t pes, std::mt19937& rng, uint64_t ls = 128 * 1024) {
  const std::string what =
      fmt::format("mode {} flags {} dims {} in {} out {} {} cl {} pes {} ls {}", u.mode, u.flags,
                  u.dims, shape_str(in_size), shape_str(out_size), dt_name(dt), cl, pes, ls);
  INFO(what);
  Device dev(32ull << 20);
  const auto lay = [&](const Shape& s) { return cl ? permuted(s, {0, 2, 3, 1}) : contiguous(s); };
  Tensor in = make_tensor(dev, dt, in_size, lay(in_size));
  randomize(dev, in, rng, -4, 4);
  Tensor out = make_tensor(dev, dt, out_size, permuted(out_size, {0, 1, 2, 3}, 3));
  const int64_t n = u.dims == 3 ? 1 : in_size[0], c = u.dims == 3 ? in_size[0] : in_size[1];
  auto r = dev.launch(Module::library(), "upsample",
                      up_args(out.addr, in.addr, dt, u, n, c, out, in), grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  const auto value = [&](const Shape& o, Tensor& x) {
    const auto p = nc5(u, o);
    const Corner cd = corner(u.ax[0], u.mode, u.flags, p[2]);
    const Corner ch = corner(u.ax[1], u.mode, u.flags, p[3]);
    const Corner cw = corner(u.ax[2], u.mode, u.flags, p[4]);
    const auto at = [&](int64_t d, int64_t h, int64_t w) {
      return u.dims == 3 ? x.at({p[1], d, h, w}) : x.at({p[0], p[1], h, w});
    };
    const auto wsum = [&](int64_t d, int64_t h) {
      return cw.l0 * at(d, h, cw.i0) + cw.l1 * at(d, h, cw.i1);
    };
    const auto hsum = [&](int64_t d) { return ch.l0 * wsum(d, ch.i0) + ch.l1 * wsum(d, ch.i1); };
    return cd.l0 * hsum(cd.i0) + cd.l1 * hsum(cd.i1);
  };
  check_tensor(
      dev, out, [&](const Shape& o) { return round_to(dt, value(o, in)); },
      dt == kF32 ? Tol{1e-5, 1e-5} : tol_for(dt), what + " forward");
  if (!dt_float(dt)) return;

  // Backward: grad_in[i] = sum over outputs of their corner weights on i times grad_out.
  Tensor go = make_tensor(dev, dt, out_size, lay(out_size));
  randomize(dev, go, rng, -2, 2);
  Tensor gi = make_tensor(dev, dt, in_size, permuted(in_size, {0, 1, 2, 3}, 2));
  r = dev.launch(Module::library(), "upsample_backward",
                 up_args(gi.addr, go.addr, dt, u, n, c, gi, go), grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  std::map<std::array<int64_t, 4>, double> want;
  for_each(out_size, [&](const Shape& o) {
    const auto p = nc5(u, o);
    const Corner cs[3] = {corner(u.ax[0], u.mode, u.flags, p[2]),
                          corner(u.ax[1], u.mode, u.flags, p[3]),
                          corner(u.ax[2], u.mode, u.flags, p[4])};
    const double g = go.at(o);
    const int nd = u.mode == kLinear ? 2 : 1;
    for (int a = 0; a < (u.ax[0].real ? nd : 1); ++a) {
      for (int b = 0; b < (u.ax[1].real ? nd : 1); ++b) {
        for (int e = 0; e < nd; ++e) {
          const int64_t d = a ? cs[0].i1 : cs[0].i0, h = b ? cs[1].i1 : cs[1].i0;
          const int64_t w = e ? cs[2].i1 : cs[2].i0;
          const double wt =
              (a ? cs[0].l1 : cs[0].l0) * (b ? cs[1].l1 : cs[1].l0) * (e ? cs[2].l1 : cs[2].l0);
          const std::array<int64_t, 4> key = u.dims == 3 ? std::array<int64_t, 4>{p[1], d, h, w}
                                                         : std::array<int64_t, 4>{p[0], p[1], h, w};
          want[key] += wt * g;
        }
      }
    }
  });
  check_tensor(
      dev, gi,
      [&](const Shape& i) {
        const auto it = want.find({i[0], i[1], i[2], i[3]});
        return round_to(dt, it == want.end() ? 0.0 : it->second);
      },
      dt == kF32 ? Tol{2e-5, 2e-5} : tol_for(dt), what + " backward");
}

// --- nll_loss ----------------------------------------------------------------------------------

constexpr int64_t kWeight = 1, kPerPos = 2, kSums = 4, kCheck = 8, kMean = 16, kBox = 32;

struct Nll {
  int64_t n, c, s, ignore = -100;
  bool weighted = false, box = false;
};

// A bad target fails the launch: the PEs that met one exit with 16, the others with 0.
bool bad_target(const LaunchResult& r) {
  bool seen = false;
  for (const PeResult& pe : r.pes) {
    if (pe.faulted || (pe.exit_status != 0 && pe.exit_status != 16)) return false;
    seen = seen || pe.exit_status == 16;
  }
  return seen;
}

void nll_case(const Nll& p, uint8_t dt, uint32_t pes, std::mt19937& rng, uint64_t ls = 128 * 1024) {
  const std::string what = fmt::format("nll n {} c {} s {} {} weighted {} box {} pes {}", p.n, p.c,
                                       p.s, dt_name(dt), p.weighted, p.box, pes);
  INFO(what);
  Device dev(32ull << 20);
  // x as [n, c, s] inside a 4-D [n, c, s, 1] view, channels innermost (a transposed layout).
  Tensor x = make_tensor(dev, dt, {p.n, p.c, p.s, 1}, permuted({p.n, p.c, p.s, 1}, {0, 2, 3, 1}));
  randomize(dev, x, rng, -3, 3);
  Tensor t = make_tensor(dev, kI64, {p.n, p.s, 1, 1});
  std::uniform_int_distribution<int64_t> cls(0, p.c - 1);
  for_each(t.size, [&](const Shape& i) {
    t.set(i, (i[0] + i[1]) % 4 == 3 ? double(p.ignore) : double(cls(rng)));
  });
  t.upload(dev);
  Tensor w = make_tensor(dev, dt, {p.c, 1, 1, 1}, {2, 1, 1, 1});  // every other element
  randomize(dev, w, rng, 0.5, 2);
  Tensor out = make_tensor(dev, dt, {p.n, p.s, 1, 1});
  Tensor sums = make_tensor(dev, kF32, {int64_t(pes), 2, 1, 1});
  const auto weight_of = [&](int64_t k) { return p.weighted ? w.at({k, 0, 0, 0}) : 1.0; };
  const int64_t base = (p.weighted ? kWeight : 0) | (p.box ? kBox : 0);
  const auto fwd_args = [&](int64_t flags, const Tensor& tt) {
    return std::vector<Arg>{
        ptr(out.addr),      ptr(sums.addr),     ptr(x.addr),       ptr(tt.addr),
        ptr(w.addr),        dtype(dt),          i64(flags),        i64(p.ignore),
        i64(p.n),           i64(p.c),           i64(p.s),          i64(x.stride[0]),
        i64(x.stride[1]),   i64(x.stride[2]),   i64(tt.stride[0]), i64(tt.stride[1]),
        i64(out.stride[0]), i64(out.stride[1]), i64(w.stride[0])};
  };
  auto r = dev.launch(Module::library(), "nll_loss", fwd_args(base | kPerPos | kSums | kCheck, t),
                      grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  double loss = 0, total = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t j = 0; j < p.s; ++j) {
      const int64_t k = int64_t(t.at({i, j, 0, 0}));
      if (k == p.ignore) continue;
      loss -= weight_of(k) * x.at({i, k, j, 0});
      total += weight_of(k);
    }
  }
  check_tensor(
      dev, out,
      [&](const Shape& i) {
        const int64_t k = int64_t(t.at({i[0], i[1], 0, 0}));
        return k == p.ignore ? 0.0 : round_to(dt, -weight_of(k) * x.at({i[0], k, i[1], 0}));
      },
      dt == kF32 ? Tol{1e-6, 1e-6} : tol_for(dt), what + " per position");
  sums.download(dev);
  double got_loss = 0, got_total = 0;
  for (int64_t pe = 0; pe < int64_t(pes); ++pe) {
    got_loss += sums.at({pe, 0, 0, 0});
    got_total += sums.at({pe, 1, 0, 0});
  }
  CHECK(got_loss == Approx(loss).epsilon(1e-5).margin(1e-4));
  CHECK(got_total == Approx(total).epsilon(1e-5).margin(1e-4));

  // Backward of the mean: grad_in[n, t, s] = -w[t] * g / total_weight, 0 elsewhere.
  Tensor gi = make_tensor(dev, dt, x.size, contiguous(x.size));
  if (!p.box) {
    for (size_t b = 0; b < gi.host.size(); ++b) gi.host[b] = 0;  // the host's fill
    gi.upload(dev);
  }
  Tensor go = make_tensor(dev, dt, {1, 1, 1, 1}), tw = make_tensor(dev, dt, {1, 1, 1, 1});
  go.set({0, 0, 0, 0}, 1.5);
  go.upload(dev);
  tw.set({0, 0, 0, 0}, round_to(dt, total));
  tw.upload(dev);
  r = dev.launch(Module::library(), "nll_loss_backward",
                 {ptr(gi.addr), ptr(go.addr), ptr(t.addr), ptr(w.addr), ptr(tw.addr), dtype(dt),
                  i64(base | kMean), i64(p.ignore), i64(p.n), i64(p.c), i64(p.s), i64(gi.stride[0]),
                  i64(gi.stride[1]), i64(gi.stride[2]), i64(0), i64(0), i64(t.stride[0]),
                  i64(t.stride[1]), i64(w.stride[0])},
                 grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  const double coef = -(1.5 / round_to(dt, total));
  check_tensor(
      dev, gi,
      [&](const Shape& i) {
        const int64_t k = int64_t(t.at({i[0], i[2], 0, 0}));
        return k == i[1] && k != p.ignore ? round_to(dt, weight_of(k) * coef) : 0.0;
      },
      dt == kF32 ? Tol{1e-6, 1e-6} : tol_for(dt), what + " backward");

  // A target out of range: status 16 with the check, nothing picked without it.
  Tensor bad = make_tensor(dev, kI64, t.size);
  for_each(bad.size, [&](const Shape& i) { bad.set(i, i[1] == p.s - 1 ? double(p.c) : 0.0); });
  bad.upload(dev);
  const LaunchResult failed = dev.launch(Module::library(), "nll_loss",
                                         fwd_args(base | kSums | kCheck, bad), grid(pes, ls));
  CHECK(bad_target(failed));
  REQUIRE(
      dev.launch(Module::library(), "nll_loss", fwd_args(base | kSums, bad), grid(pes, ls)).ok());
}

}  // namespace

TEST_CASE("upsample: nearest, nearest-exact, linear in 1-3 dims, layouts, dtypes",
          "[kernels][upsample]") {
  std::mt19937 rng(91);
  for (uint8_t dt : kFloatDtypes) {
    for (int64_t flags : {int64_t{0}, kAlign}) {
      up_case(make_up(kLinear, flags, 2, {1, 5, 7}, {1, 11, 4}), {2, 3, 5, 7}, {2, 3, 11, 4}, dt,
              false, 4, rng);
      up_case(make_up(kLinear, flags, 2, {1, 6, 4}, {1, 3, 13}), {2, 5, 6, 4}, {2, 5, 3, 13}, dt,
              true, 4, rng);
    }
  }
  up_case(make_up(kLinear, 0, 1, {1, 1, 9}, {1, 1, 20}), {3, 4, 1, 9}, {3, 4, 1, 20}, kF32, false,
          1, rng);
  up_case(make_up(kLinear, kAlign, 3, {3, 4, 5}, {5, 2, 9}), {3, 3, 4, 5}, {3, 5, 2, 9}, kF32,
          false, 4, rng);
  up_case(make_up(kLinear, 0, 3, {3, 4, 5}, {3, 8, 4}), {6, 3, 4, 5}, {6, 3, 8, 4}, kBF16, true, 64,
          rng);
  for (int64_t mode : {kNearest, kExact}) {
    for (int64_t flags : {int64_t{0}, kShortcuts}) {
      if (mode == kExact && flags) continue;
      up_case(make_up(mode, flags, 2, {1, 5, 7}, {1, 10, 7}), {2, 3, 5, 7}, {2, 3, 10, 7}, kF32,
              false, 4, rng);
      up_case(make_up(mode, flags, 2, {1, 9, 7}, {1, 4, 12}), {2, 3, 9, 7}, {2, 3, 4, 12}, kF16,
              true, 4, rng);
      up_case(make_up(mode, flags, 3, {2, 3, 4}, {4, 3, 9}), {2, 2, 3, 4}, {2, 4, 3, 9}, kF32,
              false, 1, rng);
    }
  }
  // Nearest moves bits: integers too (forward only).
  up_case(make_up(kNearest, 0, 2, {1, 4, 5}, {1, 7, 9}), {2, 3, 4, 5}, {2, 3, 7, 9}, kI32, true, 4,
          rng);
}

TEST_CASE("upsample: blocks larger than one PE's share, on both local-store sizes",
          "[kernels][upsample]") {
  std::mt19937 rng(92);
  up_case(make_up(kLinear, 0, 2, {1, 16, 12}, {1, 64, 48}), {2, 21, 16, 12}, {2, 21, 64, 48}, kF32,
          false, 64, rng);
  up_case(make_up(kLinear, kAlign, 2, {1, 20, 30}, {1, 47, 71}), {1, 9, 20, 30}, {1, 9, 47, 71},
          kF16, true, 4, rng, 384 * 1024);
  up_case(make_up(kNearest, kShortcuts, 2, {1, 24, 40}, {1, 48, 80}), {2, 6, 24, 40},
          {2, 6, 48, 80}, kF32, false, 4, rng);
}

TEST_CASE("upsample rejects bad arguments before moving data", "[kernels][upsample]") {
  Device dev;
  Tensor a = make_tensor(dev, kF32, {1, 1, 4, 4}), b = make_tensor(dev, kF32, {1, 1, 8, 8});
  const Up good = make_up(kLinear, 0, 2, {1, 4, 4}, {1, 8, 8});
  const auto run = [&](const char* k, Up u, uint8_t dt, int64_t n = 1) {
    return dev.launch(Module::library(), k, up_args(b.addr, a.addr, dt, u, n, 1, b, a)).status();
  };
  for (const char* k : {"upsample", "upsample_backward"}) {
    Up u = good;
    u.mode = 4;
    CHECK(run(k, u, kF32) == MTIA_KSTATUS_BAD_OP);
    u = good;
    u.flags = 4;
    CHECK(run(k, u, kF32) == MTIA_KSTATUS_BAD_OP);
    CHECK(run(k, good, kI32) == MTIA_KSTATUS_BAD_DTYPE);
    u = good;
    u.dims = 4;
    CHECK(run(k, u, kF32) == MTIA_KSTATUS_BAD_SHAPE);
    u = good;
    u.ax[0].out = 2;  // a padded axis must be 1 -> 1
    CHECK(run(k, u, kF32) == MTIA_KSTATUS_BAD_SHAPE);
    u = good;
    u.ax[2].in = 0;  // outputs with no input
    CHECK(run(k, u, kF32) == MTIA_KSTATUS_BAD_SHAPE);
    CHECK(run(k, good, kF32, -1) == MTIA_KSTATUS_BAD_SHAPE);
  }
  CHECK(run("upsample_backward", make_up(kNearest, 0, 2, {1, 4, 4}, {1, 8, 8}), kI32) ==
        MTIA_KSTATUS_BAD_DTYPE);
  b.download(dev);
  CHECK(std::all_of(b.host.begin(), b.host.end(), [](uint8_t v) { return v == kGapByte; }));
  // No outputs: nothing to do.
  CHECK(run("upsample", good, kF32, 0) == MTIA_KSTATUS_OK);
}

TEST_CASE("nll_loss: per position, sums, weights, ignore_index, boxes and single elements",
          "[kernels][loss]") {
  std::mt19937 rng(93);
  for (uint8_t dt : kFloatDtypes) {
    nll_case({2, 5, 37, -100, true, true}, dt, 4, rng);
    nll_case({3, 40, 9, 2, false, false}, dt, 4, rng);
  }
  nll_case({4, 21, 300, -100, true, true}, kF32, 64, rng);
  nll_case({2, 300, 50, 7, true, false}, kF32, 1, rng, 384 * 1024);
  nll_case({1, 3, 5000, -100, false, true}, kBF16, 4, rng);
}

TEST_CASE("nll_loss rejects bad arguments", "[kernels][loss]") {
  Device dev;
  Tensor x = make_tensor(dev, kF32, {1, 4, 4, 1}), t = make_tensor(dev, kI64, {1, 4, 1, 1});
  const auto run = [&](const char* k, uint8_t dt, int64_t flags, int64_t n) {
    return dev
        .launch(Module::library(), k,
                {ptr(x.addr), ptr(x.addr), ptr(x.addr), ptr(t.addr), ptr(x.addr), dtype(dt),
                 i64(flags), i64(-100), i64(n), i64(4), i64(4), i64(16), i64(4), i64(1), i64(4),
                 i64(1), i64(4), i64(1), i64(1)})
        .status();
  };
  for (const char* k : {"nll_loss", "nll_loss_backward"}) {
    CHECK(run(k, kI32, 0, 1) == MTIA_KSTATUS_BAD_DTYPE);
    CHECK(run(k, kF32, 64, 1) == MTIA_KSTATUS_BAD_OP);
    CHECK(run(k, kF32, 0, -1) == MTIA_KSTATUS_BAD_SHAPE);
  }
  CHECK(run("nll_loss_backward", kF32, kSums, 1) == MTIA_KSTATUS_BAD_OP);
}
