// The demo workload: a two-layer perceptron's forward pass on the emulated device with the
// kernel library, and the CPU reference it is checked against.
//
//   h      = relu(x W1^T + b1)        addmm + unary(relu)
//   logits = h W2^T + b2              addmm
//   probs  = softmax(logits, dim=1)   softmax
//
// Weights are stored as torch.nn.Linear stores them, W [out_features, in_features] row-major;
// the kernels read W^T through transposed strides, no copy. Every tensor is in one dtype
// (fp32, fp16 or bf16) as in a PyTorch model cast with .half() / .bfloat16().
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mtia/device.h"

namespace mtia::tools {

enum class MlpDtype { kFp32, kFp16, kBf16 };
const char* mlp_dtype_name(MlpDtype dtype);  // "fp32", "fp16", "bf16"
// The inverse; throws std::invalid_argument for any other name.
MlpDtype mlp_dtype_from_name(const std::string& name);

// IEEE binary16 and bfloat16 conversions, round to nearest even (as the device's casts).
uint16_t float_to_fp16(float f);
float fp16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);
// f rounded to the dtype and back (fp32: f itself).
float round_to(MlpDtype dtype, float f);

// Sizes of the model, in elements.
struct MlpShape {
  int64_t batch = 64;     // rows of x
  int64_t in = 256;       // input features
  int64_t hidden = 512;   // hidden units
  int64_t classes = 128;  // outputs (softmax width)

  // Throws std::invalid_argument naming the first size that is not >= 1.
  void validate() const;
  // Floating-point operations of the two matrix products, 2 * batch * (in*hidden + hidden*classes).
  double matmul_flops() const;
};

// The model's parameters and input in fp32 (before any rounding to the run's dtype):
// x [batch, in], w1 [hidden, in], b1 [hidden], w2 [classes, hidden], b2 [classes].
struct MlpModel {
  MlpShape shape;
  std::vector<float> x, w1, b1, w2, b2;

  // Deterministic pseudo-random values from `seed` (mt19937, same on every platform): x in
  // [-1, 1), W1 He-uniform, W2 scaled so the logits spread over a few units - the softmax is
  // then neither flat nor one-hot and its output tests the whole pipeline.
  static MlpModel random(const MlpShape& shape, uint32_t seed);
};

// The forward pass on the host: every operand rounded to `dtype` first, sums accumulated in
// double, each layer's output rounded to `dtype` as the device stores it, the softmax itself
// in double and not rounded. Returns probs [batch, classes] row-major.
std::vector<double> mlp_reference(const MlpModel& model, MlpDtype dtype);

// Device result against the reference.
struct MlpCheck {
  double max_abs_error = 0;  // max |device - reference| over all probabilities
  int64_t worst_row = 0, worst_col = 0;
  int64_t top1_agree = 0;  // rows whose most probable class is the same on both sides
  double tolerance = 0;
  bool passed = false;  // max_abs_error <= tolerance and no NaN
};
// Tolerance on |device - reference| for probabilities: 1e-5 for fp32 (the device's fp32 sums
// are off by ~1e-6 at most). fp16/bf16 (4e-3 / 3e-2): the device rounds each probability to
// the dtype (up to half a step at 1: 2.4e-4 / 2e-3), and fp32 and double sums can round a
// logit to neighbouring values, one step at |logit| < 16 (2^-7 / 2^-4) moving a probability by
// at most a quarter of it (the softmax's largest slope); about twice that sum.
double mlp_tolerance(MlpDtype dtype);
MlpCheck mlp_compare(const std::vector<float>& device, const std::vector<double>& reference,
                     const MlpShape& shape, MlpDtype dtype);

// One forward pass on the device, with its simulated and host times.
struct MlpRun {
  std::vector<float> probs;  // [batch, classes], converted to float
  // Simulated picoseconds (0 with the timing model off).
  int64_t upload_ps = 0;               // x, W1, b1, W2, b2 host -> device
  std::array<int64_t, 4> kernel_ps{};  // addmm, relu, addmm, softmax
  int64_t download_ps = 0;             // probs device -> host
  int64_t total_ps = 0;                // first upload to the end of the download
  double wall_seconds = 0;             // host time of the same span
};
inline constexpr std::array<const char*, 4> kMlpKernelSteps = {
    "addmm    h = b1 + x W1^T", "unary    h = relu(h)", "addmm    logits = b2 + h W2^T",
    "softmax  probs = softmax(logits, 1)"};

// Allocates the tensors, uploads, launches the four kernels of `library` on the whole PE grid
// on the default stream, downloads probs and frees the tensors. Throws mtia::Error from the
// host API (out of memory, a kernel fault).
MlpRun run_mlp(Device& device, const KernelModule& library, const MlpModel& model, MlpDtype dtype);

}  // namespace mtia::tools
