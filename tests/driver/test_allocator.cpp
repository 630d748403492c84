// The device memory allocator, against hand-computed addresses and byte counts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mtia/driver/allocator.h"
#include "must.h"

using mtia::driver::Allocation;
using mtia::driver::Allocator;
using mtia::isa::ErrorCode;
using mtia::test::failure;
using mtia::test::must;

namespace {

std::unique_ptr<Allocator> make(uint64_t base, uint64_t bytes) {
  return must(Allocator::create(base, bytes));
}

template <typename R>
ErrorCode code_of(const R& r) {
  return failure(r).code;
}

}  // namespace

TEST_CASE("allocator hands out aligned addresses first fit", "[allocator]") {
  const auto heap_ = make(0x10000, 0x10000);  // 64 KiB heap at 64 KiB, default 256-byte alignment
  Allocator& a = *heap_;
  CHECK(must(a.allocate(1)) == 0x10000);
  CHECK(must(a.allocate(100)) == 0x10100);  // the 1-byte block reserved a whole 256-byte granule
  CHECK(must(a.allocate(256)) == 0x10200);
  CHECK(must(a.allocate(257)) == 0x10300);      // reserves 512
  CHECK(must(a.allocate(8, 4096)) == 0x11000);  // stronger alignment skips to the next 4 KiB
  // The padding skipped for the 4 KiB alignment stays free and is found first.
  CHECK(must(a.allocate(256)) == 0x10500);
}

TEST_CASE("allocator with an unaligned base trims to whole granules", "[allocator]") {
  const auto heap_ = make(0x1010, 0x1000);  // [0x1010, 0x2010) -> usable [0x1100, 0x2000)
  Allocator& a = *heap_;
  CHECK(a.stats().free_bytes == 0xF00);
  CHECK(must(a.allocate(0xF00)) == 0x1100);
  CHECK(code_of(a.allocate(1)) == ErrorCode::kOutOfMemory);
}

TEST_CASE("allocator rejects bad requests", "[allocator]") {
  const auto heap_ = make(0, 1 << 20);
  Allocator& a = *heap_;
  CHECK(code_of(a.allocate(0)) == ErrorCode::kInvalidArgument);
  CHECK(code_of(a.allocate(16, 3)) == ErrorCode::kInvalidArgument);
  CHECK(code_of(Allocator::create(0, 4096, 100)) == ErrorCode::kInvalidArgument);
  CHECK(code_of(a.allocate(UINT64_MAX)) == ErrorCode::kOutOfMemory);  // no overflow while rounding
}

TEST_CASE("freeing fragments coalesces them into one range", "[allocator]") {
  const uint64_t heap = 1 << 20;
  const auto heap_ = make(0x100000, heap);
  Allocator& a = *heap_;
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(must(a.allocate(heap / 64)));
  CHECK(a.stats().free_bytes == 0);
  CHECK(code_of(a.allocate(1)) == ErrorCode::kOutOfMemory);

  // Free every other block, then the rest in a scrambled order: each free merges neighbours.
  for (size_t i = 0; i < blocks.size(); i += 2) must(a.free(blocks[i]));
  CHECK(a.stats().free_bytes == heap / 2);
  CHECK(a.stats().largest_free_bytes == heap / 64);
  CHECK(code_of(a.allocate(heap / 32)) == ErrorCode::kOutOfMemory);  // fragmented: no 2-block range
  std::vector<uint64_t> odd;
  for (size_t i = 1; i < blocks.size(); i += 2) odd.push_back(blocks[i]);
  std::shuffle(odd.begin(), odd.end(), std::mt19937(7));
  for (uint64_t b : odd) must(a.free(b));

  const auto s = a.stats();
  CHECK(s.free_bytes == heap);
  CHECK(s.largest_free_bytes == heap);
  CHECK(s.allocations == 0);
  CHECK(must(a.allocate(heap)) == 0x100000);  // the whole heap in one piece again
}

TEST_CASE("out of memory names the request and what is free", "[allocator]") {
  const auto heap_ = make(0, 4096);
  Allocator& a = *heap_;
  const uint64_t x = must(a.allocate(1024));
  must(a.allocate(1024));
  must(a.free(x));
  // Free: [0, 1024) and [2048, 4096), 3072 bytes; the largest range is 2048.
  CHECK(failure(a.allocate(3000, 512)).reason ==
        "out of device memory: requested 3000 bytes (aligned to 512), 3072 bytes free, largest "
        "free range 2048 bytes");
  const mtia::isa::Failure f = failure(a.allocate(5000));
  CHECK(f.code == ErrorCode::kOutOfMemory);
  CHECK(f.reason.find("requested 5000 bytes") != std::string::npos);
}

TEST_CASE("double free and unknown free say which", "[allocator]") {
  const auto heap_ = make(0x4000, 0x4000);
  Allocator& a = *heap_;
  const uint64_t x = must(a.allocate(1000));
  must(a.free(x));
  CHECK(failure(a.free(x)).reason ==
        "double free: device address 0x4000 (1000 bytes) was already freed");
  CHECK(failure(a.free(0x123456)).reason ==
        "cannot free device address 0x123456: it was never allocated by this device");
  const uint64_t y = must(a.allocate(512));
  CHECK(y == 0x4000);  // reused: no longer reported as freed
  CHECK(failure(a.free(y + 8)).reason ==
        "cannot free device address 0x4008: it points inside the allocation at 0x4000 (512 "
        "bytes), not at its start");
  must(a.free(y));
  CHECK(code_of(a.free(y)) == ErrorCode::kInvalidPointer);
}

TEST_CASE("find locates the live allocation holding a range", "[allocator]") {
  const auto heap_ = make(0, 1 << 16);
  Allocator& a = *heap_;
  const uint64_t x = must(a.allocate(1000));  // [0, 1000), reserves [0, 1024)
  const uint64_t y = must(a.allocate(100));   // [1024, 1124)
  auto f = a.find(x + 10, 990);
  REQUIRE(f.has_value());
  CHECK(f->address == x);
  CHECK(f->bytes == 1000);
  CHECK_FALSE(a.find(x + 10, 991).has_value());  // runs one byte past the allocation
  CHECK_FALSE(a.find(x + 1000).has_value());     // in the alignment padding, not the user range
  CHECK(a.find(y + 99)->address == y);
  CHECK_FALSE(a.find(y + 100).has_value());
  CHECK_FALSE(a.find(x, UINT64_MAX).has_value());  // no wrap-around
  must(a.free(x));
  CHECK_FALSE(a.find(x).has_value());
}

TEST_CASE("stats count bytes and allocations, and the peak resets", "[allocator]") {
  const auto heap_ = make(0, 1 << 20);
  Allocator& a = *heap_;
  const uint64_t x = must(a.allocate(1000));
  const uint64_t y = must(a.allocate(3000));
  auto s = a.stats();
  CHECK(s.allocated_bytes == 4000);
  CHECK(s.reserved_bytes == 1024 + 3072);
  CHECK(s.peak_allocated_bytes == 4000);
  CHECK(s.allocations == 2);
  CHECK(s.total_allocations == 2);
  CHECK(s.free_bytes == (1 << 20) - 4096);
  CHECK(s.largest_free_bytes == (1 << 20) - 4096);

  must(a.free(y));
  s = a.stats();
  CHECK(s.allocated_bytes == 1000);
  CHECK(s.peak_allocated_bytes == 4000);
  a.reset_peak();
  CHECK(a.stats().peak_allocated_bytes == 1000);
  must(a.allocate(500));
  s = a.stats();
  CHECK(s.peak_allocated_bytes == 1500);
  CHECK(s.total_allocations == 3);
  CHECK(s.allocations == 2);
  must(a.free(x));
}

TEST_CASE("a 128 GiB heap allocates and frees large blocks", "[allocator]") {
  const uint64_t gib = 1ull << 30;
  const uint64_t base = 4ull << 20;  // like the driver: DRAM after its ring region
  const auto heap_ = make(base, 128 * gib - base);
  Allocator& a = *heap_;
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 7; ++i) blocks.push_back(must(a.allocate(16 * gib)));
  CHECK(blocks[0] == base);
  CHECK(blocks[6] == base + 6 * 16 * gib);
  CHECK(a.stats().free_bytes == 128 * gib - base - 7 * 16 * gib);
  CHECK(code_of(a.allocate(16 * gib)) == ErrorCode::kOutOfMemory);  // 4 MiB short
  const uint64_t last = must(a.allocate(16 * gib - base));
  CHECK(last == base + 7 * 16 * gib);
  CHECK(a.stats().free_bytes == 0);
  for (uint64_t b : blocks) must(a.free(b));
  must(a.free(last));
  CHECK(a.stats().largest_free_bytes == 128 * gib - base);
  CHECK(must(a.allocate(128 * gib - base, 1ull << 20)) == base);
}

TEST_CASE("random allocate and free keep the books balanced", "[allocator]") {
  const uint64_t heap = 64 << 20;
  const auto heap_ = make(0, heap);
  Allocator& a = *heap_;
  std::mt19937_64 rng(42);
  std::vector<Allocation> live;
  std::map<uint64_t, uint64_t> ref;  // independent record of live ranges: start -> end
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t bytes = 1 + rng() % 70000;
      const uint64_t align = 1ull << (rng() % 14);
      if (mtia::isa::Result<uint64_t> got = a.allocate(bytes, align); got) {
        const uint64_t addr = got.value();
        REQUIRE(addr % std::max<uint64_t>(align, 256) == 0);
        REQUIRE(addr + bytes <= heap);
        // No overlap with the neighbouring live ranges.
        auto next = ref.lower_bound(addr);
        if (next != ref.end()) REQUIRE(next->first >= addr + bytes);
        if (next != ref.begin()) REQUIRE(std::prev(next)->second <= addr);
        ref.emplace(addr, addr + bytes);
        live.push_back({addr, bytes});
      } else {
        REQUIRE(got.error().code == ErrorCode::kOutOfMemory);
      }
    } else {
      const size_t i = rng() % live.size();
      must(a.free(live[i].address));
      ref.erase(live[i].address);
      live[i] = live.back();
      live.pop_back();
    }
  }
  uint64_t sum = 0;
  for (const auto& l : live) sum += l.bytes;
  CHECK(a.stats().allocated_bytes == sum);
  CHECK(a.stats().allocations == live.size());
  for (const auto& l : live) must(a.free(l.address));
  CHECK(a.stats().free_bytes == heap);
  CHECK(a.stats().largest_free_bytes == heap);
}
