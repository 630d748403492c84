// The demo's host side (tools/mlp.h), without a device: the fp16/bf16 conversions against
// hand-worked bit patterns and exhaustive round trips, the CPU reference against an MLP worked
// by hand, and the comparison failing on a corrupted output. The device side runs in the
// cli_demo_* tests (tests/tools/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "mlp.h"

using namespace mtia::tools;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

TEST_CASE("fp32 -> fp16 rounds to nearest even, saturates to inf, keeps NaN", "[mlp][dtype]") {
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(-2.0f) == 0xc000);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_fp16(1.0f / 3.0f) == 0x3555);
  CHECK(float_to_fp16(1.0f + 0x1p-11f) == 0x3c00);             // tie: to the even 1.0
  CHECK(float_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);         // tie: to the even 0x3c02
  CHECK(float_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);  // above the tie: up
  CHECK(float_to_fp16(65504.0f) == 0x7bff);                    // the largest half
  CHECK(float_to_fp16(65519.0f) == 0x7bff);
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // tie between 65504 and 2^16: to even, inf
  CHECK(float_to_fp16(1e10f) == 0x7c00);
  CHECK(float_to_fp16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(float_to_fp16(0x1p-24f) == 0x0001);  // the smallest subnormal
  CHECK(float_to_fp16(0x1p-25f) == 0x0000);  // tie: to the even 0
  CHECK(float_to_fp16(1.5f * 0x1p-25f) == 0x0001);
  CHECK(float_to_fp16(0x1p-14f - 0x1p-26f) == 0x0400);  // rounds up to the smallest normal
  const uint16_t nan = float_to_fp16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x3ff) != 0);
}

TEST_CASE("dtype names map both ways", "[mlp][dtype]") {
  for (MlpDtype d : {MlpDtype::kFp32, MlpDtype::kFp16, MlpDtype::kBf16}) {
    CHECK(mlp_dtype_from_name(mlp_dtype_name(d)) == d);
  }
  CHECK_THROWS_WITH(mlp_dtype_from_name("fp64"), Catch::Contains("unknown dtype 'fp64'"));
}

TEST_CASE("fp32 -> bf16 rounds to nearest even and keeps NaN", "[mlp][dtype]") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(1.0f / 3.0f) == 0x3eab);
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);             // tie: to even
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);         // tie: to even
  CHECK(float_to_bf16(from_bits(0x7f7fffff)) == 0x7f80);      // FLT_MAX rounds to inf
  const uint16_t nan = float_to_bf16(from_bits(0x7f800001));  // a NaN that truncation would lose
  CHECK((nan & 0x7f80) == 0x7f80);
  CHECK((nan & 0x7f) != 0);
}

TEST_CASE("every fp16 and bf16 value survives a round trip through fp32", "[mlp][dtype]") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto v = static_cast<uint16_t>(h);
    const bool fp16_nan = (v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0;
    if (!fp16_nan && float_to_fp16(fp16_to_float(v)) != v) FAIL("fp16 " << h);
    const bool bf16_nan = (v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0;
    if (!bf16_nan && float_to_bf16(bf16_to_float(v)) != v) FAIL("bf16 " << h);
  }
  CHECK(fp16_to_float(0x0001) == 0x1p-24f);
  CHECK(fp16_to_float(0x7bff) == 65504.0f);
  CHECK(std::isinf(fp16_to_float(0x7c00)));
  CHECK(bf16_to_float(0x3eab) == 0.333984375f);
}

TEST_CASE("the CPU reference matches an MLP worked by hand", "[mlp][reference]") {
  MlpModel m;
  m.shape = {2, 2, 2, 2};
  m.x = {1, -2, 0, 1};
  m.w1 = {1, 0.5f, -1, 1};  // [hidden, in]
  m.b1 = {0.5f, 0};
  m.w2 = {2, 1, 0, -1};  // [classes, hidden]
  m.b2 = {0, 0};
  // Row 0: h = relu([1 - 1 + 0.5, -1 - 2]) = [0.5, 0]; logits = [1, 0].
  // Row 1: h = relu([0 + 0.5 + 0.5, 0 + 1]) = [1, 1]; logits = [3, -1].
  const double e = std::exp(1.0), e4 = std::exp(-4.0);
  const double want[] = {e / (e + 1), 1 / (e + 1), 1 / (1 + e4), e4 / (1 + e4)};
  for (MlpDtype dt : {MlpDtype::kFp32, MlpDtype::kFp16, MlpDtype::kBf16}) {
    INFO(mlp_dtype_name(dt));
    const auto probs = mlp_reference(m, dt);  // every value above is exact in every dtype
    REQUIRE(probs.size() == 4);
    for (int i = 0; i < 4; ++i) CHECK(probs[i] == Approx(want[i]).epsilon(1e-15));
  }
}

TEST_CASE("the reference rounds its inputs and layer outputs to the dtype", "[mlp][reference]") {
  // One input, one hidden unit, two classes: logits [h, 0] with h = x * w1, so
  // probs[0] = 1 / (1 + exp(-h)) shows which h the reference used.
  MlpModel m;
  m.shape = {1, 1, 1, 2};
  m.x = {1.0f / 3.0f};
  m.w1 = {1.0f};
  m.b1 = {0};
  m.w2 = {1, 0};
  m.b2 = {0, 0};
  const auto p0 = [&](MlpDtype dt) { return mlp_reference(m, dt)[0]; };
  const auto sigmoid = [](double h) { return 1 / (1 + std::exp(-h)); };
  // 1/3 in each dtype: fp32 0x3eaaaaab, fp16 0x3555, bf16 0x3eab.
  CHECK(p0(MlpDtype::kFp32) == Approx(sigmoid(0.3333333432674408)).epsilon(1e-15));
  CHECK(p0(MlpDtype::kFp16) == Approx(sigmoid(0.333251953125)).epsilon(1e-15));
  CHECK(p0(MlpDtype::kBf16) == Approx(sigmoid(0.333984375)).epsilon(1e-15));
  // A layer's output is rounded too: 3 x bf16(1/3) = 1.001953125 = 1 + 2^-9, less than half a
  // bf16 step (2^-8) above 1, so the hidden unit holds 1.0 and the logit is exactly 1.
  m.w1 = {3.0f};
  CHECK(p0(MlpDtype::kBf16) == Approx(sigmoid(1.0)).epsilon(1e-15));
}

TEST_CASE("the comparison fails on a corrupted output and names the element", "[mlp][check]") {
  const MlpShape s{3, 4, 5, 6};
  const MlpModel m = MlpModel::random(s, 7);
  const auto ref = mlp_reference(m, MlpDtype::kFp32);
  std::vector<float> dev(ref.begin(), ref.end());
  MlpCheck ok = mlp_compare(dev, ref, s, MlpDtype::kFp32);
  CHECK(ok.passed);
  CHECK(ok.max_abs_error < 1e-7);  // only the rounding to float
  CHECK(ok.top1_agree == 3);

  SECTION("one probability off by twice the tolerance") {
    dev[2 * 6 + 4] += static_cast<float>(2 * mlp_tolerance(MlpDtype::kFp32));
    const MlpCheck bad = mlp_compare(dev, ref, s, MlpDtype::kFp32);
    CHECK_FALSE(bad.passed);
    CHECK(bad.worst_row == 2);
    CHECK(bad.worst_col == 4);
    CHECK(bad.max_abs_error == Approx(2e-5).epsilon(0.01));
  }
  SECTION("a NaN") {
    dev[5] = std::numeric_limits<float>::quiet_NaN();
    const MlpCheck bad = mlp_compare(dev, ref, s, MlpDtype::kFp32);
    CHECK_FALSE(bad.passed);
    CHECK(std::isnan(bad.max_abs_error));
  }
  SECTION("a wrong number of values") {
    dev.pop_back();
    CHECK_THROWS_AS(mlp_compare(dev, ref, s, MlpDtype::kFp32), std::invalid_argument);
  }
  SECTION("a looser dtype tolerates what fp32 does not") {
    dev[0] += 1e-4f;
    CHECK_FALSE(mlp_compare(dev, ref, s, MlpDtype::kFp32).passed);
    CHECK(mlp_compare(dev, ref, s, MlpDtype::kFp16).passed);
  }
}

TEST_CASE("the model is deterministic in its seed and rejects empty sizes", "[mlp][model]") {
  const MlpShape s{4, 8, 16, 5};
  const MlpModel a = MlpModel::random(s, 1), b = MlpModel::random(s, 1), c = MlpModel::random(s, 2);
  CHECK(a.x == b.x);
  CHECK(a.w1 == b.w1);
  CHECK(a.w2 == b.w2);
  CHECK(a.x != c.x);
  CHECK(a.w1.size() == 16 * 8);
  CHECK(a.w2.size() == 5 * 16);
  for (float w : a.w1) CHECK(std::fabs(w) < std::sqrt(6.0f / 8));
  CHECK(s.matmul_flops() == 2.0 * 4 * (8 * 16 + 16 * 5));
  for (auto bad : {MlpShape{0, 1, 1, 1}, MlpShape{1, 1, 1, -3}}) {
    CHECK_THROWS_WITH(MlpModel::random(bad, 1), Catch::Contains("must be >= 1"));
  }
}
