#include "mtia/sim/pe/numerics.h"

#include <cstring>

#include "elements.h"

namespace mtia::sim::pe {

void convert(uint8_t from, const void* src, uint8_t to, void* dst, size_t count) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  detail::visit_dtype(from, [&](auto in) {
    using In = decltype(in);
    detail::visit_dtype(to, [&](auto out) {
      using Out = decltype(out);
      // Element by element, reading before writing: in place works when the sizes match.
      for (size_t i = 0; i < count; ++i) {
        Out::store(d + i * Out::kBytes, detail::cast_value<In, Out>(In::load(s + i * In::kBytes)));
      }
    });
  });
}

// The same function as the scalar fp16_to_fp32, written with selects instead of branches so
// that the compiler vectorises it: the DPE widens whole fp16 tiles before each sgemm, and the
// scalar version would cost more than the matmul itself.
void fp16_to_fp32(const void* src, float* dst, size_t count) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < count; ++i) {
    uint16_t h16;
    std::memcpy(&h16, s + 2 * i, 2);  // any alignment, no aliasing assumptions
    const uint32_t h = h16;
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;  // exponent and mantissa
    // Normal: move into place and rebias the exponent by 127 - 15 = 112. Inf/NaN: rebias by
    // 224 instead, which turns exponent 31 into 255 and keeps the payload bits.
    const uint32_t special = static_cast<uint32_t>(em >= 0x7c00u);  // 0 or 1
    const uint32_t normal = (em << 13) + ((112u + 112u * special) << 23);
    // Subnormal (and zero): em * 2^-24 exactly, computed by the FPU.
    const uint32_t sub =
        std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
    const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 0x400u);  // all ones or zero
    dst[i] = std::bit_cast<float>(sign | (sub & is_sub) | (normal & ~is_sub));
  }
}

void bf16_to_fp32(const void* src, float* dst, size_t count) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < count; ++i) {
    uint16_t b;
    std::memcpy(&b, s + 2 * i, 2);
    dst[i] = std::bit_cast<float>(uint32_t{b} << 16);
  }
}

}  // namespace mtia::sim::pe
