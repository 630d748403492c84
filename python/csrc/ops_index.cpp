// Embeddings and indexing on the device (kernels/lib/index.c): index_select, embedding's
// backward, embedding_bag forward and backward, advanced indexing (index, index_put_),
// index_add, gather, scatter, scatter_add, masked_fill, masked_select, masked_scatter_,
// nonzero, cumsum, triu and tril.
//
// Index kernels check every index on the device and fail their launch with their own status
// when one is out of range; the host waits for those launches and turns that status into an
// IndexError naming the index (found on the host only then), so errors surface at the call.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <torch/library.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "runtime.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

// index.c's own exit status for an index (or bag offset) out of range.
constexpr int64_t kBadIndexStatus = 16;

uint8_t code(at::ScalarType t) {
  const auto c = kernel_dtype(t);
  TORCH_INTERNAL_ASSERT(c.has_value(), "no kernel dtype for ", t);
  return *c;
}
mtia::Arg dt(at::ScalarType t) {
  return mtia::Arg::dtype(code(t));
}

bool is_index_dtype(at::ScalarType t) {
  return t == at::kLong || t == at::kInt;
}

// The first index of `index` outside [-size, size) (wrap) or [0, size), as PyTorch words it.
std::optional<std::string> find_bad_index(const Tensor& index, int64_t size, int64_t dim,
                                          bool wrap) {
  const Tensor h = index.cpu().to(at::kLong).contiguous().reshape({-1});
  const int64_t* p = h.data_ptr<int64_t>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (p[i] >= size || p[i] < (wrap ? -size : 0)) {
      return c10::str("index ", p[i], " is out of bounds for dimension ", dim, " with size ", size);
    }
  }
  return std::nullopt;
}
std::string bad_index_message(const Tensor& index, int64_t size, int64_t dim, bool wrap) {
  return find_bad_index(index, size, dim, wrap)
      .value_or(c10::str("an index is out of bounds for dimension ", dim, " with size ", size));
}

// Launches an index kernel and waits for it: its bad-index status becomes an IndexError with
// `explain()`'s message; other failures are the usual RuntimeError.
void launch_checked(std::string_view kernel, mtia::Grid grid, const std::vector<mtia::Arg>& args,
                    const std::function<std::string()>& explain) {
  launch(kernel, grid, args);
  try {
    Runtime::get().device().synchronize(current_stream());
  } catch (const mtia::Error& e) {
    const std::string what = e.what();
    const bool ours = what.find("kernel '" + std::string(kernel) + "'") != std::string::npos &&
                      what.find(c10::str("returned status ", kBadIndexStatus)) != std::string::npos;
    TORCH_CHECK_INDEX(!ours, explain());
    rethrow(e, "running kernel '" + std::string(kernel) + "'");
  }
}

// A contiguous int32/int64 copy of an index tensor (other integer dtypes are cast to int64).
Tensor index_operand(const Tensor& index, const char* op) {
  Tensor i = index.device().type() == kDeviceType
                 ? index
                 : index.to(index.options().device(kDeviceType, current_device()));
  TORCH_CHECK_INDEX(at::isIntegralType(i.scalar_type(), /*includeBool=*/false), op,
                    "(): Expected dtype int32/int64 for index but got ", i.scalar_type());
  if (!is_index_dtype(i.scalar_type())) i = as_dtype(i, at::kLong);
  return i.contiguous();
}

// Folds a box (sizes with strides in two operands) into at most 3 dimensions: drops size-1
// dims and merges neighbours that are contiguous in both. nullopt when more remain.
struct Box3 {
  std::array<int64_t, 3> size{1, 1, 1}, a{0, 0, 0}, b{0, 0, 0};
};
std::optional<Box3> fold_box(const std::vector<int64_t>& size, const std::vector<int64_t>& a,
                             const std::vector<int64_t>& b) {
  std::vector<std::array<int64_t, 3>> dims;  // size, a, b; outermost first
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] == 1) continue;
    if (!dims.empty()) {
      auto& p = dims.back();
      if (p[1] == a[d] * size[d] && p[2] == b[d] * size[d]) {
        p = {p[0] * size[d], a[d], b[d]};
        continue;
      }
    }
    dims.push_back({size[d], a[d], b[d]});
  }
  if (dims.size() > 3) return std::nullopt;
  Box3 r;
  const size_t off = 3 - dims.size();
  for (size_t i = 0; i < dims.size(); ++i) {
    r.size[off + i] = dims[i][0];
    r.a[off + i] = dims[i][1];
    r.b[off + i] = dims[i][2];
  }
  return r;
}

// --- index_gather / index_put ------------------------------------------------------------------

// Up to four index vectors (n positions each) selecting slices of a tensor along dims.
struct Selection {
  std::vector<Tensor> idx;   // contiguous, one dtype
  std::vector<int64_t> dim;  // the tensor's dim each selects in
  bool wrap = false;
  int64_t n = 0;
};

std::string explain_selection(const Selection& s, const Tensor& t) {
  for (size_t k = 0; k < s.idx.size(); ++k) {
    if (auto m = find_bad_index(s.idx[k], t.size(s.dim[k]), s.dim[k], s.wrap)) return *m;
  }
  return "an index is out of bounds";
}

void push_selection(std::vector<mtia::Arg>& args, const Selection& s) {
  for (size_t k = 0; k < 4; ++k) {
    args.emplace_back(k < s.idx.size() ? tensor_address(s.idx[k]) : mtia::DevicePtr());
  }
}
void push_sizes(std::vector<mtia::Arg>& args, const Selection& s, const Tensor& t) {
  for (size_t k = 0; k < 4; ++k) args.emplace_back(k < s.idx.size() ? t.size(s.dim[k]) : 1);
  for (size_t k = 0; k < 4; ++k) args.emplace_back(k < s.idx.size() ? t.stride(s.dim[k]) : 0);
}

// out[p, box] = src[selection(p), box]; box = the dims of src not selected, matched with
// out's `out_box_dims`; p runs with stride out_p_stride in out.
bool gather_rows(const Tensor& out, const Tensor& src, const Selection& s, int64_t out_p_stride,
                 const std::vector<int64_t>& src_box_dims,
                 const std::vector<int64_t>& out_box_dims) {
  std::vector<int64_t> size, a, b;
  for (size_t i = 0; i < src_box_dims.size(); ++i) {
    size.push_back(src.size(src_box_dims[i]));
    a.push_back(src.stride(src_box_dims[i]));
    b.push_back(out.stride(out_box_dims[i]));
  }
  const auto box = fold_box(size, a, b);
  if (!box) return false;
  if (out.numel() == 0 || s.n == 0) return true;
  std::vector<mtia::Arg> args{tensor_address(out), tensor_address(src)};
  push_selection(args, s);
  args.emplace_back(dt(src.scalar_type()));
  args.emplace_back(dt(s.idx[0].scalar_type()));
  args.emplace_back(int64_t(s.idx.size()));
  args.emplace_back(s.n);
  args.emplace_back(int64_t(s.wrap ? 1 : 0));
  push_sizes(args, s, src);
  args.emplace_back(out_p_stride);
  for (int64_t v : box->size) args.emplace_back(v);
  for (int64_t v : box->a) args.emplace_back(v);
  for (int64_t v : box->b) args.emplace_back(v);
  launch_checked("index_gather", grid_for(s.n, 256), args,
                 [&] { return explain_selection(s, src); });
  return true;
}

// dst[selection(p), box] = (accumulate: +=) scale[p] * src[p, box].
struct PutOptions {
  bool accumulate = false;
  std::optional<Tensor> scale;  // contiguous float32, n values
  std::optional<int64_t> skip;  // positions whose first index equals it are skipped
};
bool put_rows(const Tensor& dst, const Tensor& src, const Selection& s, int64_t src_p_stride,
              const std::vector<int64_t>& dst_box_dims, const std::vector<int64_t>& src_box_dims,
              const PutOptions& o) {
  std::vector<int64_t> size, a, b;
  for (size_t i = 0; i < dst_box_dims.size(); ++i) {
    size.push_back(dst.size(dst_box_dims[i]));
    a.push_back(dst.stride(dst_box_dims[i]));
    b.push_back(src.stride(src_box_dims[i]));
  }
  const auto box = fold_box(size, a, b);
  if (!box) return false;
  if (dst.numel() == 0 || s.n == 0) return true;
  std::vector<mtia::Arg> args{tensor_address(dst), tensor_address(src)};
  push_selection(args, s);
  args.emplace_back(o.scale ? tensor_address(*o.scale) : mtia::DevicePtr());
  args.emplace_back(dt(dst.scalar_type()));
  args.emplace_back(dt(s.idx[0].scalar_type()));
  args.emplace_back(int64_t(s.idx.size()));
  args.emplace_back(s.n);
  args.emplace_back(
      int64_t((s.wrap ? 1 : 0) | (o.accumulate ? 2 : 0) | (o.scale ? 4 : 0) | (o.skip ? 8 : 0)));
  args.emplace_back(o.skip.value_or(0));
  push_sizes(args, s, dst);
  args.emplace_back(src_p_stride);
  for (int64_t v : box->size) args.emplace_back(v);
  for (int64_t v : box->a) args.emplace_back(v);
  for (int64_t v : box->b) args.emplace_back(v);
  int64_t rows = 1;
  for (int64_t d : s.dim) rows *= dst.size(d);
  launch_checked("index_put", grid_for(rows * box->size[0] * box->size[1] * box->size[2], 4096),
                 args, [&] { return explain_selection(s, dst); });
  return true;
}

bool float_kernel(at::ScalarType t) {
  return is_kernel_float(t);
}

// --- index_select, embedding ----------------------------------------------------------------

Tensor& index_select_out(const Tensor& self, int64_t dim, const Tensor& index, Tensor& out) {
  check_device(self, "index_select");
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(),
              "index_select(): self and result must have the same scalar type");
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes,
              "index_select(): out has internal overlap");
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(index_select, out)>(dtype_reason(self.scalar_type()), self, dim,
                                                   index, out);
  }
  const Tensor src = self.dim() == 0 ? self.reshape({1}) : self;
  dim = at::maybe_wrap_dim(dim, src.dim());
  const Tensor idx = index_operand(index, "index_select").reshape({-1});
  std::vector<int64_t> shape = src.sizes().vec();
  shape[size_t(dim)] = idx.numel();
  if (self.dim() == 0) {
    TORCH_CHECK_INDEX(idx.numel() == 1,
                      "index_select(): Index to scalar can have only 1 value, got ", idx.numel(),
                      " value(s)");
  }
  at::native::resize_output(out, self.dim() == 0 ? at::IntArrayRef() : at::IntArrayRef(shape));
  const Tensor o = self.dim() == 0 ? out.reshape({-1}) : out;
  if (o.numel() == 0) {
    TORCH_CHECK_INDEX(src.size(dim) > 0 || idx.numel() == 0,
                      "index_select(): index out of range in self");
    return out;
  }
  Selection s{{idx}, {dim}, false, idx.numel()};
  std::vector<int64_t> box;
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (d != dim) box.push_back(d);
  }
  const Tensor srcc = gather_rows(o, src, s, o.stride(dim), box, box) ? Tensor() : src.contiguous();
  if (srcc.defined()) TORCH_CHECK(gather_rows(o, srcc, s, o.stride(dim), box, box));
  return out;
}

Tensor index_select_dev(const Tensor& self, int64_t dim, const Tensor& index) {
  Tensor out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

// flip: one index_select launch per flipped dim, with the reversed positions (cumsum's
// backward uses it).
Tensor flip_dev(const Tensor& self, at::IntArrayRef dims) {
  check_device(self, "flip");
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  std::vector<bool> seen(size_t(nd), false);
  for (int64_t d : dims) {
    const int64_t w = at::maybe_wrap_dim(d, self.dim());
    TORCH_CHECK(!seen[size_t(w)], "dims has duplicates, original flip dims size=", dims.size());
    seen[size_t(w)] = true;
  }
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(flip)>(dtype_reason(self.scalar_type()), self, dims);
  }
  Tensor r = self;
  bool copied = false;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!seen[size_t(d)] || self.size(d) <= 1) continue;
    const Tensor rev = at::arange(self.size(d) - 1, -1, -1, self.options().dtype(at::kLong));
    r = index_select_dev(r, d, rev);
    copied = true;
  }
  return copied ? r : self.clone();
}

Tensor& flip_out(const Tensor& self, at::IntArrayRef dims, Tensor& out) {
  const Tensor r = flip_dev(self, dims);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

Tensor embedding_dense_backward(const Tensor& grad_output, const Tensor& indices,
                                c10::SymInt num_weights_s, c10::SymInt padding_idx_s,
                                bool scale_grad_by_freq) {
  const int64_t num_weights = num_weights_s.expect_int();
  const int64_t padding_idx = padding_idx_s.expect_int();
  check_device(grad_output, "embedding_dense_backward");
  if (!float_kernel(grad_output.scalar_type())) {
    return run_on_cpu<ATEN_OP(embedding_dense_backward)>(dtype_reason(grad_output.scalar_type()),
                                                         grad_output, indices, num_weights,
                                                         padding_idx, scale_grad_by_freq);
  }
  const Tensor idx = index_operand(indices, "embedding_backward").reshape({-1});
  const int64_t n = idx.numel();
  const int64_t d = grad_output.numel() / std::max<int64_t>(n, 1);
  Tensor grad = at::zeros({num_weights, d}, grad_output.options());
  if (n == 0 || d == 0 || num_weights == 0) {
    TORCH_CHECK_INDEX(n == 0 || num_weights > 0, "index out of range in self");
    return grad;
  }
  const Tensor g = grad_output.reshape({n, d});
  PutOptions o;
  o.accumulate = true;
  if (padding_idx >= 0) o.skip = padding_idx;
  Selection s{{idx}, {0}, false, n};
  if (scale_grad_by_freq) {
    // 1 / (how often each position's index occurs): counted by the same kernel.
    Tensor counts = at::zeros({num_weights, 1}, grad_output.options().dtype(at::kFloat));
    const Tensor ones = at::ones({n, 1}, counts.options());
    TORCH_CHECK(put_rows(counts, ones, s, 1, {1}, {1}, PutOptions{true, {}, {}}));
    Tensor freq = at::empty({n, 1}, counts.options());
    TORCH_CHECK(gather_rows(freq, counts, s, 1, {1}, {1}));
    o.scale = at::reciprocal(freq).reshape({n}).contiguous();
  }
  TORCH_CHECK(put_rows(grad, g.contiguous(), s, d, {1}, {1}, o));
  return grad;
}

// --- embedding_bag --------------------------------------------------------------------------

enum { kBagSum = 0, kBagMean = 1, kBagMax = 2 };

std::tuple<Tensor, Tensor, Tensor, Tensor> embedding_bag_impl(
    const Tensor& weight, const Tensor& indices, const Tensor& offsets, int64_t mode,
    const c10::optional<Tensor>& per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
  TORCH_CHECK(indices.dim() == 1 || indices.dim() == 2,
              "input has to be 1D or 2D Tensor, but got Tensor of dimension ", indices.dim());
  TORCH_CHECK(weight.dim() == 2, "weight has to be a 2D Tensor, but got Tensor of dimension ",
              weight.dim());
  TORCH_CHECK(mode >= 0 && mode <= 2, "embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max)");
  TORCH_CHECK_INDEX(is_index_dtype(indices.scalar_type()) && is_index_dtype(offsets.scalar_type()),
                    "embedding_bag: expected indices and offsets of dtype int32 or int64, got ",
                    indices.scalar_type(), " and ", offsets.scalar_type());
  TORCH_CHECK(indices.scalar_type() == offsets.scalar_type(),
              "embedding_bag: expected indices and offsets to have the same dtype, got ",
              indices.scalar_type(), " and ", offsets.scalar_type());
  const bool psw = per_sample_weights.has_value() && per_sample_weights->defined();
  if (psw) {
    TORCH_CHECK(mode == kBagSum,
                "embedding_bag: per_sample_weights was not None. "
                "per_sample_weights is only supported for mode='sum' (got mode='",
                mode == kBagMean ? "mean" : "max", "'). Please open a feature request on GitHub.");
    TORCH_CHECK(per_sample_weights->scalar_type() == weight.scalar_type(),
                "embedding_bag: expected per_sample_weights of dtype ", weight.scalar_type());
    TORCH_CHECK(per_sample_weights->numel() == indices.numel(),
                "embedding_bag: expected per_sample_weights to have as many elements as indices");
  }
  check_device(weight, "embedding_bag");
  const at::ScalarType it = indices.scalar_type();
  Tensor idx = indices.contiguous();
  Tensor offs = offsets;
  if (indices.dim() == 2) {  // fixed-size bags: offsets are implied
    const int64_t b = indices.size(0), l = indices.size(1);
    Tensor h = at::arange(0, b * l, std::max<int64_t>(l, 1), at::TensorOptions().dtype(it));
    offs = h.to(weight.device());
    idx = idx.reshape({-1});
    include_last_offset = false;
  } else {
    TORCH_CHECK(offsets.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ",
                offsets.dim());
  }
  offs = offs.contiguous();
  const int64_t noffs = offs.numel();
  if (include_last_offset) {
    TORCH_CHECK(noffs >= 1, "include_last_offset: number of offsets should be at least 1");
  }
  const int64_t nbags = include_last_offset ? noffs - 1 : noffs;
  const int64_t dim = weight.size(1), nidx = idx.numel();
  Tensor out = at::empty({nbags, dim}, weight.options());
  Tensor offset2bag = at::zeros({nidx}, idx.options());
  Tensor bag_size = at::zeros({nbags}, idx.options());
  Tensor max_idx = at::zeros({mode == kBagMax ? nbags : 0, dim}, idx.options());
  if (mode != kBagMax) max_idx = at::zeros({nbags}, idx.options());
  if (nbags == 0) return {out, offset2bag, bag_size, max_idx};
  if (!float_kernel(weight.scalar_type())) {
    auto r = run_on_cpu<ATEN_OP(_embedding_bag)>(
        dtype_reason(weight.scalar_type()), weight, indices, offsets, false, mode, false,
        per_sample_weights, include_last_offset, padding_idx);
    return r;
  }
  const Tensor w = psw ? per_sample_weights->contiguous() : Tensor();
  std::vector<mtia::Arg> args{tensor_address(out),
                              tensor_address(weight),
                              tensor_address(idx),
                              tensor_address(offs),
                              psw ? tensor_address(w) : mtia::DevicePtr(),
                              tensor_address(offset2bag),
                              tensor_address(bag_size),
                              tensor_address(max_idx),
                              dt(weight.scalar_type()),
                              dt(it),
                              mode,
                              int64_t((psw ? 1 : 0) | (include_last_offset ? 2 : 0)),
                              noffs,
                              nidx,
                              weight.size(0),
                              dim,
                              weight.stride(0),
                              weight.stride(1),
                              out.stride(0),
                              padding_idx};
  launch_checked("embedding_bag", grid_for(nbags * std::max<int64_t>(dim, 1), 2048), args, [&] {
    const Tensor ho = offs.cpu().to(at::kLong);
    const int64_t* p = ho.data_ptr<int64_t>();
    for (int64_t b = 0; b < nbags; ++b) {
      const int64_t s = p[b], e = b + 1 < noffs ? p[b + 1] : nidx;
      if (s < 0 || s > e || e > nidx) {
        return c10::str("embedding_bag: offsets[", b, "] = ", s, " and the bag's end ", e,
                        " do not describe a range of the ", nidx, " indices");
      }
    }
    const Tensor hi = idx.cpu().to(at::kLong);
    const Tensor real = padding_idx >= 0 ? hi.masked_select(hi.ne(padding_idx)) : hi;
    return bad_index_message(real, weight.size(0), 0, false);
  });
  return {out, offset2bag, bag_size, max_idx};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> embedding_bag(
    const Tensor& weight, const Tensor& indices, const Tensor& offsets, bool scale_grad_by_freq,
    int64_t mode, bool sparse, const c10::optional<Tensor>& per_sample_weights,
    bool include_last_offset, int64_t padding_idx) {
  (void)scale_grad_by_freq;
  TORCH_CHECK(!sparse,
              "torch_mtia_emu: embedding_bag with sparse=True (sparse gradients) is not "
              "supported on the mtia device");
  return embedding_bag_impl(weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                            padding_idx);
}

// 1 / count of each position's index among all indices (scale_grad_by_freq).
Tensor inverse_frequency(const Tensor& idx, int64_t num_weights) {
  const int64_t n = idx.numel();
  Tensor counts = at::zeros({num_weights, 1}, idx.options().dtype(at::kFloat));
  Selection s{{idx}, {0}, false, n};
  TORCH_CHECK(put_rows(counts, at::ones({n, 1}, counts.options()), s, 1, {1}, {1},
                       PutOptions{true, {}, {}}));
  Tensor freq = at::empty({n, 1}, counts.options());
  TORCH_CHECK(gather_rows(freq, counts, s, 1, {1}, {1}));
  return at::reciprocal(freq).reshape({n});
}

Tensor embedding_bag_dense_backward(const Tensor& grad, const Tensor& indices,
                                    const Tensor& offset2bag, const Tensor& bag_size,
                                    const Tensor& maximum_indices, c10::SymInt num_weights_s,
                                    bool scale_grad_by_freq, int64_t mode,
                                    const c10::optional<Tensor>& per_sample_weights,
                                    int64_t padding_idx) {
  const int64_t num_weights = num_weights_s.expect_int();
  check_device(grad, "embedding_bag_backward");
  if (!float_kernel(grad.scalar_type())) {
    return run_on_cpu<ATEN_OP(_embedding_bag_dense_backward)>(
        dtype_reason(grad.scalar_type()), grad, indices, offset2bag, bag_size, maximum_indices,
        num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx);
  }
  const int64_t dim = grad.size(1);
  Tensor gw = at::zeros({num_weights, dim}, grad.options());
  const Tensor idx = index_operand(indices, "embedding_bag_backward").reshape({-1});
  const int64_t n = idx.numel();
  if (n == 0 || dim == 0 || num_weights == 0) return gw;
  if (mode == kBagMax) {
    // Each output element came from one row: scatter-add grad into those rows, column by
    // column; empty bags (bag_size 0) contribute nothing.
    const Tensor empty_bag = bag_size.eq(0).unsqueeze(1).expand_as(maximum_indices);
    const Tensor mi =
        at::where(empty_bag, at::zeros({}, maximum_indices.options()), maximum_indices);
    const Tensor g = at::where(empty_bag, at::zeros({}, grad.options()), grad);
    gw.scatter_add_(0, mi, g);
    return gw;
  }
  // Row i of the gradient is grad[offset2bag[i]] times its scale.
  const Tensor o2b = index_operand(offset2bag, "embedding_bag_backward");
  Tensor rows = at::empty({n, dim}, grad.options());
  Selection bags{{o2b}, {0}, false, n};
  TORCH_CHECK(gather_rows(rows, grad.contiguous(), bags, dim, {1}, {1}));
  std::optional<Tensor> scale;
  if (mode == kBagMean) {
    Tensor bs = at::empty({n, 1}, grad.options().dtype(at::kFloat));
    const Tensor bsf = as_dtype(bag_size, at::kFloat).reshape({-1, 1}).contiguous();
    TORCH_CHECK(gather_rows(bs, bsf, bags, 1, {1}, {1}));
    scale = at::reciprocal(bs).reshape({n});
  }
  if (per_sample_weights.has_value() && per_sample_weights->defined()) {
    const Tensor w = as_dtype(*per_sample_weights, at::kFloat).reshape({n});
    scale = scale ? at::mul(*scale, w) : w;
  }
  if (scale_grad_by_freq) {
    const Tensor f = inverse_frequency(idx, num_weights);
    scale = scale ? at::mul(*scale, f) : f;
  }
  PutOptions o;
  o.accumulate = true;
  if (scale) o.scale = scale->contiguous();
  if (padding_idx >= 0) o.skip = padding_idx;
  Selection s{{idx}, {0}, false, n};
  TORCH_CHECK(put_rows(gw, rows, s, dim, {1}, {1}, o));
  return gw;
}

Tensor embedding_bag_backward(const Tensor& grad, const Tensor& indices, const Tensor& offsets,
                              const Tensor& offset2bag, const Tensor& bag_size,
                              const Tensor& maximum_indices, c10::SymInt num_weights,
                              bool scale_grad_by_freq, int64_t mode, bool sparse,
                              const c10::optional<Tensor>& per_sample_weights,
                              int64_t padding_idx) {
  (void)offsets;
  TORCH_CHECK(!sparse,
              "torch_mtia_emu: embedding_bag with sparse=True (sparse gradients) is not "
              "supported on the mtia device");
  return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                      std::move(num_weights), scale_grad_by_freq, mode,
                                      per_sample_weights, padding_idx);
}

Tensor embedding_bag_per_sample_weights_backward(const Tensor& grad, const Tensor& weight,
                                                 const Tensor& indices, const Tensor& offsets,
                                                 const Tensor& offset2bag, int64_t mode,
                                                 int64_t padding_idx) {
  (void)offsets;
  TORCH_CHECK(mode == kBagSum,
              "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  check_device(grad, "embedding_bag_per_sample_weights_backward");
  if (!float_kernel(grad.scalar_type()) || grad.scalar_type() != weight.scalar_type()) {
    return run_on_cpu<ATEN_OP(_embedding_bag_per_sample_weights_backward)>(
        dtype_reason(grad.scalar_type()), grad, weight, indices, offsets, offset2bag, mode,
        padding_idx);
  }
  const Tensor idx = index_operand(indices, "embedding_bag_backward").reshape({-1});
  const int64_t n = idx.numel(), dim = grad.size(1);
  if (n == 0) return at::zeros({0}, grad.options());
  const Tensor o2b = index_operand(offset2bag, "embedding_bag_backward");
  Tensor g = at::empty({n, dim}, grad.options()), w = at::empty({n, dim}, grad.options());
  TORCH_CHECK(gather_rows(g, grad.contiguous(), Selection{{o2b}, {0}, false, n}, dim, {1}, {1}));
  // Padding positions read row 0 (any valid row) and are zeroed below.
  const Tensor safe =
      padding_idx >= 0
          ? at::where(idx.eq(padding_idx), at::zeros({}, idx.options()), idx).contiguous()
          : idx;
  TORCH_CHECK(gather_rows(w, weight, Selection{{safe}, {0}, false, n}, dim, {1}, {1}));
  Tensor r = at::sum(at::mul(as_dtype(g, at::kFloat), as_dtype(w, at::kFloat)), {1});
  if (padding_idx >= 0) r = at::where(idx.eq(padding_idx), at::zeros({}, r.options()), r);
  return as_dtype(r, grad.scalar_type());
}

// --- advanced indexing ----------------------------------------------------------------------

// The layout of self[indices]: the defined indices (bool masks expanded into long ones),
// broadcast; where the result's index dims go.
struct AdvIndex {
  Selection s;
  std::vector<int64_t> index_shape;
  std::vector<int64_t> before, after;  // self's unindexed dims before/after the indexed ones
  bool adjacent = true;
  std::vector<int64_t> result_shape;
};

std::optional<AdvIndex> plan_index(const Tensor& self,
                                   const c10::List<c10::optional<Tensor>>& indices) {
  std::vector<Tensor> defined;
  std::vector<int64_t> dims;
  // Masks become long indices (nonzero, on the device); every index is checked for dtype.
  int64_t d = 0;
  for (const c10::optional<Tensor>& o : indices) {
    if (!o.has_value() || !o->defined()) {
      ++d;
      continue;
    }
    const Tensor& t = *o;
    if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) {
      for (int64_t j = 0; j < t.dim(); ++j) {
        TORCH_CHECK_INDEX(d + j < self.dim() && t.size(j) == self.size(d + j),
                          "The shape of the mask ", t.sizes(), " at index ", j,
                          " does not match the shape of the indexed tensor ", self.sizes(),
                          " at index ", d + j);
      }
      const Tensor nz = at::nonzero(t.scalar_type() == at::kByte ? t.to(at::kBool) : t);
      for (int64_t j = 0; j < t.dim(); ++j) {
        defined.push_back(nz.select(1, j));
        dims.push_back(d + j);
      }
      d += t.dim();
    } else {
      TORCH_CHECK_INDEX(at::isIntegralType(t.scalar_type(), false),
                        "tensors used as indices must be long, int, byte or bool tensors");
      defined.push_back(t);
      dims.push_back(d);
      ++d;
    }
  }
  TORCH_CHECK_INDEX(d <= std::max<int64_t>(self.dim(), 0),
                    "too many indices for tensor of dimension ", self.dim(), " (got ", d, ")");
  if (defined.empty() || defined.size() > 4) return std::nullopt;
  AdvIndex a;
  std::vector<Tensor> b = at::expand_outplace(defined);
  a.index_shape = b[0].sizes().vec();
  a.s.n = b[0].numel();
  a.s.wrap = true;
  for (size_t k = 0; k < b.size(); ++k) {
    a.s.idx.push_back(index_operand(b[k], "index"));
    a.s.dim.push_back(dims[k]);
  }
  // The index's dtypes must agree for the kernel: int64 unless all are int32.
  bool all32 = true;
  for (const Tensor& t : a.s.idx) all32 = all32 && t.scalar_type() == at::kInt;
  if (!all32) {
    for (Tensor& t : a.s.idx) t = as_dtype(t, at::kLong).contiguous();
  }
  for (size_t k = 1; k < dims.size(); ++k) a.adjacent = a.adjacent && dims[k] == dims[k - 1] + 1;
  for (int64_t j = 0; j < self.dim(); ++j) {
    if (std::find(dims.begin(), dims.end(), j) != dims.end()) continue;
    (j < dims.front() ? a.before : a.after).push_back(j);
  }
  if (a.adjacent) {
    for (int64_t j : a.before) a.result_shape.push_back(self.size(j));
    a.result_shape.insert(a.result_shape.end(), a.index_shape.begin(), a.index_shape.end());
    for (int64_t j : a.after) a.result_shape.push_back(self.size(j));
  } else {
    a.result_shape = a.index_shape;
    for (int64_t j : a.before) a.result_shape.push_back(self.size(j));
    for (int64_t j : a.after) a.result_shape.push_back(self.size(j));
  }
  return a;
}

// Where the box dims and the position stride lie in a contiguous result of a.result_shape.
void result_layout(const AdvIndex& a, const Tensor& res, int64_t* p_stride,
                   std::vector<int64_t>* self_box, std::vector<int64_t>* res_box) {
  const int64_t ni = int64_t(a.index_shape.size());
  const int64_t first_index = a.adjacent ? int64_t(a.before.size()) : 0;
  *p_stride = ni > 0 ? res.stride(first_index + ni - 1) : 0;
  int64_t r = a.adjacent ? 0 : ni;
  for (int64_t j : a.before) {
    self_box->push_back(j);
    res_box->push_back(r++);
  }
  if (a.adjacent) r += ni;
  for (int64_t j : a.after) {
    self_box->push_back(j);
    res_box->push_back(r++);
  }
}

Tensor index_tensor(const Tensor& self, const c10::List<c10::optional<Tensor>>& indices) {
  check_device(self, "index");
  const auto plan = kernel_supports(self.scalar_type()) ? plan_index(self, indices) : std::nullopt;
  if (!plan) {
    return run_on_cpu<ATEN_OP2(index, Tensor)>(kernel_supports(self.scalar_type())
                                                   ? std::string("more than 4 index tensors")
                                                   : dtype_reason(self.scalar_type()),
                                               self, indices);
  }
  Tensor out = at::empty(plan->result_shape, self.options());
  int64_t ps = 0;
  std::vector<int64_t> sb, rb;
  result_layout(*plan, out, &ps, &sb, &rb);
  if (out.numel() == 0) {
    if (plan->s.n > 0) {  // the indices still have to be valid
      for (size_t k = 0; k < plan->s.idx.size(); ++k) {
        TORCH_CHECK_INDEX(self.size(plan->s.dim[k]) > 0,
                          bad_index_message(plan->s.idx[k], 0, plan->s.dim[k], true));
      }
    }
    return out;
  }
  if (!gather_rows(out, self, plan->s, ps, sb, rb)) {
    TORCH_CHECK(gather_rows(out, self.contiguous(), plan->s, ps, sb, rb),
                "torch_mtia_emu: index: the unindexed dimensions do not fold into 3");
  }
  return out;
}

Tensor& index_tensor_out(const Tensor& self, const c10::List<c10::optional<Tensor>>& indices,
                         Tensor& out) {
  const Tensor r = index_tensor(self, indices);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

Tensor& index_put_impl_(Tensor& self, const c10::List<c10::optional<Tensor>>& indices,
                        const Tensor& values, bool accumulate, bool unsafe) {
  check_device(self, "index_put_");
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", values.scalar_type(),
              " for the source.");
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN(
        "Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor "
        "before performing this operation. This also applies to advanced indexing e.g. "
        "tensor[indices] = tensor");
  }
  const bool ok_dtype =
      kernel_supports(self.scalar_type()) && !(accumulate && self.scalar_type() == at::kBool);
  const auto plan = ok_dtype ? plan_index(self, indices) : std::nullopt;
  if (!plan) {
    return run_on_cpu<ATEN_OP(_index_put_impl_)>(
        ok_dtype ? std::string("more than 4 index tensors") : dtype_reason(self.scalar_type()),
        self, indices, values, accumulate, unsafe);
  }
  Tensor v = values.device().type() == kDeviceType ? values : values.to(self.device());
  TORCH_CHECK(at::is_expandable_to(v.sizes(), plan->result_shape),
              "shape mismatch: value tensor of shape ", v.sizes(),
              " cannot be broadcast to indexing result of shape ",
              at::IntArrayRef(plan->result_shape));
  const Tensor src = v.expand(plan->result_shape).contiguous();
  int64_t ps = 0;
  std::vector<int64_t> sb, rb;
  result_layout(*plan, src, &ps, &sb, &rb);
  PutOptions o;
  o.accumulate = accumulate;
  if (!put_rows(self, src, plan->s, ps, sb, rb, o)) {
    Tensor tmp = self.contiguous();
    TORCH_CHECK(put_rows(tmp, src, plan->s, ps, sb, rb, o),
                "torch_mtia_emu: index_put_: the unindexed dimensions do not fold into 3");
    self.copy_(tmp);
  }
  return self;
}

// --- index_add --------------------------------------------------------------------------------

Tensor& index_add_out(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                      const c10::Scalar& alpha, Tensor& out) {
  OutOf<at::meta::structured_index_add> m(out);
  const auto pre = m.meta(self, dim, index, source, alpha);
  dim = pre.dim;
  if (!kernel_supports(self.scalar_type()) || self.scalar_type() == at::kBool) {
    return run_on_cpu<ATEN_OP2(index_add, out)>(dtype_reason(self.scalar_type()), self, dim, index,
                                                source, alpha, out);
  }
  if (!out.is_same(self)) out.copy_(self);
  if (index.numel() == 0 || out.numel() == 0) return out;
  Tensor src = source;
  if (!(alpha.isIntegral(false) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0)) {
    src = at::mul(source, alpha);
  }
  const Tensor o = out.dim() == 0 ? out.reshape({1}) : out;
  const Tensor sv = src.dim() == 0 ? src.reshape({1}) : src;
  const Tensor idx = index_operand(index, "index_add").reshape({-1});
  std::vector<int64_t> box;
  for (int64_t d = 0; d < o.dim(); ++d) {
    if (d != dim) box.push_back(d);
  }
  PutOptions opt;
  opt.accumulate = true;
  Selection s{{idx}, {dim}, false, idx.numel()};
  const Tensor svc = put_rows(o, sv, s, sv.stride(dim), box, box, opt) ? Tensor() : sv.contiguous();
  if (svc.defined()) {
    Tensor tmp = o.contiguous();
    TORCH_CHECK(put_rows(tmp, svc, s, svc.stride(dim), box, box, opt));
    o.copy_(tmp);
  }
  return out;
}

// --- gather, scatter, scatter_add -------------------------------------------------------------

// t with `dim` moved last and padded to 4 dims with leading size-1 dims (nullopt above 4).
std::optional<std::pair<std::array<int64_t, 4>, std::array<int64_t, 4>>> lines4(const Tensor& t,
                                                                                int64_t dim) {
  const int64_t r = std::max<int64_t>(t.dim(), 1);
  if (r > 4) return std::nullopt;
  std::array<int64_t, 4> size{1, 1, 1, 1}, st{0, 0, 0, 0};
  if (t.dim() == 0) return std::make_pair(size, std::array<int64_t, 4>{0, 0, 0, 1});
  int64_t slot = 4 - r;
  for (int64_t d = 0; d < r; ++d) {
    if (d == dim) continue;
    size[size_t(slot)] = t.size(d);
    st[size_t(slot)] = t.stride(d);
    ++slot;
  }
  size[3] = t.size(dim);
  st[3] = t.stride(dim);
  return std::make_pair(size, st);
}

void push4(std::vector<mtia::Arg>& args, const std::array<int64_t, 4>& v) {
  for (int64_t x : v) args.emplace_back(x);
}

std::string explain_lines(const Tensor& index, int64_t size, int64_t dim) {
  return bad_index_message(index, size, dim, false);
}

Tensor& gather_out(const Tensor& self, int64_t dim, const Tensor& index, bool sparse_grad,
                   Tensor& out) {
  OutOf<at::meta::structured_gather> m(out);
  m.meta(self, dim, index, sparse_grad);
  dim = at::maybe_wrap_dim(dim, self.dim());
  const auto li = lines4(index, dim), ls = lines4(self, dim), lo = lines4(out, dim);
  if (!kernel_supports(self.scalar_type()) || !li) {
    return run_on_cpu<ATEN_OP2(gather, out)>(
        li ? dtype_reason(self.scalar_type()) : std::string("more than 4 dimensions"), self, dim,
        index, sparse_grad, out);
  }
  if (index.numel() == 0) return out;
  const Tensor idx = index_operand(index, "gather");
  const auto lidx = lines4(idx, dim);
  std::vector<mtia::Arg> args{tensor_address(out), tensor_address(self), tensor_address(idx),
                              dt(self.scalar_type()), dt(idx.scalar_type())};
  push4(args, li->first);
  args.emplace_back(self.dim() == 0 ? int64_t(1) : self.size(dim));
  push4(args, lo->second);
  push4(args, ls->second);
  push4(args, lidx->second);
  launch_checked("gather_lines", grid_for(index.numel(), 4096), args,
                 [&] { return explain_lines(idx, self.dim() == 0 ? 1 : self.size(dim), dim); });
  return out;
}

// scatter/scatter_add into out (already holding self): mode 0 assign, 1 add.
void scatter_into(const char* op, Tensor& out, int64_t dim, const Tensor& index, const Tensor* src,
                  const c10::Scalar* value, int64_t mode) {
  if (index.numel() == 0) return;
  const Tensor idx = index_operand(index, op);
  const auto li = lines4(idx, dim), lo = lines4(out, dim);
  std::array<int64_t, 4> sst{0, 0, 0, 0};
  if (src != nullptr) sst = lines4(*src, dim)->second;
  std::vector<mtia::Arg> args{
      tensor_address(out),
      src != nullptr ? tensor_address(*src) : tensor_address(out),
      tensor_address(idx),
      dt(out.scalar_type()),
      dt(idx.scalar_type()),
      mode,
      int64_t(src != nullptr ? 0 : 1),
      int64_t(value != nullptr ? scalar_bits(*value, out.scalar_type()) : 0)};
  push4(args, li->first);
  args.emplace_back(out.dim() == 0 ? int64_t(1) : out.size(dim));
  push4(args, lo->second);
  push4(args, sst);
  push4(args, li->second);
  launch_checked("scatter_lines", grid_for(index.numel(), 4096), args,
                 [&] { return explain_lines(idx, out.dim() == 0 ? 1 : out.size(dim), dim); });
}

// Scatter lines are kept whole in a PE's local store: longer destination lines take the CPU.
bool scatter_fits(const Tensor& out, int64_t dim) {
  const int64_t len = out.dim() == 0 ? 1 : out.size(dim);
  const int64_t per = int64_t(out.element_size()) + (is_kernel_float(out.scalar_type()) ? 4 : 8);
  return len * per <= 48 * 1024;
}

std::optional<std::string> scatter_reason(const Tensor& self, const Tensor& out, int64_t dim,
                                          bool add) {
  if (!kernel_supports(self.scalar_type())) return dtype_reason(self.scalar_type());
  if (add && self.scalar_type() == at::kBool) return dtype_reason(self.scalar_type());
  if (self.dim() > 4) return std::string("more than 4 dimensions");
  if (!scatter_fits(out, dim)) return std::string("a destination line longer than the local store");
  return std::nullopt;
}

Tensor& scatter_src_out(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        Tensor& out) {
  OutOf<at::meta::structured_scatter_src> m(out);
  m.meta(self, dim, index, src);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (auto why = scatter_reason(self, out, dim, false)) {
    return run_on_cpu<ATEN_OP2(scatter, src_out)>(*why, self, dim, index, src, out);
  }
  if (!out.is_same(self)) out.copy_(self);
  scatter_into("scatter", out, dim, index, &src, nullptr, 0);
  return out;
}

Tensor& scatter_value_out(const Tensor& self, int64_t dim, const Tensor& index,
                          const c10::Scalar& value, Tensor& out) {
  OutOf<at::meta::structured_scatter_value> m(out);
  m.meta(self, dim, index, value);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (auto why = scatter_reason(self, out, dim, false)) {
    return run_on_cpu<ATEN_OP2(scatter, value_out)>(*why, self, dim, index, value, out);
  }
  if (!out.is_same(self)) out.copy_(self);
  scatter_into("scatter", out, dim, index, nullptr, &value, 0);
  return out;
}

Tensor& scatter_add_out(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        Tensor& out) {
  OutOf<at::meta::structured_scatter_add> m(out);
  m.meta(self, dim, index, src);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (auto why = scatter_reason(self, out, dim, true)) {
    return run_on_cpu<ATEN_OP2(scatter_add, out)>(*why, self, dim, index, src, out);
  }
  if (!out.is_same(self)) out.copy_(self);
  scatter_into("scatter_add", out, dim, index, &src, nullptr, 1);
  return out;
}

// --- masked_fill, masked_select, masked_scatter_, nonzero ---------------------------------------

Tensor& masked_fill_impl(Tensor& self, const Tensor& mask, const Tensor& value_dev) {
  launch_where(self, mask, value_dev, self);
  return self;
}

void check_mask(const Tensor& self, const Tensor& mask, const char* op) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, op,
              " only supports boolean masks, but got mask with dtype ", mask.scalar_type());
  TORCH_CHECK(at::is_expandable_to(mask.sizes(), self.sizes()), "The size of the mask ",
              mask.sizes(), " must be broadcastable to the size of the tensor ", self.sizes());
  check_device(mask, op);
}

Tensor& masked_fill_scalar(Tensor& self, const Tensor& mask, const c10::Scalar& value) {
  check_device(self, "masked_fill_");
  check_mask(self, mask, "masked_fill_");
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(masked_fill_, Scalar)>(dtype_reason(self.scalar_type()), self, mask,
                                                      value);
  }
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  return masked_fill_impl(self, mask, device_scalar(value, self.scalar_type()));
}

Tensor& masked_fill_tensor(Tensor& self, const Tensor& mask, const Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  check_device(self, "masked_fill_");
  check_mask(self, mask, "masked_fill_");
  if (!kernel_supports(self.scalar_type()) || !kernel_supports(value.scalar_type())) {
    return run_on_cpu<ATEN_OP2(masked_fill_, Tensor)>(dtype_reason(self.scalar_type()), self, mask,
                                                      value);
  }
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  Tensor v;
  if (value.device().type() == kDeviceType) {
    v = as_dtype(value, self.scalar_type());
  } else {
    v = device_scalar(value.item(), self.scalar_type());
  }
  return masked_fill_impl(self, mask, v);
}

// Rows of a <= 4-D view of `t` (padded with leading size-1 dims).
std::array<int64_t, 4> pad4(at::IntArrayRef v, int64_t fill) {
  std::array<int64_t, 4> r{fill, fill, fill, fill};
  for (size_t i = 0; i < v.size(); ++i) r[4 - v.size() + i] = v[i];
  return r;
}

// Compaction over the broadcast (<= 4-D) `mask`: each row's first output position from a
// device count of the row, then the `compact` kernel. Returns the number selected.
int64_t compact_into(Tensor* out, const Tensor& mask, const Tensor* src, int64_t ndim,
                     at::ScalarType out_dtype, int64_t out_cols) {
  const auto size = pad4(mask.sizes(), 1);
  const auto mst = pad4(mask.strides(), 0);
  const int64_t rows = size[0] * size[1] * size[2];
  // Per-row counts (device sum), their running sum (device cumsum); the total is read back.
  const Tensor m4 =
      mask.as_strided({size[0], size[1], size[2], size[3]}, {mst[0], mst[1], mst[2], mst[3]});
  const Tensor counts = at::sum(m4, {3}, false, at::kLong).reshape({rows});
  const Tensor ends = at::cumsum(counts, 0);
  const int64_t total = ends[rows - 1].item<int64_t>();
  *out =
      at::empty(out_cols >= 0 ? std::vector<int64_t>{total, out_cols} : std::vector<int64_t>{total},
                mask.options().dtype(out_dtype));
  if (total == 0) return 0;
  const Tensor starts = at::sub(ends, counts).contiguous();
  std::vector<mtia::Arg> args{tensor_address(*out),
                              src != nullptr ? tensor_address(*src) : tensor_address(mask),
                              tensor_address(mask),
                              tensor_address(starts),
                              dt(src != nullptr ? src->scalar_type() : at::kLong),
                              int64_t(src != nullptr ? 0 : 1),
                              ndim};
  push4(args, size);
  push4(args, src != nullptr ? pad4(src->strides(), 0) : std::array<int64_t, 4>{0, 0, 0, 0});
  push4(args, mst);
  launch("compact", grid_for(mask.numel(), 16384), args);
  return total;
}

Tensor masked_select_dev(const Tensor& self, const Tensor& mask) {
  check_device(self, "masked_select");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask, got ",
              mask.scalar_type());
  check_device(mask, "masked_select");
  auto [s, m] = at::expand_outplace(self, mask);
  if (!kernel_supports(self.scalar_type()) || s->dim() > 4) {
    return run_on_cpu<ATEN_OP(masked_select)>(kernel_supports(self.scalar_type())
                                                  ? std::string("more than 4 dimensions")
                                                  : dtype_reason(self.scalar_type()),
                                              self, mask);
  }
  if (s->numel() == 0) return at::empty({0}, self.options());
  const Tensor ms = s->dim() == 0 ? m->reshape({1}) : *m;
  const Tensor ss = s->dim() == 0 ? s->reshape({1}) : *s;
  Tensor out;
  compact_into(&out, ms, &ss, 0, self.scalar_type(), -1);
  return out;
}

Tensor& masked_select_out(const Tensor& self, const Tensor& mask, Tensor& out) {
  const Tensor r = masked_select_dev(self, mask);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

Tensor nonzero_dev(const Tensor& self) {
  check_device(self, "nonzero");
  if (!kernel_supports(self.scalar_type()) || self.dim() > 4) {
    return run_on_cpu<ATEN_OP(nonzero)>(kernel_supports(self.scalar_type())
                                            ? std::string("more than 4 dimensions")
                                            : dtype_reason(self.scalar_type()),
                                        self);
  }
  const int64_t nd = self.dim();
  if (self.numel() == 0) return at::empty({0, nd}, self.options().dtype(at::kLong));
  const Tensor t = nd == 0 ? self.reshape({1}) : self;
  const Tensor mask = self.scalar_type() == at::kBool ? t : at::ne(t, 0);
  Tensor out;
  compact_into(&out, mask, nullptr, nd, at::kLong, nd);
  return out;
}

Tensor& nonzero_out(const Tensor& self, Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  const Tensor r = nonzero_dev(self);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

Tensor& masked_scatter_(Tensor& self, const Tensor& mask, const Tensor& source) {
  check_device(self, "masked_scatter_");
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got",
              self.scalar_type(), " and ", source.scalar_type());
  if (!kernel_supports(self.scalar_type()) || self.dim() > 4) {
    return run_on_cpu<ATEN_OP(masked_scatter_)>(dtype_reason(self.scalar_type()), self, mask,
                                                source);
  }
  if (self.numel() == 0) return self;
  const Tensor m = mask.expand(self.sizes());
  const Tensor pos = nonzero_dev(m);
  const int64_t n = pos.size(0);
  TORCH_CHECK(n <= source.numel(), "masked_scatter: expected source to have at least ", n,
              " elements, got ", source.numel());
  if (n == 0) return self;
  c10::List<c10::optional<Tensor>> idx;
  const Tensor src = source.reshape({-1}).narrow(0, 0, n);
  if (self.dim() == 0) {
    self.copy_(src.reshape({}));
    return self;
  }
  for (int64_t d = 0; d < self.dim(); ++d) idx.push_back(pos.select(1, d));
  return index_put_impl_(self, idx, src, false, false);
}

// --- cumsum, triu, tril ------------------------------------------------------------------------

Tensor& cumsum_out(const Tensor& self, int64_t dim, c10::optional<at::ScalarType> dtype,
                   Tensor& out) {
  OutOf<at::meta::structured_cumsum> m(out);
  m.meta(self, dim, dtype);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (!kernel_supports(self.scalar_type()) || !kernel_supports(out.scalar_type()) ||
      out.scalar_type() == at::kBool) {
    return run_on_cpu<ATEN_OP2(cumsum, out)>(
        dtype_reason(kernel_supports(self.scalar_type()) ? out.scalar_type() : self.scalar_type()),
        self, dim, dtype, out);
  }
  if (self.numel() == 0) return out;
  // [outer, len, inner] views: the dims before `dim` fold into outer when both tensors allow,
  // else one launch per outer index (loop below).
  const Tensor in = self.dim() == 0 ? self.reshape({1}) : self;
  Tensor o = out.dim() == 0 ? out.reshape({1}) : out;
  const Tensor inc = in.contiguous();
  const bool direct = o.is_contiguous();
  const Tensor res = direct ? o : at::empty(in.sizes(), out.options());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  const int64_t len = in.size(dim);
  std::vector<mtia::Arg> args{tensor_address(res),
                              tensor_address(inc),
                              dt(in.scalar_type()),
                              dt(out.scalar_type()),
                              outer,
                              len,
                              inner};
  for (int k = 0; k < 2; ++k) {
    args.emplace_back(len * inner);
    args.emplace_back(inner);
    args.emplace_back(int64_t(1));
  }
  launch("cumsum", grid_for(outer * inner * 64, 16384), args);
  if (!direct) o.copy_(res);
  return out;
}

Tensor& tri_out(bool lower, const Tensor& self, int64_t k, Tensor& out) {
  const int64_t r = self.dim();
  const int64_t rows = self.size(r - 2), cols = self.size(r - 1);
  if (self.numel() == 0) return out;
  // Leading dims: one batch dim per launch after folding what folds.
  const Tensor in = self, o = out;
  const int64_t batch = self.numel() / std::max<int64_t>(rows * cols, 1);
  auto folds = [&](const Tensor& t) {
    int64_t expect = t.stride(r - 3 >= 0 ? r - 3 : 0);
    for (int64_t d = r - 3; d >= 0; --d) {
      if (t.size(d) == 1) continue;
      if (t.stride(d) != expect) return false;
      expect = t.stride(d) * t.size(d);
    }
    return true;
  };
  if (r > 3 && !(folds(in) && folds(o))) {
    for (int64_t b = 0; b < self.size(0); ++b) {
      Tensor ob = out.select(0, b);
      tri_out(lower, self.select(0, b), k, ob);
    }
    return out;
  }
  const int64_t ibs = r >= 3 ? in.stride(r - 3) : 0, obs = r >= 3 ? o.stride(r - 3) : 0;
  launch("tri", grid_for(batch * rows * cols, 16384),
         {tensor_address(o), tensor_address(in), dt(self.scalar_type()), int64_t(lower ? 1 : 0), k,
          batch, rows, cols, ibs, in.stride(r - 2), in.stride(r - 1), obs, o.stride(r - 2),
          o.stride(r - 1)});
  return out;
}

Tensor& triu_out(const Tensor& self, int64_t diagonal, Tensor& out) {
  OutOf<at::meta::structured_triu> m(out);
  m.meta(self, diagonal);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(triu, out)>(dtype_reason(self.scalar_type()), self, diagonal, out);
  }
  return tri_out(false, self, diagonal, out);
}

Tensor& tril_out(const Tensor& self, int64_t diagonal, Tensor& out) {
  OutOf<at::meta::structured_tril> m(out);
  m.meta(self, diagonal);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(tril, out)>(dtype_reason(self.scalar_type()), self, diagonal, out);
  }
  return tri_out(true, self, diagonal, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("index_select", MTIA_FN(index_select_dev));
  m.impl("index_select.out", MTIA_FN(index_select_out));
  m.impl("flip", MTIA_FN(flip_dev));
  m.impl("flip.out", MTIA_FN(flip_out));
  m.impl("embedding_dense_backward", MTIA_FN(embedding_dense_backward));
  m.impl("_embedding_bag", MTIA_FN(embedding_bag));
  m.impl("_embedding_bag_forward_only", MTIA_FN(embedding_bag));
  m.impl("_embedding_bag_backward", MTIA_FN(embedding_bag_backward));
  m.impl("_embedding_bag_dense_backward", MTIA_FN(embedding_bag_dense_backward));
  m.impl("_embedding_bag_per_sample_weights_backward",
         MTIA_FN(embedding_bag_per_sample_weights_backward));
  m.impl("index.Tensor", MTIA_FN(index_tensor));
  m.impl("index.Tensor_out", MTIA_FN(index_tensor_out));
  m.impl("_index_put_impl_", MTIA_FN(index_put_impl_));
  m.impl("index_add.out", MTIA_FN(index_add_out));
  m.impl("gather.out", MTIA_FN(gather_out));
  m.impl("scatter.src_out", MTIA_FN(scatter_src_out));
  m.impl("scatter.value_out", MTIA_FN(scatter_value_out));
  m.impl("scatter_add.out", MTIA_FN(scatter_add_out));
  m.impl("masked_fill_.Scalar", MTIA_FN(masked_fill_scalar));
  m.impl("masked_fill_.Tensor", MTIA_FN(masked_fill_tensor));
  m.impl("masked_select", MTIA_FN(masked_select_dev));
  m.impl("masked_select.out", MTIA_FN(masked_select_out));
  m.impl("masked_scatter_", MTIA_FN(masked_scatter_));
  m.impl("nonzero", MTIA_FN(nonzero_dev));
  m.impl("nonzero.out", MTIA_FN(nonzero_out));
  m.impl("cumsum.out", MTIA_FN(cumsum_out));
  m.impl("triu.out", MTIA_FN(triu_out));
  m.impl("tril.out", MTIA_FN(tril_out));
}

}  // namespace mtia::torch_backend
