#include "mlp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "mtia/error.h"
#include "mtia/isa/pe/pe_ops.h"

namespace mtia::tools {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Uniform in [lo, hi) from the top 24 bits of mt19937: exact in float and the same on every
// standard library (std::uniform_real_distribution is not).
float uniform(std::mt19937& rng, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(rng() >> 8) * 0x1p-24f;
}

std::vector<float> uniform_vector(std::mt19937& rng, int64_t n, float bound) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = uniform(rng, -bound, bound);
  return v;
}

uint8_t dtype_code(MlpDtype dtype) {
  switch (dtype) {
    case MlpDtype::kFp32:
      return MTIA_PE_DT_FP32;
    case MlpDtype::kFp16:
      return MTIA_PE_DT_FP16;
    case MlpDtype::kBf16:
      return MTIA_PE_DT_BF16;
  }
  return MTIA_PE_DT_INVALID;
}

size_t elem_bytes(MlpDtype dtype) {
  return dtype == MlpDtype::kFp32 ? 4 : 2;
}

// The tensor's bytes in the run's dtype, as the device stores them.
std::vector<uint8_t> encode(MlpDtype dtype, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * elem_bytes(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == MlpDtype::kFp32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t h = dtype == MlpDtype::kFp16 ? float_to_fp16(v[i]) : float_to_bf16(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

std::vector<float> decode(MlpDtype dtype, const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / elem_bytes(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == MlpDtype::kFp32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = dtype == MlpDtype::kFp16 ? fp16_to_float(h) : bf16_to_float(h);
    }
  }
  return out;
}

std::vector<double> rounded(MlpDtype dtype, const std::vector<float>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = round_to(dtype, v[i]);
  return out;
}

// out[r][j] = round(b[j] + sum_k a[r][k] * w[j][k]): a Linear layer, w [cols, k] row-major.
std::vector<double> linear(MlpDtype dtype, const std::vector<double>& a,
                           const std::vector<double>& w, const std::vector<double>& b, int64_t rows,
                           int64_t k, int64_t cols) {
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += a[r * k + i] * w[j * k + i];
      out[r * cols + j] = round_to(dtype, static_cast<float>(acc + b[j]));
    }
  }
  return out;
}

}  // namespace

const char* mlp_dtype_name(MlpDtype dtype) {
  switch (dtype) {
    case MlpDtype::kFp32:
      return "fp32";
    case MlpDtype::kFp16:
      return "fp16";
    case MlpDtype::kBf16:
      return "bf16";
  }
  return "?";
}

MlpDtype mlp_dtype_from_name(const std::string& name) {
  for (MlpDtype d : {MlpDtype::kFp32, MlpDtype::kFp16, MlpDtype::kBf16}) {
    if (name == mlp_dtype_name(d)) return d;
  }
  throw std::invalid_argument("unknown dtype '" + name + "'; use fp32, fp16 or bf16");
}

uint16_t float_to_fp16(float f) {
  const uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // NaN stays a (quiet) NaN
  if (abs >= 0x47800000u) return sign | 0x7c00;  // >= 65536 (and inf): inf
  if (abs < 0x38800000u) {
    // Below 2^-14: a subnormal half, a multiple of 2^-24. Scaling by 2^24 is exact, and
    // nearbyint rounds to nearest even in the default rounding mode; 1024 is the smallest
    // normal half, which the encoding reaches naturally.
    const float units = std::nearbyint(float_of(abs) * 0x1p24f);
    return sign | static_cast<uint16_t>(units);
  }
  const uint32_t exp = (abs >> 23) - 127 + 15;  // 1..30
  const uint32_t mant = abs & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may reach inf: right
  return sign | static_cast<uint16_t>(h);
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0x1p-24f;  // zero or subnormal, exact
    return sign != 0 ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t float_to_bf16(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t b) {
  return float_of(static_cast<uint32_t>(b) << 16);
}

float round_to(MlpDtype dtype, float f) {
  switch (dtype) {
    case MlpDtype::kFp32:
      return f;
    case MlpDtype::kFp16:
      return fp16_to_float(float_to_fp16(f));
    case MlpDtype::kBf16:
      return bf16_to_float(float_to_bf16(f));
  }
  return f;
}

void MlpShape::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", batch}, {"in", in}, {"hidden", hidden}, {"classes", classes}};
  for (const auto& [name, value] : sizes) {
    if (value < 1) {
      throw std::invalid_argument(std::string("MLP size --") + name + " is " +
                                  std::to_string(value) + "; every size must be >= 1");
    }
  }
}

double MlpShape::matmul_flops() const {
  return 2.0 * static_cast<double>(batch) *
         (static_cast<double>(in) * static_cast<double>(hidden) +
          static_cast<double>(hidden) * static_cast<double>(classes));
}

MlpModel MlpModel::random(const MlpShape& shape, uint32_t seed) {
  shape.validate();
  std::mt19937 rng(seed);
  MlpModel m;
  m.shape = shape;
  // x ~ U(-1, 1) has variance 1/3; He-uniform W1 keeps the pre-activations' variance at 2/3,
  // so relu(h) has a second moment of 1/3. W2 ~ U(-9/sqrt(hidden), ..) then gives logits a
  // variance of hidden * 1/3 * 27/hidden = 9: a spread of about 3.
  m.x = uniform_vector(rng, shape.batch * shape.in, 1.0f);
  m.w1 =
      uniform_vector(rng, shape.hidden * shape.in, std::sqrt(6.0f / static_cast<float>(shape.in)));
  m.b1 = uniform_vector(rng, shape.hidden, 0.1f);
  m.w2 = uniform_vector(rng, shape.classes * shape.hidden,
                        9.0f / std::sqrt(static_cast<float>(shape.hidden)));
  m.b2 = uniform_vector(rng, shape.classes, 0.1f);
  return m;
}

std::vector<double> mlp_reference(const MlpModel& m, MlpDtype dtype) {
  const MlpShape& s = m.shape;
  std::vector<double> h = linear(dtype, rounded(dtype, m.x), rounded(dtype, m.w1),
                                 rounded(dtype, m.b1), s.batch, s.in, s.hidden);
  for (double& v : h) v = std::max(v, 0.0);
  const std::vector<double> logits =
      linear(dtype, h, rounded(dtype, m.w2), rounded(dtype, m.b2), s.batch, s.hidden, s.classes);
  std::vector<double> probs(logits.size());
  for (int64_t r = 0; r < s.batch; ++r) {
    const double* row = &logits[r * s.classes];
    const double mx = *std::max_element(row, row + s.classes);
    double sum = 0;
    for (int64_t j = 0; j < s.classes; ++j) sum += std::exp(row[j] - mx);
    for (int64_t j = 0; j < s.classes; ++j) probs[r * s.classes + j] = std::exp(row[j] - mx) / sum;
  }
  return probs;
}

double mlp_tolerance(MlpDtype dtype) {
  switch (dtype) {
    case MlpDtype::kFp32:
      return 1e-5;
    case MlpDtype::kFp16:
      return 4e-3;
    case MlpDtype::kBf16:
      return 3e-2;
  }
  return 0;
}

MlpCheck mlp_compare(const std::vector<float>& device, const std::vector<double>& reference,
                     const MlpShape& s, MlpDtype dtype) {
  const size_t n = static_cast<size_t>(s.batch * s.classes);
  if (device.size() != n || reference.size() != n) {
    throw std::invalid_argument("mlp_compare: " + std::to_string(device.size()) + " device and " +
                                std::to_string(reference.size()) + " reference values for a [" +
                                std::to_string(s.batch) + ", " + std::to_string(s.classes) +
                                "] output");
  }
  MlpCheck c;
  c.tolerance = mlp_tolerance(dtype);
  bool nan = false;
  for (int64_t r = 0; r < s.batch; ++r) {
    int64_t dev_best = 0, ref_best = 0;
    for (int64_t j = 0; j < s.classes; ++j) {
      const size_t i = static_cast<size_t>(r * s.classes + j);
      const double err = std::fabs(static_cast<double>(device[i]) - reference[i]);
      if (std::isnan(err)) nan = true;
      if (err > c.max_abs_error) {
        c.max_abs_error = err;
        c.worst_row = r;
        c.worst_col = j;
      }
      if (device[i] > device[r * s.classes + dev_best]) dev_best = j;
      if (reference[i] > reference[r * s.classes + ref_best]) ref_best = j;
    }
    if (dev_best == ref_best) ++c.top1_agree;
  }
  c.passed = !nan && c.max_abs_error <= c.tolerance;
  if (nan) c.max_abs_error = std::nan("");
  return c;
}

MlpRun run_mlp(Device& device, const KernelModule& library, const MlpModel& m, MlpDtype dtype) {
  using Clock = std::chrono::steady_clock;
  const MlpShape& s = m.shape;
  s.validate();
  const Kernel& addmm = library.kernel("addmm");
  const Kernel& unary = library.kernel("unary");
  const Kernel& softmax = library.kernel("softmax");
  const Grid grid{device.properties().pe_rows, device.properties().pe_cols};
  const Arg dt = Arg::dtype(dtype_code(dtype));
  const uint64_t es = elem_bytes(dtype);

  // Converted before the clock starts: host-side preparation is not the device's time.
  const std::vector<uint8_t> hx = encode(dtype, m.x), hw1 = encode(dtype, m.w1),
                             hb1 = encode(dtype, m.b1), hw2 = encode(dtype, m.w2),
                             hb2 = encode(dtype, m.b2);
  std::vector<uint8_t> hprobs(static_cast<size_t>(s.batch * s.classes) * es);

  struct Buffer {
    Device& dev;
    DevicePtr ptr;
    Buffer(Device& d, uint64_t bytes) : dev(d), ptr(d.malloc(bytes)) {}
    // Runs while an error from the device may be propagating; that error is the one to report.
    ~Buffer() {
      try {
        dev.free(ptr);
      } catch (const Error&) {
      }
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
  };
  Buffer x(device, hx.size()), w1(device, hw1.size()), b1(device, hb1.size()),
      w2(device, hw2.size()), b2(device, hb2.size()),
      h(device, static_cast<uint64_t>(s.batch * s.hidden) * es),
      a(device, static_cast<uint64_t>(s.batch * s.hidden) * es),
      logits(device, static_cast<uint64_t>(s.batch * s.classes) * es), probs(device, hprobs.size());

  struct Events {
    Device& dev;
    std::array<Event, 7> e;
    explicit Events(Device& d) : dev(d) {
      for (Event& ev : e) ev = d.create_event();
    }
    ~Events() {
      for (Event ev : e) dev.destroy_event(ev);
    }
  } ev(device);

  const int64_t B = s.batch, I = s.in, H = s.hidden, C = s.classes;
  const auto t0 = Clock::now();
  device.record(ev.e[0]);
  device.copy_async(x.ptr, hx.data(), hx.size());
  device.copy_async(w1.ptr, hw1.data(), hw1.size());
  device.copy_async(b1.ptr, hb1.data(), hb1.size());
  device.copy_async(w2.ptr, hw2.data(), hw2.size());
  device.copy_async(b2.ptr, hb2.data(), hb2.size());
  device.record(ev.e[1]);
  // addmm: out = beta * bias + alpha * (a @ b). b = W1^T: element (k, j) is W1[j][k], so
  // stride_k = 1 and stride_n = in (column-major; the kernel loads it as it lies). The bias
  // vector broadcasts down the rows with stride_m = 0.
  device.launch(addmm, grid,
                {h.ptr, b1.ptr, x.ptr, w1.ptr, dt, dt, B, H, I, 1.0f, 1.0f, int64_t{0}, int64_t{1},
                 I, int64_t{1}, int64_t{1}, I, H, int64_t{1}});
  device.record(ev.e[2]);
  // unary relu over the contiguous [B, H] viewed as [1, 1, B, H].
  device.launch(unary, grid,
                {a.ptr, h.ptr, int64_t{MTIA_PE_SE_RELU}, dt, int64_t{1}, int64_t{1}, B, H, B * H,
                 B * H, H, int64_t{1}, B * H, B * H, H, int64_t{1}});
  device.record(ev.e[3]);
  device.launch(addmm, grid,
                {logits.ptr, b2.ptr, a.ptr, w2.ptr, dt, dt, B, C, H, 1.0f, 1.0f, int64_t{0},
                 int64_t{1}, H, int64_t{1}, int64_t{1}, H, C, int64_t{1}});
  device.record(ev.e[4]);
  // softmax along dim 3 of [1, 1, B, C]: along each row, PyTorch's dim=1 of [B, C].
  device.launch(softmax, grid,
                {probs.ptr, logits.ptr, dt, int64_t{3}, int64_t{1}, int64_t{1}, B, C, B * C, B * C,
                 C, int64_t{1}, B * C, B * C, C, int64_t{1}});
  device.record(ev.e[5]);
  device.copy(hprobs.data(), probs.ptr, hprobs.size());
  device.record(ev.e[6]);
  device.synchronize(ev.e[6]);
  const auto t1 = Clock::now();

  MlpRun run;
  run.wall_seconds = std::chrono::duration<double>(t1 - t0).count();
  run.upload_ps = device.elapsed_ps(ev.e[0], ev.e[1]);
  for (size_t k = 0; k < run.kernel_ps.size(); ++k) {
    run.kernel_ps[k] = device.elapsed_ps(ev.e[1 + k], ev.e[2 + k]);
  }
  run.download_ps = device.elapsed_ps(ev.e[5], ev.e[6]);
  run.total_ps = device.elapsed_ps(ev.e[0], ev.e[6]);
  run.probs = decode(dtype, hprobs);
  return run;
}

}  // namespace mtia::tools
