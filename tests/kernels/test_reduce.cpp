// sum, mean, amax, amin, var, max_dim and min_dim along each dimension, for each dtype they
// take, with strided inputs and outputs, reductions longer than a tile (accumulated across
// chunks), NaN handling and the kernels' error statuses.
#include <catch2/catch.hpp>

#include "check.h"

using namespace kt;

namespace {

const Module& lib() {
  return Module::library();
}

std::vector<Arg> cat(std::vector<Arg> a, const std::vector<Arg>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void expect_ok(const LaunchResult& r) {
  INFO(r.describe());
  REQUIRE(r.ok());
}

// Checks a reduction result: the output dtype's rounding, plus fp32 accumulation error
// relative to the sum of magnitudes (the order of the device's sums is its own). A NaN must
// come out as a NaN.
void check_acc(Device& dev, Tensor& out, const Tensor& in, int dim,
               const std::function<double(const std::vector<double>&)>& ref, double acc_rel,
               const std::string& what, bool average = false) {
  out.download(dev);
  const Tol t = tol_for(out.dt);
  check_reduction_view(
      out, in, dim, ref, average,
      [&](double got, double want, double mag) {
        return std::isnan(want)
                   ? std::isnan(got)
                   : std::fabs(got - want) <= t.abs + t.rel * std::fabs(want) + acc_rel * mag;
      },
      what);
}

// Runs one of sum/mean/amax/amin/var: args = out, in, dtype(s)..., then the common tail.
LaunchResult run_reduce(Device& dev, const char* kernel, const Tensor& out, const Tensor& in,
                        std::vector<Arg> head, int dim, uint32_t pes) {
  head.push_back(i64(dim));
  return dev.launch(lib(), kernel,
                    cat(cat(cat(head, in.size_args()), in.stride_args()), out.stride_args()),
                    grid(pes));
}

const Shape kShape{3, 4, 37, 29};

Shape in_strides(int variant) {
  switch (variant % 3) {
    case 0:
      return contiguous(kShape);
    case 1:
      return permuted(kShape, {0, 1, 3, 2}, 3);  // transposed inner pair, padded
    default:
      return permuted(kShape, {3, 2, 0, 1});  // fully scrambled
  }
}

}  // namespace

TEST_CASE("sum along each dim, floating and integer, any layout", "[kernels][reduce]") {
  std::mt19937 rng(11);
  for (uint8_t dt : kAllDtypes) {
    const std::vector<uint8_t> outs =
        dt_float(dt) ? std::vector<uint8_t>{dt, kF32} : std::vector<uint8_t>{kI64, kI32};
    for (uint8_t odt : outs) {
      for (int dim = 0; dim < 4; ++dim) {
        Device dev;
        Tensor in = make_tensor(dev, dt, kShape, in_strides(dim + odt));
        randomize(dev, in, rng);
        const Shape os = reduced(kShape, dim);
        Tensor out =
            make_tensor(dev, odt, os, dim % 2 ? permuted(os, {3, 2, 1, 0}, 1) : contiguous(os));
        expect_ok(run_reduce(dev, "sum", out, in,
                             {ptr(out.addr), ptr(in.addr), dtype(dt), dtype(odt)}, dim,
                             dim == 1 ? 64 : 4));
        check_acc(dev, out, in, dim, sum_of, 2e-6,
                  std::string("sum ") + dt_name(dt) + " -> " + dt_name(odt) + " dim " +
                      std::to_string(dim));
      }
    }
  }
}

TEST_CASE("mean and var along each dim", "[kernels][reduce]") {
  std::mt19937 rng(12);
  for (uint8_t dt : kFloatDtypes) {
    for (int dim = 0; dim < 4; ++dim) {
      Device dev;
      Tensor in = make_tensor(dev, dt, kShape, in_strides(dim));
      randomize(dev, in, rng, -2, 6);
      const Shape os = reduced(kShape, dim);
      Tensor mean = make_tensor(dev, dt, os);
      expect_ok(
          run_reduce(dev, "mean", mean, in, {ptr(mean.addr), ptr(in.addr), dtype(dt)}, dim, 4));
      check_acc(
          dev, mean, in, dim,
          [](const std::vector<double>& v) { return sum_of(v) / double(v.size()); }, 2e-6,
          std::string("mean ") + dt_name(dt) + " dim " + std::to_string(dim), true);
      for (int64_t corr : {0, 1}) {
        Tensor var = make_tensor(dev, dt, os);
        expect_ok(run_reduce(dev, "var", var, in,
                             {ptr(var.addr), ptr(in.addr), dtype(dt), i64(corr)}, dim, 4));
        check_acc(
            dev, var, in, dim, [&](const std::vector<double>& v) { return var_of(v, corr); }, 1e-5,
            std::string("var ") + dt_name(dt) + " dim " + std::to_string(dim), true);
      }
    }
  }
}

TEST_CASE("amax and amin along each dim, every dtype", "[kernels][reduce]") {
  std::mt19937 rng(13);
  for (uint8_t dt : kAllDtypes) {
    for (int dim = 0; dim < 4; ++dim) {
      for (const char* k : {"amax", "amin"}) {
        Device dev;
        Tensor in = make_tensor(dev, dt, kShape, in_strides(dim + 1));
        randomize(dev, in, rng);
        const Shape os = reduced(kShape, dim);
        Tensor out = make_tensor(dev, dt, os);
        expect_ok(run_reduce(dev, k, out, in, {ptr(out.addr), ptr(in.addr), dtype(dt)}, dim,
                             dim == 3 ? 64 : 4));
        const bool is_max = k[1] == 'm' && k[2] == 'a';
        check_tensor(
            dev, out,
            [&](const Shape& o) {
              const auto v = along(in, o, dim);
              return is_max ? *std::max_element(v.begin(), v.end())
                            : *std::min_element(v.begin(), v.end());
            },
            {0, 0}, std::string(k) + " " + dt_name(dt) + " dim " + std::to_string(dim));
      }
    }
  }
}

namespace {

// max_dim / min_dim: values and the index of the first extreme (a NaN counts as the extreme).
void check_maxmin(Device& dev, bool is_max, Tensor& values, Tensor& indices, const Tensor& in,
                  int dim, const std::string& what) {
  auto pick = [&](const Shape& o) {
    const auto v = along(in, o, dim);
    const size_t best = first_extreme(v, is_max);
    return std::pair<double, double>(v[best], static_cast<double>(best));
  };
  check_tensor(
      dev, values, [&](const Shape& o) { return pick(o).first; }, {0, 0}, what + " values");
  check_tensor(
      dev, indices, [&](const Shape& o) { return pick(o).second; }, {0, 0}, what + " indices");
}

LaunchResult run_maxmin(Device& dev, const char* kernel, const Tensor& values,
                        const Tensor& indices, const Tensor& in, int dim, uint32_t pes) {
  return dev.launch(
      lib(), kernel,
      cat(cat(cat(cat({ptr(values.addr), ptr(indices.addr), ptr(in.addr), dtype(in.dt), i64(dim)},
                      in.size_args()),
                  in.stride_args()),
              values.stride_args()),
          indices.stride_args()),
      grid(pes));
}

}  // namespace

TEST_CASE("max_dim and min_dim give values and first indices, every dtype", "[kernels][reduce]") {
  std::mt19937 rng(14);
  for (uint8_t dt : kAllDtypes) {
    for (int dim = 0; dim < 4; ++dim) {
      for (const char* k : {"max_dim", "min_dim"}) {
        Device dev;
        Tensor in = make_tensor(dev, dt, kShape, in_strides(dim + 2));
        // Few distinct values, so ties are common and the first index matters.
        randomize(dev, in, rng, -2, 2);
        if (dt_float(dt)) {
          for (size_t e = 0; e < in.host.size() / dt_size(dt); ++e) {
            uint8_t* p = in.host.data() + e * dt_size(dt);
            store_elem(dt, p, std::round(load_elem(dt, p)));
          }
          in.upload(dev);
        }
        const Shape os = reduced(kShape, dim);
        Tensor values = make_tensor(dev, dt, os);
        Tensor indices = make_tensor(dev, kI64, os, permuted(os, {3, 2, 1, 0}));
        expect_ok(run_maxmin(dev, k, values, indices, in, dim, 4));
        check_maxmin(dev, k[1] == 'a', values, indices, in, dim,
                     std::string(k) + " " + dt_name(dt) + " dim " + std::to_string(dim));
      }
    }
  }
}

TEST_CASE("reductions longer than a tile accumulate across chunks", "[kernels][reduce]") {
  std::mt19937 rng(15);
  const int64_t R = 20011;
  // Along the last dim (tile rows are outputs) and along dim 0 (tile columns are outputs).
  for (int dim : {3, 0}) {
    const Shape size = dim == 3 ? Shape{1, 1, 3, R} : Shape{R, 1, 1, 5};
    for (uint8_t dt : {kF32, kF16, kI32}) {
      Device dev(16ull << 20);
      Tensor in = make_tensor(dev, dt, size);
      randomize(dev, in, rng);
      const Shape os = reduced(size, dim);
      const uint8_t sdt = dt_float(dt) ? kF32 : kI64;
      Tensor sum = make_tensor(dev, sdt, os);
      auto r = run_reduce(dev, "sum", sum, in, {ptr(sum.addr), ptr(in.addr), dtype(dt), dtype(sdt)},
                          dim, 4);
      expect_ok(r);
      CHECK(r.stats.reduce > 2 * static_cast<uint64_t>(os[2] * os[3]));  // several chunks each
      check_acc(dev, sum, in, dim, sum_of, 2e-6, std::string("long sum ") + dt_name(dt));

      Tensor amin = make_tensor(dev, dt, os);
      expect_ok(
          run_reduce(dev, "amin", amin, in, {ptr(amin.addr), ptr(in.addr), dtype(dt)}, dim, 4));
      check_tensor(
          dev, amin,
          [&](const Shape& o) {
            const auto v = along(in, o, dim);
            return *std::min_element(v.begin(), v.end());
          },
          {0, 0}, std::string("long amin ") + dt_name(dt));

      Tensor values = make_tensor(dev, dt, os), indices = make_tensor(dev, kI64, os);
      expect_ok(run_maxmin(dev, "max_dim", values, indices, in, dim, 4));
      check_maxmin(dev, true, values, indices, in, dim, std::string("long max_dim ") + dt_name(dt));

      if (dt_float(dt)) {
        Tensor var = make_tensor(dev, dt, os);
        expect_ok(run_reduce(dev, "var", var, in, {ptr(var.addr), ptr(in.addr), dtype(dt), i64(1)},
                             dim, 4));
        check_acc(
            dev, var, in, dim, [](const std::vector<double>& v) { return var_of(v, 1); }, 1e-5,
            std::string("long var ") + dt_name(dt), true);
      }
    }
  }
}

TEST_CASE("NaN propagates through amax and is the extreme of max_dim", "[kernels][reduce]") {
  std::mt19937 rng(16);
  for (int64_t R : {int64_t{50}, int64_t{12000}}) {  // one chunk, several chunks
    Device dev;
    const Shape size{1, 1, 4, R};
    Tensor in = make_tensor(dev, kF32, size);
    randomize(dev, in, rng);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    in.set({0, 0, 1, R - 3}, nan);  // a NaN late in row 1
    in.set({0, 0, 2, 7}, nan);      // two NaNs in row 2: the first one's index
    in.set({0, 0, 2, R - 1}, nan);
    in.upload(dev);
    const Shape os{1, 1, 4, 1};
    Tensor amax = make_tensor(dev, kF32, os);
    expect_ok(run_reduce(dev, "amax", amax, in, {ptr(amax.addr), ptr(in.addr), dtype(kF32)}, 3, 1));
    amax.download(dev);
    CHECK_FALSE(std::isnan(amax.at({0, 0, 0, 0})));
    CHECK(std::isnan(amax.at({0, 0, 1, 0})));
    CHECK(std::isnan(amax.at({0, 0, 2, 0})));
    Tensor values = make_tensor(dev, kF32, os), indices = make_tensor(dev, kI64, os);
    for (const char* k : {"max_dim", "min_dim"}) {
      expect_ok(run_maxmin(dev, k, values, indices, in, 3, 1));
      indices.download(dev);
      CHECK(indices.at({0, 0, 1, 0}) == R - 3);
      CHECK(indices.at({0, 0, 2, 0}) == 7);
      check_maxmin(dev, k[1] == 'a', values, indices, in, 3, std::string("NaN ") + k);
    }
  }
}

TEST_CASE("reduction kernels reject bad dims and dtypes; empty outputs are fine",
          "[kernels][reduce]") {
  Device dev;
  Tensor in = make_tensor(dev, kI32, {2, 3, 4, 5});
  Tensor out = make_tensor(dev, kF32, {2, 3, 4, 1});
  CHECK(
      run_reduce(dev, "sum", out, in, {ptr(out.addr), ptr(in.addr), dtype(kI32), dtype(kF32)}, 3, 4)
          .status() == MTIA_KSTATUS_BAD_DTYPE);
  CHECK(
      run_reduce(dev, "mean", out, in, {ptr(out.addr), ptr(in.addr), dtype(kI32)}, 3, 4).status() ==
      MTIA_KSTATUS_BAD_DTYPE);
  CHECK(
      run_reduce(dev, "amax", out, in, {ptr(out.addr), ptr(in.addr), dtype(kI32)}, 4, 4).status() ==
      MTIA_KSTATUS_BAD_SHAPE);
  CHECK(run_reduce(dev, "amax", out, in, {ptr(out.addr), ptr(in.addr), dtype(kI32)}, -1, 4)
            .status() == MTIA_KSTATUS_BAD_SHAPE);
  Tensor empty = make_tensor(dev, kI32, {2, 0, 4, 5});
  auto r = run_reduce(dev, "amax", out, empty, {ptr(out.addr), ptr(empty.addr), dtype(kI32)}, 3, 4);
  CHECK(r.ok());
  CHECK(r.stats.dma == 0);
  Tensor no_r = make_tensor(dev, kI32, {2, 3, 4, 0});
  CHECK(run_reduce(dev, "amax", out, no_r, {ptr(out.addr), ptr(no_r.addr), dtype(kI32)}, 3, 4)
            .status() == MTIA_KSTATUS_BAD_SHAPE);
}
