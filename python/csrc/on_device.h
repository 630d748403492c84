// Running an ATen kernel on the device of its tensors, as torchgen's wrappers do for in-tree
// backends: the tensor arguments must all be on one MTIA device (else the error CUDA gives),
// and the kernel runs with that device current, so its allocations, launches and copies go
// there. Register kernels with MTIA_FN(fn) instead of TORCH_FN(fn).
#pragma once

#include <ATen/core/IListRef.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/library.h>

#include <optional>
#include <utility>

#include "devices.h"

namespace mtia::torch_backend {

// The device one op's arguments agree on: the MTIA device of its tensor arguments, or, for a
// factory function, the device it asks for.
class CommonDevice {
 public:
  void add(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kDeviceType) return;
    const c10::DeviceIndex d = t.device().index();
    if (tensors_ < 0) {
      tensors_ = d;
    } else if (d != tensors_) {
      mismatch(d);
    }
  }
  void add(const std::optional<at::Tensor>& t) {
    if (t.has_value()) add(*t);
  }
  void add(at::TensorList ts) {
    for (const at::Tensor& t : ts) add(t);
  }
  void add(const at::ITensorListRef& ts) {
    for (const at::Tensor& t : ts) add(t);
  }
  void add(const c10::List<std::optional<at::Tensor>>& ts) {
    for (const std::optional<at::Tensor> t : ts) add(t);
  }
  void add(const std::optional<c10::Device>& d) {
    if (d.has_value() && d->type() == kDeviceType && d->has_index()) requested_ = d->index();
  }
  void add(const c10::Device& d) { add(std::optional<c10::Device>(d)); }
  template <class T>
  void add(const T&) {}  // scalars, sizes, dtypes, ...

  // The device asked for (a factory's device argument) wins over the tensors'; -1: none.
  c10::DeviceIndex index() const { return requested_ >= 0 ? requested_ : tensors_; }

 private:
  [[noreturn]] void mismatch(c10::DeviceIndex other) const;
  c10::DeviceIndex tensors_ = -1;
  c10::DeviceIndex requested_ = -1;
};

template <auto Fn>
struct OnDevice;

template <class R, class... Args, R (*Fn)(Args...)>
struct OnDevice<Fn> {
  static R call(Args... args) {
    CommonDevice common;
    (common.add(args), ...);
    const DeviceScope scope(common.index());
    return Fn(std::forward<Args>(args)...);
  }
};

}  // namespace mtia::torch_backend

#define MTIA_FN(fn) TORCH_FN(::mtia::torch_backend::OnDevice<&fn>::call)
