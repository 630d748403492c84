// What the index kernels' callers share: index operands, and launches whose out-of-range
// index becomes an IndexError at the call (kernels/lib/index.c checks every index on the
// device and fails its launch with its own status; the host then finds the index and says
// which one).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/kernel.h"

namespace mtia::torch_backend {

// int64 or int32: the index dtypes the kernels take.
bool is_index_dtype(at::ScalarType t);

// A contiguous int32/int64 copy of an index tensor on the device (other integer dtypes are
// cast to int64); an IndexError naming `op` for a non-integer one.
at::Tensor index_operand(const at::Tensor& index, const char* op);

// The first index of `index` outside [-size, size) (wrap) or [0, size), as PyTorch words it.
std::optional<std::string> find_bad_index(const at::Tensor& index, int64_t size, int64_t dim,
                                          bool wrap);
// The same, with a general message when every index is in range.
std::string bad_index_message(const at::Tensor& index, int64_t size, int64_t dim, bool wrap);

// Appends four sizes or strides to a launch's arguments.
inline void push4(std::vector<mtia::Arg>& args, const std::array<int64_t, 4>& v) {
  for (int64_t x : v) args.emplace_back(x);
}

// Launches an index kernel and waits for it: its bad-index status becomes an IndexError with
// `explain()`'s message; other failures are the usual RuntimeError.
void launch_checked(std::string_view kernel, mtia::Grid grid, const std::vector<mtia::Arg>& args,
                    const std::function<std::string()>& explain);

}  // namespace mtia::torch_backend
