// fp16 / bf16 / integer conversions of sim/pe/numerics.h against the independent reference
// of ref_dtypes.h and hand-computed cases.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mtia/sim/pe/numerics.h"
#include "ref_dtypes.h"

namespace pe = mtia::sim::pe;

namespace {

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
float float_of(uint32_t b) {
  return std::bit_cast<float>(b);
}
bool is_nan16(uint16_t h, ref::Format f) {
  const int mbits = f.precision - 1;
  const uint32_t exp_ones = (1u << f.exp_bits) - 1;
  return ((h >> mbits) & exp_ones) == exp_ones && (h & ((1u << mbits) - 1)) != 0;
}

// The fp32 values worth rounding: every midpoint between neighbouring finite values of the
// 16-bit format (and one fp32 ulp either side), plus a sweep over all fp32 bit patterns.
std::vector<float> rounding_probes(ref::Format f) {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7fff; ++h) {  // positive, ordered by value
    const long double lo = ref::decode(h, f);
    const long double hi = ref::decode(h + 1, f);
    if (std::isnan(lo) || std::isnan(hi)) continue;
    // Past the largest finite value the next "neighbour" is the overflow threshold's twin.
    const long double up = std::isinf(hi) ? lo + (lo - ref::decode(h - 1, f)) : hi;
    const auto mid = static_cast<float>((lo + up) / 2);  // exact: needs precision + 1 bits
    for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      v.push_back(m);
      v.push_back(-m);
    }
    if (std::isinf(hi)) break;
  }
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099)
    v.push_back(float_of(static_cast<uint32_t>(b)));
  return v;
}

}  // namespace

TEST_CASE("fp16: all 65536 values widen exactly and round-trip", "[numerics]") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const float f = pe::fp16_to_fp32(x);
    const long double want = ref::decode(h, ref::kFp16);
    INFO("fp16 bits " << h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      CHECK(std::signbit(f) == ((h & 0x8000) != 0));
      // Quiet NaNs come back unchanged; signalling ones come back quiet, same payload.
      CHECK(pe::fp32_to_fp16(f) == (x | 0x0200));
    } else {
      REQUIRE(static_cast<long double>(f) == want);
      REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
      REQUIRE(pe::fp32_to_fp16(f) == x);
    }
  }
}

TEST_CASE("bf16: all 65536 values widen exactly and round-trip", "[numerics]") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const float f = pe::bf16_to_fp32(x);
    INFO("bf16 bits " << h);
    REQUIRE(bits_of(f) == h << 16);  // bf16 is the upper half of binary32
    const long double want = ref::decode(h, ref::kBf16);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      CHECK(pe::fp32_to_bf16(f) == (x | 0x0040));
    } else {
      REQUIRE(static_cast<long double>(f) == want);
      REQUIRE(pe::fp32_to_bf16(f) == x);
    }
  }
}

TEST_CASE("bulk fp16/bf16 widening equals the scalar conversion bit for bit", "[numerics]") {
  // All 65536 patterns, from an odd address (the bulk functions accept any alignment).
  std::vector<uint8_t> src(2 * 65536 + 1);
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    src[1 + 2 * h] = static_cast<uint8_t>(h);
    src[2 + 2 * h] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> wide(65536);
  pe::fp16_to_fp32(src.data() + 1, wide.data(), wide.size());
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    INFO("fp16 bits " << h);
    REQUIRE(bits_of(wide[h]) == bits_of(pe::fp16_to_fp32(static_cast<uint16_t>(h))));
  }
  pe::bf16_to_fp32(src.data() + 1, wide.data(), wide.size());
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    INFO("bf16 bits " << h);
    REQUIRE(bits_of(wide[h]) == bits_of(pe::bf16_to_fp32(static_cast<uint16_t>(h))));
  }
}

TEST_CASE("fp32 -> fp16 rounds to nearest even like the reference", "[numerics]") {
  for (float f : rounding_probes(ref::kFp16)) {
    const uint16_t got = pe::fp32_to_fp16(f);
    INFO("fp32 bits " << bits_of(f));
    if (std::isnan(f)) {
      CHECK(is_nan16(got, ref::kFp16));
      CHECK((got & 0x0200) != 0);  // quiet
      CHECK(((got & 0x8000) != 0) == std::signbit(f));
      CHECK((got & 0x1ff) == ((bits_of(f) >> 13) & 0x1ff));  // top payload bits kept
    } else {
      REQUIRE(got == ref::encode(f, ref::kFp16));
    }
  }
}

TEST_CASE("fp32 -> bf16 rounds to nearest even like the reference", "[numerics]") {
  for (float f : rounding_probes(ref::kBf16)) {
    const uint16_t got = pe::fp32_to_bf16(f);
    INFO("fp32 bits " << bits_of(f));
    if (std::isnan(f)) {
      CHECK(is_nan16(got, ref::kBf16));
      CHECK((got & 0x0040) != 0);
      CHECK((got & 0xffbf) == ((bits_of(f) >> 16) & 0xffbf));  // sign and payload kept
    } else {
      REQUIRE(got == ref::encode(f, ref::kBf16));
    }
  }
}

TEST_CASE("rounding ties and edges, hand-computed", "[numerics]") {
  // fp16: 1 + 2^-11 is halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01).
  CHECK(pe::fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(pe::fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);  // 0x3c01 / 0x3c02 tie: even
  CHECK(pe::fp32_to_fp16(std::nextafter(1.0f + 0x1p-11f, 2.0f)) == 0x3c01);
  CHECK(pe::fp32_to_fp16(65504.0f) == 0x7bff);    // largest finite
  CHECK(pe::fp32_to_fp16(65519.996f) == 0x7bff);  // just under the threshold
  CHECK(pe::fp32_to_fp16(65520.0f) == 0x7c00);    // tie with 2^16: even = Inf
  CHECK(pe::fp32_to_fp16(-1e30f) == 0xfc00);
  CHECK(pe::fp32_to_fp16(0x1p-24f) == 0x0001);  // smallest subnormal
  CHECK(pe::fp32_to_fp16(0x1p-25f) == 0x0000);  // tie between 0 and 2^-24: 0
  CHECK(pe::fp32_to_fp16(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(pe::fp32_to_fp16(3 * 0x1p-25f) == 0x0002);         // 1.5 subnormal ulps: even
  CHECK(pe::fp32_to_fp16(0x1p-14f - 0x1p-25f) == 0x0400);  // rounds up into the normals
  CHECK(pe::fp32_to_fp16(-0.0f) == 0x8000);
  CHECK(pe::fp32_to_fp16(0x1p-140f) == 0x0000);  // fp32 subnormal: underflows
  CHECK(pe::fp16_to_fp32(0x0001) == 0x1p-24f);
  CHECK(pe::fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f);
  CHECK(pe::fp16_to_fp32(0x7bff) == 65504.0f);
  CHECK(pe::fp16_to_fp32(0xc000) == -2.0f);
  // bf16: 0x3f808000 = 1 + 2^-8 is halfway between 0x3f80 (even) and 0x3f81.
  CHECK(pe::fp32_to_bf16(float_of(0x3f808000)) == 0x3f80);
  CHECK(pe::fp32_to_bf16(float_of(0x3f818000)) == 0x3f82);
  CHECK(pe::fp32_to_bf16(float_of(0x3f808001)) == 0x3f81);
  CHECK(pe::fp32_to_bf16(float_of(0x7f7f8000)) == 0x7f80);  // tie at the top: Inf
  CHECK(pe::fp32_to_bf16(float_of(0x7f7f7fff)) == 0x7f7f);
  CHECK(pe::fp32_to_bf16(float_of(0x00008000)) == 0x0000);  // subnormal tie: even 0
  CHECK(pe::fp32_to_bf16(float_of(0x00018000)) == 0x0002);
  CHECK(pe::fp32_to_bf16(float_of(0x7f800001)) == 0x7fc0);  // signalling NaN quietened
  CHECK(pe::fp32_to_bf16(float_of(0xffc12345)) == 0xffc1);  // quiet NaN kept
  CHECK(pe::fp32_to_fp16(float_of(0x7f800001)) == 0x7e00);  // payload below fp16's: quiet
}

TEST_CASE("integer -> float rounds once", "[numerics]") {
  CHECK(pe::int_to_fp32(16777217) == 16777216.0f);  // 2^24 + 1: tie, even
  CHECK(pe::int_to_fp32(16777219) == 16777220.0f);  // 2^24 + 3: tie, even (up)
  CHECK(pe::int_to_fp32(-16777217) == -16777216.0f);
  CHECK(pe::int_to_fp32(INT64_MAX) == 0x1p63f);
  CHECK(pe::int_to_fp32(INT64_MIN) == -0x1p63f);
  CHECK(pe::int_to_fp32(0) == 0.0f);
  CHECK_FALSE(std::signbit(pe::int_to_fp32(0)));
  // 2^24 + 2^16 + 1 is just above the bf16 midpoint 2^24 + 2^16: rounds up to 0x4b81. Via
  // fp32 first it would tie at 2^24 + 2^16 and then go to even 0x4b80: that is double rounding.
  CHECK(pe::int_to_bf16((1 << 24) + (1 << 16) + 1) == 0x4b81);
  CHECK(pe::int_to_bf16((1 << 24) + (1 << 16)) == 0x4b80);
  CHECK(pe::int_to_bf16(-3) == 0xc040);
  CHECK(pe::int_to_fp16(2049) == 0x6800);  // 2048: tie, even
  CHECK(pe::int_to_fp16(2051) == 0x6802);  // 2052
  CHECK(pe::int_to_fp16(65504) == 0x7bff);
  CHECK(pe::int_to_fp16(65519) == 0x7bff);
  CHECK(pe::int_to_fp16(65520) == 0x7c00);  // Inf
  CHECK(pe::int_to_fp16(-70000) == 0xfc00);
  CHECK(pe::int_to_fp16(INT64_MIN) == 0xfc00);

  // Against the reference (long double holds every int64 exactly) on random magnitudes.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const int shift = static_cast<int>(rng() % 64);
    const auto v = static_cast<int64_t>(rng()) >> shift;
    const auto ld = static_cast<long double>(v);
    INFO("v = " << v);
    REQUIRE(bits_of(pe::int_to_fp32(v)) == ref::encode_f32(ld));
    REQUIRE(pe::int_to_fp16(v) == ref::encode(ld, ref::kFp16));
    REQUIRE(pe::int_to_bf16(v) == ref::encode(ld, ref::kBf16));
  }
}

TEST_CASE("float -> integer truncates and saturates, NaN is 0", "[numerics]") {
  auto i8 = [](float f) { return pe::float_to_int_saturating(f, -128, 127); };
  auto i32 = [](float f) { return pe::float_to_int_saturating(f, INT32_MIN, INT32_MAX); };
  auto i64 = [](float f) { return pe::float_to_int_saturating(f, INT64_MIN, INT64_MAX); };
  CHECK(i8(2.9f) == 2);
  CHECK(i8(-2.9f) == -2);
  CHECK(i8(127.9f) == 127);
  CHECK(i8(-128.9f) == -128);
  CHECK(i8(300.0f) == 127);
  CHECK(i8(-1e30f) == -128);
  CHECK(i8(NAN) == 0);
  CHECK(i8(INFINITY) == 127);
  CHECK(i8(-INFINITY) == -128);
  CHECK(i32(1e10f) == INT32_MAX);
  CHECK(i32(-1e10f) == INT32_MIN);
  CHECK(i32(2147483520.0f) == 2147483520);  // the largest float below 2^31
  CHECK(i32(-0x1p31f) == INT32_MIN);
  CHECK(i64(0x1p63f) == INT64_MAX);
  CHECK(i64(-0x1p63f) == INT64_MIN);
  CHECK(i64(-0x1p62f) == -(int64_t{1} << 62));
  CHECK(i64(-NAN) == 0);
  CHECK(i32(-0.0f) == 0);
}

TEST_CASE("bulk convert: every dtype pair against the reference, and in place", "[numerics]") {
  const uint8_t dts[] = {MTIA_PE_DT_FP32,  MTIA_PE_DT_FP16,  MTIA_PE_DT_BF16, MTIA_PE_DT_INT8,
                         MTIA_PE_DT_INT32, MTIA_PE_DT_INT64, MTIA_PE_DT_BOOL};
  std::mt19937_64 rng(11);
  constexpr size_t n = 4096;
  for (uint8_t from : dts) {
    std::vector<uint8_t> src(n * 8);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    if (from == MTIA_PE_DT_BOOL) {
      for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(rng() % 3);  // 2 is true
    }
    for (uint8_t to : dts) {
      std::vector<uint8_t> dst(n * 8 + 8, 0xcd);
      pe::convert(from, src.data(), to, dst.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const ref::Value v = ref::load(src.data(), from, i);
        uint64_t got = 0;
        std::memcpy(&got, dst.data() + i * ref::bytes_of(to), ref::bytes_of(to));
        const uint64_t want = ref::store_bits(v, to);
        INFO("from " << int(from) << " to " << int(to) << " element " << i);
        if (ref::is_float(to) && v.is_float && std::isnan(v.f)) {
          const ref::Value g = ref::load(dst.data(), to, i);
          REQUIRE(std::isnan(g.f));
        } else {
          REQUIRE(got == want);
        }
      }
      CHECK(dst[n * ref::bytes_of(to)] == 0xcd);  // nothing written past the end
    }
  }
  // In place between same-size dtypes: fp32 -> int32.
  std::vector<float> f = {1.5f, -2.5f, 3e9f, NAN};
  pe::convert(MTIA_PE_DT_FP32, f.data(), MTIA_PE_DT_INT32, f.data(), f.size());
  int32_t out[4];
  std::memcpy(out, f.data(), sizeof out);
  CHECK(out[0] == 1);
  CHECK(out[1] == -2);
  CHECK(out[2] == INT32_MAX);
  CHECK(out[3] == 0);
  CHECK_THROWS_AS(pe::convert(0, f.data(), MTIA_PE_DT_FP32, f.data(), 1), std::logic_error);
}
