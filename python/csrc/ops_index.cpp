// Embeddings and indexing on the device (kernels/lib/index.c): index_select and flip,
// embedding's backward, embedding_bag forward and backward, advanced indexing (index,
// index_put_) and index_add. Out-of-range indices are IndexErrors at the call
// (index_checks.h). gather and scatter are in ops_gather_scatter.cpp, the masked ops in
// ops_masked.cpp.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/index_add_meta.h>
#include <torch/library.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "index_checks.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

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
  args.emplace_back(dtype_arg(src.scalar_type()));
  args.emplace_back(dtype_arg(s.idx[0].scalar_type()));
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
  args.emplace_back(dtype_arg(dst.scalar_type()));
  args.emplace_back(dtype_arg(s.idx[0].scalar_type()));
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
                              dtype_arg(weight.scalar_type()),
                              dtype_arg(it),
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

}  // namespace

#define MTIA_OPS_index
#include "register_ops.inc"

}  // namespace mtia::torch_backend
