#include "launch.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>

#include "devices.h"
#include "mtia/settings/settings.h"

namespace mtia::torch_backend {

std::optional<uint8_t> kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MTIA_PE_DT_FP32;
    case at::kHalf:
      return MTIA_PE_DT_FP16;
    case at::kBFloat16:
      return MTIA_PE_DT_BF16;
    case at::kChar:
      return MTIA_PE_DT_INT8;
    case at::kInt:
      return MTIA_PE_DT_INT32;
    case at::kLong:
      return MTIA_PE_DT_INT64;
    case at::kBool:
      return MTIA_PE_DT_BOOL;
    default:
      return std::nullopt;
  }
}

bool is_kernel_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}
bool is_kernel_int(at::ScalarType t) {
  return t == at::kChar || t == at::kInt || t == at::kLong;
}

const char* kernel_dtype_list() {
  return "float32, float16, bfloat16, int8, int32, int64, bool";
}

mtia::Arg dtype_arg(at::ScalarType t) {
  const auto code = kernel_dtype(t);
  TORCH_INTERNAL_ASSERT(code.has_value(), "no kernel dtype for ", t);
  return mtia::Arg::dtype(*code);
}

mtia::DevicePtr tensor_address(const at::Tensor& t) {
  return device_ptr(t.storage().data()) + t.storage_offset() * int64_t(t.element_size());
}

void for_each_view4(at::IntArrayRef sizes, const std::vector<at::IntArrayRef>& strides,
                    const std::function<void(const View4&, const std::vector<int64_t>&)>& fn) {
  const size_t nops = strides.size();
  // Dimensions that matter, outermost first by the first operand's strides (stable: ties keep
  // PyTorch's order, which is what broadcast and size-1 dimensions need).
  std::vector<int64_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return;  // nothing to do
    if (sizes[d] != 1) dims.push_back(int64_t(d));
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int64_t a, int64_t b) { return strides[0][a] > strides[0][b]; });
  // Merge from the inside out: outer dim o folds into inner dim i when it continues it in
  // every operand.
  struct Dim {
    int64_t size;
    std::vector<int64_t> stride;
  };
  std::vector<Dim> merged;  // innermost first while building
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    Dim d{sizes[*it], {}};
    for (size_t k = 0; k < nops; ++k) d.stride.push_back(strides[k][*it]);
    if (!merged.empty()) {
      Dim& in = merged.back();
      bool ok = true;
      for (size_t k = 0; k < nops && ok; ++k) ok = d.stride[k] == in.stride[k] * in.size;
      if (ok) {
        in.size *= d.size;
        continue;
      }
    }
    merged.push_back(std::move(d));
  }
  std::reverse(merged.begin(), merged.end());  // outermost first

  const size_t extra = merged.size() > 4 ? merged.size() - 4 : 0;
  View4 v;
  v.strides.assign(nops, {0, 0, 0, 0});
  const size_t kept = merged.size() - extra;
  for (size_t j = 0; j < kept; ++j) {
    const Dim& d = merged[extra + j];
    const size_t slot = 4 - kept + j;
    v.sizes[slot] = d.size;
    for (size_t k = 0; k < nops; ++k) v.strides[k][slot] = d.stride[k];
  }
  std::vector<int64_t> offsets(nops, 0);
  if (extra == 0) {
    fn(v, offsets);
    return;
  }
  // Walk the outer dimensions like an odometer.
  std::vector<int64_t> idx(extra, 0);
  while (true) {
    for (size_t k = 0; k < nops; ++k) {
      int64_t off = 0;
      for (size_t j = 0; j < extra; ++j) off += idx[j] * merged[j].stride[k];
      offsets[k] = off;
    }
    fn(v, offsets);
    size_t j = extra;
    while (j > 0) {
      --j;
      if (++idx[j] < merged[j].size) break;
      idx[j] = 0;
      if (j == 0) return;
    }
  }
}

mtia::Grid grid_for(int64_t work, int64_t items_per_pe) {
  // $MTIA_EMU_MAX_PES caps every launch (1..64): fewer PEs simulate faster, more PEs give a
  // shorter simulated time.
  static const int64_t max_pes = [] {
    const std::optional<std::string> e = mtia::settings::read("MTIA_EMU_MAX_PES");
    const int64_t v = e ? std::atoll(e->c_str()) : 64;
    return std::clamp<int64_t>(v, 1, 64);
  }();
  const int64_t pes = std::clamp<int64_t>((work + items_per_pe - 1) / items_per_pe, 1, max_pes);
  if (pes <= 8) return mtia::Grid{1, uint32_t(pes)};
  return mtia::Grid{uint32_t((pes + 7) / 8), 8};
}

namespace {
std::mutex g_count_mu;
std::map<std::string, uint64_t> g_counts;
}  // namespace

std::map<std::string, uint64_t> launch_counts() {
  std::lock_guard lock(g_count_mu);
  return g_counts;
}

void reset_launch_counts() {
  std::lock_guard lock(g_count_mu);
  g_counts.clear();
}

void launch(std::string_view name, mtia::Grid grid, const std::vector<mtia::Arg>& args) {
  {
    std::lock_guard lock(g_count_mu);
    g_counts[std::string(name)] += 1;
  }
  // On the current device: the op's (on_device.h).
  DeviceContext& c = Runtime::get().context(current_device());
  const mtia::Kernel& k = c.kernel(name);
  guarded(std::string("launching kernel '") + std::string(name) + "'",
          [&] { c.device().launch(k, grid, args, current_stream()); });
}

void launch(const mtia::Kernel& kernel, mtia::Grid grid, const std::vector<mtia::Arg>& args) {
  {
    std::lock_guard lock(g_count_mu);
    g_counts[kernel.name] += 1;
  }
  DeviceContext& c = Runtime::get().context(current_device());
  guarded("launching kernel '" + kernel.name + "'",
          [&] { c.device().launch(kernel, grid, args, current_stream()); });
}

uint64_t scalar_bits(const c10::Scalar& value, at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: {
      const float f = value.to<float>();
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
    case at::kHalf:
      return value.to<c10::Half>().x;
    case at::kBFloat16:
      return value.to<c10::BFloat16>().x;
    case at::kChar:
      return uint8_t(value.to<int8_t>());
    case at::kInt:
      return uint32_t(value.to<int32_t>());
    case at::kLong:
      return uint64_t(value.to<int64_t>());
    case at::kBool:
      return value.to<bool>() ? 1 : 0;
    default:
      TORCH_CHECK(false, "torch_mtia_emu: no kernel element encoding for dtype ", dtype);
  }
}

}  // namespace mtia::torch_backend
