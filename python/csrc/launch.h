// Launching the kernel library (docs/kernels.md) on tensors: dtype codes, the 4-D views the
// kernels take, the PE grid, and the launch itself on the current stream.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/device.h"
#include "mtia/isa/pe/pe_ops.h"

namespace mtia::torch_backend {

// The kernels' dtype code (enum mtia_pe_dtype) for a PyTorch dtype, if the kernels take it:
// float32, float16, bfloat16, int8, int32, int64, bool.
std::optional<uint8_t> kernel_dtype(at::ScalarType t);
inline bool kernel_supports(at::ScalarType t) {
  return kernel_dtype(t).has_value();
}
bool is_kernel_float(at::ScalarType t);            // float32, float16, bfloat16
bool is_kernel_int(at::ScalarType t);              // int8, int32, int64
inline bool is_kernel_numeric(at::ScalarType t) {  // a float or an int the kernels take
  return is_kernel_float(t) || is_kernel_int(t);
}
// "float32, float16, bfloat16, int8, int32, int64, bool", for messages.
const char* kernel_dtype_list();
// A launch argument holding kernel_dtype(t); the caller has checked that the kernels take t.
mtia::Arg dtype_arg(at::ScalarType t);

// The device address of a tensor's first element.
mtia::DevicePtr tensor_address(const at::Tensor& t);

// Up to 4 dimensions of several operands of equal sizes, outermost first, in elements.
struct View4 {
  std::array<int64_t, 4> sizes{1, 1, 1, 1};
  std::vector<std::array<int64_t, 4>> strides;  // one per operand
};

// Folds operands that all have `sizes` (each with its own strides; 0 broadcasts) into 4-D
// views the kernels take: drops size-1 dimensions, orders the rest by the first operand's
// strides (the output's, so it is written in memory order) and merges neighbours that are
// contiguous in every operand. When more than 4 dimensions remain, `fn` runs once per index
// of the outermost ones, with each operand's element offset for that index.
void for_each_view4(at::IntArrayRef sizes, const std::vector<at::IntArrayRef>& strides,
                    const std::function<void(const View4&, const std::vector<int64_t>&)>& fn);

// A PE grid for `work` items (elements, output elements): one PE per `items_per_pe`, at most
// the 8 x 8 chip (or $MTIA_EMU_MAX_PES). Each PE a launch starts costs the simulator host time
// whether or not it has much to do, so small ops take few PEs; the shares are chosen so that
// a PE's work outweighs its start-up in simulated time too.
mtia::Grid grid_for(int64_t work, int64_t items_per_pe = 16384);

// Launches the library kernel `name` on the current device's current stream (an op runs with
// its tensors' device current). Host API errors become c10::Error naming the kernel.
void launch(std::string_view name, mtia::Grid grid, const std::vector<mtia::Arg>& args);

// Launches `kernel` (of any loaded module) the same way, counted under its name.
void launch(const mtia::Kernel& kernel, mtia::Grid grid, const std::vector<mtia::Arg>& args);

// Launches per kernel name since the last reset (torch_mtia_emu.kernel_launch_counts()).
std::map<std::string, uint64_t> launch_counts();
void reset_launch_counts();

// The bit pattern of `value` as one element of `dtype` (a kernel dtype), rounding to nearest
// even for float16/bfloat16 like the device does.
uint64_t scalar_bits(const c10::Scalar& value, at::ScalarType dtype);

}  // namespace mtia::torch_backend
