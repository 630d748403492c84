// softmax, log_softmax and layer_norm against double-precision references: each dim, each
// floating dtype, strided and transposed operands, rows longer than a tile (the multi-pass
// path), grids of 1, 4 and 64 PEs.
#include <catch2/catch.hpp>

#include <fmt/format.h>

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

LaunchResult run_softmax(Device& dev, bool log_form, const Tensor& out, const Tensor& in, int dim,
                         uint32_t pes, uint64_t ls = 128 * 1024) {
  return dev.launch(
      lib(), log_form ? "log_softmax" : "softmax",
      cat(cat(cat({ptr(out.addr), ptr(in.addr), dtype(in.dt), i64(dim)}, in.size_args()),
              in.stride_args()),
          out.stride_args()),
      grid(pes, ls));
}

}  // namespace

TEST_CASE("softmax and log_softmax along each dim", "[kernels][softmax]") {
  std::mt19937 rng(21);
  const Shape size{2, 3, 21, 37};
  for (uint8_t dt : kFloatDtypes) {
    for (int dim = 0; dim < 4; ++dim) {
      for (bool log_form : {false, true}) {
        Device dev;
        Tensor in = make_tensor(dev, dt, size,
                                dim % 2 ? permuted(size, {0, 1, 3, 2}, 2) : contiguous(size));
        randomize(dev, in, rng, -6, 6);
        Tensor out =
            make_tensor(dev, dt, size, dim == 2 ? permuted(size, {3, 2, 1, 0}) : contiguous(size));
        const uint32_t pes = dim == 3 ? 64 : dim == 2 ? 1 : 4;
        expect_ok(run_softmax(dev, log_form, out, in, dim, pes));
        check_tensor(
            dev, out, ref_softmax(in, dim, log_form), tol_norm(dt),
            fmt::format("{} {} dim {}", log_form ? "log_softmax" : "softmax", dt_name(dt), dim));
      }
    }
  }
}

TEST_CASE("softmax over rows longer than a tile takes three passes", "[kernels][softmax]") {
  std::mt19937 rng(22);
  for (int dim : {3, 0}) {
    const int64_t R = 15013;
    const Shape size = dim == 3 ? Shape{1, 1, 3, R} : Shape{R, 1, 1, 4};
    for (uint8_t dt : {kF32, kBF16}) {
      for (bool log_form : {false, true}) {
        Device dev(16ull << 20);
        Tensor in = make_tensor(dev, dt, size);
        randomize(dev, in, rng, -8, 8);
        Tensor out = make_tensor(dev, dt, size);
        auto r = run_softmax(dev, log_form, out, in, dim, 4);
        expect_ok(r);
        // Every element was loaded three times (max, sum, output) in several chunks.
        CHECK(r.stats.dma > 3 * 2 * static_cast<uint64_t>(size[0] * size[3] / R * size[2]));
        check_tensor(dev, out, ref_softmax(in, dim, log_form), tol_norm(dt),
                     fmt::format("long {} {}", log_form ? "log_softmax" : "softmax", dt_name(dt)));
      }
    }
  }
}

TEST_CASE("softmax rejects integer dtypes", "[kernels][softmax]") {
  Device dev;
  Tensor in = make_tensor(dev, kI32, {1, 1, 2, 3});
  CHECK(run_softmax(dev, false, in, in, 3, 1).status() == MTIA_KSTATUS_BAD_DTYPE);
}

namespace {

// x, out: [1, 1, rows, cols] views; weight, bias: [cols]; mean, rstd: [rows] fp32.
LaunchResult run_ln(Device& dev, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                    const Tensor& x, const Tensor& w, const Tensor& b, int64_t flags, float eps,
                    uint32_t pes) {
  return dev.launch(lib(), "layer_norm",
                    {ptr(out.addr), ptr(mean.addr), ptr(rstd.addr), ptr(x.addr), ptr(w.addr),
                     ptr(b.addr), dtype(x.dt), i64(flags), f32(eps), i64(x.size[2]), i64(x.size[3]),
                     i64(x.stride[2]), i64(x.stride[3]), i64(out.stride[2]), i64(out.stride[3])},
                    grid(pes));
}

void layer_norm_case(uint8_t dt, int64_t rows, int64_t cols, bool transposed, int64_t flags,
                     uint32_t pes, std::mt19937& rng) {
  Device dev(16ull << 20);
  const Shape size{1, 1, rows, cols};
  Tensor x = make_tensor(
      dev, dt, size, transposed ? permuted(size, {0, 1, 3, 2}) : permuted(size, {0, 1, 2, 3}, 5));
  randomize(dev, x, rng, -3, 5);
  Tensor w = make_tensor(dev, dt, {1, 1, 1, cols}), b = make_tensor(dev, dt, {1, 1, 1, cols});
  randomize(dev, w, rng, 0.5, 1.5);
  randomize(dev, b, rng, -1, 1);
  Tensor out =
      make_tensor(dev, dt, size, transposed ? contiguous(size) : permuted(size, {0, 1, 3, 2}));
  Tensor mean = make_tensor(dev, kF32, {1, 1, rows, 1}),
         rstd = make_tensor(dev, kF32, {1, 1, rows, 1});
  const float eps = 1e-5f;
  auto r = run_ln(dev, out, mean, rstd, x, w, b, flags, eps, pes);
  expect_ok(r);
  const LayerNormStats ref = layer_norm_stats(x, eps);
  const std::string what = fmt::format("layer_norm {} {}x{} flags {}{}", dt_name(dt), rows, cols,
                                       flags, transposed ? " transposed" : "");
  check_tensor(
      dev, out, [&](const Shape& i) { return ref.out(x, w, b, flags, i); }, tol_layer_norm(dt),
      what);
  if (flags & 4) {
    check_tensor(
        dev, mean, [&](const Shape& i) { return ref.mean[i[2]]; }, kTolLayerNormMean,
        what + " mean");
    check_tensor(
        dev, rstd, [&](const Shape& i) { return ref.rstd[i[2]]; }, kTolLayerNormRstd,
        what + " rstd");
  } else {
    mean.download(dev);
    CHECK(std::all_of(mean.host.begin(), mean.host.end(), [](uint8_t v) { return v == 0xA5; }));
  }
}

}  // namespace

TEST_CASE("layer_norm with and without affine parameters and statistics", "[kernels][layer_norm]") {
  std::mt19937 rng(23);
  for (uint8_t dt : kFloatDtypes) {
    for (int64_t flags : {0, 1, 3, 7}) layer_norm_case(dt, 37, 129, false, flags, 4, rng);
    layer_norm_case(dt, 37, 129, true, 7, 64, rng);  // column-major input: the other tile axis
    layer_norm_case(dt, 5, 77, false, 7, 1, rng);
  }
}

TEST_CASE("layer_norm over rows longer than a tile", "[kernels][layer_norm]") {
  std::mt19937 rng(24);
  layer_norm_case(kF32, 3, 20011, false, 7, 4, rng);
  layer_norm_case(kBF16, 3, 12007, false, 3, 2, rng);
  layer_norm_case(kF16, 9000, 3, true, 7, 4, rng);  // many short rows, column-major
}

TEST_CASE("layer_norm rejects integer dtypes and unknown flags", "[kernels][layer_norm]") {
  Device dev;
  Tensor x = make_tensor(dev, kI32, {1, 1, 2, 3});
  CHECK(run_ln(dev, x, x, x, x, x, x, 0, 1e-5f, 1).status() == MTIA_KSTATUS_BAD_DTYPE);
  Tensor y = make_tensor(dev, kF32, {1, 1, 2, 3});
  CHECK(run_ln(dev, y, y, y, y, y, y, 8, 1e-5f, 1).status() == MTIA_KSTATUS_BAD_OP);
}
