// The two builds of the SE's transcendental blocks (sim/pe/src/vector_math.h) against each
// other: the AVX2 build must give the baseline's tanh bit for bit (both are correctly
// rounded) and exp, sigmoid and SiLU within a few ulp, with the same special values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "vector_math.h"

namespace vm = mtia::sim::pe::detail;

namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Distance in representable floats (same sign assumed; sign changes count as far).
uint64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : ~0ull;
  if (std::signbit(a) != std::signbit(b)) return a == b ? 0 : ~0ull;
  const uint32_t x = bits(a), y = bits(b);
  return x > y ? x - y : y - x;
}

// Every 4099th bit pattern, both signs, and the special values; an odd count so that the
// tails of both builds are covered.
std::vector<float> sweep() {
  std::vector<float> in;
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) {
    float f;
    const uint32_t u = static_cast<uint32_t>(b);
    std::memcpy(&f, &u, 4);
    in.push_back(f);
  }
  for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-30f, -1e-30f, 88.0f, -104.0f,
                  9.1f, -9.1f, 0x1p-13f, -0x1p-13f}) {
    in.push_back(f);
  }
  if (in.size() % 2 == 0) in.push_back(0.5f);
  return in;
}

}  // namespace

TEST_CASE("SE transcendental blocks: the AVX2 build agrees with the baseline build",
          "[units][se]") {
  if (std::string(vm::vector_math_variant()) != "avx2") {
    WARN("this CPU has no AVX2: only the baseline build runs here");
    return;
  }
  const std::vector<float> in = sweep();
  struct Fn {
    const char* name;
    void (*base)(float*, size_t);
    void (*avx2)(float*, size_t);
    uint64_t max_ulps;
  };
  const Fn fns[] = {{"tanh", vm::baseline::tanh_block, vm::avx2::tanh_block, 0},
                    {"exp", vm::baseline::exp_block, vm::avx2::exp_block, 2},
                    {"sigmoid", vm::baseline::sigmoid_block, vm::avx2::sigmoid_block, 2},
                    {"silu", vm::baseline::silu_block, vm::avx2::silu_block, 3}};
  for (const Fn& f : fns) {
    std::vector<float> a = in, b = in;
    f.base(a.data(), a.size());
    f.avx2(b.data(), b.size());
    uint64_t worst = 0, bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint64_t d = ulps(a[i], b[i]);
      worst = std::max(worst, d);
      if (d > f.max_ulps) {
        ++bad;
        UNSCOPED_INFO(f.name << "(" << in[i] << "): baseline " << a[i] << ", avx2 " << b[i]);
      }
    }
    INFO(f.name << ": worst difference " << worst << " ulp over " << in.size() << " inputs");
    CHECK(bad == 0);
  }
  // The specials exactly: -0 stays -0 for tanh, SiLU(-Inf) is -0, sigmoid(-Inf) is +0.
  float t[3] = {-0.0f, -INFINITY, INFINITY};
  vm::avx2::tanh_block(t, 3);
  CHECK(bits(t[0]) == 0x80000000u);
  CHECK(t[1] == -1.0f);
  CHECK(t[2] == 1.0f);
  float s[2] = {-INFINITY, INFINITY};
  vm::avx2::silu_block(s, 2);
  CHECK(bits(s[0]) == 0x80000000u);
  CHECK(s[1] == INFINITY);
  float g[2] = {-INFINITY, INFINITY};
  vm::avx2::sigmoid_block(g, 2);
  CHECK(bits(g[0]) == 0u);
  CHECK(g[1] == 1.0f);
}
