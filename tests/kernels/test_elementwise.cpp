// fill, copy, cast, unary, binary, binary_scalar, where, clamp and pointwise against
// nested-loop references, for every dtype they take, with strided, transposed, padded and
// broadcast operands, shapes that are not multiples of any chunk size, and grids of 1, 4 and 64
// PEs.
#include <catch2/catch.hpp>

#include "check.h"

using namespace kt;

namespace {

const Module& lib() {
  return Module::library();
}

std::vector<Arg> cat(std::vector<Arg> a, const std::vector<Arg>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A strided view: stored with dims 2 and 3 swapped and 3 elements of padding per stored row.
Shape odd_strides(const Shape& s) {
  return permuted(s, {0, 1, 3, 2}, 3);
}

void expect_ok(const LaunchResult& r) {
  INFO(r.describe());
  REQUIRE(r.ok());
}

}  // namespace

TEST_CASE("fill writes a value into every element of a view", "[kernels][elementwise]") {
  for (uint8_t dt : kAllDtypes) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      Device dev;
      const Shape size{2, 3, 37, 41};
      Tensor out = make_tensor(dev, dt, size, pes == 4 ? odd_strides(size) : contiguous(size));
      const double value = dt_float(dt) ? round_to(dt, -1.375) : dt == kBool ? 1 : -77;
      auto r = dev.launch(
          lib(), "fill",
          cat(cat({ptr(out.addr), dtype(dt), i64(static_cast<int64_t>(bits_of(dt, value)))},
                  out.size_args()),
              out.stride_args()),
          grid(pes));
      expect_ok(r);
      check_tensor(
          dev, out, [&](const Shape&) { return value; }, {0, 0},
          std::string("fill ") + dt_name(dt) + " on " + std::to_string(pes) + " PEs");
    }
  }
}

TEST_CASE("copy moves any layout into any layout, with broadcasting", "[kernels][elementwise]") {
  std::mt19937 rng(2);
  for (uint8_t dt : kAllDtypes) {
    Device dev;
    const Shape size{3, 1, 45, 67};
    Tensor in = make_tensor(dev, dt, size, odd_strides(size));
    randomize(dev, in, rng);
    Tensor out = make_tensor(dev, dt, size);
    expect_ok(dev.launch(
        lib(), "copy",
        cat(cat(cat({ptr(out.addr), ptr(in.addr), dtype(dt)}, out.size_args()), out.stride_args()),
            in.stride_args()),
        grid(4)));
    check_tensor(
        dev, out, [&](const Shape& i) { return in.at(i); }, {0, 0},
        std::string("copy ") + dt_name(dt));

    // A row vector broadcast over the rows of a padded output (source stride 0).
    Tensor row = make_tensor(dev, dt, {1, 1, 1, 67});
    randomize(dev, row, rng);
    Tensor wide = make_tensor(dev, dt, {2, 1, 45, 67}, permuted({2, 1, 45, 67}, {0, 1, 2, 3}, 5));
    expect_ok(dev.launch(lib(), "copy",
                         cat(cat(cat({ptr(wide.addr), ptr(row.addr), dtype(dt)}, wide.size_args()),
                                 wide.stride_args()),
                             {i64(0), i64(0), i64(0), i64(1)}),
                         grid(64)));
    check_tensor(
        dev, wide,
        [&](const Shape& i) {
          return row.at({0, 0, 0, i[3]});
        },
        {0, 0}, std::string("broadcast copy ") + dt_name(dt));
  }
}

TEST_CASE("cast converts between every pair of dtypes", "[kernels][elementwise]") {
  std::mt19937 rng(3);
  for (uint8_t from : kAllDtypes) {
    for (uint8_t to : kAllDtypes) {
      Device dev;
      const Shape size{1, 2, 33, 50};
      Tensor in = make_tensor(dev, from, size, odd_strides(size));
      randomize(dev, in, rng, -300, 300);  // floats beyond int8's range saturate
      Tensor out = make_tensor(dev, to, size);
      expect_ok(dev.launch(
          lib(), "cast",
          cat(cat(cat({ptr(out.addr), ptr(in.addr), dtype(to), dtype(from)}, out.size_args()),
                  out.stride_args()),
              in.stride_args()),
          grid(4)));
      check_tensor(
          dev, out, [&](const Shape& i) { return ref_cast(from, to, in.at(i)); }, {0, 0},
          std::string("cast ") + dt_name(from) + " -> " + dt_name(to));
    }
  }
}

TEST_CASE("unary applies every SE unary op for each dtype it takes", "[kernels][elementwise]") {
  const std::vector<uint8_t> ops = se_ops_of_arity(1);
  std::mt19937 rng(4);
  int runs = 0;
  for (uint8_t op : ops) {
    for (uint8_t dt : kAllDtypes) {
      if (!se_op_takes(op, dt)) continue;
      ++runs;
      Device dev;
      const Shape size{2, 1, 29, 53};
      Tensor a = make_tensor(dev, dt, size, odd_strides(size));
      // Inputs inside each function's domain.
      double lo = -4, hi = 4;
      switch (op) {
        case MTIA_PE_SE_LOG:
        case MTIA_PE_SE_SQRT:
        case MTIA_PE_SE_RSQRT:
        case MTIA_PE_SE_LOG2:
        case MTIA_PE_SE_LOG10:
        case MTIA_PE_SE_LGAMMA:
          lo = 0.05;
          break;
        case MTIA_PE_SE_ACOSH:
          lo = 1.05;
          break;
        case MTIA_PE_SE_ASIN:
        case MTIA_PE_SE_ACOS:
        case MTIA_PE_SE_ATANH:
        case MTIA_PE_SE_LOG1P:
          lo = -0.95, hi = 0.95;
          break;
        case MTIA_PE_SE_TAN:
          lo = -1.4, hi = 1.4;
          break;
        default:
          break;
      }
      randomize(dev, a, rng, lo, hi);
      const uint8_t out_dt = se_op_bool_out(op) ? kBool : dt;
      Tensor out = make_tensor(dev, out_dt, size);
      expect_ok(
          dev.launch(lib(), "unary",
                     cat(cat(cat({ptr(out.addr), ptr(a.addr), i64(op), dtype(dt)}, out.size_args()),
                             out.stride_args()),
                         a.stride_args()),
                     grid(4)));
      check_tensor(
          dev, out, [&](const Shape& i) { return ref_unary(op, dt, a.at(i)); }, tol_for(out_dt),
          "unary op " + std::to_string(op) + " " + dt_name(dt));
    }
  }
  int want_runs = 0;
  for (uint8_t op : ops) {
    for (uint8_t dt : kAllDtypes) want_runs += se_op_takes(op, dt);
  }
  CHECK(runs == want_runs);
  CHECK(ops.size() == 41);  // every unary op of the table
}

TEST_CASE("binary with a per-row, per-column or single broadcast operand over large rows",
          "[kernels][elementwise]") {
  // [M, N] op [M, 1] (a per-row scale), [M, N] op [1, N] and [M, N] op [1, 1], with rows long
  // enough that a chunk holds part of a row or several rows: the broadcast operand is read
  // once per distinct element and spread over the chunk in the local store.
  std::mt19937 rng(11);
  struct Case {
    int64_t m, n;
    bool rows, cols;  // b varies along dim 2 (rows) / dim 3 (columns)
    uint32_t pes;
  };
  const Case cases[] = {{3, 70001, true, false, 4},
                        {300, 517, true, false, 64},
                        {37, 1031, false, true, 1},
                        {129, 257, false, false, 4},
                        {5, 40000, true, false, 1}};
  for (uint8_t dt : {kF32, kF16}) {
    for (uint8_t op : {uint8_t(MTIA_PE_SE_MUL), uint8_t(MTIA_PE_SE_DIV)}) {
      for (const Case& c : cases) {
        Device dev;
        const Shape size{1, 1, c.m, c.n};
        Tensor a = make_tensor(dev, dt, size);
        Tensor b = make_tensor(dev, dt, {1, 1, c.rows ? c.m : 1, c.cols ? c.n : 1});
        randomize(dev, a, rng, -4, 4);
        randomize(dev, b, rng, 0.5, 4);  // no 0 divisors
        const Shape b_st{0, 0, c.rows ? b.stride[2] : 0, c.cols ? b.stride[3] : 0};
        Tensor out = make_tensor(dev, dt, size);
        expect_ok(dev.launch(
            lib(), "binary",
            cat(cat(cat(cat({ptr(out.addr), ptr(a.addr), ptr(b.addr), i64(op), dtype(dt)},
                            out.size_args()),
                        out.stride_args()),
                    a.stride_args()),
                {i64(b_st[0]), i64(b_st[1]), i64(b_st[2]), i64(b_st[3])}),
            grid(c.pes)));
        check_tensor(
            dev, out,
            [&](const Shape& i) {
              return ref_binary(op, dt, a.at(i),
                                b.at({0, 0, c.rows ? i[2] : 0, c.cols ? i[3] : 0}));
            },
            tol_for(dt),
            "binary op " + std::to_string(op) + " " + dt_name(dt) + " " + std::to_string(c.m) +
                "x" + std::to_string(c.n));
      }
    }
  }
}

TEST_CASE("binary applies every SE binary op with broadcasting", "[kernels][elementwise]") {
  const std::vector<uint8_t> ops = se_ops_of_arity(2);
  std::mt19937 rng(5);
  for (uint8_t op : ops) {
    for (uint8_t dt : kAllDtypes) {
      if (!se_op_takes(op, dt)) continue;
      Device dev;
      const Shape size{2, 3, 19, 41};
      // a: transposed and padded; b: one value per (dim 1, dim 3), broadcast over 0 and 2.
      Tensor a = make_tensor(dev, dt, size, odd_strides(size));
      Tensor b = make_tensor(dev, dt, {1, 3, 1, 41});
      randomize(dev, a, rng, -4, 4);
      randomize(dev, b, rng, -4, 4);
      const bool divides = op == MTIA_PE_SE_DIV || op == MTIA_PE_SE_FMOD ||
                           op == MTIA_PE_SE_REMAINDER || op == MTIA_PE_SE_FLOOR_DIV;
      if (op == MTIA_PE_SE_POW) randomize(dev, a, rng, 0.1, 4);  // no NaN from negative bases
      if (divides) {
        for (size_t k = 0; k < b.host.size() / dt_size(dt); ++k) {  // no 0 divisors
          uint8_t* p = b.host.data() + k * dt_size(dt);
          if (load_elem(dt, p) == 0) store_elem(dt, p, 3);
        }
        b.upload(dev);
      }
      const Shape b_st{0, b.stride[1], 0, b.stride[3]};
      const uint8_t out_dt = se_op_bool_out(op) ? kBool : dt;
      Tensor out = make_tensor(dev, out_dt, size);
      const uint32_t pes = op % 3 == 0 ? 64 : op % 3 == 1 ? 4 : 1;
      expect_ok(
          dev.launch(lib(), "binary",
                     cat(cat(cat(cat({ptr(out.addr), ptr(a.addr), ptr(b.addr), i64(op), dtype(dt)},
                                     out.size_args()),
                                 out.stride_args()),
                             a.stride_args()),
                         {i64(b_st[0]), i64(b_st[1]), i64(b_st[2]), i64(b_st[3])}),
                     grid(pes)));
      check_tensor(
          dev, out,
          [&](const Shape& i) {
            return ref_binary(op, dt, a.at(i), b.at({0, i[1], 0, i[3]}));
          },
          tol_for(out_dt), "binary op " + std::to_string(op) + " " + dt_name(dt));
    }
  }
}

TEST_CASE("binary streams a large tensor through double-buffered chunks",
          "[kernels][elementwise]") {
  std::mt19937 rng(6);
  for (uint8_t dt : {kF32, kBF16}) {
    for (uint32_t pes : {1u, 4u}) {
      Device dev;
      const Shape size{1, 3, 257, 301};  // 231,771 elements: many chunks per PE
      Tensor a = make_tensor(dev, dt, size);
      Tensor b = make_tensor(dev, dt, size);
      randomize(dev, a, rng);
      randomize(dev, b, rng);
      Tensor out = make_tensor(dev, dt, size);
      auto r = dev.launch(
          lib(), "binary",
          cat(cat(cat(cat({ptr(out.addr), ptr(a.addr), ptr(b.addr), i64(MTIA_PE_SE_MUL), dtype(dt)},
                          out.size_args()),
                      out.stride_args()),
                  a.stride_args()),
              b.stride_args()),
          grid(pes));
      expect_ok(r);
      CHECK(r.stats.eltwise > 3 * pes);
      check_tensor(
          dev, out,
          [&](const Shape& i) { return ref_binary(MTIA_PE_SE_MUL, dt, a.at(i), b.at(i)); },
          tol_for(dt), std::string("large mul ") + dt_name(dt));
    }
  }
}

TEST_CASE("binary_scalar combines a tensor with an immediate", "[kernels][elementwise]") {
  std::mt19937 rng(7);
  const std::vector<std::pair<uint8_t, double>> cases = {
      {MTIA_PE_SE_MUL, 2.5}, {MTIA_PE_SE_SUB, -1.25}, {MTIA_PE_SE_DIV, 4}, {MTIA_PE_SE_GT, 0.5}};
  for (const auto& c : cases) {
    const uint8_t op = c.first;  // not a structured binding: clang 14's lambdas cannot capture one
    const double scalar = c.second;
    for (uint8_t dt : {kF32, kF16, kBF16, kI32, kI8, kI64}) {
      Device dev;
      const Shape size{1, 5, 7, 93};
      Tensor a = make_tensor(dev, dt, size, odd_strides(size));
      randomize(dev, a, rng);
      const double s = dt_float(dt) ? round_to(dt, scalar) : std::trunc(scalar);
      const uint8_t out_dt = se_op_bool_out(op) ? kBool : dt;
      Tensor out = make_tensor(dev, out_dt, size);
      expect_ok(dev.launch(lib(), "binary_scalar",
                           cat(cat(cat({ptr(out.addr), ptr(a.addr), i64(op), dtype(dt),
                                        i64(static_cast<int64_t>(bits_of(dt, s)))},
                                       out.size_args()),
                                   out.stride_args()),
                               a.stride_args()),
                           grid(4)));
      check_tensor(
          dev, out, [&](const Shape& i) { return ref_binary(op, dt, a.at(i), s); }, tol_for(out_dt),
          "binary_scalar op " + std::to_string(op) + " " + dt_name(dt));
    }
  }
}

namespace {

// One step of a pointwise program (kernels/lib/elementwise.c): dst = op(src0, src1, src2).
struct PwStep {
  uint8_t op, dst, s0 = 0, s1 = 0, s2 = 0;
  uint64_t imm = 0;
};
constexpr uint8_t kPwA = 0, kPwB = 1, kPwC = 2, kPwD = 3, kPwE = 4, kPwT0 = 5, kPwT1 = 6,
                  kPwOut = 8, kPwImm = 15;

LaunchResult launch_pointwise(Device& dev, uint8_t dt, Tensor& out,
                              const std::vector<const Tensor*>& in,
                              const std::vector<PwStep>& steps, uint32_t pes,
                              const std::vector<Shape>& strides = {}) {
  std::vector<Arg> args{ptr(out.addr)};
  for (size_t i = 0; i < 5; ++i) args.push_back(ptr(i < in.size() ? in[i]->addr : out.addr));
  args.push_back(dtype(dt));
  args.push_back(i64(static_cast<int64_t>(in.size())));
  args.push_back(i64(static_cast<int64_t>(steps.size())));
  for (size_t k = 0; k < 6; ++k) {
    const PwStep s = k < steps.size() ? steps[k] : PwStep{0, 0};
    args.push_back(
        i64(k < steps.size() ? s.op | s.dst << 8 | s.s0 << 12 | s.s1 << 16 | s.s2 << 20 : 0));
  }
  for (size_t k = 0; k < 6; ++k) {
    args.push_back(i64(static_cast<int64_t>(k < steps.size() ? steps[k].imm : 0)));
  }
  args = cat(cat(args, out.size_args()), out.stride_args());
  for (size_t i = 0; i < 5; ++i) {
    if (i < strides.size()) {
      for (int64_t v : strides[i]) args.push_back(i64(v));
    } else {
      args = cat(args, i < in.size() ? in[i]->stride_args() : out.stride_args());
    }
  }
  return dev.launch(lib(), "pointwise", args, grid(pes));
}

}  // namespace

TEST_CASE("pointwise runs a program of SE steps in one launch", "[kernels][elementwise]") {
  std::mt19937 rng(12);
  // grad * s * (1 + x * (1 - s)), s = sigmoid(x): SiLU's backward, scratch and immediates.
  for (uint8_t dt : {kF32, kBF16}) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      Device dev;
      const Shape size{2, 3, 37, 41};
      Tensor g = make_tensor(dev, dt, size, odd_strides(size));
      Tensor x = make_tensor(dev, dt, size);
      randomize(dev, g, rng, -2, 2);
      randomize(dev, x, rng, -4, 4);
      Tensor out = make_tensor(dev, dt, size);
      const uint64_t one = bits_of(dt, 1.0);
      auto r = launch_pointwise(dev, dt, out, {&g, &x},
                                {{MTIA_PE_SE_SIGMOID, kPwT0, kPwB},
                                 {MTIA_PE_SE_SUB, kPwT1, kPwImm, kPwT0, 0, one},
                                 {MTIA_PE_SE_MUL, kPwT1, kPwB, kPwT1},
                                 {MTIA_PE_SE_ADD, kPwT1, kPwT1, kPwImm, 0, one},
                                 {MTIA_PE_SE_MUL, kPwT0, kPwA, kPwT0},
                                 {MTIA_PE_SE_MUL, kPwOut, kPwT0, kPwT1}},
                                pes);
      expect_ok(r);
      CHECK(r.stats.eltwise >= 6);  // six SE steps per chunk, in the one launch
      check_tensor(
          dev, out,
          [&](const Shape& i) {
            const double s = ref_unary(MTIA_PE_SE_SIGMOID, dt, x.at(i));
            double u = ref_binary(MTIA_PE_SE_SUB, dt, 1.0, s);
            u = ref_binary(MTIA_PE_SE_MUL, dt, x.at(i), u);
            u = ref_binary(MTIA_PE_SE_ADD, dt, u, 1.0);
            return ref_binary(MTIA_PE_SE_MUL, dt, ref_binary(MTIA_PE_SE_MUL, dt, g.at(i), s), u);
          },
          tol_for(dt), std::string("silu backward ") + dt_name(dt));
    }
  }
  // A bool scratch from a comparison picks between an immediate and an input; the third input
  // is broadcast and clamps the result.
  for (uint8_t dt : {kF32, kI32, kF16}) {
    Device dev;
    const Shape size{1, 4, 29, 53};
    Tensor a = make_tensor(dev, dt, size);
    Tensor b = make_tensor(dev, dt, size, odd_strides(size));
    Tensor hi = make_tensor(dev, dt, {1, 1, 1, 53});
    randomize(dev, a, rng, -4, 4);
    randomize(dev, b, rng, -4, 4);
    randomize(dev, hi, rng, -2, 2);
    Tensor out = make_tensor(dev, dt, size);
    const double thr = dt_float(dt) ? 0.5 : 1;
    auto r = launch_pointwise(dev, dt, out, {&a, &b, &hi},
                              {{MTIA_PE_SE_LE, kPwT0, kPwB, kPwImm, 0, bits_of(dt, thr)},
                               {MTIA_PE_SE_SELECT, kPwT1, kPwT0, kPwImm, kPwA, bits_of(dt, 0)},
                               {MTIA_PE_SE_MIN, kPwOut, kPwT1, kPwC}},
                              4, {a.stride, b.stride, Shape{0, 0, 0, hi.stride[3]}});
    expect_ok(r);
    check_tensor(
        dev, out,
        [&](const Shape& i) {
          const double picked = b.at(i) <= thr ? 0.0 : a.at(i);
          return std::min(picked, hi.at({0, 0, 0, i[3]}));
        },
        {0, 0}, std::string("threshold, select and min ") + dt_name(dt));
  }
  // Five inputs, three of them per-row vectors: ((g - a) - x * b) * r, a layer norm's dX.
  {
    Device dev;
    const Shape size{1, 1, 45, 67};
    Tensor g = make_tensor(dev, kF32, size, odd_strides(size));
    Tensor x = make_tensor(dev, kF32, size);
    Tensor a = make_tensor(dev, kF32, {1, 1, 45, 1});
    Tensor b = make_tensor(dev, kF32, {1, 1, 45, 1});
    Tensor r = make_tensor(dev, kF32, {1, 1, 45, 1});
    for (Tensor* t : {&g, &x, &a, &b, &r}) randomize(dev, *t, rng, -2, 2);
    Tensor out = make_tensor(dev, kF32, size);
    const Shape row{0, 0, 1, 0};
    auto res = launch_pointwise(dev, kF32, out, {&g, &a, &x, &b, &r},
                                {{MTIA_PE_SE_SUB, kPwT0, kPwA, kPwB},
                                 {MTIA_PE_SE_MUL, kPwT1, kPwC, kPwD},
                                 {MTIA_PE_SE_SUB, kPwT0, kPwT0, kPwT1},
                                 {MTIA_PE_SE_MUL, kPwOut, kPwT0, kPwE}},
                                4, {g.stride, row, x.stride, row, row});
    expect_ok(res);
    check_tensor(
        dev, out,
        [&](const Shape& i) {
          const Shape v{0, 0, i[2], 0};
          const double d = ref_binary(MTIA_PE_SE_SUB, kF32, g.at(i), a.at(v));
          const double e = ref_binary(MTIA_PE_SE_MUL, kF32, x.at(i), b.at(v));
          return ref_binary(MTIA_PE_SE_MUL, kF32, ref_binary(MTIA_PE_SE_SUB, kF32, d, e), r.at(v));
        },
        tol_for(kF32), "five-input pointwise");
  }
  // Bad programs come back as a status.
  Device dev;
  const Shape size{1, 1, 4, 4};
  Tensor a = make_tensor(dev, kF32, size);
  Tensor out = make_tensor(dev, kF32, size);
  auto run = [&](const std::vector<PwStep>& steps, uint8_t dt = kF32) {
    return launch_pointwise(dev, dt, out, {&a}, steps, 1).status();
  };
  CHECK(run({{MTIA_PE_SE_NEG, kPwOut, kPwA}}) == MTIA_KSTATUS_OK);
  CHECK(run({}) == MTIA_KSTATUS_BAD_OP);                                  // no steps
  CHECK(run({{MTIA_PE_SE_NEG, kPwOut, kPwB}}) == MTIA_KSTATUS_BAD_OP);    // b not given
  CHECK(run({{MTIA_PE_SE_NEG, kPwOut, kPwT0}}) == MTIA_KSTATUS_BAD_OP);   // read before written
  CHECK(run({{MTIA_PE_SE_NEG, kPwA, kPwA}}) == MTIA_KSTATUS_BAD_OP);      // writes an input
  CHECK(run({{MTIA_PE_SE_NEG, kPwT0, kPwA}}) == MTIA_KSTATUS_BAD_DTYPE);  // output not written
  CHECK(run({{MTIA_PE_SE_GT, kPwOut, kPwA, kPwImm}}) == MTIA_KSTATUS_BAD_DTYPE);  // bool output
  CHECK(run({{MTIA_PE_SE_NEG, kPwOut, kPwA, kPwT0}}) == MTIA_KSTATUS_BAD_OP);     // extra source
  CHECK(run({{200, kPwOut, kPwA}}) == MTIA_KSTATUS_BAD_OP);
  CHECK(run({{MTIA_PE_SE_SELECT, kPwOut, kPwA, kPwA, kPwA}}) == MTIA_KSTATUS_BAD_DTYPE);  // cond
  CHECK(run({{MTIA_PE_SE_BNOT, kPwOut, kPwA}}) == MTIA_KSTATUS_BAD_DTYPE);  // not on floats
  CHECK(run({{MTIA_PE_SE_NEG, kPwOut, kPwA}}, kBool) == MTIA_KSTATUS_BAD_DTYPE);
  std::vector<PwStep> seven(7, PwStep{MTIA_PE_SE_NEG, kPwOut, kPwA});
  CHECK(run(seven) == MTIA_KSTATUS_BAD_OP);  // more than six steps
}

TEST_CASE("where selects between two tensors by a broadcast condition", "[kernels][elementwise]") {
  std::mt19937 rng(8);
  for (uint8_t dt : kAllDtypes) {
    Device dev;
    const Shape size{2, 2, 31, 47};
    Tensor cond = make_tensor(dev, kBool, {1, 1, 31, 47});  // broadcast over dims 0 and 1
    Tensor a = make_tensor(dev, dt, size, odd_strides(size));
    Tensor b = make_tensor(dev, dt, size);
    randomize(dev, cond, rng);
    randomize(dev, a, rng);
    randomize(dev, b, rng);
    Tensor out = make_tensor(dev, dt, size);
    expect_ok(dev.launch(
        lib(), "where",
        cat(cat(cat(cat(cat({ptr(out.addr), ptr(cond.addr), ptr(a.addr), ptr(b.addr), dtype(dt)},
                            out.size_args()),
                        out.stride_args()),
                    {i64(0), i64(0), i64(cond.stride[2]), i64(cond.stride[3])}),
                a.stride_args()),
            b.stride_args()),
        grid(dt == kF32 ? 64 : 4)));
    check_tensor(
        dev, out,
        [&](const Shape& i) {
          return cond.at({0, 0, i[2], i[3]}) != 0 ? a.at(i) : b.at(i);
        },
        {0, 0}, std::string("where ") + dt_name(dt));
  }
}

TEST_CASE("clamp bounds every element", "[kernels][elementwise]") {
  std::mt19937 rng(9);
  for (uint8_t dt : {kF32, kF16, kBF16, kI8, kI32, kI64}) {
    Device dev;
    const Shape size{3, 1, 23, 59};
    Tensor a = make_tensor(dev, dt, size, odd_strides(size));
    randomize(dev, a, rng, -5, 5);
    const double lo = dt_float(dt) ? round_to(dt, -1.5) : -40, hi = dt_float(dt) ? 2.25 : 55;
    Tensor out = make_tensor(dev, dt, size);
    expect_ok(dev.launch(lib(), "clamp",
                         cat(cat(cat({ptr(out.addr), ptr(a.addr), dtype(dt),
                                      i64(static_cast<int64_t>(bits_of(dt, lo))),
                                      i64(static_cast<int64_t>(bits_of(dt, hi)))},
                                     out.size_args()),
                                 out.stride_args()),
                             a.stride_args()),
                         grid(4)));
    check_tensor(
        dev, out, [&](const Shape& i) { return std::min(std::max(a.at(i), lo), hi); }, {0, 0},
        std::string("clamp ") + dt_name(dt));
  }
}

TEST_CASE("elementwise kernels reject bad ops, dtypes and shapes with a status",
          "[kernels][elementwise]") {
  Device dev;
  const Shape size{1, 1, 4, 4};
  Tensor a = make_tensor(dev, kI32, size);
  Tensor out = make_tensor(dev, kI32, size);
  auto unary = [&](int64_t op, uint8_t dt, int64_t stride3) {
    return dev.launch(
        lib(), "unary",
        cat(cat(cat({ptr(out.addr), ptr(a.addr), i64(op), dtype(dt)}, out.size_args()),
                out.stride_args()),
            {i64(16), i64(16), i64(4), i64(stride3)}),
        grid(4));
  };
  CHECK(unary(MTIA_PE_SE_ADD, kI32, 1).status() == MTIA_KSTATUS_BAD_OP);  // binary op
  CHECK(unary(200, kI32, 1).status() == MTIA_KSTATUS_BAD_OP);
  CHECK(unary(MTIA_PE_SE_EXP, kI32, 1).status() == MTIA_KSTATUS_BAD_DTYPE);
  CHECK(unary(MTIA_PE_SE_ABS, 0, 1).status() == MTIA_KSTATUS_BAD_DTYPE);
  CHECK(unary(MTIA_PE_SE_ABS, kI32, -1).status() == MTIA_KSTATUS_BAD_SHAPE);
  CHECK(unary(MTIA_PE_SE_ABS, kI32, 1).ok());
  auto fill =
      dev.launch(lib(), "fill",
                 cat(cat({ptr(out.addr), dtype(9), i64(0)}, out.size_args()), out.stride_args()));
  CHECK(fill.status() == MTIA_KSTATUS_BAD_DTYPE);
  // An empty view: nothing to do, nothing moved.
  auto none =
      dev.launch(lib(), "fill",
                 cat(cat({ptr(out.addr), dtype(kI32), i64(0)}, {i64(1), i64(0), i64(4), i64(4)}),
                     out.stride_args()),
                 grid(4));
  CHECK(none.ok());
  CHECK(none.stats.dma == 0);
  // An output outside device memory is a unit fault naming the DMA, not a wrong result.
  auto far = dev.launch(
      lib(), "fill",
      cat(cat({ptr(1ull << 40), dtype(kI32), i64(0)}, out.size_args()), out.stride_args()));
  CHECK_FALSE(far.ok());
  CHECK_THAT(far.describe(), Catch::Contains("dma.start"));
}
