#include "elementwise.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/TensorOptions.h>

#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <utility>

#include "devices.h"
#include "launch.h"

namespace mtia::torch_backend {

namespace {

// `in`'s strides broadcast to `sizes` (0 where it repeats).
std::vector<int64_t> broadcast_strides(const at::Tensor& in, at::IntArrayRef sizes) {
  const int64_t R = int64_t(sizes.size());
  const int64_t r = in.dim();
  TORCH_CHECK(r <= R, "torch_mtia_emu: cannot broadcast shape ", in.sizes(), " to ", sizes);
  std::vector<int64_t> st(size_t(R), 0);
  for (int64_t d = R - r; d < R; ++d) {
    const int64_t j = d - (R - r);
    if (in.size(j) == sizes[d]) {
      st[d] = in.stride(j);
    } else {
      TORCH_CHECK(in.size(j) == 1, "torch_mtia_emu: cannot broadcast shape ", in.sizes(), " to ",
                  sizes);
    }
  }
  return st;
}

uint8_t dtype_code(const at::Tensor& t) {
  auto c = kernel_dtype(t.scalar_type());
  TORCH_CHECK(c.has_value(), "torch_mtia_emu: the device kernels take ", kernel_dtype_list(),
              ", not ", t.scalar_type());
  return *c;
}

// Runs an elementwise kernel over `out` and `inputs`: its arguments are head(pointers) (the
// operands' element-0 addresses, out first), then the 4 sizes, then 4 strides per operand.
template <class Head>
void run(std::string_view kernel, const at::Tensor& out, const std::vector<at::Tensor>& inputs,
         Head&& head) {
  if (out.numel() == 0) return;
  std::vector<const at::Tensor*> ops{&out};
  for (const auto& t : inputs) ops.push_back(&t);
  std::vector<std::vector<int64_t>> st;
  st.reserve(ops.size());
  st.push_back(out.strides().vec());
  for (size_t k = 1; k < ops.size(); ++k) st.push_back(broadcast_strides(*ops[k], out.sizes()));
  std::vector<at::IntArrayRef> refs(st.begin(), st.end());
  std::vector<mtia::DevicePtr> base;
  std::vector<int64_t> esize;
  for (const at::Tensor* t : ops) {
    base.push_back(tensor_address(*t));
    esize.push_back(int64_t(t->element_size()));
  }
  const mtia::Grid grid = grid_for(out.numel());
  for_each_view4(out.sizes(), refs, [&](const View4& v, const std::vector<int64_t>& off) {
    std::vector<mtia::DevicePtr> ptrs;
    for (size_t k = 0; k < ops.size(); ++k) ptrs.push_back(base[k] + off[k] * esize[k]);
    std::vector<mtia::Arg> args = head(ptrs);
    for (int64_t s : v.sizes) args.emplace_back(s);
    for (const auto& s : v.strides) {
      for (int64_t x : s) args.emplace_back(x);
    }
    launch(kernel, grid, args);
  });
}

}  // namespace

void launch_unary(SeOp op, const at::Tensor& out, const at::Tensor& a) {
  const uint8_t dt = dtype_code(a);
  run("unary", out, {a}, [&](const std::vector<mtia::DevicePtr>& p) {
    return std::vector<mtia::Arg>{p[0], p[1], op, mtia::Arg::dtype(dt)};
  });
}

void launch_binary(SeOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  TORCH_INTERNAL_ASSERT(a.scalar_type() == b.scalar_type(), "binary operands differ in dtype");
  const uint8_t dt = dtype_code(a);
  run("binary", out, {a, b}, [&](const std::vector<mtia::DevicePtr>& p) {
    return std::vector<mtia::Arg>{p[0], p[1], p[2], op, mtia::Arg::dtype(dt)};
  });
}

void launch_pointwise(const at::Tensor& out, const std::vector<at::Tensor>& inputs,
                      const std::vector<PwStep>& steps) {
  TORCH_INTERNAL_ASSERT(
      inputs.size() <= pw::kMaxInputs && !steps.empty() && steps.size() <= pw::kMaxSteps,
      "pointwise takes up to ", pw::kMaxInputs, " inputs and ", pw::kMaxSteps, " steps");
  for (const at::Tensor& t : inputs) {
    TORCH_INTERNAL_ASSERT(t.scalar_type() == out.scalar_type(), "pointwise inputs differ in dtype");
  }
  const uint8_t dt = dtype_code(out);
  // Unused inputs: the output stands in (its strides are valid; the kernel does not read it).
  std::vector<at::Tensor> operands = inputs;
  operands.resize(pw::kMaxInputs, out);
  run("pointwise", out, operands, [&](const std::vector<mtia::DevicePtr>& p) {
    std::vector<mtia::Arg> args(p.begin(), p.end());
    args.emplace_back(mtia::Arg::dtype(dt));
    args.emplace_back(int64_t(inputs.size()));
    args.emplace_back(int64_t(steps.size()));
    for (size_t k = 0; k < pw::kMaxSteps; ++k) {
      int64_t w = 0;
      if (k < steps.size()) {
        const PwStep& s = steps[k];
        w = s.op | s.dst << 8 | s.src[0] << 12 | s.src[1] << 16 | s.src[2] << 20;
      }
      args.emplace_back(w);
    }
    for (size_t k = 0; k < pw::kMaxSteps; ++k) {
      args.emplace_back(int64_t(k < steps.size() ? steps[k].imm : 0));
    }
    return args;
  });
}

void apply_pointwise(const at::Tensor& out, const std::vector<at::Tensor>& inputs,
                     at::ScalarType compute, const std::vector<PwStep>& steps) {
  std::vector<at::Tensor> in;
  for (const at::Tensor& t : inputs) in.push_back(as_dtype(t, compute));
  const at::Tensor r = out.scalar_type() == compute ? out : empty_device(out.sizes(), compute);
  launch_pointwise(r, in, steps);
  write_into(out, r);
}

void launch_binary_scalar(SeOp op, const at::Tensor& out, const at::Tensor& a, uint64_t bits) {
  const uint8_t dt = dtype_code(a);
  run("binary_scalar", out, {a}, [&](const std::vector<mtia::DevicePtr>& p) {
    return std::vector<mtia::Arg>{p[0], p[1], op, mtia::Arg::dtype(dt), int64_t(bits)};
  });
}

void launch_cast(const at::Tensor& out, const at::Tensor& in) {
  const uint8_t odt = dtype_code(out);
  const uint8_t idt = dtype_code(in);
  run("cast", out, {in}, [&](const std::vector<mtia::DevicePtr>& p) {
    return std::vector<mtia::Arg>{p[0], p[1], mtia::Arg::dtype(odt), mtia::Arg::dtype(idt)};
  });
}

void launch_where(const at::Tensor& out, const at::Tensor& cond, const at::Tensor& a,
                  const at::Tensor& b) {
  TORCH_INTERNAL_ASSERT(cond.scalar_type() == at::kBool && a.scalar_type() == b.scalar_type() &&
                        out.scalar_type() == a.scalar_type());
  const uint8_t dt = dtype_code(a);
  run("where", out, {cond, a, b}, [&](const std::vector<mtia::DevicePtr>& p) {
    return std::vector<mtia::Arg>{p[0], p[1], p[2], p[3], mtia::Arg::dtype(dt)};
  });
}

void launch_clamp(const at::Tensor& out, const at::Tensor& a, uint64_t lo_bits, uint64_t hi_bits) {
  const uint8_t dt = dtype_code(a);
  run("clamp", out, {a}, [&](const std::vector<mtia::DevicePtr>& p) {
    return std::vector<mtia::Arg>{p[0], p[1], mtia::Arg::dtype(dt), int64_t(lo_bits),
                                  int64_t(hi_bits)};
  });
}

void launch_fill(const at::Tensor& out, uint64_t bits) {
  const uint8_t dt = dtype_code(out);
  run("fill", out, {}, [&](const std::vector<mtia::DevicePtr>& p) {
    return std::vector<mtia::Arg>{p[0], mtia::Arg::dtype(dt), int64_t(bits)};
  });
}

at::Tensor empty_like_dtype(const at::Tensor& t, at::ScalarType dtype) {
  // Dense strides in t's memory order, so a copy between them moves in long runs.
  if (t.is_non_overlapping_and_dense()) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().dtype(dtype));
  }
  return at::empty(t.sizes(), t.options().dtype(dtype));
}

at::Tensor empty_device(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::empty(sizes, c10::TensorOptions().device(kDeviceType, current_device()).dtype(dtype));
}

at::Tensor as_dtype(const at::Tensor& t, at::ScalarType dtype) {
  if (t.scalar_type() == dtype) return t;
  at::Tensor r = empty_like_dtype(t, dtype);
  launch_cast(r, t);
  return r;
}

void write_into(const at::Tensor& out, const at::Tensor& result) {
  if (out.is_same(result)) return;
  if (out.scalar_type() == result.scalar_type()) {
    dma_copy(out, result);
  } else {
    launch_cast(out, result);
  }
}

at::Tensor device_scalar(const c10::Scalar& value, at::ScalarType dtype) {
  // Constants are made once (synchronously, so every stream may read them at once) and kept:
  // nothing writes them, and composed ops use the same few (0, 1) over and over.
  static std::mutex mu;
  static std::map<std::tuple<c10::DeviceIndex, at::ScalarType, uint64_t>, at::Tensor> cache;
  const uint64_t bits = scalar_bits(value, dtype);
  const c10::DeviceIndex device = current_device();
  std::lock_guard lock(mu);
  auto it = cache.find({device, dtype, bits});
  if (it != cache.end()) return it->second;
  at::Tensor t = empty_device({}, dtype);
  guarded("writing a constant", [&] {
    Runtime::get().device().copy(tensor_address(t), &bits, t.element_size(), current_stream());
  });
  if (cache.size() < 256) cache.emplace(std::make_tuple(device, dtype, bits), t);
  return t;
}

namespace {

// The op with its operands swapped (a op b == b op' a), or -1 when there is none.
SeOp mirrored(SeOp op) {
  switch (op) {
    case MTIA_PE_SE_ADD:
    case MTIA_PE_SE_MUL:
    case MTIA_PE_SE_MIN:
    case MTIA_PE_SE_MAX:
    case MTIA_PE_SE_EQ:
    case MTIA_PE_SE_NE:
    case MTIA_PE_SE_LAND:
    case MTIA_PE_SE_LOR:
    case MTIA_PE_SE_LXOR:
    case MTIA_PE_SE_BAND:
    case MTIA_PE_SE_BOR:
    case MTIA_PE_SE_BXOR:
      return op;
    case MTIA_PE_SE_LT:
      return MTIA_PE_SE_GT;
    case MTIA_PE_SE_GT:
      return MTIA_PE_SE_LT;
    case MTIA_PE_SE_LE:
      return MTIA_PE_SE_GE;
    case MTIA_PE_SE_GE:
      return MTIA_PE_SE_LE;
    default:
      return -1;
  }
}

// A device operand of `dtype`: CPU scalars become 0-dim device tensors.
at::Tensor operand(const at::Tensor& t, at::ScalarType dtype) {
  if (is_cpu_scalar(t)) return device_scalar(t.item(), dtype);
  return as_dtype(t, dtype);
}

}  // namespace

void apply_unary(SeOp op, const at::Tensor& out, const at::Tensor& in, at::ScalarType compute,
                 at::ScalarType result) {
  if (out.numel() == 0) return;
  const at::Tensor a = operand(in, compute);
  const at::Tensor target = out.scalar_type() == result ? out : empty_like_dtype(out, result);
  launch_unary(op, target, a);
  write_into(out, target);
}

void apply_binary(SeOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                  at::ScalarType compute, at::ScalarType result) {
  if (out.numel() == 0) return;
  const at::Tensor target = out.scalar_type() == result ? out : empty_like_dtype(out, result);
  if (is_cpu_scalar(b) && !is_cpu_scalar(a)) {
    launch_binary_scalar(op, target, as_dtype(a, compute), scalar_bits(b.item(), compute));
  } else if (is_cpu_scalar(a) && !is_cpu_scalar(b) && mirrored(op) >= 0) {
    launch_binary_scalar(mirrored(op), target, as_dtype(b, compute),
                         scalar_bits(a.item(), compute));
  } else {
    launch_binary(op, target, operand(a, compute), operand(b, compute));
  }
  write_into(out, target);
}

void apply_binary_scalar(SeOp op, const at::Tensor& out, const at::Tensor& a,
                         const c10::Scalar& scalar, at::ScalarType compute) {
  if (out.numel() == 0) return;
  const at::Tensor target = out.scalar_type() == compute ? out : empty_like_dtype(out, compute);
  launch_binary_scalar(op, target, operand(a, compute), scalar_bits(scalar, compute));
  write_into(out, target);
}

at::ScalarType acc_dtype(at::ScalarType t) {
  return (t == at::kHalf || t == at::kBFloat16) ? at::kFloat : t;
}

std::string dtype_reason(at::ScalarType t) {
  return std::string("dtype ") + c10::toString(t);
}

bool is_cpu_scalar(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.dim() == 0;
}

void check_device(const at::Tensor& t, const char* op, bool allow_cpu_scalar) {
  if (t.device().type() == kDeviceType) return;
  TORCH_CHECK(allow_cpu_scalar && is_cpu_scalar(t), op,
              ": expected all tensors on the device (mtia:0), got one on ", t.device(),
              " (only 0-dim CPU tensors may be mixed in, as scalars)");
}

}  // namespace mtia::torch_backend
