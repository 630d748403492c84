// pool2d and pool2d_backward against nested-loop references of PyTorch's CPU semantics: max
// with indices (first maximum, a NaN wins, the first position inside the input for a window of
// -inf), average (padding, count_include_pad, divisor_override, ceil_mode windows), adaptive
// windows (divisible, uneven and growing), NCHW and channels_last layouts with strided
// outputs, each floating dtype (and integers for max), grids of 1, 4 and 64 PEs, both
// local-store sizes, and the error statuses.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "check.h"

using namespace kt;

namespace {

constexpr int64_t kMax = 1, kAvg = 2;
constexpr int64_t kAdaptive = 1, kCountPad = 2;

struct Pool {
  int64_t op = kMax, flags = 0;
  int64_t n = 1, c = 1, h = 1, w = 1, oh = 1, ow = 1;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, divisor = 0;
};

// PyTorch's pooling_output_shape.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

Pool regular(int64_t op, Shape in, int64_t k0, int64_t k1, int64_t s0, int64_t s1, int64_t p0,
             int64_t p1, int64_t d0, int64_t d1, bool ceil_mode) {
  Pool p;
  p.op = op;
  p.n = in[0];
  p.c = in[1];
  p.h = in[2];
  p.w = in[3];
  p.kh = k0;
  p.kw = k1;
  p.sh = s0;
  p.sw = s1;
  p.ph = p0;
  p.pw = p1;
  p.dh = d0;
  p.dw = d1;
  p.oh = out_size(p.h, k0, s0, p0, d0, ceil_mode);
  p.ow = out_size(p.w, k1, s1, p1, d1, ceil_mode);
  return p;
}

Pool adaptive(int64_t op, Shape in, int64_t oh, int64_t ow) {
  Pool p;
  p.op = op;
  p.flags = kAdaptive;
  p.n = in[0];
  p.c = in[1];
  p.h = in[2];
  p.w = in[3];
  p.oh = oh;
  p.ow = ow;
  return p;
}

// One axis's window of output o: positions start + j * d for j < len.
struct Win {
  int64_t start, len, d;
};
Win win(const Pool& p, bool rows, int64_t o) {
  const int64_t in = rows ? p.h : p.w, out = rows ? p.oh : p.ow;
  if (p.flags & kAdaptive) {
    const int64_t s = o * in / out, e = ((o + 1) * in + out - 1) / out;
    return {s, e - s, 1};
  }
  return {o * (rows ? p.sh : p.sw) - (rows ? p.ph : p.pw), rows ? p.kh : p.kw, rows ? p.dh : p.dw};
}

int64_t divisor_of(const Pool& p, int64_t oh, int64_t ow) {
  if (p.divisor != 0) return p.divisor;
  if (p.flags & kAdaptive) return win(p, true, oh).len * win(p, false, ow).len;
  const auto axis = [&](bool rows, int64_t o) {
    const int64_t in = rows ? p.h : p.w, k = rows ? p.kh : p.kw, pad = rows ? p.ph : p.pw;
    int64_t s = o * (rows ? p.sh : p.sw) - pad;
    int64_t e = std::min(s + k, in + pad);
    const int64_t padded = e - s;
    s = std::max<int64_t>(s, 0);
    e = std::min(e, in);
    return (p.flags & kCountPad) ? padded : e - s;
  };
  return axis(true, oh) * axis(false, ow);
}

struct Ref {
  std::vector<double> val;
  std::vector<int64_t> idx;
  size_t at(const Pool& p, const Shape& i) const {
    return size_t(((i[0] * p.c + i[1]) * p.oh + i[2]) * p.ow + i[3]);
  }
};

Ref ref_forward(const Pool& p, const HostView& in) {
  Ref r;
  r.val.resize(size_t(p.n * p.c * p.oh * p.ow));
  r.idx.resize(r.val.size());
  for_each({p.n, p.c, p.oh, p.ow}, [&](const Shape& o) {
    const Win a = win(p, true, o[2]), b = win(p, false, o[3]);
    double best = dt_float(in.dt) ? -INFINITY : -1e300, sum = 0;
    int64_t ih0 = a.start, iw0 = b.start;
    while (ih0 < 0) ih0 += a.d;
    while (iw0 < 0) iw0 += b.d;
    int64_t bi = ih0 * p.w + iw0;
    for (int64_t jh = 0; jh < a.len; ++jh) {
      const int64_t ih = a.start + jh * a.d;
      if (ih < 0 || ih >= p.h) continue;
      for (int64_t jw = 0; jw < b.len; ++jw) {
        const int64_t iw = b.start + jw * b.d;
        if (iw < 0 || iw >= p.w) continue;
        const double v = in.at({o[0], o[1], ih, iw});
        sum += v;
        if (v > best || std::isnan(v)) {
          best = v;
          bi = ih * p.w + iw;
        }
      }
    }
    r.val[r.at(p, o)] = p.op == kMax ? best : sum / double(divisor_of(p, o[2], o[3]));
    r.idx[r.at(p, o)] = bi;
  });
  return r;
}

// grad_in of the pooling, given grad_out and (max) the indices.
std::vector<double> ref_backward(const Pool& p, const HostView& go,
                                 const std::vector<int64_t>& idx) {
  std::vector<double> gi(size_t(p.n * p.c * p.h * p.w), 0.0);
  for_each({p.n, p.c, p.oh, p.ow}, [&](const Shape& o) {
    const size_t plane = size_t((o[0] * p.c + o[1]) * p.h * p.w);
    const double g = go.at(o);
    if (p.op == kMax) {
      gi[plane + size_t(idx[size_t(((o[0] * p.c + o[1]) * p.oh + o[2]) * p.ow + o[3])])] += g;
      return;
    }
    const Win a = win(p, true, o[2]), b = win(p, false, o[3]);
    const double d = g / double(divisor_of(p, o[2], o[3]));
    for (int64_t jh = 0; jh < a.len; ++jh) {
      const int64_t ih = a.start + jh * a.d;
      if (ih < 0 || ih >= p.h) continue;
      for (int64_t jw = 0; jw < b.len; ++jw) {
        const int64_t iw = b.start + jw * b.d;
        if (iw >= 0 && iw < p.w) gi[plane + size_t(ih * p.w + iw)] += d;
      }
    }
  });
  return gi;
}

std::vector<Arg> pool_args(uint64_t a, uint64_t b, uint64_t idx, uint8_t dt, const Pool& p,
                           const Shape& s0, const Shape& s1, const Shape& s2) {
  std::vector<Arg> args{ptr(a),    ptr(b),    ptr(idx),      dtype(dt), i64(p.op), i64(p.flags),
                        i64(p.n),  i64(p.c),  i64(p.h),      i64(p.w),  i64(p.oh), i64(p.ow),
                        i64(p.kh), i64(p.kw), i64(p.sh),     i64(p.sw), i64(p.ph), i64(p.pw),
                        i64(p.dh), i64(p.dw), i64(p.divisor)};
  for (const Shape* s : {&s0, &s1, &s2}) {
    for (int64_t v : *s) args.push_back(i64(v));
  }
  return args;
}

// Layouts: 0 NCHW, 1 channels_last, 2 NCHW with padded rows.
Shape layout(const Shape& size, int l) {
  switch (l) {
    case 1:
      return permuted(size, {0, 2, 3, 1});
    case 2:
      return permuted(size, {0, 1, 2, 3}, 3);
    default:
      return contiguous(size);
  }
}

// Runs forward and backward of `p` and checks both against the references.
void pool_case(const Pool& p, uint8_t dt, int in_layout, int out_layout, uint32_t pes,
               std::mt19937& rng, uint64_t ls = 128 * 1024, bool with_nan = false) {
  const std::string what = fmt::format(
      "{} {} {} in {}x{}x{}x{} out {}x{} k {}x{} s {}x{} p {}x{} d {}x{} div {} "
      "layouts {}/{} pes {}",
      p.op == kMax ? "max" : "avg", (p.flags & kAdaptive) ? "adaptive" : "regular", dt_name(dt),
      p.n, p.c, p.h, p.w, p.oh, p.ow, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, p.divisor,
      in_layout, out_layout, pes);
  INFO(what);
  Device dev(32ull << 20);
  const Shape is{p.n, p.c, p.h, p.w}, os{p.n, p.c, p.oh, p.ow};
  Tensor in = make_tensor(dev, dt, is, layout(is, in_layout));
  fill_random(in, rng, -4, 4);
  if (with_nan) {
    in.set({0, 0, 0, 0}, NAN);
    in.set({p.n - 1, p.c - 1, p.h - 1, p.w - 1}, NAN);
  }
  in.upload(dev);
  Tensor out = make_tensor(dev, dt, os, layout(os, out_layout));
  Tensor idx = make_tensor(dev, kI64, os, layout(os, out_layout == 1 ? 2 : 1));
  auto r =
      dev.launch(Module::library(), "pool2d",
                 pool_args(out.addr, in.addr, idx.addr, dt, p, in.stride, out.stride, idx.stride),
                 grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  const Ref ref = ref_forward(p, in);
  const Tol tol = p.op == kMax ? Tol{} : tol_for(dt);
  check_tensor(
      dev, out, [&](const Shape& i) { return round_to(dt, ref.val[ref.at(p, i)]); }, tol,
      what + " values");
  if (p.op == kMax) {
    check_tensor(
        dev, idx, [&](const Shape& i) { return double(ref.idx[ref.at(p, i)]); }, Tol{},
        what + " indices");
  } else {
    idx.download(dev);
    CHECK(std::all_of(idx.host.begin(), idx.host.end(), [](uint8_t v) { return v == kGapByte; }));
  }
  if (!dt_float(dt)) return;

  // Backward from a random grad_out (and, for max, the forward's indices).
  Tensor go = make_tensor(dev, dt, os, layout(os, 1 - std::min(out_layout, 1)));
  randomize(dev, go, rng, -2, 2);
  Tensor gi = make_tensor(dev, dt, is, layout(is, in_layout == 1 ? 2 : 1));
  r = dev.launch(Module::library(), "pool2d_backward",
                 pool_args(gi.addr, go.addr, idx.addr, dt, p, gi.stride, go.stride, idx.stride),
                 grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  const std::vector<double> want = ref_backward(p, go, ref.idx);
  // Overlapping windows add a few terms in fp32: the dtype's rounding plus an ulp per term.
  const Tol btol = dt == kF32 ? Tol{1e-5, 1e-6} : tol_for(dt);
  check_tensor(
      dev, gi,
      [&](const Shape& i) {
        return round_to(dt, want[size_t(((i[0] * p.c + i[1]) * p.h + i[2]) * p.w + i[3])]);
      },
      btol, what + " grad_input");
}

}  // namespace

TEST_CASE("max_pool2d with indices: padding, stride, dilation, ceil_mode, layouts",
          "[kernels][pool]") {
  std::mt19937 rng(71);
  for (uint8_t dt : kFloatDtypes) {
    pool_case(regular(kMax, {2, 3, 9, 11}, 3, 3, 2, 2, 1, 1, 1, 1, false), dt, 0, 0, 4, rng);
    pool_case(regular(kMax, {2, 5, 10, 7}, 2, 3, 2, 1, 1, 0, 2, 1, true), dt, 1, 1, 4, rng);
    pool_case(regular(kMax, {1, 4, 13, 13}, 3, 2, 3, 2, 1, 1, 1, 2, true), dt, 2, 0, 64, rng);
  }
  pool_case(regular(kMax, {3, 7, 8, 8}, 2, 2, 2, 2, 0, 0, 1, 1, false), kF32, 1, 0, 1, rng);
  // Overlapping windows: an element can be the maximum of several outputs.
  pool_case(regular(kMax, {2, 2, 12, 12}, 4, 4, 1, 1, 2, 2, 1, 1, false), kF32, 0, 1, 4, rng);
}

TEST_CASE("max_pool2d takes integers; NaN wins and windows of -inf keep a position",
          "[kernels][pool]") {
  std::mt19937 rng(72);
  for (uint8_t dt : {kI8, kI32, kI64}) {
    pool_case(regular(kMax, {2, 3, 7, 9}, 3, 2, 2, 2, 1, 1, 1, 1, true), dt, 1, 0, 4, rng);
  }
  pool_case(regular(kMax, {2, 2, 6, 6}, 2, 2, 2, 2, 1, 1, 1, 1, false), kF32, 0, 0, 1, rng,
            128 * 1024, true);
  // Every element -inf: the index is each window's first position inside the input.
  Device dev;
  const Pool p = regular(kMax, {1, 1, 4, 4}, 3, 3, 2, 2, 1, 1, 1, 1, false);
  Tensor in = make_tensor(dev, kF32, {1, 1, 4, 4});
  for_each(in.size, [&](const Shape& i) { in.set(i, -INFINITY); });
  in.upload(dev);
  Tensor out = make_tensor(dev, kF32, {1, 1, p.oh, p.ow}), idx = make_tensor(dev, kI64, out.size);
  auto r = dev.launch(
      Module::library(), "pool2d",
      pool_args(out.addr, in.addr, idx.addr, kF32, p, in.stride, out.stride, idx.stride));
  REQUIRE(r.ok());
  const Ref ref = ref_forward(p, in);
  check_tensor(
      dev, idx, [&](const Shape& i) { return double(ref.idx[ref.at(p, i)]); }, Tol{},
      "-inf indices");
}

TEST_CASE("avg_pool2d: count_include_pad, divisor_override, ceil_mode", "[kernels][pool]") {
  std::mt19937 rng(73);
  for (uint8_t dt : kFloatDtypes) {
    for (int64_t flags : {0, 2}) {
      Pool p = regular(kAvg, {2, 3, 9, 10}, 3, 2, 2, 2, 1, 1, 1, 1, true);
      p.flags = flags;
      pool_case(p, dt, flags ? 1 : 0, flags ? 0 : 1, 4, rng);
    }
  }
  Pool p = regular(kAvg, {1, 6, 11, 11}, 3, 3, 3, 3, 1, 1, 1, 1, false);
  p.divisor = 5;
  pool_case(p, kF32, 1, 1, 64, rng);
  p.divisor = -3;  // PyTorch takes any non-zero override
  pool_case(p, kF16, 0, 1, 4, rng);
  pool_case(regular(kAvg, {2, 4, 8, 8}, 2, 2, 1, 1, 0, 0, 1, 1, false), kBF16, 0, 0, 1, rng);
}

TEST_CASE("adaptive pooling: divisible, uneven and growing windows", "[kernels][pool]") {
  std::mt19937 rng(74);
  for (int64_t op : {kMax, kAvg}) {
    for (uint8_t dt : kFloatDtypes) {
      pool_case(adaptive(op, {2, 3, 12, 10}, 4, 5), dt, 0, 0, 4, rng);
      pool_case(adaptive(op, {2, 3, 10, 13}, 4, 3), dt, 1, 0, 4, rng);
    }
    pool_case(adaptive(op, {1, 5, 3, 5}, 7, 8), kF32, 1, 1, 4, rng);  // outputs > inputs
    pool_case(adaptive(op, {3, 2, 9, 9}, 1, 1), kF32, 0, 2, 64, rng);
  }
}

TEST_CASE("pooling larger than one tile, on both local-store sizes", "[kernels][pool]") {
  std::mt19937 rng(75);
  pool_case(regular(kMax, {2, 16, 40, 40}, 3, 3, 2, 2, 1, 1, 1, 1, false), kF32, 1, 1, 4, rng);
  pool_case(regular(kAvg, {2, 8, 45, 37}, 3, 3, 1, 1, 1, 1, 1, 1, false), kBF16, 0, 0, 4, rng,
            384 * 1024);
  pool_case(adaptive(kAvg, {1, 4, 70, 50}, 6, 7), kF16, 0, 0, 2, rng);
}

TEST_CASE("pooling rejects bad arguments before moving data", "[kernels][pool]") {
  Device dev;
  Tensor a = make_tensor(dev, kF32, {1, 1, 4, 4}), b = make_tensor(dev, kF32, {1, 1, 2, 2});
  const Pool good = regular(kMax, {1, 1, 4, 4}, 2, 2, 2, 2, 0, 0, 1, 1, false);
  const auto run = [&](const char* k, const Pool& p, uint8_t dt) {
    return dev
        .launch(Module::library(), k,
                pool_args(b.addr, a.addr, b.addr, dt, p, a.stride, b.stride, b.stride))
        .status();
  };
  for (const char* k : {"pool2d", "pool2d_backward"}) {
    Pool p = good;
    p.op = 3;
    CHECK(run(k, p, kF32) == MTIA_KSTATUS_BAD_OP);
    p = good;
    p.flags = 4;
    CHECK(run(k, p, kF32) == MTIA_KSTATUS_BAD_OP);
    CHECK(run(k, good, kBool) == MTIA_KSTATUS_BAD_DTYPE);
    p = good;
    p.op = kAvg;
    CHECK(run(k, p, kI32) == MTIA_KSTATUS_BAD_DTYPE);
    p = good;
    p.sh = 0;
    CHECK(run(k, p, kF32) == MTIA_KSTATUS_BAD_SHAPE);
    p = good;
    p.ph = -1;
    CHECK(run(k, p, kF32) == MTIA_KSTATUS_BAD_SHAPE);
    p = good;
    p.h = -4;
    CHECK(run(k, p, kF32) == MTIA_KSTATUS_BAD_SHAPE);
    p = adaptive(kMax, {1, 1, 0, 4}, 2, 2);
    CHECK(run(k, p, kF32) == MTIA_KSTATUS_BAD_SHAPE);
  }
  // Gradients are floating; max of integers is forward only.
  CHECK(run("pool2d_backward", good, kI32) == MTIA_KSTATUS_BAD_DTYPE);
  // Nothing was written by the rejected launches.
  b.download(dev);
  CHECK(std::all_of(b.host.begin(), b.host.end(), [](uint8_t v) { return v == kGapByte; }));
  // No outputs: nothing to do, and nothing written.
  Pool e = good;
  e.n = 0;
  CHECK(run("pool2d", e, kF32) == MTIA_KSTATUS_OK);
}
