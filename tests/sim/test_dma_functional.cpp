// N-D copies and fills against a nested-loop reference, and the faults of bad regions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "host_buffer.h"
#include "mtia/isa/address_map.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/memory_system.h"
#include "must.h"

using mtia::test::must;

namespace isa = mtia::isa;
namespace sim = mtia::sim;

namespace {

// The reference: one element at a time, dimension ndims-1 fastest.
template <typename Body>
void for_each_index(const uint64_t* sizes, int ndims, Body&& body) {
  uint64_t total = 1;
  for (int d = 0; d < ndims; ++d) total *= sizes[d];
  uint64_t idx[isa::kMaxDims] = {};
  for (uint64_t n = 0; n < total; ++n) {
    body(idx);
    for (int d = ndims - 1; d >= 0; --d) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
}

uint64_t offset_of(const uint64_t* idx, const uint64_t* strides, int ndims) {
  uint64_t off = 0;
  for (int d = 0; d < ndims; ++d) off += idx[d] * strides[d];
  return off;
}

void reference_copy(uint8_t* dst, const uint64_t* ds, const uint8_t* src, const uint64_t* ss,
                    const uint64_t* sizes, int ndims, uint32_t elem) {
  for_each_index(sizes, ndims, [&](const uint64_t* idx) {
    std::memcpy(dst + offset_of(idx, ds, ndims), src + offset_of(idx, ss, ndims), elem);
  });
}

void reference_fill(uint8_t* dst, const uint64_t* ds, const uint64_t* sizes, int ndims,
                    uint32_t elem, uint64_t pattern) {
  for_each_index(sizes, ndims, [&](const uint64_t* idx) {
    std::memcpy(dst + offset_of(idx, ds, ndims), &pattern, elem);  // little-endian low bytes
  });
}

uint64_t span_bytes(const uint64_t* sizes, const uint64_t* strides, int ndims, uint32_t elem) {
  uint64_t hi = elem;
  for (int d = 0; d < ndims; ++d) hi += (sizes[d] - 1) * strides[d];
  return hi;
}

// A non-overlapping layout: dimensions laid out in a random order with random padding.
void random_layout(std::mt19937_64& rng, const uint64_t* sizes, int ndims, uint32_t elem,
                   uint64_t* strides) {
  int order[isa::kMaxDims];
  std::iota(order, order + ndims, 0);
  std::shuffle(order, order + ndims, rng);
  uint64_t extent = elem;
  for (int i = ndims - 1; i >= 0; --i) {
    const int d = order[i];
    const uint64_t pad = (rng() % 3 == 0) ? (rng() % 4) * elem : 0;
    strides[d] = extent + pad;
    extent = strides[d] * sizes[d];
  }
}

void fill_random(std::vector<uint8_t>& v, std::mt19937_64& rng) {
  for (auto& b : v) b = static_cast<uint8_t>(rng());
}

void check_copy(const uint64_t* sizes, int ndims, uint32_t elem, const uint64_t* ss,
                const uint64_t* ds, std::mt19937_64& rng) {
  std::vector<uint8_t> src(span_bytes(sizes, ss, ndims, elem));
  fill_random(src, rng);
  std::vector<uint8_t> dst(span_bytes(sizes, ds, ndims, elem));
  fill_random(dst, rng);
  std::vector<uint8_t> expect = dst;
  reference_copy(expect.data(), ds, src.data(), ss, sizes, ndims, elem);
  sim::nd_copy(dst.data(), ds, src.data(), ss, sizes, ndims, elem);
  REQUIRE(dst == expect);  // padding bytes untouched too
}

}  // namespace

TEST_CASE("nd_copy matches a nested loop for random shapes, strides and element sizes",
          "[dma][functional]") {
  std::mt19937_64 rng(20240611);
  const uint32_t elems[] = {1, 2, 4, 8};
  for (int iter = 0; iter < 1500; ++iter) {
    const int ndims = 1 + static_cast<int>(rng() % isa::kMaxDims);
    const uint32_t elem = elems[rng() % 4];
    uint64_t sizes[isa::kMaxDims] = {};
    uint64_t total = 1;
    for (int d = 0; d < ndims; ++d) {
      sizes[d] = 1 + rng() % (ndims <= 2 ? 70 : 7);
      total *= sizes[d];
    }
    uint64_t ss[isa::kMaxDims] = {};
    uint64_t ds[isa::kMaxDims] = {};
    random_layout(rng, sizes, ndims, elem, ss);
    random_layout(rng, sizes, ndims, elem, ds);
    if (rng() % 8 == 0) ss[rng() % ndims] = 0;  // broadcast a source dimension
    INFO("iteration " << iter << " ndims " << ndims << " elem " << elem << " elements " << total);
    check_copy(sizes, ndims, elem, ss, ds, rng);
  }
}

TEST_CASE("nd_copy transposes of every element size, edges included", "[dma][functional]") {
  std::mt19937_64 rng(7);
  for (uint32_t elem : {1u, 2u, 4u, 8u}) {
    for (auto [rows, cols] : {std::pair<uint64_t, uint64_t>{1, 1},
                              {3, 5},
                              {4, 4},
                              {37, 53},
                              {131, 145},
                              {256, 16},
                              {16, 256}}) {
      INFO("elem " << elem << " " << rows << "x" << cols);
      // dst[i][j] = src[j][i], both dense.
      const uint64_t sizes[2] = {rows, cols};
      const uint64_t ds[2] = {cols * elem, elem};
      const uint64_t ss[2] = {elem, rows * elem};
      check_copy(sizes, 2, elem, ss, ds, rng);
      // The same with padded rows and a batch dimension in front.
      const uint64_t sizes3[3] = {3, rows, cols};
      const uint64_t ds3[3] = {rows * (cols + 3) * elem, (cols + 3) * elem, elem};
      const uint64_t ss3[3] = {(rows + 1) * cols * elem, elem, (rows + 1) * elem};
      check_copy(sizes3, 3, elem, ss3, ds3, rng);
    }
  }
}

TEST_CASE("nd_fill writes 1, 2, 4 and 8 byte patterns like a nested loop", "[dma][functional]") {
  std::mt19937_64 rng(99);
  const uint64_t patterns[] = {0xA5, 0xBEEF, 0xDEADBEEF, 0x0123456789ABCDEFull};
  const uint32_t elems[] = {1, 2, 4, 8};
  for (int iter = 0; iter < 400; ++iter) {
    const int which = static_cast<int>(rng() % 4);
    const uint32_t elem = elems[which];
    const int ndims = 1 + static_cast<int>(rng() % isa::kMaxDims);
    uint64_t sizes[isa::kMaxDims] = {};
    for (int d = 0; d < ndims; ++d) sizes[d] = 1 + rng() % (ndims <= 2 ? 300 : 6);
    uint64_t ds[isa::kMaxDims] = {};
    random_layout(rng, sizes, ndims, elem, ds);
    std::vector<uint8_t> dst(span_bytes(sizes, ds, ndims, elem));
    fill_random(dst, rng);
    std::vector<uint8_t> expect = dst;
    reference_fill(expect.data(), ds, sizes, ndims, elem, patterns[which]);
    sim::nd_fill(dst.data(), ds, sizes, ndims, elem, patterns[which]);
    INFO("iteration " << iter);
    REQUIRE(dst == expect);
  }
}

// ---- through the MemorySystem: validation against the memory map ---------------------------

namespace {

isa::NdRegion region(uint64_t addr, isa::AddressSpace space, std::initializer_list<uint64_t> s) {
  isa::NdRegion r{};
  r.addr = addr;
  r.space = static_cast<uint8_t>(space);
  int d = 0;
  for (uint64_t v : s) r.strides[d++] = v;
  return r;
}

isa::DmaCopyPacket copy_1d(uint64_t bytes, isa::NdRegion src, isa::NdRegion dst) {
  isa::DmaCopyPacket p{};
  p.header.opcode = static_cast<uint8_t>(isa::Opcode::kDmaCopy);
  p.header.version = isa::kPacketVersion;
  p.ndims = 1;
  p.elem_size = 1;
  p.sizes[0] = bytes;
  p.src = src;
  p.dst = dst;
  return p;
}

}  // namespace

TEST_CASE("DMA jobs move data between host, DRAM, SRAM and local stores", "[dma][functional]") {
  const auto config = must(sim::load_preset("mtia-v2"));
  test::HostBuffer host(1 << 20);
  sim::MemorySystem ms(config, host);
  for (uint64_t i = 0; i < host.size(); ++i) host.data()[i] = static_cast<uint8_t>(i * 7 + 1);

  const uint64_t bus = test::HostBuffer::kBusBase;
  const uint64_t dram = 0x1000;
  const uint64_t sram = isa::kSramBase + 0x40;
  const uint64_t ls5 = isa::kLocalStoreBase + 5 * isa::kLocalStoreStride + 0x100;
  const uint64_t n = 4096;
  using AS = isa::AddressSpace;
  const std::pair<isa::NdRegion, isa::NdRegion> hops[] = {
      {region(bus, AS::kHost, {1}), region(dram, AS::kDevice, {1})},
      {region(dram, AS::kDevice, {1}), region(sram, AS::kDevice, {1})},
      {region(sram, AS::kDevice, {1}), region(ls5, AS::kDevice, {1})},
      {region(ls5, AS::kDevice, {1}), region(bus + 0x80000, AS::kHost, {1})},
  };
  for (const auto& [src, dst] : hops) {
    const auto plan = ms.schedule_copy(copy_1d(n, src, dst), 0);
    REQUIRE(isa::error_code(plan.status) == isa::ErrorCode::kNone);
    REQUIRE(isa::error_code(ms.perform(plan)) == isa::ErrorCode::kNone);
  }
  CHECK(std::memcmp(host.data(), host.data() + 0x80000, n) == 0);

  isa::FillPacket fill{};
  fill.header.opcode = static_cast<uint8_t>(isa::Opcode::kFill);
  fill.header.version = isa::kPacketVersion;
  fill.ndims = 2;
  fill.pattern_size = 2;
  fill.pattern = 0x1234;
  fill.sizes[0] = 3;
  fill.sizes[1] = 5;
  fill.dst = region(dram, AS::kDevice, {64, 2});
  const auto plan = ms.schedule_fill(fill, 0);
  REQUIRE(isa::error_code(ms.perform(plan)) == isa::ErrorCode::kNone);
  const uint8_t* d = ms.device().translate(dram, 256);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) {
      uint16_t v;
      std::memcpy(&v, d + r * 64 + c * 2, 2);
      CHECK(v == 0x1234);
    }
    uint16_t after;
    std::memcpy(&after, d + r * 64 + 10, 2);
    CHECK(after != 0x1234);  // the copied host bytes beyond the fill are untouched
  }
}

TEST_CASE("regions outside memory fault with the span that does not fit", "[dma][faults]") {
  const auto config = must(sim::load_preset("mtia-v2"));
  test::HostBuffer host(1 << 16);
  sim::MemorySystem ms(config, host);
  using AS = isa::AddressSpace;
  const uint64_t bus = test::HostBuffer::kBusBase;
  const uint64_t now = 5'000'000;
  const uint64_t setup = 100'000;

  SECTION("device destination past the end of DRAM") {
    // 2-D: 4 rows of 64 bytes, rows 1 MiB apart; the last row ends 32 bytes past DRAM.
    isa::DmaCopyPacket p = copy_1d(64, region(bus, AS::kHost, {1}), {});
    p.ndims = 2;
    p.sizes[0] = 4;
    p.sizes[1] = 64;
    p.src = region(bus, AS::kHost, {64, 1});
    const uint64_t lo = config.dram_bytes - 3 * (1 << 20) - 32;
    p.dst = region(lo, AS::kDevice, {1 << 20, 1});
    const auto plan = ms.schedule_copy(p, now);
    CHECK(isa::error_code(plan.status) == isa::ErrorCode::kDeviceAddressFault);
    CHECK(plan.status.error().arg0 == lo);
    CHECK(plan.status.error().arg1 == 3 * (1 << 20) + 64);
    CHECK(plan.end_ps == now + setup);                   // reported after the descriptor fetch
    CHECK(ms.free_at_ps(sim::Resource::kPcieH2D) == 0);  // nothing was reserved
  }
  SECTION("device source in the hole after a local store") {
    const uint64_t lo = isa::kLocalStoreBase + config.local_store_bytes - 8;
    const auto plan = ms.schedule_copy(
        copy_1d(16, region(lo, AS::kDevice, {1}), region(0, AS::kDevice, {1})), now);
    CHECK(isa::error_code(plan.status) == isa::ErrorCode::kDeviceAddressFault);
    CHECK(plan.status.error().arg0 == lo);
    CHECK(plan.status.error().arg1 == 16);
  }
  SECTION("host region not registered") {
    const auto plan = ms.schedule_copy(
        copy_1d(128, region(0, AS::kDevice, {1}), region(bus + (1 << 16) - 64, AS::kHost, {1})),
        now);
    CHECK(isa::error_code(plan.status) == isa::ErrorCode::kHostAddressFault);
    CHECK(plan.status.error().arg0 == bus + (1 << 16) - 64);
    CHECK(plan.status.error().arg1 == 128);
  }
  SECTION("host memory unregistered between planning and the end of the job") {
    const auto plan = ms.schedule_copy(
        copy_1d(4096, region(bus + 0x8000, AS::kHost, {1}), region(0, AS::kDevice, {1})), now);
    REQUIRE(isa::error_code(plan.status) == isa::ErrorCode::kNone);
    host.truncate(0x4000);
    const auto result = ms.perform(plan);
    CHECK(isa::error_code(result) == isa::ErrorCode::kHostAddressFault);
    CHECK(result.error().arg0 == bus + 0x8000);
    CHECK(result.error().arg1 == 4096);
  }
  SECTION("fill outside SRAM") {
    isa::FillPacket f{};
    f.ndims = 1;
    f.pattern_size = 8;
    f.sizes[0] = 4;
    f.dst = region(isa::kSramBase + config.sram_bytes - 16, AS::kDevice, {8});
    const auto plan = ms.schedule_fill(f, now);
    CHECK(isa::error_code(plan.status) == isa::ErrorCode::kDeviceAddressFault);
    CHECK(plan.status.error().arg0 == isa::kSramBase + config.sram_bytes - 16);
    CHECK(plan.status.error().arg1 == 32);
  }
}
