// The device's default random generator. The kernel library has no random kernel, so random
// ops draw on the host with this generator (a CPU Mersenne-Twister/Philox generator like
// torch's default) and copy the numbers to the device: after the same seed, the device gets
// exactly the numbers the CPU gets. torch_mtia_emu.manual_seed() seeds it.
#pragma once

#include <ATen/core/Generator.h>

namespace mtia::torch_backend {

at::Generator& default_generator();

}  // namespace mtia::torch_backend
