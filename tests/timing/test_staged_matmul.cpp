// matmul on the full device, where products with more than one output tile and at least 1 MiB
// of operands stage A and B in the on-chip SRAM (kernels/lib/matmul.c): every layout of A and
// B, shapes that are not multiples of the tiles, several grids, both presets, against a
// double-precision reference. All cases but the last are above the staging threshold on both
// presets; the last (k = 1) reads its tiles straight from DRAM.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "mtia/device.h"

namespace {

constexpr uint8_t kFp32 = 1;  // MTIA_PE_DT_FP32

// A rows x cols matrix stored row-major, or column-major (the transpose stored row-major).
struct Matrix {
  int64_t rows, cols;
  bool col_major;
  std::vector<float> data;
  int64_t stride_row() const { return col_major ? 1 : cols; }
  int64_t stride_col() const { return col_major ? rows : 1; }
  float at(int64_t i, int64_t j) const { return data[i * stride_row() + j * stride_col()]; }
};

Matrix random_matrix(int64_t rows, int64_t cols, bool col_major, std::mt19937& rng) {
  Matrix m{rows, cols, col_major, std::vector<float>(rows * cols)};
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : m.data) x = dist(rng);
  return m;
}

// Payload bytes the device has moved through the on-chip SRAM so far (stats.json).
uint64_t sram_bytes(mtia::Device& dev) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mtia_staged_matmul_stats_" + std::to_string(::getpid()));
  dev.write_artifacts(dir.string());
  std::ifstream in(dir / "stats.json");
  const auto stats = nlohmann::json::parse(in);
  std::filesystem::remove_all(dir);
  return stats.at("sram").at("bytes").at("value").get<uint64_t>();
}

}  // namespace

TEST_CASE("staged matmul matches a CPU reference for every layout, shape and grid",
          "[timing][matmul]") {
  const std::string preset = GENERATE("mtia-v1", "mtia-v2");
  mtia::DeviceOptions options;
  options.preset = preset;
  mtia::Device dev = mtia::Device::open(options);
  mtia::KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
  std::mt19937 rng(11);

  struct Case {
    int64_t m, n, k;
    uint32_t rows, cols;
    bool staged;  // at least 1 MiB of operands: A and B go through the SRAM
  };
  const Case cases[] = {{300, 520, 330, 8, 8, true},
                        {1031, 129, 250, 8, 8, true},
                        {200, 330, 513, 3, 5, true},
                        {129, 1000, 250, 2, 2, true},
                        {65, 97, 1, 1, 8, false}};
  for (const Case& t : cases) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool a_cm = (layout & 1) != 0, b_cm = (layout & 2) != 0;
      INFO(preset << " m " << t.m << " n " << t.n << " k " << t.k << " grid " << t.rows << "x"
                  << t.cols << " A " << (a_cm ? "col" : "row") << "-major, B "
                  << (b_cm ? "col" : "row") << "-major");
      const Matrix a = random_matrix(t.m, t.k, a_cm, rng);
      const Matrix b = random_matrix(t.k, t.n, b_cm, rng);
      mtia::DevicePtr da = dev.malloc(a.data.size() * 4), db = dev.malloc(b.data.size() * 4);
      // C with a padded row stride, so the output side is strided too.
      const int64_t ldc = t.n + 3;
      mtia::DevicePtr dc = dev.malloc(t.m * ldc * 4);
      dev.copy(da, a.data.data(), a.data.size() * 4);
      dev.copy(db, b.data.data(), b.data.size() * 4);
      dev.synchronize();
      const uint64_t sram_before = sram_bytes(dev);
      dev.launch(lib.kernel("matmul"), mtia::Grid{t.rows, t.cols},
                 {dc, da, db, mtia::Arg::dtype(kFp32), mtia::Arg::dtype(kFp32), t.m, t.n, t.k,
                  a.stride_row(), a.stride_col(), b.stride_row(), b.stride_col(), ldc, int64_t{1}});
      std::vector<float> c(t.m * ldc);
      dev.copy(c.data(), dc, c.size() * 4);
      dev.synchronize();
      CHECK((sram_bytes(dev) > sram_before) == t.staged);
      int bad = 0;
      for (int64_t i = 0; i < t.m && bad < 5; ++i) {
        for (int64_t j = 0; j < t.n && bad < 5; ++j) {
          double want = 0, scale = 0;
          for (int64_t k = 0; k < t.k; ++k) {
            want += double(a.at(i, k)) * b.at(k, j);
            scale += std::fabs(double(a.at(i, k)) * b.at(k, j));
          }
          if (std::fabs(c[i * ldc + j] - want) > 1e-5 * scale + 1e-30) {
            ++bad;
            FAIL_CHECK("C[" << i << "][" << j << "] = " << c[i * ldc + j] << ", want " << want);
          }
        }
      }
      dev.free(da);
      dev.free(db);
      dev.free(dc);
    }
  }
}
