// The device's random generators. Eager random ops draw on the host and copy the numbers to
// the device (inside a graph capture the device draws: ops_tensor.cpp, graphs.h). An MTIA
// generator (a torch.Generator whose device is mtia:N) holds a CPU Mersenne-Twister generator
// like torch's default and draws with it: after the same seed, the device gets exactly the
// numbers the CPU gets. Each device has its own default generator; torch.mtia.manual_seed()
// seeds the current device's, manual_seed_all() every device's.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace mtia::torch_backend {

class MtiaGeneratorImpl final : public c10::GeneratorImpl {
 public:
  MtiaGeneratorImpl(uint64_t seed, c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  // The state is the CPU generator's byte tensor, so get_rng_state() output moves between
  // the CPU and the device generators.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator that draws the numbers.
  const at::Generator& host() const { return host_; }

 private:
  MtiaGeneratorImpl* clone_impl() const override;
  at::Generator host_;
};

// Device `device`'s default generator (torch.mtia.default_generators[device]; >= 0). It exists
// before the device opens, so seeding first and opening later works.
const at::Generator& default_generator(c10::DeviceIndex device);
// A new MTIA generator of `device` (torch.Generator(device="mtia:N")).
at::Generator new_generator(c10::DeviceIndex device);
// The CPU generator that draws for `gen` (an MTIA generator; the current device's default one
// when undefined).
at::Generator host_generator(const std::optional<at::Generator>& gen);

}  // namespace mtia::torch_backend
