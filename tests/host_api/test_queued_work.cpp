// Unit math still queued on a helper thread when the PEs pass a barrier: the PE model joins at
// a barrier only the work that reaches device memory and lets math on a local store run on
// (PeGrid, "Host threads"). Another PE that reads or overwrites that local store through its
// device window after the barrier must see the finished result, and its write must land after
// it (kernels/queued_work.c). Every unit operation goes to the helpers here
// (MTIA_EMU_INLINE_WORK_NS=0), and the results must also match a device without helpers.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/runtime.h"

using namespace mtia;
using mtia::test::download;
using mtia::test::file_bytes;
using mtia::test::random_floats;
using mtia::test::upload;

namespace {

constexpr size_t kN = 128;     // the kernels' matrices are kN x kN fp32
constexpr double kSteps = 32;  // matmuls PE 0 accumulates (STEPS)

// A v2 device (its local store holds the kernels' three matrices) with `threads` helper
// threads and every unit operation handed to them (the environment is read when it opens).
Device open_device(unsigned threads) {
  ::setenv("MTIA_EMU_UNIT_THREADS", std::to_string(threads).c_str(), 1);
  ::setenv("MTIA_EMU_INLINE_WORK_NS", "0", 1);
  DeviceOptions options;
  options.preset = "mtia-v2";
  Device dev = Device::open(options);
  ::unsetenv("MTIA_EMU_UNIT_THREADS");
  ::unsetenv("MTIA_EMU_INLINE_WORK_NS");
  return dev;
}

std::vector<float> run(unsigned threads, const char* kernel, const std::vector<float>& a,
                       const std::vector<float>& b, const std::vector<float>& z) {
  Device dev = open_device(threads);
  const std::vector<uint8_t> elf = file_bytes(MTIA_QUEUED_WORK_KERNELS_ELF);
  KernelModule module = dev.load_module(elf.data(), elf.size());
  DevicePtr da = upload(dev, a), db = upload(dev, b), dz = upload(dev, z);
  DevicePtr dc = dev.malloc(kN * kN * sizeof(float));
  dev.launch(module.kernel(kernel), Grid{1, 2}, {dc, da, db, dz});
  return download<float>(dev, dc, kN * kN);
}

}  // namespace

TEST_CASE("a PE reads another's queued matmul result through its window after a barrier",
          "[kernels][queued]") {
  const std::vector<float> a = random_floats(kN * kN, 1), b = random_floats(kN * kN, 2);
  const std::vector<float> z(kN * kN, 0.0f);
  const std::vector<float> c = run(2, "window_read_after_barrier", a, b, z);
  int bad = 0;
  for (size_t i = 0; i < kN && bad < 5; ++i) {
    for (size_t j = 0; j < kN && bad < 5; ++j) {
      double want = 0;
      for (size_t k = 0; k < kN; ++k) want += double(a[i * kN + k]) * b[k * kN + j];
      want *= kSteps;
      if (std::abs(c[i * kN + j] - want) > 1e-3) {
        ++bad;
        FAIL_CHECK("C[" << i << "][" << j << "] = " << c[i * kN + j] << ", want " << want);
      }
    }
  }
  // The same bits as with the math on the simulator thread.
  CHECK(c == run(0, "window_read_after_barrier", a, b, z));
}

TEST_CASE("a PE's write through another's window after a barrier lands after its queued matmul",
          "[kernels][queued]") {
  const std::vector<float> a = random_floats(kN * kN, 3), b = random_floats(kN * kN, 4);
  const std::vector<float> z = random_floats(kN * kN, 5);
  CHECK(run(2, "window_write_after_barrier", a, b, z) == z);
  CHECK(run(0, "window_write_after_barrier", a, b, z) == z);
}
