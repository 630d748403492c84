// The _foreach_* ops optimizers use, as loops of device ops (one launch per tensor and step;
// there is no multi-tensor kernel). Variants not listed here take the CPU fallback.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

namespace mtia::torch_backend {

namespace {

using at::Scalar;
using at::Tensor;
using at::TensorList;

void check_lists(TensorList a, TensorList b, const char* op) {
  TORCH_CHECK(a.size() == b.size(), op, ": tensor lists must have the same length, got ", a.size(),
              " and ", b.size());
}

void check_lists(TensorList a, at::ArrayRef<Scalar> b, const char* op) {
  TORCH_CHECK(a.size() == b.size(), op, ": expected ", a.size(), " scalars, got ", b.size());
}

template <class Fn>
std::vector<Tensor> map(TensorList self, Fn&& fn) {
  std::vector<Tensor> out;
  out.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) out.push_back(fn(i, self[i]));
  return out;
}

// add, sub, mul, div: Scalar, List and ScalarList forms, functional and in place.
#define MTIA_FOREACH_ARITH(name)                                                    \
  std::vector<Tensor> name##_scalar(TensorList self, const Scalar& s) {             \
    return map(self, [&](size_t, const Tensor& t) { return at::name(t, s); });      \
  }                                                                                 \
  void name##_scalar_(TensorList self, const Scalar& s) {                           \
    for (const Tensor& t : self) t.name##_(s);                                      \
  }                                                                                 \
  std::vector<Tensor> name##_scalarlist(TensorList self, at::ArrayRef<Scalar> s) {  \
    check_lists(self, s, "_foreach_" #name);                                        \
    return map(self, [&](size_t i, const Tensor& t) { return at::name(t, s[i]); }); \
  }                                                                                 \
  void name##_scalarlist_(TensorList self, at::ArrayRef<Scalar> s) {                \
    check_lists(self, s, "_foreach_" #name "_");                                    \
    for (size_t i = 0; i < self.size(); ++i) self[i].name##_(s[i]);                 \
  }

MTIA_FOREACH_ARITH(add)
MTIA_FOREACH_ARITH(sub)
MTIA_FOREACH_ARITH(mul)
MTIA_FOREACH_ARITH(div)
#undef MTIA_FOREACH_ARITH

std::vector<Tensor> add_list(TensorList self, TensorList other, const Scalar& alpha) {
  check_lists(self, other, "_foreach_add");
  return map(self, [&](size_t i, const Tensor& t) { return at::add(t, other[i], alpha); });
}
void add_list_(TensorList self, TensorList other, const Scalar& alpha) {
  check_lists(self, other, "_foreach_add_");
  for (size_t i = 0; i < self.size(); ++i) self[i].add_(other[i], alpha);
}
std::vector<Tensor> sub_list(TensorList self, TensorList other, const Scalar& alpha) {
  check_lists(self, other, "_foreach_sub");
  return map(self, [&](size_t i, const Tensor& t) { return at::sub(t, other[i], alpha); });
}
void sub_list_(TensorList self, TensorList other, const Scalar& alpha) {
  check_lists(self, other, "_foreach_sub_");
  for (size_t i = 0; i < self.size(); ++i) self[i].sub_(other[i], alpha);
}

#define MTIA_FOREACH_LIST(name, op)                                                   \
  std::vector<Tensor> name##_list(TensorList self, TensorList other) {                \
    check_lists(self, other, "_foreach_" #name);                                      \
    return map(self, [&](size_t i, const Tensor& t) { return at::op(t, other[i]); }); \
  }                                                                                   \
  void name##_list_(TensorList self, TensorList other) {                              \
    check_lists(self, other, "_foreach_" #name "_");                                  \
    for (size_t i = 0; i < self.size(); ++i) self[i].op##_(other[i]);                 \
  }

MTIA_FOREACH_LIST(mul, mul)
MTIA_FOREACH_LIST(div, div)
#undef MTIA_FOREACH_LIST

std::vector<Tensor> maximum_list(TensorList self, TensorList other) {
  check_lists(self, other, "_foreach_maximum");
  return map(self, [&](size_t i, const Tensor& t) { return at::maximum(t, other[i]); });
}
void maximum_list_(TensorList self, TensorList other) {
  check_lists(self, other, "_foreach_maximum_");
  for (size_t i = 0; i < self.size(); ++i) {
    at::maximum_out(const_cast<Tensor&>(self[i]), self[i],
                    other[i]);  // the handle, not the data, is const
  }
}
std::vector<Tensor> minimum_list(TensorList self, TensorList other) {
  check_lists(self, other, "_foreach_minimum");
  return map(self, [&](size_t i, const Tensor& t) { return at::minimum(t, other[i]); });
}
void minimum_list_(TensorList self, TensorList other) {
  check_lists(self, other, "_foreach_minimum_");
  for (size_t i = 0; i < self.size(); ++i) {
    at::minimum_out(const_cast<Tensor&>(self[i]), self[i], other[i]);
  }
}

// addcmul, addcdiv: one value for all, or one per tensor.
#define MTIA_FOREACH_ADDC(name)                                                                    \
  std::vector<Tensor> name##_scalar(TensorList self, TensorList t1, TensorList t2,                 \
                                    const Scalar& v) {                                             \
    check_lists(self, t1, "_foreach_" #name);                                                      \
    check_lists(self, t2, "_foreach_" #name);                                                      \
    return map(self, [&](size_t i, const Tensor& t) { return at::name(t, t1[i], t2[i], v); });     \
  }                                                                                                \
  void name##_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& v) {            \
    check_lists(self, t1, "_foreach_" #name "_");                                                  \
    check_lists(self, t2, "_foreach_" #name "_");                                                  \
    for (size_t i = 0; i < self.size(); ++i) self[i].name##_(t1[i], t2[i], v);                     \
  }                                                                                                \
  std::vector<Tensor> name##_scalarlist(TensorList self, TensorList t1, TensorList t2,             \
                                        at::ArrayRef<Scalar> v) {                                  \
    check_lists(self, t1, "_foreach_" #name);                                                      \
    check_lists(self, v, "_foreach_" #name);                                                       \
    return map(self, [&](size_t i, const Tensor& t) { return at::name(t, t1[i], t2[i], v[i]); });  \
  }                                                                                                \
  void name##_scalarlist_(TensorList self, TensorList t1, TensorList t2, at::ArrayRef<Scalar> v) { \
    check_lists(self, t1, "_foreach_" #name "_");                                                  \
    check_lists(self, v, "_foreach_" #name "_");                                                   \
    for (size_t i = 0; i < self.size(); ++i) self[i].name##_(t1[i], t2[i], v[i]);                  \
  }

MTIA_FOREACH_ADDC(addcmul)
MTIA_FOREACH_ADDC(addcdiv)
#undef MTIA_FOREACH_ADDC

#define MTIA_FOREACH_UNARY(name)                                            \
  std::vector<Tensor> foreach_##name(TensorList self) {                     \
    return map(self, [&](size_t, const Tensor& t) { return at::name(t); }); \
  }                                                                         \
  void foreach_##name##_(TensorList self) {                                 \
    for (const Tensor& t : self) t.name##_();                               \
  }

MTIA_FOREACH_UNARY(abs)
MTIA_FOREACH_UNARY(neg)
MTIA_FOREACH_UNARY(sqrt)
MTIA_FOREACH_UNARY(exp)
#undef MTIA_FOREACH_UNARY

void foreach_zero_(TensorList self) {
  for (const Tensor& t : self) t.zero_();
}

// Vector norms of each tensor: 2 (sqrt of the sum of squares), 1 and inf; others through
// linalg_vector_norm (which may take the CPU fallback). With `dtype`, each tensor is cast to
// it first, as PyTorch's own kernels do.
std::vector<Tensor> norm(TensorList self, const Scalar& ord, std::optional<at::ScalarType> dtype) {
  const double p = ord.toDouble();
  return map(self, [&](size_t, const Tensor& in) -> Tensor {
    const Tensor t = dtype.has_value() ? in.to(*dtype) : in;
    if (p == 2.0) return at::sqrt(at::sum(at::mul(t, t)));
    if (p == 1.0) return at::sum(at::abs(t));
    if (std::isinf(p) && p > 0) return at::amax(at::abs(t));
    return at::linalg_vector_norm(t, ord);
  });
}

}  // namespace

#define MTIA_OPS_foreach
#include "register_ops.inc"

}  // namespace mtia::torch_backend
