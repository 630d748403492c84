// The CPU fallback: every ATen op without a device kernel (and every device op called with a
// dtype its kernels do not take) runs on the CPU: device tensor arguments are copied to the
// host, the CPU kernel runs, mutated arguments (in-place and out=) are copied back into the
// original device tensors, and results are moved to the device. View ops never fall back
// (a CPU copy cannot alias device memory): they are an error.
//
// Each op warns once (a Python UserWarning) and is counted; MTIA_EMU_FALLBACK=error (or
// set_fallback_mode) turns a fallback into an exception naming the op, so CI can prove that a
// workload runs entirely on device kernels.
#pragma once

#include <ATen/Operators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>

#include <cstdint>
#include <map>
#include <string>

namespace mtia::torch_backend {

enum class FallbackMode {
  kWarn,    // run on the CPU, warn once per op (the default)
  kSilent,  // run on the CPU without warning
  kError,   // refuse: raise NotImplementedError naming the op (and the dtype)
};

FallbackMode fallback_mode();
void set_fallback_mode(FallbackMode mode);
// Parses "warn", "silent" or "error"; throws c10::Error otherwise.
FallbackMode parse_fallback_mode(const std::string& text);
// Calls per op ("aten::nll_loss_forward", "aten::add.out (dtype Double)") since the last reset.
std::map<std::string, uint64_t> fallback_counts();
void reset_fallback_counts();

// The boxed fallback registered for every op of the PrivateUse1 key.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// While set on a thread, fallbacks there are neither counted, warned about nor refused: for
// PyTorch's tensor printing, whose formatting ops are not the user's workload. Returns the
// previous setting.
bool set_quiet_fallbacks(bool quiet);

namespace detail {
// Why the next fallback on this thread happens, when it is not "no device kernel".
struct FallbackReason {
  explicit FallbackReason(std::string reason);
  ~FallbackReason();
};
}  // namespace detail

// Runs the ATen op `Op` (an at::_ops struct, e.g. ATEN_OP2(add, out)) through the CPU
// fallback from inside a device kernel, for `reason` ("dtype Double").
template <class Op, class... Args>
decltype(auto) run_on_cpu(std::string reason, Args&&... args) {
  detail::FallbackReason scope(std::move(reason));
  return at::native::call_fallback_fn<&cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

}  // namespace mtia::torch_backend
