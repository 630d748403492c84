// Every kernel of the library (docs/kernels.md) launched through the public API on the
// emulated device - host API, driver, firmware, SystemC PE grid - against nested-loop CPU
// references written here: each dtype a kernel takes, shapes that are not multiples of any
// tile, transposed, padded and broadcast operands, outputs whose gaps must stay untouched, and
// grids of 1 PE and 8x8. A subset runs on both presets; results are bitwise the same with the
// timing model off and on, and the same launches take the same simulated time run after run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/isa/pe/kernel_meta.h"
#include "mtia/isa/pe/pe_ops.h"

using namespace mtia;

#ifdef MTIA_KERNEL_LIBRARY_ELF
namespace {

// --- numerics of the reference: IEEE binary32 math, then one round-to-nearest-even -----------

uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float f32_from(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint16_t to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (m != 0 ? 0x200u | (m >> 13) : 0));
  const int exp = static_cast<int>(e) - 127 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to infinity
  uint32_t r, rem, half;
  if (exp <= 0) {  // a subnormal half, or zero
    if (exp < -10) return sign;
    const uint32_t mant = m | 0x800000u;
    const int shift = 14 - exp;
    r = mant >> shift;
    rem = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    r = (static_cast<uint32_t>(exp) << 10) | (m >> 13);
    rem = m & 0x1fffu;
    half = 0x1000u;
  }
  if (rem > half || (rem == half && (r & 1u) != 0)) ++r;  // a carry may reach infinity: right
  return static_cast<uint16_t>(sign | r);
}
float from_f16(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return f32_from(sign | 0x7f800000u | (m << 13));
  if (e == 0) return (sign != 0 ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(m), -24);
  return f32_from(sign | ((e - 15 + 127) << 23) | (m << 13));
}
uint16_t to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
  return f32_from(uint32_t{h} << 16);
}

// --- dtypes ----------------------------------------------------------------------------------

constexpr uint8_t kF32 = MTIA_PE_DT_FP32, kF16 = MTIA_PE_DT_FP16, kBF16 = MTIA_PE_DT_BF16,
                  kI8 = MTIA_PE_DT_INT8, kI32 = MTIA_PE_DT_INT32, kI64 = MTIA_PE_DT_INT64,
                  kBool = MTIA_PE_DT_BOOL;

unsigned dt_size(uint8_t dt) {
  switch (dt) {
    case kF32:
    case kI32:
      return 4;
    case kF16:
    case kBF16:
      return 2;
    case kI64:
      return 8;
    default:
      return 1;
  }
}
bool dt_float(uint8_t dt) {
  return dt == kF32 || dt == kF16 || dt == kBF16;
}
bool dt_int(uint8_t dt) {
  return dt == kI8 || dt == kI32 || dt == kI64;
}
std::string dt_name(uint8_t dt) {
  static const char* const names[] = {"?",    "fp32",  "fp16",  "bf16",
                                      "int8", "int32", "int64", "bool"};
  return dt < 8 ? names[dt] : "?";
}

// The value of dtype dt nearest to v (floats: through binary32, as the device computes).
double round_to(uint8_t dt, double v) {
  switch (dt) {
    case kF32:
      return static_cast<float>(v);
    case kF16:
      return from_f16(to_f16(static_cast<float>(v)));
    case kBF16:
      return from_bf16(to_bf16(static_cast<float>(v)));
    case kBool:
      return v != 0 ? 1 : 0;
    default:
      return v;
  }
}

// Two's complement wrap of an integer to dtype dt.
double wrap(uint8_t dt, int64_t v) {
  switch (dt) {
    case kI8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case kI32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    default:
      return static_cast<double>(v);
  }
}

uint64_t bits_of(uint8_t dt, double v) {
  switch (dt) {
    case kF32:
      return f32_bits(static_cast<float>(v));
    case kF16:
      return to_f16(static_cast<float>(v));
    case kBF16:
      return to_bf16(static_cast<float>(v));
    case kI8:
      return static_cast<uint8_t>(static_cast<int8_t>(v));
    case kI32:
      return static_cast<uint32_t>(static_cast<int32_t>(v));
    case kI64:
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    default:
      return v != 0 ? 1 : 0;
  }
}

double load_elem(uint8_t dt, const uint8_t* p) {
  uint64_t b = 0;
  std::memcpy(&b, p, dt_size(dt));
  switch (dt) {
    case kF32:
      return f32_from(static_cast<uint32_t>(b));
    case kF16:
      return from_f16(static_cast<uint16_t>(b));
    case kBF16:
      return from_bf16(static_cast<uint16_t>(b));
    case kI8:
      return static_cast<int8_t>(b);
    case kI32:
      return static_cast<int32_t>(b);
    case kI64:
      return static_cast<double>(static_cast<int64_t>(b));
    default:
      return static_cast<double>(b);
  }
}

// --- 4-D strided tensors in device memory, with a host copy of their storage ----------------

using Shape = std::array<int64_t, 4>;

Shape contiguous(const Shape& size) {
  Shape st{};
  int64_t s = 1;
  for (int i = 3; i >= 0; --i) {
    st[i] = s;
    s *= std::max<int64_t>(size[i], 1);
  }
  return st;
}

// Strides of a tensor stored with its dimensions in `order` (outermost first), with `pad`
// extra elements after each innermost stored run.
Shape permuted(const Shape& size, const std::array<int, 4>& order, int64_t pad = 0) {
  Shape st{};
  int64_t s = 1;
  for (int i = 3; i >= 0; --i) {
    st[order[i]] = s;
    s *= std::max<int64_t>(size[order[i]], 1) + (i == 3 ? pad : 0);
  }
  return st;
}

// Dims 2 and 3 swapped in storage, 3 elements of padding per stored row.
Shape odd_strides(const Shape& size) {
  return permuted(size, {0, 1, 3, 2}, 3);
}

void for_each(const Shape& size, const std::function<void(const Shape&)>& fn) {
  Shape i{};
  for (i[0] = 0; i[0] < size[0]; ++i[0])
    for (i[1] = 0; i[1] < size[1]; ++i[1])
      for (i[2] = 0; i[2] < size[2]; ++i[2])
        for (i[3] = 0; i[3] < size[3]; ++i[3]) fn(i);
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "[" << s[0] << "," << s[1] << "," << s[2] << "," << s[3] << "]";
  return o.str();
}

constexpr uint8_t kGapByte = 0xA5;  // every byte of a tensor's storage before the launch

struct Tensor {
  uint8_t dt = kF32;
  Shape size{1, 1, 1, 1};
  Shape stride{1, 1, 1, 1};
  DevicePtr ptr;
  std::vector<uint8_t> host;

  int64_t offset(const Shape& i) const {
    return i[0] * stride[0] + i[1] * stride[1] + i[2] * stride[2] + i[3] * stride[3];
  }
  double at(const Shape& i) const { return load_elem(dt, host.data() + offset(i) * dt_size(dt)); }
  void set(const Shape& i, double v) {
    const uint64_t b = bits_of(dt, v);
    std::memcpy(host.data() + offset(i) * dt_size(dt), &b, dt_size(dt));
  }
  std::vector<Arg> sizes() const { return {size[0], size[1], size[2], size[3]}; }
  std::vector<Arg> strides() const { return {stride[0], stride[1], stride[2], stride[3]}; }
  void upload(Device& dev) const { dev.copy(ptr, host.data(), host.size()); }
  void download(Device& dev) { dev.copy(host.data(), ptr, host.size()); }
};

// A tensor whose whole storage (gaps included) is kGapByte, on the device too.
Tensor make_tensor(Device& dev, uint8_t dt, const Shape& size, const Shape& stride) {
  Tensor t;
  t.dt = dt;
  t.size = size;
  t.stride = stride;
  int64_t span = 1;
  for (int d = 0; d < 4; ++d) span += (std::max<int64_t>(size[d], 1) - 1) * stride[d];
  t.host.assign(static_cast<size_t>(span) * dt_size(dt), kGapByte);
  t.ptr = dev.malloc(t.host.size());
  t.upload(dev);
  return t;
}
Tensor make_tensor(Device& dev, uint8_t dt, const Shape& size) {
  return make_tensor(dev, dt, size, contiguous(size));
}

// Random values of dt at every storage element: floats in [lo, hi) rounded to dt, integers in
// a range where sums do not overflow, bools 0/1.
void randomize(Device& dev, Tensor& t, std::mt19937& rng, double lo = -3, double hi = 3) {
  const unsigned es = dt_size(t.dt);
  for (size_t k = 0; k < t.host.size() / es; ++k) {
    double v;
    if (t.dt == kBool) {
      v = static_cast<double>(rng() & 1u);
    } else if (dt_float(t.dt)) {
      v = round_to(t.dt, std::uniform_real_distribution<double>(lo, hi)(rng));
    } else {
      const int64_t range = t.dt == kI8 ? 100 : 1000;
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(-range, range)(rng));
    }
    const uint64_t b = bits_of(t.dt, v);
    std::memcpy(t.host.data() + k * es, &b, es);
  }
  t.upload(dev);
}

struct Tol {
  double rel = 0, abs = 0;
};
Tol tol_for(uint8_t dt) {
  switch (dt) {
    case kF32:
      return {2e-5, 1e-5};
    case kF16:
      return {2e-3, 1e-3};
    case kBF16:
      return {1.6e-2, 8e-3};
    default:
      return {};
  }
}
bool close(double got, double want, Tol t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= t.abs + t.rel * std::fabs(want);
}

// Downloads `out`; every element of its view must match want(index) within `tol`, and every
// byte of its storage outside the view must still be kGapByte.
void check_tensor(Device& dev, Tensor& out, const std::function<double(const Shape&)>& want,
                  Tol tol, const std::string& what) {
  out.download(dev);
  const unsigned es = dt_size(out.dt);
  std::vector<bool> in_view(out.host.size() / es, false);
  int64_t bad = 0;
  std::string first;
  for_each(out.size, [&](const Shape& i) {
    in_view[static_cast<size_t>(out.offset(i))] = true;
    const double g = out.at(i), w = want(i);
    if (!close(g, w, tol) && bad++ == 0) {
      std::ostringstream o;
      o << shape_str(i) << " got " << g << " want " << w;
      first = o.str();
    }
  });
  INFO(what << ": " << bad << " mismatches, first " << first);
  CHECK(bad == 0);
  int64_t touched = 0;
  for (size_t k = 0; k < in_view.size(); ++k) {
    if (in_view[k]) continue;
    for (unsigned b = 0; b < es; ++b) touched += out.host[k * es + b] != kGapByte;
  }
  INFO(what << ": bytes written outside the output view");
  CHECK(touched == 0);
}

std::vector<Arg> cat(std::vector<Arg> a, const std::vector<Arg>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Launches a library kernel and waits for it: a failure throws with the device's reason.
void run(Device& dev, const KernelModule& lib, const char* name, Grid grid,
         const std::vector<Arg>& args) {
  dev.launch(lib.kernel(name), grid, args);
  dev.synchronize();
}

std::string grid_str(Grid g) {
  return std::to_string(g.rows) + "x" + std::to_string(g.cols);
}

// --- references of the elementwise ops (docs/pe-isa.md semantics) -----------------------------

bool op_takes(uint8_t op, uint8_t dt) {
  const bool f = dt_float(dt), i = dt_int(dt), b = dt == kBool;
  switch (op) {
    case MTIA_PE_SE_ADD:
    case MTIA_PE_SE_SUB:
    case MTIA_PE_SE_MUL:
    case MTIA_PE_SE_DIV:
    case MTIA_PE_SE_MIN:
    case MTIA_PE_SE_MAX:
    case MTIA_PE_SE_ABS:
    case MTIA_PE_SE_NEG:
    case MTIA_PE_SE_RELU:
      return f || i;
    case MTIA_PE_SE_EXP:
    case MTIA_PE_SE_LOG:
    case MTIA_PE_SE_SQRT:
    case MTIA_PE_SE_RSQRT:
    case MTIA_PE_SE_TANH:
    case MTIA_PE_SE_ERF:
    case MTIA_PE_SE_SIGMOID:
    case MTIA_PE_SE_SILU:
      return f;
    case MTIA_PE_SE_BAND:
    case MTIA_PE_SE_BOR:
    case MTIA_PE_SE_BXOR:
    case MTIA_PE_SE_BNOT:
      return i || b;
    default:
      return true;  // comparisons and logical ops
  }
}
bool bool_out(uint8_t op) {
  return op >= MTIA_PE_SE_EQ && op <= MTIA_PE_SE_LNOT;
}
// The transcendental ops are the units' own approximations: compared with a tolerance.
bool exact_op(uint8_t op) {
  return !(op >= MTIA_PE_SE_EXP && op <= MTIA_PE_SE_SIGMOID) && op != MTIA_PE_SE_SILU;
}

double ref_unary(uint8_t op, uint8_t dt, double a) {
  if (op == MTIA_PE_SE_LNOT) return a == 0 ? 1 : 0;
  if (dt_float(dt)) {
    const auto x = static_cast<float>(a);
    float r = 0;
    switch (op) {
      case MTIA_PE_SE_ABS:
        r = std::fabs(x);
        break;
      case MTIA_PE_SE_NEG:
        r = -x;
        break;
      case MTIA_PE_SE_RELU:
        r = x > 0 ? x : 0.0f;
        break;
      case MTIA_PE_SE_EXP:
        r = std::exp(x);
        break;
      case MTIA_PE_SE_LOG:
        r = std::log(x);
        break;
      case MTIA_PE_SE_SQRT:
        r = std::sqrt(x);
        break;
      case MTIA_PE_SE_RSQRT:
        r = 1.0f / std::sqrt(x);
        break;
      case MTIA_PE_SE_TANH:
        r = std::tanh(x);
        break;
      case MTIA_PE_SE_ERF:
        r = std::erf(x);
        break;
      case MTIA_PE_SE_SIGMOID:
        r = 1.0f / (1.0f + std::exp(-x));
        break;
      case MTIA_PE_SE_SILU:
        r = x / (1.0f + std::exp(-x));
        break;
      default:
        FAIL("no reference for unary op " << int(op));
    }
    return round_to(dt, r);
  }
  const auto v = static_cast<int64_t>(a);
  switch (op) {
    case MTIA_PE_SE_ABS:
      return wrap(dt, v < 0 ? -v : v);
    case MTIA_PE_SE_NEG:
      return wrap(dt, -v);
    case MTIA_PE_SE_RELU:
      return v > 0 ? static_cast<double>(v) : 0;
    case MTIA_PE_SE_BNOT:
      return dt == kBool ? (v == 0 ? 1 : 0) : wrap(dt, ~v);
    default:
      FAIL("no reference for unary op " << int(op));
  }
  return 0;
}

double ref_binary(uint8_t op, uint8_t dt, double a, double b) {
  switch (op) {
    case MTIA_PE_SE_EQ:
      return a == b;
    case MTIA_PE_SE_NE:
      return a != b;
    case MTIA_PE_SE_LT:
      return a < b;
    case MTIA_PE_SE_LE:
      return a <= b;
    case MTIA_PE_SE_GT:
      return a > b;
    case MTIA_PE_SE_GE:
      return a >= b;
    case MTIA_PE_SE_LAND:
      return a != 0 && b != 0;
    case MTIA_PE_SE_LOR:
      return a != 0 || b != 0;
    case MTIA_PE_SE_LXOR:
      return (a != 0) != (b != 0);
    default:
      break;
  }
  if (dt_float(dt)) {
    const auto x = static_cast<float>(a), y = static_cast<float>(b);
    float r = 0;
    switch (op) {
      case MTIA_PE_SE_ADD:
        r = x + y;
        break;
      case MTIA_PE_SE_SUB:
        r = x - y;
        break;
      case MTIA_PE_SE_MUL:
        r = x * y;
        break;
      case MTIA_PE_SE_DIV:
        r = x / y;
        break;
      case MTIA_PE_SE_MIN:
        r = std::min(x, y);
        break;
      case MTIA_PE_SE_MAX:
        r = std::max(x, y);
        break;
      default:
        FAIL("no reference for binary op " << int(op));
    }
    return round_to(dt, r);
  }
  const auto x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
  switch (op) {
    case MTIA_PE_SE_ADD:
      return wrap(dt, x + y);
    case MTIA_PE_SE_SUB:
      return wrap(dt, x - y);
    case MTIA_PE_SE_MUL:
      return wrap(dt, x * y);
    case MTIA_PE_SE_DIV:
      return wrap(dt, x / y);  // truncates toward zero; the test never divides by zero
    case MTIA_PE_SE_MIN:
      return static_cast<double>(std::min(x, y));
    case MTIA_PE_SE_MAX:
      return static_cast<double>(std::max(x, y));
    case MTIA_PE_SE_BAND:
      return static_cast<double>(x & y);
    case MTIA_PE_SE_BOR:
      return static_cast<double>(x | y);
    case MTIA_PE_SE_BXOR:
      return static_cast<double>(x ^ y);
    default:
      FAIL("no reference for binary op " << int(op));
  }
  return 0;
}

double ref_cast(uint8_t from, uint8_t to, double v) {
  if (to == kBool) return v != 0 || std::isnan(v) ? 1 : 0;
  if (dt_float(to)) return round_to(to, v);
  if (dt_float(from)) {  // truncate toward zero, saturate, NaN -> 0
    if (std::isnan(v)) return 0;
    const double lo = to == kI8 ? -128.0 : to == kI32 ? -2147483648.0 : -9223372036854775808.0;
    const double hi = to == kI8 ? 127.0 : to == kI32 ? 2147483647.0 : 9223372036854775807.0;
    return std::min(std::max(std::trunc(v), lo), hi);
  }
  return wrap(to, static_cast<int64_t>(v));  // integers wrap
}

const std::vector<uint8_t> kAllDtypes = {kF32, kF16, kBF16, kI8, kI32, kI64, kBool};

// The library, loaded into a device opened with `options`.
struct Lib {
  Device dev;
  KernelModule lib;
  explicit Lib(const DeviceOptions& options = test::functional_options())
      : dev(Device::open(options)), lib(dev.load_module(MTIA_KERNEL_LIBRARY_ELF)) {}
};

}  // namespace

// ============================================================================================
// Elementwise kernels
// ============================================================================================

TEST_CASE("library fill and copy through the device, every dtype", "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16, kI8, kI32, kI64, kBool);
  const Grid grid = GENERATE(Grid{1, 1}, Grid{8, 8});
  INFO(dt_name(dt) << " on " << grid_str(grid));
  Lib l;
  std::mt19937 rng(100 + dt);
  const Shape size{2, 3, 7, 37};

  // fill into a transposed, padded view: the gaps keep their bytes.
  Tensor out = make_tensor(l.dev, dt, size, odd_strides(size));
  const double value = dt_float(dt) ? round_to(dt, -1.375) : dt == kBool ? 1 : -77;
  run(l.dev, l.lib, "fill", grid,
      cat(cat({out.ptr, Arg::dtype(dt), static_cast<int64_t>(bits_of(dt, value))}, out.sizes()),
          out.strides()));
  check_tensor(
      l.dev, out, [&](const Shape&) { return value; }, {}, "fill");

  // copy from that layout into a contiguous one.
  randomize(l.dev, out, rng);
  Tensor dense = make_tensor(l.dev, dt, size);
  run(l.dev, l.lib, "copy", grid,
      cat(cat(cat({dense.ptr, out.ptr, Arg::dtype(dt)}, dense.sizes()), dense.strides()),
          out.strides()));
  check_tensor(
      l.dev, dense, [&](const Shape& i) { return out.at(i); }, {}, "copy");

  // copy of a row vector broadcast (source strides 0) over a padded output.
  Tensor row = make_tensor(l.dev, dt, {1, 1, 1, 37});
  randomize(l.dev, row, rng);
  Tensor wide = make_tensor(l.dev, dt, size, permuted(size, {0, 1, 2, 3}, 5));
  run(l.dev, l.lib, "copy", grid,
      cat(cat(cat({wide.ptr, row.ptr, Arg::dtype(dt)}, wide.sizes()), wide.strides()),
          {int64_t{0}, int64_t{0}, int64_t{0}, int64_t{1}}));
  check_tensor(
      l.dev, wide,
      [&](const Shape& i) {
        return row.at({0, 0, 0, i[3]});
      },
      {}, "broadcast copy");
}

TEST_CASE("library cast through the device, every dtype pair", "[kernels][library]") {
  const uint8_t from = GENERATE(kF32, kF16, kBF16, kI8, kI32, kI64, kBool);
  Lib l;
  std::mt19937 rng(200 + from);
  const Shape size{1, 2, 9, 33};
  Tensor in = make_tensor(l.dev, from, size, odd_strides(size));
  randomize(l.dev, in, rng, -300, 300);  // beyond int8: floats saturate, integers wrap
  for (uint8_t to : kAllDtypes) {
    const Grid grid = to % 2 == 0 ? Grid{8, 8} : Grid{1, 1};
    Tensor out = make_tensor(l.dev, to, size);
    run(l.dev, l.lib, "cast", grid,
        cat(cat(cat({out.ptr, in.ptr, Arg::dtype(to), Arg::dtype(from)}, out.sizes()),
                out.strides()),
            in.strides()));
    check_tensor(
        l.dev, out, [&](const Shape& i) { return ref_cast(from, to, in.at(i)); }, {},
        "cast " + dt_name(from) + " -> " + dt_name(to) + " on " + grid_str(grid));
  }
}

TEST_CASE("library unary ops through the device, each dtype they take", "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16, kI8, kI32, kI64, kBool);
  Lib l;
  std::mt19937 rng(300 + dt);
  const Shape size{2, 1, 5, 53};
  int runs = 0;
  for (uint8_t op :
       {MTIA_PE_SE_ABS, MTIA_PE_SE_NEG, MTIA_PE_SE_RELU, MTIA_PE_SE_EXP, MTIA_PE_SE_LOG,
        MTIA_PE_SE_SQRT, MTIA_PE_SE_RSQRT, MTIA_PE_SE_TANH, MTIA_PE_SE_ERF, MTIA_PE_SE_SIGMOID,
        MTIA_PE_SE_SILU, MTIA_PE_SE_LNOT, MTIA_PE_SE_BNOT}) {
    if (!op_takes(op, dt)) continue;
    ++runs;
    Tensor a = make_tensor(l.dev, dt, size, odd_strides(size));
    const bool positive = op == MTIA_PE_SE_LOG || op == MTIA_PE_SE_SQRT || op == MTIA_PE_SE_RSQRT;
    randomize(l.dev, a, rng, positive ? 0.05 : -4, 4);
    const uint8_t out_dt = bool_out(op) ? kBool : dt;
    Tensor out = make_tensor(l.dev, out_dt, size);
    const Grid grid = runs % 2 == 0 ? Grid{8, 8} : Grid{1, 1};
    run(l.dev, l.lib, "unary", grid,
        cat(cat(cat({out.ptr, a.ptr, int64_t{op}, Arg::dtype(dt)}, out.sizes()), out.strides()),
            a.strides()));
    check_tensor(
        l.dev, out, [&](const Shape& i) { return ref_unary(op, dt, a.at(i)); },
        exact_op(op) ? Tol{} : tol_for(out_dt),
        "unary op " + std::to_string(op) + " " + dt_name(dt) + " on " + grid_str(grid));
  }
  // Numeric: abs neg relu; floating: 8 more; any: logical_not; int and bool: bitwise_not.
  CHECK(runs == (dt_float(dt) ? 12 : dt == kBool ? 2 : 5));
}

TEST_CASE("library binary and binary_scalar through the device, with broadcasting",
          "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16, kI8, kI32, kI64, kBool);
  const Grid grid = GENERATE(Grid{1, 1}, Grid{8, 8});
  Lib l;
  std::mt19937 rng(400 + dt * 2 + grid.rows);
  const Shape size{2, 3, 5, 41};
  // a: transposed and padded; b: one value per (dim 1, dim 3), broadcast over dims 0 and 2.
  Tensor a = make_tensor(l.dev, dt, size, odd_strides(size));
  Tensor b = make_tensor(l.dev, dt, {1, 3, 1, 41});
  randomize(l.dev, a, rng, -4, 4);
  randomize(l.dev, b, rng, -4, 4);
  for (int64_t k = 0; k < 3 * 41; ++k) {  // no zero divisors
    const Shape i{0, k / 41, 0, k % 41};
    if (b.at(i) == 0) b.set(i, dt == kBool ? 1 : 3);
  }
  b.upload(l.dev);
  const std::vector<Arg> b_strides = {int64_t{0}, b.stride[1], int64_t{0}, b.stride[3]};
  for (uint8_t op : {MTIA_PE_SE_ADD, MTIA_PE_SE_SUB, MTIA_PE_SE_MUL, MTIA_PE_SE_DIV, MTIA_PE_SE_MIN,
                     MTIA_PE_SE_MAX, MTIA_PE_SE_EQ, MTIA_PE_SE_NE, MTIA_PE_SE_LT, MTIA_PE_SE_LE,
                     MTIA_PE_SE_GT, MTIA_PE_SE_GE, MTIA_PE_SE_LAND, MTIA_PE_SE_LOR, MTIA_PE_SE_LXOR,
                     MTIA_PE_SE_BAND, MTIA_PE_SE_BOR, MTIA_PE_SE_BXOR}) {
    if (!op_takes(op, dt)) continue;
    const uint8_t out_dt = bool_out(op) ? kBool : dt;
    Tensor out = make_tensor(l.dev, out_dt, size);
    run(l.dev, l.lib, "binary", grid,
        cat(cat(cat(cat({out.ptr, a.ptr, b.ptr, int64_t{op}, Arg::dtype(dt)}, out.sizes()),
                    out.strides()),
                a.strides()),
            b_strides));
    check_tensor(
        l.dev, out,
        [&](const Shape& i) {
          return ref_binary(op, dt, a.at(i), b.at({0, i[1], 0, i[3]}));
        },
        {}, "binary op " + std::to_string(op) + " " + dt_name(dt) + " on " + grid_str(grid));
  }
  // binary_scalar: b is an immediate bit pattern of dt.
  const double scalar = dt_float(dt) ? round_to(dt, -1.25) : dt == kBool ? 1 : -3;
  for (uint8_t op :
       {MTIA_PE_SE_MUL, MTIA_PE_SE_SUB, MTIA_PE_SE_DIV, MTIA_PE_SE_GT, MTIA_PE_SE_BXOR}) {
    if (!op_takes(op, dt)) continue;
    const uint8_t out_dt = bool_out(op) ? kBool : dt;
    Tensor out = make_tensor(l.dev, out_dt, size, permuted(size, {3, 2, 1, 0}));
    run(l.dev, l.lib, "binary_scalar", grid,
        cat(cat(cat({out.ptr, a.ptr, int64_t{op}, Arg::dtype(dt),
                     static_cast<int64_t>(bits_of(dt, scalar))},
                    out.sizes()),
                out.strides()),
            a.strides()));
    check_tensor(
        l.dev, out, [&](const Shape& i) { return ref_binary(op, dt, a.at(i), scalar); }, {},
        "binary_scalar op " + std::to_string(op) + " " + dt_name(dt) + " on " + grid_str(grid));
  }
}

TEST_CASE("library where and clamp through the device", "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16, kI8, kI32, kI64, kBool);
  Lib l;
  std::mt19937 rng(500 + dt);
  const Shape size{2, 2, 11, 29};
  const Grid grid = dt % 2 == 0 ? Grid{8, 8} : Grid{1, 1};
  Tensor cond = make_tensor(l.dev, kBool, {1, 1, 11, 29});  // broadcast over dims 0 and 1
  Tensor a = make_tensor(l.dev, dt, size, odd_strides(size));
  Tensor b = make_tensor(l.dev, dt, size);
  randomize(l.dev, cond, rng);
  randomize(l.dev, a, rng, -5, 5);
  randomize(l.dev, b, rng, -5, 5);
  Tensor out = make_tensor(l.dev, dt, size);
  run(l.dev, l.lib, "where", grid,
      cat(cat(cat(cat(cat({out.ptr, cond.ptr, a.ptr, b.ptr, Arg::dtype(dt)}, out.sizes()),
                      out.strides()),
                  {int64_t{0}, int64_t{0}, cond.stride[2], cond.stride[3]}),
              a.strides()),
          b.strides()));
  check_tensor(
      l.dev, out,
      [&](const Shape& i) {
        return cond.at({0, 0, i[2], i[3]}) != 0 ? a.at(i) : b.at(i);
      },
      {}, "where " + dt_name(dt) + " on " + grid_str(grid));

  if (dt == kBool) return;  // clamp takes numeric dtypes
  const double lo = dt_float(dt) ? round_to(dt, -1.5) : -40, hi = dt_float(dt) ? 2.25 : 55;
  if (dt_int(dt)) randomize(l.dev, a, rng);  // +-100 / +-1000: both bounds bite
  Tensor clamped = make_tensor(l.dev, dt, size, permuted(size, {0, 1, 2, 3}, 2));
  run(l.dev, l.lib, "clamp", grid,
      cat(cat(cat({clamped.ptr, a.ptr, Arg::dtype(dt), static_cast<int64_t>(bits_of(dt, lo)),
                   static_cast<int64_t>(bits_of(dt, hi))},
                  clamped.sizes()),
              clamped.strides()),
          a.strides()));
  check_tensor(
      l.dev, clamped, [&](const Shape& i) { return std::min(std::max(a.at(i), lo), hi); }, {},
      "clamp " + dt_name(dt) + " on " + grid_str(grid));
}

// ============================================================================================
// Reductions
// ============================================================================================

namespace {

Shape reduced(Shape s, int dim) {
  s[dim] = 1;
  return s;
}

std::vector<double> along(const Tensor& in, Shape o, int dim) {
  std::vector<double> v;
  for (int64_t r = 0; r < in.size[dim]; ++r) {
    o[dim] = r;
    v.push_back(in.at(o));
  }
  return v;
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double var_of(const std::vector<double>& v, int64_t correction) {
  const double m = sum_of(v) / static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(std::max<int64_t>(static_cast<int64_t>(v.size()) - correction, 0));
}

// A floating reduction: the output dtype's rounding plus fp32 accumulation error relative to
// the sum of magnitudes (the device sums in its own order). Integer outputs are exact.
void check_reduction(Device& dev, Tensor& out, const Tensor& in, int dim,
                     const std::function<double(const std::vector<double>&)>& ref, double acc_rel,
                     bool average, const std::string& what) {
  out.download(dev);
  int64_t bad = 0;
  std::string first;
  const Tol t = tol_for(out.dt);
  for_each(out.size, [&](const Shape& o) {
    const auto v = along(in, o, dim);
    double mag = 0;
    for (double x : v) mag += std::fabs(x);
    if (average) mag /= static_cast<double>(v.size());
    const double want = ref(v), got = out.at(o);
    const double allowed = dt_float(out.dt) ? t.abs + t.rel * std::fabs(want) + acc_rel * mag : 0;
    if (std::fabs(got - want) > allowed && bad++ == 0) {
      std::ostringstream s;
      s << shape_str(o) << " got " << got << " want " << want;
      first = s.str();
    }
  });
  INFO(what << ": " << bad << " mismatches, first " << first);
  CHECK(bad == 0);
}

// Input layouts for the reductions: contiguous, transposed and padded, fully scrambled.
Shape reduce_strides(const Shape& size, int variant) {
  switch (variant % 3) {
    case 0:
      return contiguous(size);
    case 1:
      return permuted(size, {0, 1, 3, 2}, 3);
    default:
      return permuted(size, {3, 2, 0, 1});
  }
}

}  // namespace

TEST_CASE("library sum, mean, var, amax and amin through the device along each dim",
          "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16, kI8, kI32, kI64, kBool);
  const Grid grid = GENERATE(Grid{1, 1}, Grid{8, 8});
  Lib l;
  std::mt19937 rng(600 + dt * 2 + grid.rows);
  const Shape size{3, 4, 9, 23};
  for (int dim = 0; dim < 4; ++dim) {
    const std::string where = " dim " + std::to_string(dim) + " on " + grid_str(grid);
    Tensor in = make_tensor(l.dev, dt, size, reduce_strides(size, dim));
    randomize(l.dev, in, rng, -2, 6);
    const Shape os = reduced(size, dim);
    auto tail = [&](const Tensor& out) {
      return cat(cat(in.sizes(), in.strides()), out.strides());
    };

    const uint8_t sum_dt = dt_float(dt) ? (dim % 2 == 0 ? dt : kF32) : (dim % 2 == 0 ? kI64 : kI32);
    Tensor sum =
        make_tensor(l.dev, sum_dt, os, dim % 2 ? permuted(os, {3, 2, 1, 0}, 1) : contiguous(os));
    run(l.dev, l.lib, "sum", grid,
        cat({sum.ptr, in.ptr, Arg::dtype(dt), Arg::dtype(sum_dt), int64_t{dim}}, tail(sum)));
    check_reduction(l.dev, sum, in, dim, sum_of, 2e-6, false,
                    "sum " + dt_name(dt) + " -> " + dt_name(sum_dt) + where);

    for (const char* k : {"amax", "amin"}) {
      Tensor out = make_tensor(l.dev, dt, os);
      run(l.dev, l.lib, k, grid, cat({out.ptr, in.ptr, Arg::dtype(dt), int64_t{dim}}, tail(out)));
      const bool is_max = k[2] == 'a';
      check_tensor(
          l.dev, out,
          [&](const Shape& o) {
            const auto v = along(in, o, dim);
            return is_max ? *std::max_element(v.begin(), v.end())
                          : *std::min_element(v.begin(), v.end());
          },
          {}, std::string(k) + " " + dt_name(dt) + where);
    }

    if (!dt_float(dt)) continue;  // mean and var take floating dtypes
    Tensor mean = make_tensor(l.dev, dt, os);
    run(l.dev, l.lib, "mean", grid,
        cat({mean.ptr, in.ptr, Arg::dtype(dt), int64_t{dim}}, tail(mean)));
    check_reduction(
        l.dev, mean, in, dim,
        [](const std::vector<double>& v) { return sum_of(v) / static_cast<double>(v.size()); },
        2e-6, true, "mean " + dt_name(dt) + where);
    const int64_t correction = dim % 2;
    Tensor var = make_tensor(l.dev, dt, os, permuted(os, {2, 3, 0, 1}));
    run(l.dev, l.lib, "var", grid,
        cat({var.ptr, in.ptr, Arg::dtype(dt), correction, int64_t{dim}}, tail(var)));
    check_reduction(
        l.dev, var, in, dim, [&](const std::vector<double>& v) { return var_of(v, correction); },
        1e-5, true, "var " + dt_name(dt) + " correction " + std::to_string(correction) + where);
  }
}

TEST_CASE("library max_dim and min_dim through the device: values and first indices",
          "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16, kI8, kI32, kI64, kBool);
  Lib l;
  std::mt19937 rng(700 + dt);
  const Shape size{2, 3, 8, 19};
  for (int dim = 0; dim < 4; ++dim) {
    const Grid grid = dim % 2 == 0 ? Grid{8, 8} : Grid{1, 1};
    Tensor in = make_tensor(l.dev, dt, size, reduce_strides(size, dim + 1));
    randomize(l.dev, in, rng, -2, 2);
    if (dt_float(dt)) {  // few distinct values: ties are common and the first index matters
      for_each(size, [&](const Shape& i) { in.set(i, std::round(in.at(i))); });
      in.upload(l.dev);
    }
    const Shape os = reduced(size, dim);
    for (const char* k : {"max_dim", "min_dim"}) {
      const bool is_max = k[1] == 'a';
      Tensor values = make_tensor(l.dev, dt, os);
      Tensor indices = make_tensor(l.dev, kI64, os, permuted(os, {3, 2, 1, 0}));
      run(l.dev, l.lib, k, grid,
          cat(cat(cat(cat({values.ptr, indices.ptr, in.ptr, Arg::dtype(dt), int64_t{dim}},
                          in.sizes()),
                      in.strides()),
                  values.strides()),
              indices.strides()));
      auto pick = [&](const Shape& o) {
        const auto v = along(in, o, dim);
        size_t best = 0;
        for (size_t r = 1; r < v.size(); ++r) {
          if (is_max ? v[r] > v[best] : v[r] < v[best]) best = r;
        }
        return std::make_pair(v[best], static_cast<double>(best));
      };
      const std::string what = std::string(k) + " " + dt_name(dt) + " dim " + std::to_string(dim) +
                               " on " + grid_str(grid);
      check_tensor(
          l.dev, values, [&](const Shape& o) { return pick(o).first; }, {}, what + " values");
      check_tensor(
          l.dev, indices, [&](const Shape& o) { return pick(o).second; }, {}, what + " indices");
    }
  }
}

// ============================================================================================
// softmax, log_softmax, layer_norm
// ============================================================================================

namespace {

// softmax / log_softmax of `in` along `dim` in double precision; each line's max and sum of
// exponentials are computed once.
std::function<double(const Shape&)> ref_softmax(const Tensor& in, int dim, bool log_form) {
  Shape lines = in.size;
  lines[dim] = 1;
  auto stats = std::make_shared<std::vector<std::pair<double, double>>>();
  for_each(lines, [&](const Shape& line) {
    Shape o = line;
    double m = -INFINITY, s = 0;
    for (o[dim] = 0; o[dim] < in.size[dim]; ++o[dim]) m = std::max(m, in.at(o));
    for (o[dim] = 0; o[dim] < in.size[dim]; ++o[dim]) s += std::exp(in.at(o) - m);
    stats->push_back({m, s});
  });
  return [&in, dim, log_form, lines, stats](const Shape& i) {
    Shape o = i;
    o[dim] = 0;
    const int64_t line = ((o[0] * lines[1] + o[1]) * lines[2] + o[2]) * lines[3] + o[3];
    const auto [m, s] = (*stats)[static_cast<size_t>(line)];
    return log_form ? (in.at(i) - m) - std::log(s) : std::exp(in.at(i) - m) / s;
  };
}

Tol tol_norm(uint8_t dt) {
  return dt == kF32 ? Tol{2e-5, 2e-6} : tol_for(dt);
}

void run_softmax(Lib& l, bool log_form, const Tensor& out, const Tensor& in, int dim, Grid grid) {
  run(l.dev, l.lib, log_form ? "log_softmax" : "softmax", grid,
      cat(cat(cat({out.ptr, in.ptr, Arg::dtype(in.dt), int64_t{dim}}, in.sizes()), in.strides()),
          out.strides()));
}

struct LayerNormRef {
  std::vector<double> mean, rstd;
};
LayerNormRef layer_norm_stats(const Tensor& x, double eps) {
  LayerNormRef r;
  const int64_t rows = x.size[2], cols = x.size[3];
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0, q = 0;
    for (int64_t j = 0; j < cols; ++j) s += x.at({0, 0, i, j});
    const double m = s / static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) q += (x.at({0, 0, i, j}) - m) * (x.at({0, 0, i, j}) - m);
    r.mean.push_back(m);
    r.rstd.push_back(1.0 / std::sqrt(q / static_cast<double>(cols) + eps));
  }
  return r;
}

// x, out: [1, 1, rows, cols] views; weight and bias [cols]; mean and rstd [rows] fp32.
void layer_norm_case(Lib& l, uint8_t dt, int64_t rows, int64_t cols, bool column_major,
                     int64_t flags, Grid grid, std::mt19937& rng) {
  const Shape size{1, 1, rows, cols};
  Tensor x =
      make_tensor(l.dev, dt, size,
                  column_major ? permuted(size, {0, 1, 3, 2}) : permuted(size, {0, 1, 2, 3}, 5));
  randomize(l.dev, x, rng, -3, 5);
  Tensor w = make_tensor(l.dev, dt, {1, 1, 1, cols}), b = make_tensor(l.dev, dt, {1, 1, 1, cols});
  randomize(l.dev, w, rng, 0.5, 1.5);
  randomize(l.dev, b, rng, -1, 1);
  Tensor out =
      make_tensor(l.dev, dt, size, column_major ? contiguous(size) : permuted(size, {0, 1, 3, 2}));
  Tensor mean = make_tensor(l.dev, kF32, {1, 1, rows, 1}),
         rstd = make_tensor(l.dev, kF32, {1, 1, rows, 1});
  const float eps = 1e-5f;
  run(l.dev, l.lib, "layer_norm", grid,
      {out.ptr, mean.ptr, rstd.ptr, x.ptr, w.ptr, b.ptr, Arg::dtype(dt), flags, eps, rows, cols,
       x.stride[2], x.stride[3], out.stride[2], out.stride[3]});
  const LayerNormRef ref = layer_norm_stats(x, eps);
  const std::string what = "layer_norm " + dt_name(dt) + " " + std::to_string(rows) + "x" +
                           std::to_string(cols) + " flags " + std::to_string(flags) +
                           (column_major ? " column-major" : "") + " on " + grid_str(grid);
  check_tensor(
      l.dev, out,
      [&](const Shape& i) {
        double y = (x.at(i) - ref.mean[i[2]]) * ref.rstd[i[2]];
        if (flags & 1) y *= w.at({0, 0, 0, i[3]});
        if (flags & 2) y += b.at({0, 0, 0, i[3]});
        return y;
      },
      dt == kF32 ? Tol{1e-4, 1e-5} : tol_for(dt), what);
  if (flags & 4) {
    check_tensor(
        l.dev, mean, [&](const Shape& i) { return ref.mean[i[2]]; }, {1e-5, 1e-6}, what + " mean");
    check_tensor(
        l.dev, rstd, [&](const Shape& i) { return ref.rstd[i[2]]; }, {1e-4, 1e-6}, what + " rstd");
  } else {
    for (Tensor* t : {&mean, &rstd}) {
      t->download(l.dev);
      INFO(what << ": mean and rstd are written only with flag 4");
      CHECK(std::all_of(t->host.begin(), t->host.end(), [](uint8_t v) { return v == kGapByte; }));
    }
  }
}

}  // namespace

TEST_CASE("library softmax and log_softmax through the device along each dim",
          "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16);
  const Grid grid = GENERATE(Grid{1, 1}, Grid{8, 8});
  Lib l;
  std::mt19937 rng(800 + dt * 2 + grid.rows);
  const Shape size{2, 3, 7, 29};
  for (int dim = 0; dim < 4; ++dim) {
    for (bool log_form : {false, true}) {
      Tensor in = make_tensor(l.dev, dt, size,
                              dim % 2 ? permuted(size, {0, 1, 3, 2}, 2) : contiguous(size));
      randomize(l.dev, in, rng, -6, 6);
      Tensor out =
          make_tensor(l.dev, dt, size, dim == 2 ? permuted(size, {3, 2, 1, 0}) : contiguous(size));
      run_softmax(l, log_form, out, in, dim, grid);
      check_tensor(l.dev, out, ref_softmax(in, dim, log_form), tol_norm(dt),
                   std::string(log_form ? "log_softmax " : "softmax ") + dt_name(dt) + " dim " +
                       std::to_string(dim) + " on " + grid_str(grid));
    }
  }
}

TEST_CASE("library layer_norm through the device, with and without weight, bias and statistics",
          "[kernels][library]") {
  const uint8_t dt = GENERATE(kF32, kF16, kBF16);
  Lib l;
  std::mt19937 rng(900 + dt);
  layer_norm_case(l, dt, 13, 77, false, 7, Grid{8, 8}, rng);
  layer_norm_case(l, dt, 13, 77, false, 1, Grid{1, 1}, rng);
  layer_norm_case(l, dt, 9, 45, true, 3, Grid{8, 8}, rng);  // column-major: the other tile axis
  layer_norm_case(l, dt, 5, 30, true, 0, Grid{1, 1}, rng);
}

// ============================================================================================
// matmul, bmm, addmm
// ============================================================================================

namespace {

enum class MatLayout { kRowMajor, kColMajor, kPadded };

// A [batch, rows, cols] operand as the view [1, batch, rows, cols].
Tensor matrix(Device& dev, uint8_t dt, int64_t batch, int64_t rows, int64_t cols, MatLayout l) {
  const Shape size{1, batch, rows, cols};
  switch (l) {
    case MatLayout::kRowMajor:
      return make_tensor(dev, dt, size);
    case MatLayout::kColMajor:
      return make_tensor(dev, dt, size, permuted(size, {0, 1, 3, 2}));
    default: {
      // Padded rows and a column stride of 2: a layout the DPE flags cannot express.
      Shape st = permuted(size, {0, 1, 2, 3}, cols + 7);
      st[3] = 2;
      return make_tensor(dev, dt, size, st);
    }
  }
}

// out[b] = alpha * A[b] @ B[b] + beta * bias; an operand with batch size 1 is broadcast.
struct MatmulRef {
  const Tensor* a;
  const Tensor* b;
  const Tensor* bias = nullptr;  // [1, 1, m or 1, n or 1]
  double alpha = 1, beta = 0;

  double at(int64_t bi, int64_t i, int64_t j, double* mag) const {
    double s = 0, m = 0;
    const int64_t ab = a->size[1] == 1 ? 0 : bi, bb = b->size[1] == 1 ? 0 : bi;
    for (int64_t l = 0; l < a->size[3]; ++l) {
      const double p = a->at({0, ab, i, l}) * b->at({0, bb, l, j});
      s += p;
      m += std::fabs(p);
    }
    double v = alpha * s;
    m *= std::fabs(alpha);
    if (bias != nullptr && beta != 0) {
      const double bv = bias->at({0, 0, bias->size[2] == 1 ? 0 : i, bias->size[3] == 1 ? 0 : j});
      v += beta * bv;
      m += std::fabs(beta * bv);
    }
    *mag = m;
    return v;
  }
};

void check_matmul(Device& dev, Tensor& c, const MatmulRef& ref, const std::string& what) {
  c.download(dev);
  const Tol t = tol_for(c.dt);
  int64_t bad = 0;
  std::string first;
  for_each(c.size, [&](const Shape& i) {
    double mag;
    const double want = ref.at(i[1], i[2], i[3], &mag), got = c.at(i);
    // fp32 accumulation in the device's order, then one rounding; int8 -> int32 is exact.
    const double allowed = dt_float(c.dt) ? t.abs + t.rel * std::fabs(want) + 4e-6 * mag : 0;
    if (std::fabs(got - want) > allowed && bad++ == 0) {
      std::ostringstream s;
      s << "[" << i[1] << "," << i[2] << "," << i[3] << "] got " << got << " want " << want;
      first = s.str();
    }
  });
  INFO(what << ": " << bad << " mismatches, first " << first);
  CHECK(bad == 0);
}

void run_matmul(Lib& l, const Tensor& c, const Tensor& a, const Tensor& b, Grid grid) {
  run(l.dev, l.lib, "matmul", grid,
      {c.ptr, a.ptr, b.ptr, Arg::dtype(a.dt), Arg::dtype(c.dt), a.size[2], b.size[3], a.size[3],
       a.stride[2], a.stride[3], b.stride[2], b.stride[3], c.stride[2], c.stride[3]});
}

int64_t batch_stride(const Tensor& t) {
  return t.size[1] == 1 ? 0 : t.stride[1];
}

void run_bmm(Lib& l, const Tensor& c, const Tensor& a, const Tensor& b, Grid grid) {
  run(l.dev, l.lib, "bmm", grid,
      {c.ptr, a.ptr, b.ptr, Arg::dtype(a.dt), Arg::dtype(c.dt), c.size[1], a.size[2], b.size[3],
       a.size[3], batch_stride(a), a.stride[2], a.stride[3], batch_stride(b), b.stride[2],
       b.stride[3], c.stride[1], c.stride[2], c.stride[3]});
}

void run_addmm(Lib& l, const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b,
               float alpha, float beta, Grid grid) {
  run(l.dev, l.lib, "addmm", grid,
      {out.ptr, bias.ptr, a.ptr, b.ptr, Arg::dtype(a.dt), Arg::dtype(out.dt), a.size[2], b.size[3],
       a.size[3], alpha, beta, bias.size[2] == 1 ? int64_t{0} : bias.stride[2],
       bias.size[3] == 1 ? int64_t{0} : bias.stride[3], a.stride[2], a.stride[3], b.stride[2],
       b.stride[3], out.stride[2], out.stride[3]});
}

struct DtypePair {
  uint8_t in, out;
};

}  // namespace

TEST_CASE("library matmul through the device, every dtype pair and operand layout",
          "[kernels][library]") {
  const DtypePair p =
      GENERATE(DtypePair{kF32, kF32}, DtypePair{kF16, kF16}, DtypePair{kF16, kF32},
               DtypePair{kBF16, kBF16}, DtypePair{kBF16, kF32}, DtypePair{kI8, kI32});
  const Grid grid = GENERATE(Grid{1, 1}, Grid{8, 8});
  Lib l;
  std::mt19937 rng(1000 + p.in * 10 + p.out + grid.rows);
  const std::string what =
      "matmul " + dt_name(p.in) + " -> " + dt_name(p.out) + " on " + grid_str(grid);
  // Row-major operands, sizes that are no multiple of any tile.
  Tensor a = matrix(l.dev, p.in, 1, 37, 45, MatLayout::kRowMajor);
  Tensor b = matrix(l.dev, p.in, 1, 45, 29, MatLayout::kRowMajor);
  randomize(l.dev, a, rng);
  randomize(l.dev, b, rng);
  Tensor c = matrix(l.dev, p.out, 1, 37, 29, MatLayout::kRowMajor);
  run_matmul(l, c, a, b, grid);
  check_matmul(l.dev, c, {&a, &b}, what);
  // Transposed (column-major) A and a gathered, padded B into a column-major C.
  Tensor at = matrix(l.dev, p.in, 1, 37, 45, MatLayout::kColMajor);
  Tensor bp = matrix(l.dev, p.in, 1, 45, 29, MatLayout::kPadded);
  randomize(l.dev, at, rng);
  randomize(l.dev, bp, rng);
  Tensor ct = matrix(l.dev, p.out, 1, 37, 29, MatLayout::kColMajor);
  run_matmul(l, ct, at, bp, grid);
  check_matmul(l.dev, ct, {&at, &bp}, what + ", A transposed, B padded");
}

TEST_CASE("library bmm through the device with per-batch and broadcast operands",
          "[kernels][library]") {
  const DtypePair p = GENERATE(DtypePair{kF32, kF32}, DtypePair{kF16, kF16}, DtypePair{kBF16, kF32},
                               DtypePair{kI8, kI32});
  Lib l;
  std::mt19937 rng(1100 + p.in * 10 + p.out);
  for (bool broadcast_a : {false, true}) {
    const Grid grid = broadcast_a ? Grid{8, 8} : Grid{1, 1};
    const int64_t batch = 3;
    Tensor a = matrix(l.dev, p.in, broadcast_a ? 1 : batch, 21, 17, MatLayout::kRowMajor);
    Tensor b = matrix(l.dev, p.in, batch, 17, 13,
                      broadcast_a ? MatLayout::kColMajor : MatLayout::kRowMajor);
    randomize(l.dev, a, rng);
    randomize(l.dev, b, rng);
    Tensor c = matrix(l.dev, p.out, batch, 21, 13, MatLayout::kPadded);
    run_bmm(l, c, a, b, grid);
    check_matmul(l.dev, c, {&a, &b},
                 "bmm " + dt_name(p.in) + " -> " + dt_name(p.out) +
                     (broadcast_a ? " broadcast A" : "") + " on " + grid_str(grid));
  }
}

TEST_CASE("library addmm through the device with a broadcast bias, alpha and beta",
          "[kernels][library]") {
  struct Case {
    DtypePair dt;
    float alpha, beta;
    bool row_vector;
  };
  const Case k = GENERATE(Case{{kF32, kF32}, 1, 1, true}, Case{{kF32, kF32}, 0.5f, 2, false},
                          Case{{kBF16, kBF16}, 1, 1, true}, Case{{kF16, kF32}, -1.5f, 0.25f, true},
                          Case{{kF16, kF16}, 2, -1, false});
  const Grid grid = GENERATE(Grid{1, 1}, Grid{8, 8});
  Lib l;
  std::mt19937 rng(1200 + k.dt.in * 10 + k.dt.out + grid.rows);
  const int64_t m = 23, n = 31, kk = 40;
  Tensor a = matrix(l.dev, k.dt.in, 1, m, kk, MatLayout::kRowMajor);
  Tensor b = matrix(l.dev, k.dt.in, 1, kk, n, MatLayout::kColMajor);  // x @ W.T
  Tensor bias = make_tensor(l.dev, k.dt.out, {1, 1, k.row_vector ? 1 : m, n});
  randomize(l.dev, a, rng);
  randomize(l.dev, b, rng);
  randomize(l.dev, bias, rng);
  Tensor out = matrix(l.dev, k.dt.out, 1, m, n, MatLayout::kRowMajor);
  run_addmm(l, out, bias, a, b, k.alpha, k.beta, grid);
  std::ostringstream what;
  what << "addmm " << dt_name(k.dt.in) << " -> " << dt_name(k.dt.out) << " alpha " << k.alpha
       << " beta " << k.beta << (k.row_vector ? " row-vector bias" : "") << " on "
       << grid_str(grid);
  check_matmul(l.dev, out, {&a, &b, &bias, k.alpha, k.beta}, what.str());
}

// ============================================================================================
// Both presets, timing parity, determinism
// ============================================================================================

namespace {

// A workload touching each family of kernels, sized to need several tiles on mtia-v1 (128 KiB
// local store) and fewer on mtia-v2 (384 KiB): returns the raw bytes of every output and the
// simulated time of each launch (events around it).
struct WorkloadResult {
  std::vector<std::vector<uint8_t>> outputs;
  std::vector<int64_t> elapsed_ps;
};

WorkloadResult run_workload(Lib& l, bool check) {
  std::mt19937 rng(1300);
  WorkloadResult result;
  auto timed = [&](const char* name, Grid grid, const std::vector<Arg>& args) {
    Event start = l.dev.create_event(), end = l.dev.create_event();
    l.dev.record(start);
    l.dev.launch(l.lib.kernel(name), grid, args);
    l.dev.record(end);
    l.dev.synchronize();
    result.elapsed_ps.push_back(l.dev.elapsed_ps(start, end));
    l.dev.destroy_event(start);
    l.dev.destroy_event(end);
  };
  auto keep = [&](Tensor& t) {
    t.download(l.dev);
    result.outputs.push_back(t.host);
  };

  // binary fp16 with a broadcast operand, on 64 PEs.
  const Shape size{2, 3, 33, 101};
  Tensor a = make_tensor(l.dev, kF16, size, odd_strides(size));
  Tensor b = make_tensor(l.dev, kF16, {1, 3, 1, 101});
  randomize(l.dev, a, rng);
  randomize(l.dev, b, rng);
  Tensor sum = make_tensor(l.dev, kF16, size);
  timed("binary", {8, 8},
        cat(cat(cat(cat({sum.ptr, a.ptr, b.ptr, int64_t{MTIA_PE_SE_ADD}, Arg::dtype(kF16)},
                        sum.sizes()),
                    sum.strides()),
                a.strides()),
            {int64_t{0}, b.stride[1], int64_t{0}, b.stride[3]}));
  if (check) {
    check_tensor(
        l.dev, sum,
        [&](const Shape& i) {
          return ref_binary(MTIA_PE_SE_ADD, kF16, a.at(i), b.at({0, i[1], 0, i[3]}));
        },
        {}, "binary");
  }
  keep(sum);

  // sum of fp16 along dim 2 into fp32, on 1 PE.
  Tensor red = make_tensor(l.dev, kF32, reduced(size, 2));
  timed("sum", {1, 1},
        cat(cat(cat({red.ptr, a.ptr, Arg::dtype(kF16), Arg::dtype(kF32), int64_t{2}}, a.sizes()),
                a.strides()),
            red.strides()));
  if (check) check_reduction(l.dev, red, a, 2, sum_of, 2e-6, false, "sum");
  keep(red);

  // softmax over rows of 40000 fp32: longer than a tile on mtia-v1 (the multi-pass path).
  const Shape rows{1, 1, 3, 40000};
  Tensor x = make_tensor(l.dev, kF32, rows);
  randomize(l.dev, x, rng, -8, 8);
  Tensor sm = make_tensor(l.dev, kF32, rows);
  timed("softmax", {2, 2},
        cat(cat(cat({sm.ptr, x.ptr, Arg::dtype(kF32), int64_t{3}}, x.sizes()), x.strides()),
            sm.strides()));
  if (check) check_tensor(l.dev, sm, ref_softmax(x, 3, false), tol_norm(kF32), "softmax");
  keep(sm);

  // layer_norm of 70 x 300 bf16 with everything on.
  const Shape ln{1, 1, 70, 300};
  Tensor lx = make_tensor(l.dev, kBF16, ln);
  Tensor w = make_tensor(l.dev, kBF16, {1, 1, 1, 300}),
         bias = make_tensor(l.dev, kBF16, {1, 1, 1, 300});
  randomize(l.dev, lx, rng);
  randomize(l.dev, w, rng, 0.5, 1.5);
  randomize(l.dev, bias, rng);
  Tensor ly = make_tensor(l.dev, kBF16, ln);
  Tensor mean = make_tensor(l.dev, kF32, {1, 1, 70, 1}),
         rstd = make_tensor(l.dev, kF32, {1, 1, 70, 1});
  timed("layer_norm", {8, 8},
        {ly.ptr, mean.ptr, rstd.ptr, lx.ptr, w.ptr, bias.ptr, Arg::dtype(kBF16), int64_t{7}, 1e-5f,
         int64_t{70}, int64_t{300}, int64_t{300}, int64_t{1}, int64_t{300}, int64_t{1}});
  if (check) {
    const LayerNormRef ref = layer_norm_stats(lx, 1e-5);
    check_tensor(
        l.dev, ly,
        [&](const Shape& i) {
          return (lx.at(i) - ref.mean[i[2]]) * ref.rstd[i[2]] * w.at({0, 0, 0, i[3]}) +
                 bias.at({0, 0, 0, i[3]});
        },
        tol_for(kBF16), "layer_norm");
  }
  keep(ly);
  keep(mean);
  keep(rstd);

  // fp32 matmul of 150 x 100 by 100 x 70 (B transposed): several 128x64x32 tiles on mtia-v1.
  Tensor ma = matrix(l.dev, kF32, 1, 150, 100, MatLayout::kRowMajor);
  Tensor mb = matrix(l.dev, kF32, 1, 100, 70, MatLayout::kColMajor);
  randomize(l.dev, ma, rng);
  randomize(l.dev, mb, rng);
  Tensor mc = matrix(l.dev, kF32, 1, 150, 70, MatLayout::kRowMajor);
  timed("matmul", {8, 8},
        {mc.ptr, ma.ptr, mb.ptr, Arg::dtype(kF32), Arg::dtype(kF32), int64_t{150}, int64_t{70},
         int64_t{100}, ma.stride[2], ma.stride[3], mb.stride[2], mb.stride[3], mc.stride[2],
         mc.stride[3]});
  if (check) check_matmul(l.dev, mc, {&ma, &mb}, "matmul");
  keep(mc);
  return result;
}

}  // namespace

TEST_CASE("library kernels on both presets with the timing model on",
          "[kernels][library][preset]") {
  const std::string preset = GENERATE(std::string("mtia-v1"), std::string("mtia-v2"));
  INFO("preset " << preset);
  DeviceOptions o;
  o.preset = preset;
  o.timing = true;
  Lib l(o);
  REQUIRE(l.dev.properties().name == preset);
  const WorkloadResult r = run_workload(l, /*check=*/true);
  for (size_t i = 0; i < r.elapsed_ps.size(); ++i) {
    INFO("launch " << i);
    CHECK(r.elapsed_ps[i] > 0);
  }
}

TEST_CASE("library results are bitwise identical with timing off and on, and deterministic",
          "[kernels][library][timing]") {
  DeviceOptions on;
  on.timing = true;
  WorkloadResult first, second, reopened, functional;
  {
    Lib l(on);
    first = run_workload(l, /*check=*/true);
    second = run_workload(l, /*check=*/false);  // the same launches again, same device
  }
  {
    Lib l(on);
    reopened = run_workload(l, /*check=*/false);  // ... and on a freshly opened device
  }
  {
    Lib l(test::functional_options());
    functional = run_workload(l, /*check=*/false);
  }
  REQUIRE(first.outputs.size() == 7);
  for (size_t i = 0; i < first.outputs.size(); ++i) {
    INFO("output " << i);
    CHECK(second.outputs[i] == first.outputs[i]);
    CHECK(reopened.outputs[i] == first.outputs[i]);
    CHECK(functional.outputs[i] == first.outputs[i]);
  }
  REQUIRE(first.elapsed_ps.size() == 5);
  for (size_t i = 0; i < first.elapsed_ps.size(); ++i) {
    INFO("launch " << i);
    CHECK(first.elapsed_ps[i] > 0);
    CHECK(second.elapsed_ps[i] == first.elapsed_ps[i]);
    CHECK(reopened.elapsed_ps[i] == first.elapsed_ps[i]);
    CHECK(functional.elapsed_ps[i] == 0);
  }
}
#endif  // MTIA_KERNEL_LIBRARY_ELF
