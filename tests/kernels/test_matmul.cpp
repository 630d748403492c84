// matmul, bmm and addmm against nested-loop references: every supported dtype pair, shapes
// that are not multiples of the tiles, row- and column-major and gathered operands, batch
// broadcasting, bias broadcasting, alpha/beta, k = 0, grids of 1, 4 and 64 PEs, both local
// store sizes, and the double buffering (DMA in flight while the DPE works).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "check.h"

using namespace kt;

namespace {

const Module& lib() {
  return Module::library();
}

void expect_ok(const LaunchResult& r) {
  INFO(r.describe());
  REQUIRE(r.ok());
}

// A [batch, rows, cols] operand as the 4-D view [1, batch, rows, cols].
Tensor matrix(Device& dev, uint8_t dt, int64_t batch, int64_t rows, int64_t cols, MatLayout l) {
  const Shape size{1, batch, rows, cols};
  return make_tensor(dev, dt, size, matrix_strides(size, l));
}

void check_mm(Device& dev, Tensor& c, const MatmulRef& ref, const std::string& what) {
  c.download(dev);
  check_matmul_view(c, ref, what);
}

LaunchResult run_matmul(Device& dev, const Tensor& c, const Tensor& a, const Tensor& b,
                        const LaunchConfig& cfg) {
  return dev.launch(
      lib(), "matmul",
      {ptr(c.addr), ptr(a.addr), ptr(b.addr), dtype(a.dt), dtype(c.dt), i64(a.size[2]),
       i64(b.size[3]), i64(a.size[3]), i64(a.stride[2]), i64(a.stride[3]), i64(b.stride[2]),
       i64(b.stride[3]), i64(c.stride[2]), i64(c.stride[3])},
      cfg);
}

LaunchResult run_bmm(Device& dev, const Tensor& c, const Tensor& a, const Tensor& b,
                     const LaunchConfig& cfg) {
  auto bs = [](const Tensor& t) { return t.size[1] == 1 ? 0 : t.stride[1]; };
  return dev.launch(lib(), "bmm",
                    {ptr(c.addr), ptr(a.addr), ptr(b.addr), dtype(a.dt), dtype(c.dt),
                     i64(c.size[1]), i64(a.size[2]), i64(b.size[3]), i64(a.size[3]), i64(bs(a)),
                     i64(a.stride[2]), i64(a.stride[3]), i64(bs(b)), i64(b.stride[2]),
                     i64(b.stride[3]), i64(c.stride[1]), i64(c.stride[2]), i64(c.stride[3])},
                    cfg);
}

LaunchResult run_addmm(Device& dev, const Tensor& out, const Tensor& bias, const Tensor& a,
                       const Tensor& b, float alpha, float beta, const LaunchConfig& cfg) {
  return dev.launch(
      lib(), "addmm",
      {ptr(out.addr), ptr(bias.addr), ptr(a.addr), ptr(b.addr), dtype(a.dt), dtype(out.dt),
       i64(a.size[2]), i64(b.size[3]), i64(a.size[3]), f32(alpha), f32(beta),
       i64(bias.size[2] == 1 ? 0 : bias.stride[2]), i64(bias.size[3] == 1 ? 0 : bias.stride[3]),
       i64(a.stride[2]), i64(a.stride[3]), i64(b.stride[2]), i64(b.stride[3]), i64(out.stride[2]),
       i64(out.stride[3])},
      cfg);
}

}  // namespace

TEST_CASE("matmul for every dtype pair on 1, 4 and 64 PEs", "[kernels][matmul]") {
  std::mt19937 rng(31);
  const std::vector<std::pair<uint8_t, uint8_t>> pairs = {
      {kF32, kF32}, {kF16, kF16}, {kF16, kF32}, {kBF16, kBF16}, {kBF16, kF32}, {kI8, kI32}};
  for (auto [in, out] : pairs) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      Device dev;
      const int64_t m = 70, n = 50, k = 90;  // not multiples of any tile size
      Tensor a = matrix(dev, in, 1, m, k, MatLayout::kRowMajor);
      Tensor b = matrix(dev, in, 1, k, n, MatLayout::kRowMajor);
      randomize(dev, a, rng);
      randomize(dev, b, rng);
      Tensor c = matrix(dev, out, 1, m, n, MatLayout::kRowMajor);
      auto r = run_matmul(dev, c, a, b, grid(pes));
      expect_ok(r);
      check_mm(dev, c, {&a, &b},
               fmt::format("matmul {} -> {} on {} PEs", dt_name(in), dt_name(out), pes));
    }
  }
}

TEST_CASE("matmul takes column-major operands with the DPE's transpose flags",
          "[kernels][matmul]") {
  std::mt19937 rng(32);
  for (MatLayout la : {MatLayout::kRowMajor, MatLayout::kColMajor, MatLayout::kPadded}) {
    for (MatLayout lb : {MatLayout::kRowMajor, MatLayout::kColMajor, MatLayout::kPadded}) {
      Device dev;
      Tensor a = matrix(dev, kF32, 1, 45, 77, la);
      Tensor b = matrix(dev, kF32, 1, 77, 39, lb);
      randomize(dev, a, rng);
      randomize(dev, b, rng);
      Tensor c = matrix(dev, kF32, 1, 45, 39,
                        lb == MatLayout::kPadded ? MatLayout::kColMajor : MatLayout::kRowMajor);
      auto r = run_matmul(dev, c, a, b, grid(4));
      expect_ok(r);
      CHECK((r.stats.matmul_trans_a > 0) == (la == MatLayout::kColMajor));
      CHECK((r.stats.matmul_trans_b > 0) == (lb == MatLayout::kColMajor));
      check_mm(dev, c, {&a, &b}, fmt::format("matmul layouts {} {}", int(la), int(lb)));
    }
  }
}

TEST_CASE("matmul double-buffers its tiles over a long k", "[kernels][matmul]") {
  std::mt19937 rng(33);
  for (uint64_t ls : {uint64_t{128 * 1024}, uint64_t{384 * 1024}}) {
    for (uint32_t pes : {4u, 64u}) {
      Device dev(16ull << 20);
      Tensor a = matrix(dev, kF32, 1, 300, 520, MatLayout::kRowMajor);
      Tensor b = matrix(dev, kF32, 1, 520, 260, MatLayout::kColMajor);
      randomize(dev, a, rng);
      randomize(dev, b, rng);
      Tensor c = matrix(dev, kF32, 1, 300, 260, MatLayout::kRowMajor);
      auto r = run_matmul(dev, c, a, b, grid(pes, ls));
      expect_ok(r);
      // Several k steps per PE, and every k step but a PE's last found the next step's DMA
      // already in flight.
      CHECK(r.stats.matmul >= 2 * pes);
      CHECK(r.stats.matmul_overlapping_dma + pes >= r.stats.matmul);
      check_mm(dev, c, {&a, &b}, fmt::format("large matmul on {} PEs, {} KiB", pes, ls / 1024));
    }
  }
}

TEST_CASE("bmm with per-batch and broadcast operands", "[kernels][matmul]") {
  std::mt19937 rng(34);
  for (auto [in, out] :
       std::vector<std::pair<uint8_t, uint8_t>>{{kF16, kF16}, {kF32, kF32}, {kI8, kI32}}) {
    for (bool broadcast_a : {false, true}) {
      Device dev;
      const int64_t batch = 3;
      Tensor a = matrix(dev, in, broadcast_a ? 1 : batch, 33, 21, MatLayout::kRowMajor);
      Tensor b =
          matrix(dev, in, batch, 21, 17, broadcast_a ? MatLayout::kColMajor : MatLayout::kRowMajor);
      randomize(dev, a, rng);
      randomize(dev, b, rng);
      Tensor c = matrix(dev, out, batch, 33, 17, MatLayout::kPadded);
      auto r = run_bmm(dev, c, a, b, grid(broadcast_a ? 64 : 4));
      expect_ok(r);
      check_mm(dev, c, {&a, &b},
               fmt::format("bmm {} -> {}{}", dt_name(in), dt_name(out),
                           broadcast_a ? " broadcast A" : ""));
    }
  }
}

TEST_CASE("addmm adds a broadcast bias with alpha and beta", "[kernels][matmul]") {
  std::mt19937 rng(35);
  struct Case {
    uint8_t in, out;
    float alpha, beta;
    bool row_vector;
  };
  for (const Case& k : {Case{kF32, kF32, 1, 1, true}, Case{kF32, kF32, 0.5f, 2, false},
                        Case{kBF16, kBF16, 1, 1, true}, Case{kF16, kF32, -1.5f, 0.25f, true}}) {
    for (uint32_t pes : {1u, 64u}) {
      Device dev;
      const int64_t m = 41, n = 67, kk = 100;
      Tensor a = matrix(dev, k.in, 1, m, kk, MatLayout::kRowMajor);
      Tensor b = matrix(dev, k.in, 1, kk, n, MatLayout::kColMajor);  // x @ W.T
      Tensor bias = make_tensor(dev, k.out, {1, 1, k.row_vector ? 1 : m, n});
      randomize(dev, a, rng);
      randomize(dev, b, rng);
      randomize(dev, bias, rng);
      Tensor out = matrix(dev, k.out, 1, m, n, MatLayout::kRowMajor);
      auto r = run_addmm(dev, out, bias, a, b, k.alpha, k.beta, grid(pes));
      expect_ok(r);
      MatmulRef ref{&a, &b, &bias, k.alpha, k.beta};
      check_mm(dev, out, ref,
               fmt::format("addmm {} -> {} alpha {} beta {} on {} PEs", dt_name(k.in),
                           dt_name(k.out), k.alpha, k.beta, pes));
    }
  }
}

TEST_CASE("addmm with beta 0 ignores the bias, and k = 0 gives beta * bias", "[kernels][matmul]") {
  std::mt19937 rng(36);
  Device dev;
  Tensor a = matrix(dev, kF32, 1, 20, 30, MatLayout::kRowMajor);
  Tensor b = matrix(dev, kF32, 1, 30, 10, MatLayout::kRowMajor);
  randomize(dev, a, rng);
  randomize(dev, b, rng);
  Tensor bias = make_tensor(dev, kF32, {1, 1, 1, 10});
  for (int64_t j = 0; j < 10; ++j) bias.set({0, 0, 0, j}, std::numeric_limits<double>::quiet_NaN());
  bias.upload(dev);
  Tensor out = matrix(dev, kF32, 1, 20, 10, MatLayout::kRowMajor);
  expect_ok(run_addmm(dev, out, bias, a, b, 1, 0, grid(4)));
  check_mm(dev, out, {&a, &b}, "addmm beta 0");

  randomize(dev, bias, rng);
  Tensor a0 = matrix(dev, kF32, 1, 20, 0, MatLayout::kRowMajor);
  Tensor b0 = matrix(dev, kF32, 1, 0, 10, MatLayout::kRowMajor);
  expect_ok(run_addmm(dev, out, bias, a0, b0, 1, 3, grid(4)));
  check_tensor(
      dev, out,
      [&](const Shape& i) {
        return 3 * bias.at({0, 0, 0, i[3]});
      },
      tol_for(kF32), "addmm k = 0");
  Tensor c = matrix(dev, kF32, 1, 20, 10, MatLayout::kRowMajor);
  expect_ok(run_matmul(dev, c, a0, b0, grid(4)));
  check_tensor(
      dev, c, [](const Shape&) { return 0.0; }, {0, 0}, "matmul k = 0");
}

TEST_CASE("matmul kernels reject unsupported dtype pairs", "[kernels][matmul]") {
  Device dev;
  Tensor a8 = matrix(dev, kI8, 1, 4, 4, MatLayout::kRowMajor);
  Tensor c32 = matrix(dev, kF32, 1, 4, 4, MatLayout::kRowMajor);
  Tensor c16 = matrix(dev, kF16, 1, 4, 4, MatLayout::kRowMajor);
  Tensor a32 = matrix(dev, kF32, 1, 4, 4, MatLayout::kRowMajor);
  CHECK(run_matmul(dev, c32, a8, a8, grid(1)).status() == MTIA_KSTATUS_BAD_DTYPE);
  CHECK(run_matmul(dev, c16, a32, a32, grid(1)).status() == MTIA_KSTATUS_BAD_DTYPE);
  Tensor ci = matrix(dev, kI32, 1, 4, 4, MatLayout::kRowMajor);
  CHECK(run_addmm(dev, ci, ci, a8, a8, 1, 1, grid(1)).status() == MTIA_KSTATUS_BAD_DTYPE);
  Tensor bool_in = matrix(dev, kBool, 1, 4, 4, MatLayout::kRowMajor);
  CHECK(run_bmm(dev, ci, bool_in, bool_in, grid(1)).status() == MTIA_KSTATUS_BAD_DTYPE);
}
