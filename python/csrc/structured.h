// The out= half of a PyTorch structured kernel, as torchgen writes it for in-tree backends.
//
// A structured op's meta function (at::meta::structured_<op>::meta) checks the arguments and
// decides the output's sizes and dtype, then calls set_output_*; for TensorIterator ops it
// also computes broadcasting and the common dtype. OutOf<Meta> answers set_output_* by
// resizing the caller's out tensor, so a device kernel only has to compute. PyTorch 1.13
// routes the functional and in-place variants (add, add_) through the out= kernel
// registered here (their CompositeExplicitAutogradNonFunctional kernels), so registering
// the .out overload gives all three.
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>

#include <array>
#include <functional>
#include <type_traits>

namespace mtia::torch_backend {

// Resizes (and, when resized, restrides) `out` for a structured op, checking dtype and device
// as torchgen's resize_out does.
inline void resize_out(const at::Tensor& out, at::IntArrayRef sizes, at::IntArrayRef strides,
                       const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ", options.dtype(),
              ", but got ", out.dtype(), " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ",
              options.device(), ", but got ", out.device(), " instead");
  const bool resized = at::native::resize_output(out, sizes);
  if (resized) {
    if (!strides.empty()) {
      at::native::as_strided_(out, sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
    }
  }
}

template <class Meta, size_t N = 1>
struct OutOf final : public Meta {
  template <class... Outs>
  explicit OutOf(Outs&... outs) : outs_{std::ref(outs)...} {
    static_assert(sizeof...(Outs) == N, "one out tensor per output");
  }

  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options, at::DimnameList names) override {
    set(i, sizes, strides, options, names);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options, at::DimnameList names) override {
    set(i, sizes, strides, options, names);
  }
  const at::Tensor& maybe_get_output(int64_t i) override { return outs_[size_t(i)].get(); }
  at::Tensor& out(size_t i = 0) { return outs_[i].get(); }

 private:
  void set(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options,
           at::DimnameList names) {
    const at::Tensor& out = outs_[size_t(i)].get();
    // The device kernels take any output strides, so the meta's stride wish is only a hint
    // for a freshly resized output (no proxy outputs needed).
    resize_out(out, sizes, strides, options);
    if (!names.empty()) at::namedinference::propagate_names(out, names);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options, names);
    }
  }
  std::array<std::reference_wrapper<at::Tensor>, N> outs_;
};

}  // namespace mtia::torch_backend
