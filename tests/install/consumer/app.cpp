// Launches the consumer's own kernel (addtwo.c) on the emulated device and checks the result
// against the host's. Usage: app KERNEL_ELF. Exits non-zero when any element differs.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "mtia/device.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: app KERNEL_ELF\n");
    return 2;
  }
  try {
    mtia::Device device = mtia::Device::open();
    const mtia::KernelModule module = device.load_module(argv[1]);
    const int64_t n = 1000;  // not a multiple of the kernel's chunk
    std::vector<int32_t> in(n), out(n);
    for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 7 - 3000);
    const uint64_t bytes = n * sizeof(int32_t);
    const mtia::DevicePtr d_in = device.malloc(bytes);
    const mtia::DevicePtr d_out = device.malloc(bytes);
    device.copy(d_in, in.data(), bytes);
    device.launch(module.kernel("addtwo"), mtia::Grid{2, 2}, {d_out, d_in, n});
    device.synchronize();
    device.copy(out.data(), d_out, bytes);
    int wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t expect = in[i] + 2;
      if (out[i] != expect && wrong++ < 5) {
        std::fprintf(stderr, "out[%lld] = %d, expected %d\n", static_cast<long long>(i), out[i],
                     expect);
      }
    }
    std::printf("addtwo: %s\n", wrong == 0 ? "PASS" : "FAIL");
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "app: %s\n", e.what());
    return 1;
  }
}
