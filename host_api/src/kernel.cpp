// Kernel modules and launches: see mtia/kernel.h and Device::launch in mtia/device.h.
#include <spdlog/fmt/fmt.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "device_impl.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/error_record.h"
#include "mtia/isa/pe/kernel_meta.h"
#include "mtia/kernel.h"

namespace mtia {

struct KernelModule::State {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  uint64_t elf_entry = 0;
  bool has_metadata = false;
  std::vector<Kernel> kernels;
};

const char* arg_kind_name(ArgKind kind) {
  switch (kind) {
    case ArgKind::kPointer:
      return "ptr";
    case ArgKind::kI64:
      return "i64";
    case ArgKind::kF32:
      return "f32";
    case ArgKind::kF64:
      return "f64";
    case ArgKind::kDtype:
      return "dtype";
  }
  return "?";
}

Arg::Arg(float v) : kind_(ArgKind::kF32), bits_(std::bit_cast<uint32_t>(v)) {}
Arg::Arg(double v) : kind_(ArgKind::kF64), bits_(std::bit_cast<uint64_t>(v)) {}
Arg Arg::dtype(uint8_t code) {
  return Arg(ArgKind::kDtype, code);
}

std::string Kernel::describe() const {
  if (!checked) return name + "(unchecked arguments)";
  std::string s = name + "(";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i != 0) s += ", ";
    s += params[i].name + ":" + arg_kind_name(params[i].kind);
  }
  return s + ")";
}

namespace {
const KernelModule::State& state_of(const std::shared_ptr<const KernelModule::State>& s) {
  if (!s) throw Error(ErrorKind::kInvalidHandle, "the kernel module was never loaded");
  return *s;
}
}  // namespace

const Kernel& KernelModule::kernel(std::string_view name) const {
  const State& s = state_of(state_);
  for (const Kernel& k : s.kernels) {
    if (k.name == name) return k;
  }
  if (!s.has_metadata) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("kernel '{}': this module has no kernel metadata (no .mtia.meta "
                            "section); declare kernels with MTIA_KERNEL, or launch its ELF entry "
                            "with entry_kernel()",
                            name));
  }
  std::string names;
  for (const Kernel& k : s.kernels) names += (names.empty() ? "" : ", ") + k.name;
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("the module has no kernel '{}'; it has: {}", name, names));
}

std::vector<std::string> KernelModule::kernel_names() const {
  std::vector<std::string> out;
  for (const Kernel& k : state_of(state_).kernels) out.push_back(k.name);
  return out;
}
bool KernelModule::has_metadata() const {
  return state_of(state_).has_metadata;
}
uint64_t KernelModule::device_address() const {
  return state_of(state_).addr;
}
uint64_t KernelModule::image_bytes() const {
  return state_of(state_).bytes;
}
Kernel KernelModule::entry_kernel() const {
  const State& s = state_of(state_);
  Kernel k;
  k.name = "<elf entry>";
  k.image_addr = s.addr;
  k.entry = s.elf_entry;
  k.checked = false;
  return k;
}

KernelModule Device::load_module(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cannot open kernel module '{}': {}", path, std::strerror(errno)));
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  try {
    return load_module(bytes.data(), bytes.size());
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("kernel module '{}': {}", path, e.what()));
  }
}

KernelModule Device::load_module(const void* elf, size_t bytes) {
  impl_->check_lost();
  ApiCall call(*impl_->trace, "load_module");
  call.set_detail(fmt::format("{} bytes", bytes));
  const auto* p = static_cast<const uint8_t*>(elf);
  if (bytes < 64 ||
      std::memcmp(p,
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      p[4] != 2 || p[5] != 1) {
    throw Error(ErrorKind::kInvalidArgument,
                "not a kernel module: expected a little-endian ELF64 file built by kernels/");
  }
  auto state = std::make_shared<KernelModule::State>();
  std::memcpy(&state->elf_entry, p + 24, 8);
  auto info = isa::parse_kernel_module(std::span<const uint8_t>(p, bytes));
  if (info.ok()) {
    state->has_metadata = true;
  } else if (info.error().code != isa::ErrorCode::kBadOpcode ||
             info.error().reason.find("no " MTIA_KMETA_SECTION) == std::string::npos) {
    throw Error(ErrorKind::kInvalidArgument, "bad kernel module: " + info.error().reason);
  }  // else: an image without metadata (entry_kernel() only)
  const DevicePtr image = malloc(bytes);
  state->addr = image.address();
  state->bytes = bytes;
  // Runtime-owned: user calls may not address it as a malloc() allocation.
  impl_->memory->make_runtime(image.address(), bytes);
  // Written through the memory window before any launch is queued; the launch's doorbell
  // orders it before the PEs read it.
  check(impl_->dev->write_memory(image.address(), p, bytes), "loading a kernel module: ");
  if (state->has_metadata) {
    for (const isa::KernelInfo& k : info.value().kernels) {
      Kernel kernel;
      kernel.name = k.name;
      kernel.image_addr = state->addr;
      kernel.entry = k.entry;
      for (const isa::KernelArg& a : k.args) {
        ArgKind kind = ArgKind::kI64;
        switch (a.kind) {
          case isa::KernelArgKind::kPointer:
            kind = ArgKind::kPointer;
            break;
          case isa::KernelArgKind::kI64:
            kind = ArgKind::kI64;
            break;
          case isa::KernelArgKind::kF32:
            kind = ArgKind::kF32;
            break;
          case isa::KernelArgKind::kF64:
            kind = ArgKind::kF64;
            break;
          case isa::KernelArgKind::kDtype:
            kind = ArgKind::kDtype;
            break;
        }
        kernel.params.push_back({a.name, kind});
      }
      state->kernels.push_back(std::move(kernel));
    }
  }
  return KernelModule(std::move(state));
}

namespace {
// Launch argument blocks come from a runtime arena of fixed slots (the most a launch takes:
// 64 arguments of 8 bytes), reused as launches complete: no allocator walk, no map nodes and
// no lock shared with malloc()/free() per launch. When every slot is in flight the block
// comes from the allocator as before.
constexpr uint64_t kArgSlotBytes = 8 * MTIA_KMETA_MAX_ARGS;
constexpr uint32_t kArgSlots = 1024;  // 512 KiB: a full ring of launches on each of 2 queues
static_assert(kArgSlotBytes == 512);
}  // namespace

isa::Result<uint64_t> Device::Impl::take_arg_block(uint64_t bytes) {
  {
    std::lock_guard lock(args_mu);
    const uint64_t arena = arg_arena.load(std::memory_order_relaxed);
    if (!arg_slots_free.empty()) {
      const uint32_t slot = arg_slots_free.back();
      arg_slots_free.pop_back();
      return arena + slot * kArgSlotBytes;
    }
    if (arena == 0 && !arg_arena_failed) {
      uint64_t made = 0;
      if (isa::Result<uint64_t> arena_block =
              memory->allocator().allocate(kArgSlots * kArgSlotBytes)) {
        made = arena_block.value();
      } else {
        arg_arena_failed = true;  // a small device: every block from the allocator
      }
      if (made != 0) {
        arg_arena.store(made, std::memory_order_release);
        arg_slots_free.reserve(kArgSlots);
        for (uint32_t i = kArgSlots; i > 1; --i) arg_slots_free.push_back(i - 1);
        memory->add_runtime_block(made, kArgSlots * kArgSlotBytes);
        return made;  // slot 0
      }
    }
  }
  return memory->allocator().allocate(bytes);
}

void Device::Impl::give_arg_block(uint64_t addr) {
  const uint64_t arena = arg_arena.load(std::memory_order_acquire);
  if (arena != 0 && addr >= arena && addr < arena + kArgSlots * kArgSlotBytes) {
    std::lock_guard lock(args_mu);
    arg_slots_free.push_back(static_cast<uint32_t>((addr - arg_arena) / kArgSlotBytes));
    return;
  }
  if (isa::Status freed = memory->allocator().free(addr); !freed) {
    log->error("returning an argument block failed: {}", freed.error().reason);
  }
}

void Device::launch(const Kernel& kernel, Grid grid, const std::vector<Arg>& args, Stream stream,
                    uint64_t watchdog_cycles) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "launch");
  // Names the launch in the trace, its summary and activities.
  if (call.labelled()) call.set_label(kernel.name);
  if (call.active()) {
    call.set_detail(
        fmt::format("{} on {}x{} PEs, stream {}", kernel.name, grid.rows, grid.cols, stream.id));
  }
  const DeviceProperties& props = d.props;
  // Built only for a message: describe() lists every parameter.
  auto what = [&] { return "launch of " + kernel.describe(); };
  if (grid.rows < 1 || grid.cols < 1 || grid.rows > props.pe_rows || grid.cols > props.pe_cols) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: grid {}x{} is not within 1x1 .. {}x{} PEs", what(), grid.rows,
                            grid.cols, props.pe_rows, props.pe_cols));
  }
  if (kernel.entry < MTIA_PE_IMAGE_BASE || kernel.image_addr == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: not a kernel of a loaded module", what()));
  }
  if (args.size() > props.max_kernel_args) {
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format("{}: {} arguments exceed the device limit max_kernel_args = {} by {}", what(),
                    args.size(), props.max_kernel_args, args.size() - props.max_kernel_args));
  }
  if (kernel.checked) {
    if (args.size() != kernel.params.size()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: takes {} arguments, {} given", what(), kernel.params.size(),
                              args.size()));
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].kind() != kernel.params[i].kind) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{}: argument {} '{}' is {}, but a {} was given", what(), i,
                                kernel.params[i].name, arg_kind_name(kernel.params[i].kind),
                                arg_kind_name(args[i].kind())));
      }
    }
  }
  // Distinct buffers: the allocations the pointer arguments point into. Fewer pointers than
  // the limit cannot exceed it, so the allocator is asked only when there are more.
  size_t pointers = 0;
  for (const Arg& a : args) pointers += a.kind() == ArgKind::kPointer;
  if (pointers > props.max_kernel_buffers) {
    std::set<uint64_t> buffers;
    for (const Arg& a : args) {
      if (a.kind() != ArgKind::kPointer) continue;
      const auto alloc = d.memory->allocator().find(a.bits(), 1);
      buffers.insert(alloc ? alloc->address : a.bits());
    }
    if (buffers.size() > props.max_kernel_buffers) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: its pointer arguments touch {} distinct buffers, exceeding the "
                              "device limit max_kernel_buffers = {} by {}",
                              what(), buffers.size(), props.max_kernel_buffers,
                              buffers.size() - props.max_kernel_buffers));
    }
  }
  auto s = d.stream_state(stream);

  // The argument block: one 8-byte little-endian slot per argument, in a runtime block given
  // back when the launch completes.
  std::array<uint8_t, kArgSlotBytes> block;
  const uint64_t block_bytes = args.size() * 8;
  if (block_bytes > block.size()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} arguments exceed the kernel ABI's {}", what(), args.size(),
                            MTIA_KMETA_MAX_ARGS));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const uint64_t bits = args[i].bits();
    std::memcpy(block.data() + 8 * i, &bits, 8);
  }
  uint64_t args_addr = 0;
  if (block_bytes != 0) {
    isa::Result<uint64_t> taken = d.take_arg_block(block_bytes);
    if (!taken) {
      throw Error(ErrorKind::kOutOfMemory,
                  fmt::format("{}: no device memory for its argument block: {}", what(),
                              taken.error().reason));
    }
    args_addr = taken.value();
    if (isa::Status written = d.dev->write_memory(args_addr, block.data(), block_bytes); !written) {
      d.give_arg_block(args_addr);
      raise(written.error(), what() + ": cannot write its argument block: ");
    }
  }

  isa::LaunchPacket p{};
  p.image_addr = kernel.image_addr;
  p.entry_offset = kernel.entry - MTIA_PE_IMAGE_BASE;
  p.args_addr = args_addr;
  p.args_bytes = static_cast<uint32_t>(block_bytes);
  p.grid_rows = static_cast<uint16_t>(grid.rows);
  p.grid_cols = static_cast<uint16_t>(grid.cols);
  p.watchdog_cycles = watchdog_cycles;
  const std::string name = kernel.name;
  std::weak_ptr<StreamState> weak = s;
  auto on_complete = [&d, args_addr, name, grid, weak](const driver::Completion& c) {
    if (args_addr != 0) d.give_arg_block(args_addr);
    if (c.ok || c.aborted) return;
    if (c.error == isa::ErrorCode::kSanitizerError) {
      // The device's report names the launch, the PE, the pc, the access and the allocation.
      std::string error = fmt::format("sanitizer: kernel '{}' on a {}x{} grid: {}", name, grid.rows,
                                      grid.cols, c.reason);
      host_api_logger()->error("{}", error);
      if (auto st = weak.lock()) st->refine_failure(c.message, std::move(error));
      return;
    }
    const bool kernel_error =
        c.error == isa::ErrorCode::kKernelFault || c.error == isa::ErrorCode::kWatchdog;
    if (!kernel_error && c.error != isa::ErrorCode::kBadKernelImage) return;
    // Name the kernel, the PE, the pc and why. The device's reason (its error record) names
    // the PE's row and column and the fault; an exit status is named after the library ABI.
    const std::string head =
        fmt::format("kernel '{}' on a {}x{} grid failed: ", name, grid.rows, grid.cols);
    std::string error;
    if (kernel_error && c.exit_status) {
      const char* status = isa::kernel_status_name(*c.exit_status);
      error = head + fmt::format("PE {} (row {}, col {}) returned status {} ({}) at pc 0x{:x}",
                                 c.error_arg1, c.error_arg1 / grid.cols, c.error_arg1 % grid.cols,
                                 *c.exit_status,
                                 status != nullptr ? status : "not a kernel library status",
                                 c.error_arg0);
    } else if (kernel_error && !c.reason.empty()) {
      error = head + c.reason;
    } else if (kernel_error) {
      error = head + fmt::format("{} on PE {} at pc 0x{:x} (the device gave no reason)",
                                 isa::error_code_name(c.error), c.error_arg1, c.error_arg0);
    } else {
      error = fmt::format("kernel '{}': the device rejected the image at 0x{:x}; {}", name,
                          c.error_arg0, c.message);
    }
    if (auto st = weak.lock()) st->refine_failure(c.message, std::move(error));
  };
  std::vector<uint64_t> pointer_args;
  for (const Arg& a : args) {
    if (a.kind() == ArgKind::kPointer) pointer_args.push_back(a.bits());
  }
  // Captured: the graph keeps the argument block until it is destroyed.
  if (d.capture_launch(*s, p, args_addr, pointer_args)) return;
  try {
    d.submit(s, p, std::move(on_complete));
  } catch (...) {
    // Never queued: its completion will not give the argument block back.
    if (args_addr != 0) d.give_arg_block(args_addr);
    throw;
  }
}

}  // namespace mtia
