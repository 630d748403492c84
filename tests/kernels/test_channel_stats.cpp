// channel_moments and channel_grad_sums (the statistics of batch and group norm) against
// double-precision references: NCHW-like and channels_last-like [N, C, S] views, strided
// inputs, channels whose elements take several tiles, each floating dtype, grids of 1, 4 and
// 64 PEs, and the error statuses.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "check.h"

using namespace kt;

namespace {

// [N, C, S] as the harness's 4-D view [1, N, C, S].
struct Ncs {
  int64_t n, c, s;
};

Shape strides_of(const Tensor& t) {
  return {t.stride[1], t.stride[2], t.stride[3], 0};
}

void moments_case(uint8_t dt, Ncs d, bool channels_last, uint32_t pes, std::mt19937& rng,
                  uint64_t ls = 128 * 1024) {
  const std::string what = fmt::format("channel_moments {} {}x{}x{}{} pes {}", dt_name(dt), d.n,
                                       d.c, d.s, channels_last ? " channels_last" : "", pes);
  INFO(what);
  Device dev(32ull << 20);
  const Shape size{1, d.n, d.c, d.s};
  Tensor x =
      make_tensor(dev, dt, size,
                  channels_last ? permuted(size, {0, 1, 3, 2}) : permuted(size, {0, 1, 2, 3}, 2));
  randomize(dev, x, rng, -2, 6);
  Tensor mean = make_tensor(dev, kF32, {1, 1, 1, d.c}),
         var = make_tensor(dev, kF32, {1, 1, 1, d.c});
  const Shape st = strides_of(x);
  auto r = dev.launch(Module::library(), "channel_moments",
                      {ptr(mean.addr), ptr(var.addr), ptr(x.addr), dtype(dt), i64(d.n), i64(d.c),
                       i64(d.s), i64(st[0]), i64(st[1]), i64(st[2])},
                      grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  std::vector<double> m(size_t(d.c), 0), v(size_t(d.c), 0);
  const double cnt = double(d.n * d.s);
  for_each(size, [&](const Shape& i) { m[size_t(i[2])] += x.at(i) / cnt; });
  for_each(size, [&](const Shape& i) {
    const double e = x.at(i) - m[size_t(i[2])];
    v[size_t(i[2])] += e * e / cnt;
  });
  check_tensor(
      dev, mean, [&](const Shape& i) { return m[size_t(i[3])]; }, Tol{1e-5, 1e-5}, what + " mean");
  check_tensor(
      dev, var, [&](const Shape& i) { return v[size_t(i[3])]; }, Tol{1e-5, 1e-5}, what + " var");
}

void grad_sums_case(uint8_t dt, Ncs d, bool channels_last, bool sub_mean, uint32_t pes,
                    std::mt19937& rng) {
  const std::string what =
      fmt::format("channel_grad_sums {} {}x{}x{}{}{} pes {}", dt_name(dt), d.n, d.c, d.s,
                  channels_last ? " channels_last" : "", sub_mean ? " mean" : "", pes);
  INFO(what);
  Device dev(32ull << 20);
  const Shape size{1, d.n, d.c, d.s};
  Tensor dy =
      make_tensor(dev, dt, size, channels_last ? permuted(size, {0, 1, 3, 2}) : contiguous(size));
  Tensor x = make_tensor(
      dev, dt, size,
      channels_last ? permuted(size, {0, 1, 3, 2}, 1) : permuted(size, {0, 1, 2, 3}, 3));
  randomize(dev, dy, rng, -2, 2);
  randomize(dev, x, rng, -3, 3);
  Tensor mean = make_tensor(dev, kF32, {1, 1, 1, d.c});
  randomize(dev, mean, rng, -1, 1);
  Tensor s1 = make_tensor(dev, kF32, {1, 1, 1, d.c}), s2 = make_tensor(dev, kF32, {1, 1, 1, d.c});
  const Shape ds = strides_of(dy), xs = strides_of(x);
  auto r = dev.launch(Module::library(), "channel_grad_sums",
                      {ptr(s1.addr), ptr(s2.addr), ptr(dy.addr), ptr(x.addr), ptr(mean.addr),
                       dtype(dt), i64(sub_mean ? 1 : 0), i64(d.n), i64(d.c), i64(d.s), i64(ds[0]),
                       i64(ds[1]), i64(ds[2]), i64(xs[0]), i64(xs[1]), i64(xs[2])},
                      grid(pes));
  INFO(r.describe());
  REQUIRE(r.ok());
  std::vector<double> a(size_t(d.c), 0), b(size_t(d.c), 0), mag(size_t(d.c), 0);
  for_each(size, [&](const Shape& i) {
    const size_t c = size_t(i[2]);
    const double m = sub_mean ? mean.at({0, 0, 0, i[2]}) : 0;
    a[c] += dy.at(i);
    b[c] += dy.at(i) * (x.at(i) - m);
    mag[c] += std::fabs(dy.at(i) * (x.at(i) - m)) + std::fabs(dy.at(i));
  });
  // fp32 sums of many terms: an error relative to the sum of magnitudes.
  const auto near = [&](Tensor& t, const std::vector<double>& want, const char* name) {
    t.download(dev);
    for (int64_t c = 0; c < d.c; ++c) {
      const double got = t.at({0, 0, 0, c});
      INFO(what << " " << name << " channel " << c << " got " << got << " want "
                << want[size_t(c)]);
      CHECK(std::fabs(got - want[size_t(c)]) <= 1e-6 * mag[size_t(c)] + 1e-6);
    }
  };
  near(s1, a, "sum_dy");
  near(s2, b, "sum_dyx");
}

}  // namespace

TEST_CASE("channel_moments: both layouts, each dtype, long channels", "[kernels][channel_stats]") {
  std::mt19937 rng(81);
  for (uint8_t dt : kFloatDtypes) {
    moments_case(dt, {4, 6, 25}, false, 4, rng);
    moments_case(dt, {3, 20, 9}, true, 4, rng);
  }
  moments_case(kF32, {1, 5, 7}, false, 1, rng);
  moments_case(kF32, {2, 130, 3}, true, 64, rng);
  moments_case(kF32, {5, 3, 9001}, false, 4, rng);  // several tiles per channel
  moments_case(kBF16, {40, 3, 700}, true, 2, rng, 384 * 1024);
}

TEST_CASE("channel_grad_sums: with and without the mean", "[kernels][channel_stats]") {
  std::mt19937 rng(82);
  for (uint8_t dt : kFloatDtypes) {
    for (bool sub : {false, true}) {
      grad_sums_case(dt, {3, 7, 17}, false, sub, 4, rng);
      grad_sums_case(dt, {3, 9, 11}, true, sub, 1, rng);
    }
  }
  grad_sums_case(kF32, {6, 4, 6001}, false, true, 4, rng);
  grad_sums_case(kF16, {2, 70, 5}, true, true, 64, rng);
}

TEST_CASE("channel statistics reject bad arguments", "[kernels][channel_stats]") {
  Device dev;
  Tensor x = make_tensor(dev, kF32, {1, 1, 2, 3}), o = make_tensor(dev, kF32, {1, 1, 1, 2});
  const auto moments = [&](uint8_t dt, int64_t n, int64_t c, int64_t s, int64_t st) {
    return dev
        .launch(Module::library(), "channel_moments",
                {ptr(o.addr), ptr(o.addr), ptr(x.addr), dtype(dt), i64(n), i64(c), i64(s), i64(st),
                 i64(3), i64(1)})
        .status();
  };
  CHECK(moments(kI32, 1, 2, 3, 6) == MTIA_KSTATUS_BAD_DTYPE);
  CHECK(moments(kF32, -1, 2, 3, 6) == MTIA_KSTATUS_BAD_SHAPE);
  CHECK(moments(kF32, 1, 2, 3, -6) == MTIA_KSTATUS_BAD_SHAPE);
  CHECK(moments(kF32, 0, 2, 3, 6) == MTIA_KSTATUS_BAD_SHAPE);  // channels over no elements
  CHECK(moments(kF32, 1, 0, 3, 6) == MTIA_KSTATUS_OK);         // no channels: nothing to do
  const auto sums = [&](int64_t flags, uint8_t dt) {
    return dev
        .launch(
            Module::library(), "channel_grad_sums",
            {ptr(o.addr), ptr(o.addr), ptr(x.addr), ptr(x.addr), ptr(o.addr), dtype(dt), i64(flags),
             i64(1), i64(2), i64(3), i64(6), i64(3), i64(1), i64(6), i64(3), i64(1)})
        .status();
  };
  CHECK(sums(2, kF32) == MTIA_KSTATUS_BAD_OP);
  CHECK(sums(1, kBool) == MTIA_KSTATUS_BAD_DTYPE);
  o.download(dev);
  CHECK(std::all_of(o.host.begin(), o.host.end(), [](uint8_t v) { return v == kGapByte; }));
}
