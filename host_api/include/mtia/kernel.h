// Kernels: loading a kernel module (a RISC-V ELF image built by kernels/, see
// docs/pe-isa.md and isa/pe/kernel_meta.h), looking its kernels up by name, and the
// arguments of a launch. Device::launch (device.h) runs a kernel on a grid of PEs.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/device_ptr.h"

namespace mtia {

// The PEs a launch runs on: rows x cols, each 1..the chip's grid (8 x 8 on both presets).
struct Grid {
  uint32_t rows = 1;
  uint32_t cols = 1;
};

// Kinds of kernel arguments; each takes one 8-byte slot of the argument block.
enum class ArgKind : uint8_t { kPointer, kI64, kF32, kF64, kDtype };
const char* arg_kind_name(ArgKind kind);  // "ptr", "i64", "f32", "f64", "dtype"

// One launch argument. Integers become i64, float f32, double f64, DevicePtr ptr;
// Arg::dtype(code) passes an element type (enum mtia_pe_dtype of isa/pe/pe_ops.h).
class Arg {
 public:
  Arg(DevicePtr p) : kind_(ArgKind::kPointer), bits_(p.address()) {}  // NOLINT: implicit
  template <std::integral T>
  Arg(T v)
      : kind_(ArgKind::kI64), bits_(static_cast<uint64_t>(static_cast<int64_t>(v))) {}  // NOLINT
  Arg(float v);   // NOLINT: implicit
  Arg(double v);  // NOLINT: implicit
  static Arg dtype(uint8_t code);

  ArgKind kind() const { return kind_; }
  uint64_t bits() const { return bits_; }  // the 8-byte slot, little-endian

 private:
  Arg(ArgKind kind, uint64_t bits) : kind_(kind), bits_(bits) {}
  ArgKind kind_;
  uint64_t bits_;
};

struct KernelParam {
  std::string name;
  ArgKind kind = ArgKind::kI64;
};

// A kernel of a loaded module. Valid while its Device is open.
struct Kernel {
  std::string name;
  uint64_t image_addr = 0;  // device address of the module's image
  uint64_t entry = 0;       // core address the PEs start at
  // False for a module without metadata (entry_kernel()): the launch cannot check argument
  // kinds, only the device limits.
  bool checked = true;
  std::vector<KernelParam> params;
  std::string describe() const;  // "name(out:ptr, n:i64)"
};

// A kernel module loaded into device memory (Device::load_module). Its image stays in device
// memory until the Device is closed. Cheap to copy.
class KernelModule {
 public:
  KernelModule() = default;
  // The kernel called `name`. Throws mtia::Error kInvalidArgument listing the module's kernels
  // when there is none (or the module has no metadata).
  const Kernel& kernel(std::string_view name) const;
  // Names of the kernels in the module's metadata, in section order.
  std::vector<std::string> kernel_names() const;
  // True when the module carries kernel metadata (a .mtia.meta section).
  bool has_metadata() const;
  // The module's ELF entry point as an unchecked kernel: for single-kernel images built with
  // crt0 (mtia_add_kernel) that have no metadata. Arguments are packed as 8-byte slots.
  Kernel entry_kernel() const;
  uint64_t device_address() const;
  uint64_t image_bytes() const;

  struct State;

 private:
  friend class Device;
  explicit KernelModule(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

}  // namespace mtia
