// The out= half of a PyTorch structured kernel, as torchgen writes it for in-tree backends.
//
// A structured op's meta function (at::meta::structured_<op>::meta) checks the arguments and
// decides the output's sizes and dtype, then calls set_output_*; for TensorIterator ops it
// also computes broadcasting and the common dtype. OutOf<Meta> answers set_output_* by
// resizing the caller's out tensor, so a device kernel only has to compute. Functional and
// in-place variants (add, add_) are registered beside the .out kernel and share it.
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>

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
      // A dense layout of the same elements (a permutation of the contiguous strides), so
      // the storage resize_output sized fits it.
      out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
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
                          at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t i) override { return outs_[size_t(i)].get(); }
  at::Tensor& out(size_t i = 0) { return outs_[i].get(); }

 private:
  void set(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options) {
    const at::Tensor& out = outs_[size_t(i)].get();
    // The device kernels take any output strides, so the meta's stride wish is only a hint
    // for a freshly resized output (no proxy outputs needed).
    resize_out(out, sizes, strides, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }
  std::array<std::reference_wrapper<at::Tensor>, N> outs_;
};

// Defines `Tensor& NAME_out(const Tensor& self, Tensor& out)` for a structured unary op on
// floating dtypes (integer inputs are promoted by its meta): the SE op `se_op` on the device,
// the CPU fallback for other dtypes. Expands where elementwise.h, fallback.h and launch.h are
// included and at::Tensor / at::ScalarType are in scope as Tensor / ScalarType.
#define MTIA_UNARY_FLOAT(name, se_op)                                      \
  Tensor& name##_out(const Tensor& self, Tensor& out) {                    \
    OutOf<at::meta::structured_##name> m(out);                             \
    m.meta(self);                                                          \
    const ScalarType dt = m.common_dtype();                                \
    if (!is_kernel_float(dt)) {                                            \
      return run_on_cpu<ATEN_OP2(name, out)>(dtype_reason(dt), self, out); \
    }                                                                      \
    apply_unary(se_op, out, m.input(0), dt, dt);                           \
    return out;                                                            \
  }

}  // namespace mtia::torch_backend
