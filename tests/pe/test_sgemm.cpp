// The DPE's fp32 GEMM: every build the host can run against a double-precision reference.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mtia/sim/pe/sgemm.h"

TEST_CASE("the DPE's fp32 GEMM builds match a double reference", "[pe][sgemm]") {
  const auto builds = mtia::sim::pe::sgemm_builds();
  REQUIRE(std::string(builds.back().name) == "baseline");
  // The first build, unless the environment names another (MTIA_EMU_DPE_GEMM).
  if (std::getenv("MTIA_EMU_DPE_GEMM") == nullptr) {
    CHECK(std::string(builds.front().name) == mtia::sim::pe::sgemm_variant());
  }
  const size_t which = GENERATE(0, 1, 2);  // Eigen's builds, where the host runs them
  if (which >= builds.size()) return;      // this host runs fewer builds
  const mtia::sim::pe::SgemmFn build = builds[which].fn;
  INFO("build " << builds[which].name);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // An odd shape and a DPE tile shape.
  const auto [m, n, k] =
      GENERATE(std::array<uint32_t, 3>{37, 21, 70}, std::array<uint32_t, 3>{128, 64, 32});
  INFO(m << " x " << n << " x " << k);
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = (layout & 1) != 0, tb = (layout & 2) != 0;
    // Stored with padded row strides, as tiles in a local store are.
    const size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    auto A = [&](uint32_t i, uint32_t p) { return ta ? a[p * lda + i] : a[i * lda + p]; };
    auto B = [&](uint32_t p, uint32_t j) { return tb ? b[j * ldb + p] : b[p * ldb + j]; };
    for (const bool accumulate : {false, true}) {
      INFO("trans_a " << ta << " trans_b " << tb << " accumulate " << accumulate);
      // Overwriting must not read C: start from NaN. Accumulating adds to 1.5.
      std::vector<float> c(m * ldc, accumulate ? 1.5f : std::numeric_limits<float>::quiet_NaN());
      build(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, accumulate, c.data(), ldc);
      for (uint32_t i = 0; i < m; ++i) {
        for (uint32_t j = 0; j < n; ++j) {
          double want = accumulate ? 1.5 : 0.0;
          for (uint32_t p = 0; p < k; ++p) want += double(A(i, p)) * B(p, j);
          REQUIRE(std::fabs(c[i * ldc + j] - want) < 1e-4);
        }
      }
      // The padding of each row is left alone.
      if (!accumulate) CHECK(std::isnan(c[n]));
    }
  }
}
