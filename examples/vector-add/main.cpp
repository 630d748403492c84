// Runs the kernels of kernels/vector_add.c on the emulated MTIA device and checks them on the
// CPU: device memory, copies, a kernel launch on a grid of PEs and events that time it in
// simulated time. Exits non-zero when a result differs.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "mtia/device.h"
#include "mtia/error.h"

namespace {

// Launches `name` on 2 x 4 PEs with out = f(a, b) (and `alpha` for axpy), copies out back and
// compares it with `expect`. Returns the number of elements that differ.
int run(mtia::Device& device, const mtia::KernelModule& module, const char* name,
        const std::vector<float>& a, const std::vector<float>& b, float alpha,
        const std::vector<float>& expect) {
  const int64_t n = static_cast<int64_t>(a.size());
  const uint64_t bytes = a.size() * sizeof(float);
  const mtia::DevicePtr d_a = device.malloc(bytes);
  const mtia::DevicePtr d_b = device.malloc(bytes);
  const mtia::DevicePtr d_out = device.malloc(bytes);
  device.copy(d_a, a.data(), bytes);
  device.copy(d_b, b.data(), bytes);

  const mtia::Kernel& kernel = module.kernel(name);
  std::vector<mtia::Arg> args = {d_out, d_a, d_b};
  if (kernel.params.size() == 5) args.push_back(alpha);  // axpy(out, x, y, alpha, n)
  args.push_back(n);
  const mtia::Event start = device.create_event();
  const mtia::Event end = device.create_event();
  device.record(start);
  device.launch(kernel, mtia::Grid{2, 4}, args);
  device.record(end);
  device.synchronize(end);

  std::vector<float> out(a.size());
  device.copy(out.data(), d_out, bytes);
  int wrong = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != expect[i] && wrong++ < 5) {
      std::fprintf(stderr, "%s: out[%zu] = %g, expected %g\n", name, i, out[i], expect[i]);
    }
  }
  std::printf("%-10s %s  n = %lld on 2 x 4 PEs, %.3f us simulated: %s\n", name,
              kernel.describe().c_str(), static_cast<long long>(n),
              device.elapsed_ms(start, end) * 1e3, wrong == 0 ? "PASS" : "FAIL");
  for (mtia::DevicePtr p : {d_a, d_b, d_out}) device.free(p);
  return wrong;
}

}  // namespace

int main() {
  try {
    // The default preset (mtia-v2), read from the mtia-emu installation this was built against.
    mtia::Device device = mtia::Device::open();
    const mtia::KernelModule module = device.load_module(VECTOR_ADD_KERNELS);

    const size_t n = 10000;  // not a multiple of the kernels' chunk: the last one is partial
    const float alpha = 1.5f;
    std::vector<float> a(n), b(n), sum(n), axpy(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i) * 0.25f - 100.0f;
      b[i] = 3.0f - static_cast<float>(i % 97) * 0.125f;
      sum[i] = a[i] + b[i];
      const float product = alpha * a[i];  // rounded, as the device rounds each operation
      axpy[i] = product + b[i];
    }
    const int wrong = run(device, module, "vector_add", a, b, 0.0f, sum) +
                      run(device, module, "axpy", a, b, alpha, axpy);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vector_add: %s\n", e.what());
    return 1;
  }
}
