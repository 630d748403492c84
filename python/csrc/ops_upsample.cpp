// Upsampling on the upsample and upsample_backward kernels (kernels/lib/upsample.c): nearest,
// nearest-exact and linear (linear1d, bilinear2d, trilinear3d), 1-D to 3-D, forward and
// backward, for any input layout (channels_last included). PyTorch's meta functions check the
// arguments and size the outputs; the host computes each axis's ratio as PyTorch defines it
// (area_pixel_compute_scale for linear, compute_scales_value for nearest) in float32 and the
// kernels derive every source position and weight from it on the device.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_upsample_nearest_exact1d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact1d_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_meta.h>
#include <ATen/ops/_upsample_nearest_exact3d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact3d_meta.h>
#include <ATen/ops/upsample_bilinear2d_backward_meta.h>
#include <ATen/ops/upsample_bilinear2d_meta.h>
#include <ATen/ops/upsample_linear1d_backward_meta.h>
#include <ATen/ops/upsample_linear1d_meta.h>
#include <ATen/ops/upsample_nearest1d_backward_meta.h>
#include <ATen/ops/upsample_nearest1d_meta.h>
#include <ATen/ops/upsample_nearest2d_backward_meta.h>
#include <ATen/ops/upsample_nearest2d_meta.h>
#include <ATen/ops/upsample_nearest3d_backward_meta.h>
#include <ATen/ops/upsample_nearest3d_meta.h>
#include <ATen/ops/upsample_trilinear3d_backward_meta.h>
#include <ATen/ops/upsample_trilinear3d_meta.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;
using Scales = std::array<std::optional<double>, 3>;  // depth, height, width

// Kernel modes (kernels/lib/upsample.c).
constexpr int64_t kNearest = 1, kNearestExact = 2, kLinear = 3;
constexpr int64_t kAlignCorners = 1, kShortcuts = 2;
constexpr int64_t kMaxExtent = int64_t{1} << 24;

// PyTorch's ratio of input to output positions when no alignment is asked: 1 / scale when a
// positive scale was given, else in / out; float32 as PyTorch computes it.
float scale_ratio(int64_t in, int64_t out, std::optional<double> scale) {
  if (scale.has_value() && *scale > 0.) return static_cast<float>(1.0 / *scale);
  return static_cast<float>(in) / static_cast<float>(out);
}

// The ratio of the linear modes: with align_corners the corner pixels' centres line up.
float linear_ratio(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) {
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  }
  return scale_ratio(in, out, scale);
}

// A tensor of 2 + dims dimensions as [N, C, D, H, W] (missing spatial dims of extent 1).
struct View5 {
  std::array<int64_t, 5> size{1, 1, 1, 1, 1}, stride{0, 0, 0, 0, 0};
};
View5 view5(const Tensor& t) {
  View5 v;
  const int64_t off = 5 - t.dim();
  v.size[0] = t.size(0);
  v.size[1] = t.size(1);
  v.stride[0] = t.stride(0);
  v.stride[1] = t.stride(1);
  for (int64_t d = 2; d < t.dim(); ++d) {
    v.size[size_t(d + off)] = t.size(d);
    v.stride[size_t(d + off)] = t.stride(d);
  }
  return v;
}

// Whether one launch's tables and one row of each side fit a PE's local store (the kernel's
// own budget, with room to spare); otherwise the op takes the CPU fallback.
bool fits_local_store(bool backward, int64_t mode, int dims, const View5& in, const View5& out,
                      unsigned es) {
  const bool linear = mode == kLinear;
  uint64_t need = 8192 + 4096;
  uint64_t scratch = 0;
  for (int a = 0; a < 3; ++a) {
    const uint64_t I = uint64_t(in.size[size_t(a + 2)]), O = uint64_t(out.size[size_t(a + 2)]);
    if (I >= uint64_t(kMaxExtent) || O >= uint64_t(kMaxExtent)) return false;
    const bool real = a >= 3 - dims;
    const uint64_t corners = (linear && real) ? 2 : 1;
    need += corners * (O * 8 + (linear ? O * 4 : 0) + (backward ? (I + 1) * 8 : 0) + 3 * 64);
    scratch = std::max(scratch, O * 8 + 128);
  }
  need += scratch;
  const uint64_t W = uint64_t(in.size[4]), OW = uint64_t(out.size[4]);
  if (backward) {
    need += W * (4 + es) + OW * (es + 20) + 64 + 10 * 64;
  } else {
    // The rows, and the width gathers' boxes (at most 20 bytes per output column and corner).
    need += W * es + OW * (linear ? 2 * es + 24 : es) + 64 + 12 * 64;
    need += (linear ? 2 : 1) * (OW * 20 + 64) + OW + 64;
  }
  return need <= Runtime::get().device().properties().local_store_bytes;
}

struct Plan {
  int64_t mode;
  bool align_corners;
  int dims;
  Scales scales;
};

// The kernel's flags. PyTorch 2.13's CPU kernels map equal and doubled extents of nearest
// upsampling without arithmetic in the 2-D forward and in every backward, but not in the 1-D
// and 3-D forward (a scale given with such sizes then picks other elements).
int64_t plan_flags(bool backward, const Plan& p) {
  if (p.mode == kLinear) return p.align_corners ? kAlignCorners : 0;
  if (p.mode == kNearest && (backward || p.dims == 2)) return kShortcuts;
  return 0;
}

// Why an upsampling runs on the CPU, or nullopt when the kernels take it. `in`/`out` are the
// pooled input and output (forward) or grad_input and grad_output (backward).
std::optional<std::string> refuse(bool backward, const Plan& p, const Tensor& in,
                                  const Tensor& out) {
  if (!is_kernel_float(in.scalar_type()) || in.scalar_type() != out.scalar_type()) {
    return dtype_reason(in.scalar_type());
  }
  if (!fits_local_store(backward, p.mode, p.dims, view5(in), view5(out),
                        unsigned(c10::elementSize(in.scalar_type())))) {
    return std::string("rows too wide for a PE's local store");
  }
  return std::nullopt;
}

// Launches upsample (`dst` the output, `src` the input) or upsample_backward (`dst` grad_input,
// `src` grad_output). The input side's sizes come from `in`, the output side's from `out`.
void launch_upsample(bool backward, const Plan& p, const Tensor& dst, const Tensor& src,
                     const Tensor& in, const Tensor& out) {
  if (backward && out.numel() == 0) {
    if (dst.numel() > 0) launch_fill(dst, scalar_bits(0, dst.scalar_type()));
    return;
  }
  if (dst.numel() == 0) return;
  const View5 iv = view5(in), ov = view5(out), dv = view5(dst), sv = view5(src);
  std::array<float, 3> ratio{0.f, 0.f, 0.f};
  for (int a = 0; a < 3; ++a) {
    if (a < 3 - p.dims) continue;
    const int64_t I = iv.size[size_t(a + 2)], O = ov.size[size_t(a + 2)];
    ratio[size_t(a)] = p.mode == kLinear ? linear_ratio(I, O, p.align_corners, p.scales[size_t(a)])
                                         : scale_ratio(I, O, p.scales[size_t(a)]);
  }
  std::vector<mtia::Arg> args{tensor_address(dst),
                              tensor_address(src),
                              dtype_arg(dst.scalar_type()),
                              p.mode,
                              plan_flags(backward, p),
                              int64_t{p.dims},
                              iv.size[0],
                              iv.size[1],
                              iv.size[2],
                              iv.size[3],
                              iv.size[4],
                              ov.size[2],
                              ov.size[3],
                              ov.size[4],
                              ratio[0],
                              ratio[1],
                              ratio[2]};
  for (int64_t s : dv.stride) args.emplace_back(s);
  for (int64_t s : sv.stride) args.emplace_back(s);
  launch(backward ? "upsample_backward" : "upsample", grid_for(dst.numel(), 8192), args);
}

// Forward and backward of each op, by hand: their schemas differ in the scale arguments.

Tensor& nearest1d_out(const Tensor& self, at::IntArrayRef osize, std::optional<double> sw,
                      Tensor& out) {
  check_device(self, "upsample_nearest1d");
  OutOf<at::meta::structured_upsample_nearest1d> m(out);
  m.meta(self, osize, sw);
  const Plan p{kNearest, false, 1, {std::nullopt, std::nullopt, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(upsample_nearest1d, out)>(*why, self, osize, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& nearest2d_out(const Tensor& self, at::IntArrayRef osize, std::optional<double> sh,
                      std::optional<double> sw, Tensor& out) {
  check_device(self, "upsample_nearest2d");
  OutOf<at::meta::structured_upsample_nearest2d> m(out);
  m.meta(self, osize, sh, sw);
  const Plan p{kNearest, false, 2, {std::nullopt, sh, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(upsample_nearest2d, out)>(*why, self, osize, sh, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& nearest3d_out(const Tensor& self, at::IntArrayRef osize, std::optional<double> sd,
                      std::optional<double> sh, std::optional<double> sw, Tensor& out) {
  check_device(self, "upsample_nearest3d");
  OutOf<at::meta::structured_upsample_nearest3d> m(out);
  m.meta(self, osize, sd, sh, sw);
  const Plan p{kNearest, false, 3, {sd, sh, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(upsample_nearest3d, out)>(*why, self, osize, sd, sh, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& nearest_exact1d_out(const Tensor& self, at::IntArrayRef osize, std::optional<double> sw,
                            Tensor& out) {
  check_device(self, "_upsample_nearest_exact1d");
  OutOf<at::meta::structured__upsample_nearest_exact1d> m(out);
  m.meta(self, osize, sw);
  const Plan p{kNearestExact, false, 1, {std::nullopt, std::nullopt, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(_upsample_nearest_exact1d, out)>(*why, self, osize, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& nearest_exact2d_out(const Tensor& self, at::IntArrayRef osize, std::optional<double> sh,
                            std::optional<double> sw, Tensor& out) {
  check_device(self, "_upsample_nearest_exact2d");
  OutOf<at::meta::structured__upsample_nearest_exact2d> m(out);
  m.meta(self, osize, sh, sw);
  const Plan p{kNearestExact, false, 2, {std::nullopt, sh, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(_upsample_nearest_exact2d, out)>(*why, self, osize, sh, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& nearest_exact3d_out(const Tensor& self, at::IntArrayRef osize, std::optional<double> sd,
                            std::optional<double> sh, std::optional<double> sw, Tensor& out) {
  check_device(self, "_upsample_nearest_exact3d");
  OutOf<at::meta::structured__upsample_nearest_exact3d> m(out);
  m.meta(self, osize, sd, sh, sw);
  const Plan p{kNearestExact, false, 3, {sd, sh, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(_upsample_nearest_exact3d, out)>(*why, self, osize, sd, sh, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& linear1d_out(const Tensor& self, at::IntArrayRef osize, bool align,
                     std::optional<double> sw, Tensor& out) {
  check_device(self, "upsample_linear1d");
  OutOf<at::meta::structured_upsample_linear1d> m(out);
  m.meta(self, osize, align, sw);
  const Plan p{kLinear, align, 1, {std::nullopt, std::nullopt, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(upsample_linear1d, out)>(*why, self, osize, align, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& bilinear2d_out(const Tensor& self, at::IntArrayRef osize, bool align,
                       std::optional<double> sh, std::optional<double> sw, Tensor& out) {
  check_device(self, "upsample_bilinear2d");
  OutOf<at::meta::structured_upsample_bilinear2d> m(out);
  m.meta(self, osize, align, sh, sw);
  const Plan p{kLinear, align, 2, {std::nullopt, sh, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(upsample_bilinear2d, out)>(*why, self, osize, align, sh, sw, out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

Tensor& trilinear3d_out(const Tensor& self, at::IntArrayRef osize, bool align,
                        std::optional<double> sd, std::optional<double> sh,
                        std::optional<double> sw, Tensor& out) {
  check_device(self, "upsample_trilinear3d");
  OutOf<at::meta::structured_upsample_trilinear3d> m(out);
  m.meta(self, osize, align, sd, sh, sw);
  const Plan p{kLinear, align, 3, {sd, sh, sw}};
  if (auto why = refuse(false, p, self, out)) {
    return run_on_cpu<ATEN_OP2(upsample_trilinear3d, out)>(*why, self, osize, align, sd, sh, sw,
                                                           out);
  }
  launch_upsample(false, p, out, self, self, out);
  return out;
}

// --- backward ----------------------------------------------------------------------------------

Tensor& nearest1d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                               std::optional<double> sw, Tensor& gi) {
  check_device(go, "upsample_nearest1d_backward");
  OutOf<at::meta::structured_upsample_nearest1d_backward> m(gi);
  m.meta(go, osize, isize, sw);
  const Plan p{kNearest, false, 1, {std::nullopt, std::nullopt, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(upsample_nearest1d_backward, grad_input)>(*why, go, osize, isize, sw,
                                                                         gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& nearest2d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                               std::optional<double> sh, std::optional<double> sw, Tensor& gi) {
  check_device(go, "upsample_nearest2d_backward");
  OutOf<at::meta::structured_upsample_nearest2d_backward> m(gi);
  m.meta(go, osize, isize, sh, sw);
  const Plan p{kNearest, false, 2, {std::nullopt, sh, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(upsample_nearest2d_backward, grad_input)>(*why, go, osize, isize, sh,
                                                                         sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& nearest3d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                               std::optional<double> sd, std::optional<double> sh,
                               std::optional<double> sw, Tensor& gi) {
  check_device(go, "upsample_nearest3d_backward");
  OutOf<at::meta::structured_upsample_nearest3d_backward> m(gi);
  m.meta(go, osize, isize, sd, sh, sw);
  const Plan p{kNearest, false, 3, {sd, sh, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(upsample_nearest3d_backward, grad_input)>(*why, go, osize, isize, sd,
                                                                         sh, sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& nearest_exact1d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                                     std::optional<double> sw, Tensor& gi) {
  check_device(go, "_upsample_nearest_exact1d_backward");
  OutOf<at::meta::structured__upsample_nearest_exact1d_backward> m(gi);
  m.meta(go, osize, isize, sw);
  const Plan p{kNearestExact, false, 1, {std::nullopt, std::nullopt, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(_upsample_nearest_exact1d_backward, grad_input)>(*why, go, osize,
                                                                                isize, sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& nearest_exact2d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                                     std::optional<double> sh, std::optional<double> sw,
                                     Tensor& gi) {
  check_device(go, "_upsample_nearest_exact2d_backward");
  OutOf<at::meta::structured__upsample_nearest_exact2d_backward> m(gi);
  m.meta(go, osize, isize, sh, sw);
  const Plan p{kNearestExact, false, 2, {std::nullopt, sh, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(_upsample_nearest_exact2d_backward, grad_input)>(*why, go, osize,
                                                                                isize, sh, sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& nearest_exact3d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                                     std::optional<double> sd, std::optional<double> sh,
                                     std::optional<double> sw, Tensor& gi) {
  check_device(go, "_upsample_nearest_exact3d_backward");
  OutOf<at::meta::structured__upsample_nearest_exact3d_backward> m(gi);
  m.meta(go, osize, isize, sd, sh, sw);
  const Plan p{kNearestExact, false, 3, {sd, sh, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(_upsample_nearest_exact3d_backward, grad_input)>(
        *why, go, osize, isize, sd, sh, sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& linear1d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                              bool align, std::optional<double> sw, Tensor& gi) {
  check_device(go, "upsample_linear1d_backward");
  OutOf<at::meta::structured_upsample_linear1d_backward> m(gi);
  m.meta(go, osize, isize, align, sw);
  const Plan p{kLinear, align, 1, {std::nullopt, std::nullopt, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(upsample_linear1d_backward, grad_input)>(*why, go, osize, isize,
                                                                        align, sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& bilinear2d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                                bool align, std::optional<double> sh, std::optional<double> sw,
                                Tensor& gi) {
  check_device(go, "upsample_bilinear2d_backward");
  OutOf<at::meta::structured_upsample_bilinear2d_backward> m(gi);
  m.meta(go, osize, isize, align, sh, sw);
  const Plan p{kLinear, align, 2, {std::nullopt, sh, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(upsample_bilinear2d_backward, grad_input)>(*why, go, osize, isize,
                                                                          align, sh, sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

Tensor& trilinear3d_backward_out(const Tensor& go, at::IntArrayRef osize, at::IntArrayRef isize,
                                 bool align, std::optional<double> sd, std::optional<double> sh,
                                 std::optional<double> sw, Tensor& gi) {
  check_device(go, "upsample_trilinear3d_backward");
  OutOf<at::meta::structured_upsample_trilinear3d_backward> m(gi);
  m.meta(go, osize, isize, align, sd, sh, sw);
  const Plan p{kLinear, align, 3, {sd, sh, sw}};
  if (auto why = refuse(true, p, gi, go)) {
    return run_on_cpu<ATEN_OP2(upsample_trilinear3d_backward, grad_input)>(*why, go, osize, isize,
                                                                           align, sd, sh, sw, gi);
  }
  launch_upsample(true, p, gi, go, gi, go);
  return gi;
}

}  // namespace

#define MTIA_OPS_upsample
#include "register_ops.inc"

}  // namespace mtia::torch_backend
