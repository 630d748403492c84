#include "fallback.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "devices.h"
#include "on_device.h"

namespace mtia::torch_backend {

namespace {

// Set from MTIA_EMU_FALLBACK by the Python package when it loads.
std::atomic<FallbackMode> g_mode{FallbackMode::kWarn};

std::mutex g_mu;
std::map<std::string, uint64_t> g_counts;
std::set<std::string> g_warned;
thread_local std::optional<std::string> t_reason;
thread_local bool t_quiet = false;

std::string op_name(const c10::OperatorHandle& op) {
  const auto& n = op.schema().operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

bool is_device(const at::Tensor& t) {
  return t.defined() && t.device().type() == kDeviceType;
}

at::Tensor to_cpu(const at::Tensor& t) {
  return is_device(t) ? t.to(at::kCPU) : t;
}

// Copies a CPU result back into the device tensor the op was meant to mutate.
void write_back(const at::Tensor& device, const at::Tensor& cpu) {
  if (device.sizes() != cpu.sizes()) device.resize_(cpu.sizes());
  device.copy_(cpu);
}

// Decides whether to run, and warns or refuses as the mode says.
void admit(const std::string& name, const std::optional<std::string>& reason) {
  if (t_quiet) return;
  const std::string key = reason ? name + " (" + *reason + ")" : name;
  const FallbackMode mode = g_mode.load();
  if (mode == FallbackMode::kError) {
    // NotImplementedError (a RuntimeError), not TypeError: Python turns a TypeError raised
    // inside an operator such as `x + 1` into its own generic message.
    if (reason) {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_mtia_emu: ", name, " on the device: ", *reason,
                                  " is not supported by the device kernels (they take "
                                  "float32, float16, bfloat16, int8, int32, int64, bool), and "
                                  "MTIA_EMU_FALLBACK=error forbids running it on the CPU");
    }
    TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_mtia_emu: ", name,
                                " has no device kernel, and MTIA_EMU_FALLBACK=error forbids "
                                "running it on the CPU");
  }
  bool first = false;
  {
    std::lock_guard lock(g_mu);
    g_counts[key] += 1;
    first = g_warned.insert(key).second;
  }
  if (first && mode == FallbackMode::kWarn) {
    TORCH_WARN("torch_mtia_emu: ", name, reason ? " with " + *reason : std::string(),
               " has no device kernel; it runs on the CPU (arguments copied to the host and "
               "results back). Warned once per op; torch_mtia_emu.fallback_counts() counts "
               "calls, MTIA_EMU_FALLBACK=error makes this an error.");
  }
}

}  // namespace

FallbackMode fallback_mode() {
  return g_mode.load();
}
void set_fallback_mode(FallbackMode mode) {
  g_mode.store(mode);
}

FallbackMode parse_fallback_mode(const std::string& text) {
  if (text == "warn") return FallbackMode::kWarn;
  if (text == "silent") return FallbackMode::kSilent;
  if (text == "error") return FallbackMode::kError;
  TORCH_CHECK_VALUE(false, "torch_mtia_emu: fallback mode '", text,
                    "' is not one of warn, silent, error");
}

std::map<std::string, uint64_t> fallback_counts() {
  std::lock_guard lock(g_mu);
  return g_counts;
}

void reset_fallback_counts() {
  std::lock_guard lock(g_mu);
  g_counts.clear();
  g_warned.clear();
}

bool set_quiet_fallbacks(bool quiet) {
  const bool previous = t_quiet;
  t_quiet = quiet;
  return previous;
}

namespace detail {
FallbackReason::FallbackReason(std::string reason) {
  t_reason = std::move(reason);
}
FallbackReason::~FallbackReason() {
  t_reason.reset();
}
}  // namespace detail

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name(op);
  std::optional<std::string> reason;
  reason.swap(t_reason);  // consumed: nested ops fall back for their own reasons
  const auto& schema = op.schema();

  // A view cannot be emulated by a copy: its result must share the device storage.
  for (const auto& ret : schema.returns()) {
    const c10::AliasInfo* a = ret.alias_info();
    TORCH_CHECK(a == nullptr || a->isWrite(), "torch_mtia_emu: ", name,
                " is a view op without a device implementation; views cannot fall back to the "
                "CPU (the result must alias device memory)");
  }
  admit(name, reason);

  const auto& args = schema.arguments();
  const size_t n = args.size();
  const size_t begin = stack->size() - n;
  std::optional<c10::Device> target;
  CommonDevice common;
  // Per argument: the original device tensors and their CPU stand-ins (one per list item).
  std::vector<std::vector<at::Tensor>> originals(n), stand_ins(n);

  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[begin + i];
    auto convert = [&](const at::Tensor& t) {
      common.add(t);  // the device tensors must be on one device
      if (is_device(t) && !target) target = t.device();
      at::Tensor c = to_cpu(t);
      originals[i].push_back(t);
      stand_ins[i].push_back(c);
      return c;
    };
    if (v.isTensor()) {
      v = convert(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> cpu;
      for (const at::Tensor& t : v.toTensorVector()) cpu.push_back(convert(t));
      v = cpu;
    } else if (v.isOptionalTensorList()) {
      c10::List<c10::optional<at::Tensor>> cpu;
      for (const c10::optional<at::Tensor>& t : v.toOptionalTensorVector()) {
        cpu.push_back(t.has_value() ? c10::optional<at::Tensor>(convert(*t)) : c10::nullopt);
      }
      v = cpu;
    } else if (v.isDevice() && v.toDevice().type() == kDeviceType) {
      target = v.toDevice();  // a factory asked for the device
      v = c10::Device(at::kCPU);
    }
  }

  // Results go back to that device (a factory's: the one it asked for, else the current one),
  // and everything the fallback does on the device runs there.
  if (target && !target->has_index()) target = c10::Device(kDeviceType, current_device());
  const DeviceScope on(target ? target->index() : -1);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  // In-place and out= arguments: the CPU kernel wrote the stand-ins.
  for (size_t i = 0; i < n; ++i) {
    const c10::AliasInfo* a = args[i].alias_info();
    if (a == nullptr || !a->isWrite()) continue;
    for (size_t k = 0; k < originals[i].size(); ++k) {
      if (is_device(originals[i][k])) write_back(originals[i][k], stand_ins[i][k]);
    }
  }

  const auto& rets = schema.returns();
  const size_t rbegin = stack->size() - rets.size();
  for (size_t r = 0; r < rets.size(); ++r) {
    c10::IValue& v = (*stack)[rbegin + r];
    const c10::AliasInfo* a = rets[r].alias_info();
    if (a != nullptr) {
      // A mutable alias of an argument: return the original device tensor(s).
      for (size_t i = 0; i < n; ++i) {
        const c10::AliasInfo* ai = args[i].alias_info();
        if (ai == nullptr || !(*ai == *a) || originals[i].empty()) continue;
        if (v.isTensorList()) {
          v = c10::List<at::Tensor>(originals[i]);
        } else {
          v = originals[i][0];
        }
        break;
      }
      continue;
    }
    if (!target) continue;
    if (v.isTensor() && v.toTensor().defined()) {
      v = v.toTensor().to(*target);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> dev;
      for (const at::Tensor& t : v.toTensorVector()) dev.push_back(t.defined() ? t.to(*target) : t);
      v = dev;
    }
  }
}

TORCH_LIBRARY_IMPL(_, MTIA, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace mtia::torch_backend
