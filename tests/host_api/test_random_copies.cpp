// Thousands of random strided copies host -> device -> device -> host, each checked against
// the nested-loop reference copy, gaps between elements included.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "device_helpers.h"
#include "reference.h"

using namespace mtia;

namespace {

constexpr size_t kArenaBytes = 4 << 20;

// Host memory for one side of a copy: a slice of a pinned arena or a pageable vector.
struct HostBuffer {
  uint8_t* data = nullptr;
  std::vector<uint8_t> pageable;
};

void take_host(HostBuffer& b, uint8_t* arena, size_t bytes, bool pinned) {
  if (pinned && bytes <= kArenaBytes) {
    b.data = arena;
  } else {
    b.pageable.assign(bytes, 0);
    b.data = b.pageable.data();
  }
}

struct Counts {
  int cases = 0, pinned_sides = 0, async_copies = 0, split_copies = 0, max_rank = 0;
};

// One case: src (host, layout a) -> dev1 (layout b) -> dev2 (layout c) -> host (layout d).
void random_case(Device& dev, std::mt19937_64& rng, const std::vector<Stream>& streams,
                 uint8_t* arena_in, uint8_t* arena_out, Counts& counts) {
  auto coin = [&] { return (rng() & 1) != 0; };
  const size_t elem = test::random_elem_size(rng);
  const auto sizes = test::random_shape(rng, 8, 2048 / static_cast<int64_t>(elem));
  const Layout a = test::random_layout(rng, sizes, elem);
  const Layout b = test::random_layout(rng, sizes, elem);
  const Layout c = test::random_layout(rng, sizes, elem);
  const Layout d = test::random_layout(rng, sizes, elem);
  INFO("shape rank " << sizes.size() << ", elem " << elem << "\n  a " << a.to_string() << "\n  b "
                     << b.to_string() << "\n  c " << c.to_string() << "\n  d " << d.to_string());
  const Stream stream = streams[rng() % streams.size()];
  const bool async = coin();
  counts.cases += 1;
  counts.async_copies += async ? 1 : 0;
  counts.max_rank = std::max(counts.max_rank, static_cast<int>(sizes.size()));
  counts.split_copies += plan_copy(b, a).pieces.size() > 1 ? 1 : 0;

  // Host source.
  HostBuffer in;
  const bool in_pinned = coin();
  counts.pinned_sides += in_pinned ? 1 : 0;
  take_host(in, arena_in, test::span_end(a), in_pinned);
  const auto bytes = test::random_bytes(rng, test::span_end(a));
  std::memcpy(in.data, bytes.data(), bytes.size());

  // Host -> device.
  const uint64_t b_bytes = test::span_end(b);
  DevicePtr db = dev.malloc(b_bytes);
  dev.memset(db, 0xB0, b_bytes, stream);
  std::vector<uint8_t> b_img(b_bytes, 0xB0);
  test::reference_copy(b_img.data(), b, in.data, a);
  if (async) {
    dev.copy_async(db, b, in.data, a, stream);
    dev.synchronize(stream);
  } else {
    dev.copy(db, b, in.data, a, stream);
  }
  std::vector<uint8_t> got(b_bytes);
  dev.copy(got.data(), db, b_bytes, stream);
  REQUIRE(got == b_img);

  // Device -> device.
  const uint64_t c_bytes = test::span_end(c);
  DevicePtr dc = dev.malloc(c_bytes);
  dev.memset_async(dc, 0xC3, c_bytes, stream);
  std::vector<uint8_t> c_img(c_bytes, 0xC3);
  test::reference_copy(c_img.data(), c, b_img.data(), b);
  if (async) {
    dev.copy_async(dc, c, db, b, stream);
  } else {
    dev.copy(dc, c, db, b, stream);
  }
  got.assign(c_bytes, 0);
  dev.copy(got.data(), dc, c_bytes, stream);
  REQUIRE(got == c_img);

  // Device -> host, into memory prefilled so that untouched gaps are checked too.
  HostBuffer out;
  const bool out_pinned = coin();
  counts.pinned_sides += out_pinned ? 1 : 0;
  const uint64_t d_bytes = test::span_end(d);
  take_host(out, arena_out, d_bytes, out_pinned);
  std::memset(out.data, 0xD7, d_bytes);
  std::vector<uint8_t> d_img(d_bytes, 0xD7);
  test::reference_copy(d_img.data(), d, c_img.data(), c);
  if (async) {
    dev.copy_async(out.data, d, dc, c, stream);
    dev.synchronize(stream);
  } else {
    dev.copy(out.data, d, dc, c, stream);
  }
  REQUIRE(std::memcmp(out.data, d_img.data(), d_bytes) == 0);

  dev.free(db);
  dev.free(dc);
}

void run_random_copies(Device& dev, uint64_t seed, int cases) {
  std::mt19937_64 rng(seed);
  std::vector<Stream> streams = {Stream{}, dev.create_stream(), dev.create_stream()};
  auto* arena_in = static_cast<uint8_t*>(dev.host_alloc(kArenaBytes));
  auto* arena_out = static_cast<uint8_t*>(dev.host_alloc(kArenaBytes));
  Counts counts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < cases; ++i) {
    INFO("case " << i << " of seed " << seed);
    random_case(dev, rng, streams, arena_in, arena_out, counts);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN(cases << " random cases (timing " << (dev.properties().timing ? "on" : "off") << ") in "
             << secs << " s; " << counts.pinned_sides << " pinned host sides, "
             << counts.async_copies << " async, " << counts.split_copies
             << " split over several descriptors, max rank " << counts.max_rank);
  // The generator must really have produced the interesting cases.
  CHECK(counts.pinned_sides > cases / 2);
  CHECK(counts.async_copies > cases / 4);
  CHECK(counts.split_copies > 0);
  CHECK(counts.max_rank == 8);
  dev.host_free(arena_in);
  dev.host_free(arena_out);
  for (size_t i = 1; i < streams.size(); ++i) dev.destroy_stream(streams[i]);
  CHECK(dev.memory_stats().allocated_bytes == 0);
}

}  // namespace

TEST_CASE("random strided copies match the nested-loop reference (functional mode)",
          "[copies][random]") {
  Device dev = Device::open(test::functional_options());
  run_random_copies(dev, 0x5eed0001, 4000);
}

TEST_CASE("random strided copies match the nested-loop reference (timing mode)",
          "[copies][random]") {
  Device dev = Device::open();
  REQUIRE(dev.properties().timing);
  run_random_copies(dev, 0x5eed0002, 1000);
}
