#include "random.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>

#include <array>
#include <mutex>

#include "devices.h"

namespace mtia::torch_backend {

MtiaGeneratorImpl::MtiaGeneratorImpl(uint64_t seed, c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(kDeviceType, device),
                         c10::DispatchKeySet(c10::DispatchKey::MTIA)),
      host_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void MtiaGeneratorImpl::set_current_seed(uint64_t seed) {
  host_.set_current_seed(seed);
}
void MtiaGeneratorImpl::set_offset(uint64_t offset) {
  host_.set_offset(offset);
}
uint64_t MtiaGeneratorImpl::get_offset() const {
  return host_.get_offset();
}
uint64_t MtiaGeneratorImpl::current_seed() const {
  return host_.current_seed();
}
uint64_t MtiaGeneratorImpl::seed() {
  return host_.seed();
}
void MtiaGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  host_.unsafeGetGeneratorImpl()->set_state(new_state);
}
c10::intrusive_ptr<c10::TensorImpl> MtiaGeneratorImpl::get_state() const {
  return host_.unsafeGetGeneratorImpl()->get_state();
}
MtiaGeneratorImpl* MtiaGeneratorImpl::clone_impl() const {
  auto* copy = new MtiaGeneratorImpl(0, device().index());
  copy->host_ = host_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  TORCH_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices, "device index ", int(device));
  // Made on first use and kept for the life of the process (PyTorch holds references).
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<at::Generator, kMaxDevices> generators;
  std::call_once(once[size_t(device)], [&] {
    generators[size_t(device)] =
        at::make_generator<MtiaGeneratorImpl>(c10::default_rng_seed_val, device);
  });
  return generators[size_t(device)];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<MtiaGeneratorImpl>(c10::default_rng_seed_val, device);
}

at::Generator host_generator(const std::optional<at::Generator>& gen) {
  const at::Generator& g =
      gen.has_value() && gen->defined() ? *gen : default_generator(current_device());
  if (g.device().type() == c10::DeviceType::CPU) return g;
  auto* impl = dynamic_cast<MtiaGeneratorImpl*>(g.unsafeGetGeneratorImpl());
  TORCH_CHECK_VALUE(impl != nullptr, "torch_mtia_emu: a generator of ", g.device(),
                    " cannot draw numbers for an mtia tensor; use an mtia or a CPU generator");
  return impl->host();
}

}  // namespace mtia::torch_backend
