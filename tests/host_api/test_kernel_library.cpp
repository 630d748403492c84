// Every kernel of the library (docs/kernels.md) launched through the public API on the
// emulated device - host API, driver, firmware, SystemC PE grid - against the nested-loop CPU
// references the kernel tests use too (tests/kernels/reference_ops.h): each dtype a kernel takes,
// shapes that are not multiples of any tile, transposed, padded and broadcast operands, outputs
// whose gaps must stay untouched, and grids of 1 PE and 8x8. A subset runs on both presets; results
// are bitwise the same with the timing model off and on, and the same launches take the same
// simulated time run after run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/pe/kernel_meta.h"
#include "mtia/isa/pe/pe_ops.h"
#include "reference_ops.h"

using namespace mtia;
using namespace kt;

#ifdef MTIA_KERNEL_LIBRARY_ELF
namespace {

// --- 4-D strided tensors in device memory, with a host copy of their storage ----------------

// Dims 2 and 3 swapped in storage, 3 elements of padding per stored row.
Shape odd_strides(const Shape& size) {
  return permuted(size, {0, 1, 3, 2}, 3);
}

struct Tensor : HostView {
  DevicePtr ptr;

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

// Random values of dt at every storage element (see fill_random), uploaded.
void randomize(Device& dev, Tensor& t, std::mt19937& rng, double lo = -3, double hi = 3) {
  fill_random(t, rng, lo, hi);
  t.upload(dev);
}

// Downloads `out` and checks it with check_view: its view against want(index), its gaps.
void check_tensor(Device& dev, Tensor& out, const std::function<double(const Shape&)>& want,
                  Tol tol, const std::string& what) {
  out.download(dev);
  check_view(out, want, tol, what);
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

// --- elementwise ops ------------------------------------------------------------------------

// The transcendental ops are the units' own approximations: compared with a tolerance.
bool exact_op(uint8_t op) {
  return !(op >= MTIA_PE_SE_EXP && op <= MTIA_PE_SE_SIGMOID) && op != MTIA_PE_SE_SILU;
}

// The library, loaded into a device opened with `options`.
struct Lib {
  Device dev;
  KernelModule lib;
  explicit Lib(const DeviceOptions& options = test::functional_options())
      : dev(Device::open(options)), lib(dev.load_module(MTIA_KERNEL_LIBRARY_ELF)) {}
};

}  // namespace

// ============================================================================================
// Loading modules: what the toolchain makes loads, what cannot be loaded is refused at once
// ============================================================================================

namespace {

template <typename T>
T field(const std::vector<uint8_t>& elf, uint64_t at) {
  T v{};
  REQUIRE(at + sizeof(T) <= elf.size());
  std::memcpy(&v, elf.data() + at, sizeof(T));
  return v;
}
template <typename T>
void set_field(std::vector<uint8_t>& elf, uint64_t at, T v) {
  REQUIRE(at + sizeof(T) <= elf.size());
  std::memcpy(elf.data() + at, &v, sizeof(T));
}

// Loads `elf` and checks that the library's fill kernel runs from it.
void check_fill_runs(Device& dev, const std::vector<uint8_t>& elf) {
  KernelModule m = dev.load_module(elf.data(), elf.size());
  Tensor out = make_tensor(dev, kF32, {1, 1, 1, 16});
  run(dev, m, "fill", Grid{1, 1},
      cat(cat({out.ptr, Arg::dtype(kF32), static_cast<int64_t>(bits_of(kF32, 2.5))}, out.sizes()),
          out.strides()));
  check_tensor(
      dev, out, [](const Shape&) { return 2.5; }, {}, "fill from the edited module");
}

}  // namespace

TEST_CASE("a module whose segment claims more memory than a PE has is refused at load",
          "[kernels][library][load]") {
  Device dev = Device::open(test::functional_options());
  const std::vector<uint8_t> good = test::file_bytes(MTIA_KERNEL_LIBRARY_ELF);
  const auto phoff = field<uint64_t>(good, 32);
  const auto phentsize = field<uint16_t>(good, 54);
  const auto phnum = field<uint16_t>(good, 56);
  int loads = 0;
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint64_t ph = phoff + uint64_t{i} * phentsize;
    if (field<uint32_t>(good, ph) != 1 /* PT_LOAD */) continue;
    ++loads;
    for (const uint64_t memsz : {uint64_t{1} << 63, uint64_t{1} << 40, uint64_t{2} << 20}) {
      INFO("segment " << i << ", p_memsz " << memsz);
      std::vector<uint8_t> bad = good;
      set_field<uint64_t>(bad, ph + 40, memsz);
      test::expect_error(ErrorKind::kInvalidArgument, "does not fit in the PE's 1 MiB image",
                         [&] { dev.load_module(bad.data(), bad.size()); });
    }
  }
  CHECK(loads >= 2);
  // The device is untouched by the refusals.
  check_fill_runs(dev, good);
}

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
    if (!se_op_takes(op, dt)) continue;
    ++runs;
    Tensor a = make_tensor(l.dev, dt, size, odd_strides(size));
    const bool positive = op == MTIA_PE_SE_LOG || op == MTIA_PE_SE_SQRT || op == MTIA_PE_SE_RSQRT;
    randomize(l.dev, a, rng, positive ? 0.05 : -4, 4);
    const uint8_t out_dt = se_op_bool_out(op) ? kBool : dt;
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
    if (!se_op_takes(op, dt)) continue;
    const uint8_t out_dt = se_op_bool_out(op) ? kBool : dt;
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
    if (!se_op_takes(op, dt)) continue;
    const uint8_t out_dt = se_op_bool_out(op) ? kBool : dt;
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

// A floating reduction: the output dtype's rounding plus fp32 accumulation error relative to
// the sum of magnitudes (the device sums in its own order). Integer outputs are exact.
void check_reduction(Device& dev, Tensor& out, const Tensor& in, int dim,
                     const std::function<double(const std::vector<double>&)>& ref, double acc_rel,
                     bool average, const std::string& what) {
  out.download(dev);
  const Tol t = tol_for(out.dt);
  check_reduction_view(
      out, in, dim, ref, average,
      [&](double got, double want, double mag) {
        const double allowed =
            dt_float(out.dt) ? t.abs + t.rel * std::fabs(want) + acc_rel * mag : 0;
        return !(std::fabs(got - want) > allowed);
      },
      what);
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
        const size_t best = first_extreme(v, is_max);
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

void run_softmax(Lib& l, bool log_form, const Tensor& out, const Tensor& in, int dim, Grid grid) {
  run(l.dev, l.lib, log_form ? "log_softmax" : "softmax", grid,
      cat(cat(cat({out.ptr, in.ptr, Arg::dtype(in.dt), int64_t{dim}}, in.sizes()), in.strides()),
          out.strides()));
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
  const LayerNormStats ref = layer_norm_stats(x, eps);
  const std::string what = "layer_norm " + dt_name(dt) + " " + std::to_string(rows) + "x" +
                           std::to_string(cols) + " flags " + std::to_string(flags) +
                           (column_major ? " column-major" : "") + " on " + grid_str(grid);
  check_tensor(
      l.dev, out, [&](const Shape& i) { return ref.out(x, w, b, flags, i); }, tol_layer_norm(dt),
      what);
  if (flags & 4) {
    check_tensor(
        l.dev, mean, [&](const Shape& i) { return ref.mean[i[2]]; }, kTolLayerNormMean,
        what + " mean");
    check_tensor(
        l.dev, rstd, [&](const Shape& i) { return ref.rstd[i[2]]; }, kTolLayerNormRstd,
        what + " rstd");
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

// A [batch, rows, cols] operand as the view [1, batch, rows, cols].
Tensor matrix(Device& dev, uint8_t dt, int64_t batch, int64_t rows, int64_t cols, MatLayout l) {
  const Shape size{1, batch, rows, cols};
  return make_tensor(dev, dt, size, matrix_strides(size, l));
}

void check_matmul(Device& dev, Tensor& c, const MatmulRef& ref, const std::string& what) {
  c.download(dev);
  check_matmul_view(c, ref, what);
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

TEST_CASE("library matmul with its operands in the on-chip SRAM reads them there, unstaged",
          "[kernels][library]") {
  // A product the kernel stages in the SRAM when its operands lie in DRAM (2 MiB of panels, 16
  // tiles). With A at the SRAM's base, B and C after it (put there by the copy kernel, whose
  // DMAs reach the launch's SRAM), staging would overwrite them; the kernel loads its tiles
  // from the SRAM as they lie instead.
  Lib l;
  std::mt19937 rng(1250);
  const int64_t n = 512;
  const Grid grid{8, 8};
  Tensor a = matrix(l.dev, kF32, 1, n, n, MatLayout::kRowMajor);
  Tensor b = matrix(l.dev, kF32, 1, n, n, MatLayout::kRowMajor);
  randomize(l.dev, a, rng);
  randomize(l.dev, b, rng);
  Tensor c = matrix(l.dev, kF32, 1, n, n, MatLayout::kRowMajor);
  const uint64_t bytes = n * n * 4;
  const DevicePtr sa(isa::kSramBase), sb(isa::kSramBase + bytes), sc(isa::kSramBase + 2 * bytes);
  auto copy = [&](DevicePtr dst, DevicePtr src) {
    run(l.dev, l.lib, "copy", grid,
        {dst, src, Arg::dtype(kF32), int64_t{1}, int64_t{1}, int64_t{1}, n * n, int64_t{0},
         int64_t{0}, int64_t{0}, int64_t{1}, int64_t{0}, int64_t{0}, int64_t{0}, int64_t{1}});
  };
  copy(sa, a.ptr);
  copy(sb, b.ptr);
  run(l.dev, l.lib, "matmul", grid,
      {sc, sa, sb, Arg::dtype(kF32), Arg::dtype(kF32), n, n, n, n, int64_t{1}, n, int64_t{1}, n,
       int64_t{1}});
  copy(c.ptr, sc);
  check_matmul(l.dev, c, {&a, &b}, "matmul fp32 512^3 with A, B and C in the SRAM");
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
    const LayerNormStats ref = layer_norm_stats(lx, 1e-5);
    check_tensor(
        l.dev, ly, [&](const Shape& i) { return ref.out(lx, w, bias, 7, i); }, tol_for(kBF16),
        "layer_norm");
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
