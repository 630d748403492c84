// Device memory: the address map, overflow-safe bounds, and lazy backing of a 128 GiB DRAM.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "mtia/isa/address_map.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/device_memory.h"
#include "must.h"

using mtia::test::must;
#include "rss.h"

using mtia::sim::DeviceMemory;
using mtia::sim::MemoryKind;
namespace isa = mtia::isa;

TEST_CASE("translate follows the address map with exact bounds", "[memory]") {
  const auto config = must(mtia::sim::load_preset("mtia-v2"));
  DeviceMemory mem(config);
  const uint64_t dram = config.dram_bytes;
  const uint64_t sram = config.sram_bytes;
  const uint64_t ls = config.local_store_bytes;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

  // DRAM
  CHECK(mem.translate(isa::kDramBase, 1) != nullptr);
  CHECK(mem.translate(isa::kDramBase, dram) != nullptr);
  CHECK(mem.translate(isa::kDramBase, dram + 1) == nullptr);
  CHECK(mem.translate(dram - 1, 1) != nullptr);
  CHECK(mem.translate(dram, 1) == nullptr);
  CHECK(mem.translate(dram - 8, 16) == nullptr);  // straddles the end
  CHECK(mem.translate(8, kMax) == nullptr);       // addr + len would overflow
  CHECK(mem.translate(kMax, 1) == nullptr);
  CHECK(mem.translate(kMax - 3, 8) == nullptr);
  CHECK(mem.kind_of(4096, 64) == MemoryKind::kDram);

  // SRAM
  CHECK(mem.translate(isa::kSramBase - 1, 1) == nullptr);
  CHECK(mem.translate(isa::kSramBase - 1, 2) == nullptr);  // DRAM gap into SRAM
  CHECK(mem.translate(isa::kSramBase, sram) != nullptr);
  CHECK(mem.translate(isa::kSramBase + sram - 1, 1) != nullptr);
  CHECK(mem.translate(isa::kSramBase + sram, 1) == nullptr);
  CHECK(mem.kind_of(isa::kSramBase + 100, 8) == MemoryKind::kSram);

  // Local stores: one window per PE, holes between stores.
  const uint64_t pe63 = isa::kLocalStoreBase + 63 * isa::kLocalStoreStride;
  CHECK(mem.translate(isa::kLocalStoreBase, ls) != nullptr);
  CHECK(mem.translate(isa::kLocalStoreBase + ls - 1, 1) != nullptr);
  CHECK(mem.translate(isa::kLocalStoreBase + ls, 1) == nullptr);  // hole after PE 0's store
  CHECK(mem.translate(isa::kLocalStoreBase + ls - 4, 8) == nullptr);
  CHECK(mem.translate(pe63 + ls - 1, 1) != nullptr);
  CHECK(mem.translate(pe63 + isa::kLocalStoreStride, 1) == nullptr);  // PE 64 does not exist
  CHECK(mem.kind_of(pe63, 16) == MemoryKind::kLocalStore);
  CHECK(mem.kind_of(pe63 + ls, 1) == MemoryKind::kNone);

  // Distinct memories do not alias.
  uint8_t* a = mem.translate(isa::kLocalStoreBase, 1);
  uint8_t* b = mem.translate(isa::kLocalStoreBase + isa::kLocalStoreStride, 1);
  *a = 0x11;
  *b = 0x22;
  CHECK(*a == 0x11);
  CHECK(b - a == static_cast<ptrdiff_t>(ls));
  CHECK(*mem.translate(0, 1) == 0);  // fresh memory reads as zero
}

TEST_CASE("a 128 GiB DRAM is backed lazily", "[memory]") {
  const auto config = must(mtia::sim::load_preset("mtia-v2"));
  REQUIRE(config.dram_bytes == 128ull << 30);
  const uint64_t before = test::rss_bytes();
  {
    DeviceMemory mem(config);
    uint8_t* last = mem.translate(config.dram_bytes - 1, 1);
    REQUIRE(last != nullptr);
    *last = 0xAB;
    uint8_t* first = mem.translate(0, 1);
    *first = 0xCD;
    CHECK(*mem.translate(config.dram_bytes - 1, 1) == 0xAB);
    CHECK(*mem.translate(0, 1) == 0xCD);
    // Two touched pages, not 128 GiB.
    CHECK(test::rss_bytes() < before + (64ull << 20));
  }
}

TEST_CASE("an unmappable size fails with a clear error", "[memory]") {
  // More address space than x86-64 user space has: mmap must refuse it.
  auto config = must(mtia::sim::load_preset("mtia-v2"));
  config.dram_bytes = 1ull << 62;  // bypasses validate() on purpose
  try {
    DeviceMemory mem(config);
    FAIL("mapping 4 EiB should fail");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.find("DRAM") != std::string::npos);
    CHECK(what.find("cannot reserve") != std::string::npos);
  }
}

TEST_CASE("writes to watched ranges are counted; others and uncounted writers are not",
          "[memory]") {
  const auto config = must(mtia::sim::load_preset("mtia-v2"));
  DeviceMemory mem(config);
  CHECK(mem.watched_writes() == 0);
  mem.note_written(0x1000, 16);  // nothing watched yet
  CHECK(mem.watched_writes() == 0);

  mem.watch(0x1000, 0x100);         // [0x1000, 0x1100)
  mem.watch(0x5000, 0x10);          // [0x5000, 0x5010)
  mem.note_written(0x0f00, 0x100);  // ends where the first range starts
  mem.note_written(0x1100, 8);      // starts where it ends
  mem.note_written(0x2000, 0x1000);
  CHECK(mem.watched_writes() == 0);
  mem.note_written(0x0fff, 2);  // its first byte
  CHECK(mem.watched_writes() == 1);
  mem.note_written(0x10ff, 1);  // its last byte
  CHECK(mem.watched_writes() == 2);
  mem.note_written(0x4000, 0x2000);  // covers the second range
  CHECK(mem.watched_writes() == 3);
  mem.note_written(0x1000, 0x5000);  // overlaps both: one write
  CHECK(mem.watched_writes() == 4);

  mem.unwatch_all();
  mem.note_written(0x1000, 0x100);
  CHECK(mem.watched_writes() == 4);  // the count stays, the ranges are gone

  CHECK_FALSE(mem.writes_uncounted());
  CHECK(mem.dram_fd() >= 0);  // another process may write through it now
  CHECK(mem.writes_uncounted());
}
