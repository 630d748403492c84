#include "index_checks.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include "devices.h"
#include "elementwise.h"
#include "launch.h"
#include "on_device.h"

namespace mtia::torch_backend {

namespace {

// index.c's own exit status for an index (or bag offset) out of range.
constexpr int64_t kBadIndexStatus = 16;

}  // namespace

bool is_index_dtype(at::ScalarType t) {
  return t == at::kLong || t == at::kInt;
}

std::optional<std::string> find_bad_index(const at::Tensor& index, int64_t size, int64_t dim,
                                          bool wrap) {
  const at::Tensor h = index.cpu().to(at::kLong).contiguous().reshape({-1});
  const int64_t* p = h.data_ptr<int64_t>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (p[i] >= size || p[i] < (wrap ? -size : 0)) {
      return c10::str("index ", p[i], " is out of bounds for dimension ", dim, " with size ", size);
    }
  }
  return std::nullopt;
}
std::string bad_index_message(const at::Tensor& index, int64_t size, int64_t dim, bool wrap) {
  return find_bad_index(index, size, dim, wrap)
      .value_or(c10::str("an index is out of bounds for dimension ", dim, " with size ", size));
}

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

at::Tensor index_operand(const at::Tensor& index, const char* op) {
  at::Tensor i = index.device().type() == kDeviceType
                     ? index
                     : index.to(index.options().device(kDeviceType, current_device()));
  TORCH_CHECK_INDEX(at::isIntegralType(i.scalar_type(), /*includeBool=*/false), op,
                    "(): Expected dtype int32/int64 for index but got ", i.scalar_type());
  if (!is_index_dtype(i.scalar_type())) i = as_dtype(i, at::kLong);
  return i.contiguous();
}

}  // namespace mtia::torch_backend
