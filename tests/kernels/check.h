// Checking kernel outputs against CPU references, and the references of the elementwise ops
// (written from docs/pe-isa.md's numerics, independently of the units' code).
#pragma once

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "ref.h"

namespace kt {

// Downloads `out` and checks each element of the view against want(index) within `tol`, and
// that the storage outside the view (gaps of a strided output) still holds the 0xA5 fill.
inline void check_tensor(Device& dev, Tensor& out, const std::function<double(const Shape&)>& want,
                         Tol tol, const std::string& what) {
  out.download(dev);
  const unsigned es = dt_size(out.dt);
  std::vector<bool> in_view(out.host.size() / es, false);
  int64_t bad = 0;
  std::string first;
  for_each(out.size, [&](const Shape& i) {
    in_view[static_cast<size_t>(out.offset(i))] = true;
    const double g = out.at(i), w = want(i);
    if (!close(g, w, tol)) {
      if (bad++ == 0) {
        first = fmt::format("[{},{},{},{}] got {} want {}", i[0], i[1], i[2], i[3], g, w);
      }
    }
  });
  INFO(what << ": " << bad << " mismatches, first " << first);
  CHECK(bad == 0);
  int64_t touched = 0;
  for (size_t k = 0; k < in_view.size(); ++k) {
    if (in_view[k]) continue;
    for (unsigned b = 0; b < es; ++b) touched += out.host[k * es + b] != 0xA5;
  }
  INFO(what << ": bytes written outside the output view");
  CHECK(touched == 0);
}

inline bool is_int_dt(uint8_t dt) {
  return dt == kI8 || dt == kI32 || dt == kI64;
}

// Two's complement wrap of v to the width of integer dtype dt.
inline double wrap(uint8_t dt, int64_t v) {
  switch (dt) {
    case MTIA_PE_DT_INT8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case MTIA_PE_DT_INT32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    default:
      return static_cast<double>(v);
  }
}

inline double ref_cast(uint8_t from, uint8_t to, double v) {
  if (to == kBool) return v != 0 || std::isnan(v) ? 1 : 0;
  if (dt_float(to)) return round_to(to, v);
  if (dt_float(from)) {
    if (std::isnan(v)) return 0;
    const double t = std::trunc(v);
    const double lo = to == kI8 ? -128.0 : to == kI32 ? -2147483648.0 : -9223372036854775808.0;
    const double hi = to == kI8 ? 127.0 : to == kI32 ? 2147483647.0 : 9223372036854775807.0;
    return std::min(std::max(t, lo), hi);
  }
  return wrap(to, static_cast<int64_t>(v));
}

inline bool se_op_takes(uint8_t op, uint8_t dt) {
  const bool f = dt_float(dt), i = is_int_dt(dt), b = dt == kBool;
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
      return true;  // comparisons and logical ops take every dtype
  }
}

inline bool se_op_bool_out(uint8_t op) {
  return (op >= MTIA_PE_SE_EQ && op <= MTIA_PE_SE_LNOT);
}

inline double ref_unary(uint8_t op, uint8_t dt, double a) {
  const float x = static_cast<float>(a);
  if (dt_float(dt)) {
    float r;
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
      case MTIA_PE_SE_LNOT:
        return a == 0 ? 1 : 0;
      default:
        throw std::logic_error("no reference for this unary op");
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
    case MTIA_PE_SE_LNOT:
      return v == 0 ? 1 : 0;
    case MTIA_PE_SE_BNOT:
      return dt == kBool ? (v == 0 ? 1 : 0) : wrap(dt, ~v);
    default:
      throw std::logic_error("no reference for this unary op");
  }
}

inline double ref_binary(uint8_t op, uint8_t dt, double a, double b) {
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
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    float r;
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
        throw std::logic_error("no reference for this binary op");
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
      return y == 0 ? -1 : wrap(dt, x / y);
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
      throw std::logic_error("no reference for this binary op");
  }
}

}  // namespace kt
