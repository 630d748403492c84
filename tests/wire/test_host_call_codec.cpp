// A host-call record crosses the device server's socket unchanged, and a damaged one is refused.
#include <catch2/catch.hpp>

#include "mtia/wire/host_call_codec.h"

using namespace mtia;

TEST_CASE("a host-call record round-trips through its bytes", "[trace][server]") {
  trace::HostCall c;
  c.thread = 3;
  c.order = 41;
  c.name = "copy_async";
  c.detail = "host to device, 4096 bytes";
  c.start_ps = 1000;
  c.end_ps = 2500;
  c.wall_start_us = 12.25;
  c.wall_us = 0.5;
  c.error = "";
  c.packets = {{1, 7, 1100, "DMA copy"}, {2, 8, 1200, "matmul"}};
  const auto bytes = wire::encode_host_call(c);
  isa::Result<trace::HostCall> back = wire::decode_host_call(bytes.data(), bytes.size());
  REQUIRE(back.ok());
  const trace::HostCall& b = back.value();
  CHECK(b.thread == 3);
  CHECK(b.order == 41);
  CHECK(b.name == c.name);
  CHECK(b.detail == c.detail);
  CHECK(b.start_ps == 1000);
  CHECK(b.end_ps == 2500);
  CHECK(b.wall_start_us == 12.25);
  CHECK(b.wall_us == 0.5);
  REQUIRE(b.packets.size() == 2);
  CHECK(b.packets[1].queue == 2);
  CHECK(b.packets[1].seq == 8);
  CHECK(b.packets[1].submit_ps == 1200);
  CHECK(b.packets[1].label == "matmul");

  for (size_t n = 0; n < bytes.size(); ++n) {  // every truncation is refused
    INFO("cut at " << n);
    CHECK_FALSE(wire::decode_host_call(bytes.data(), n).ok());
  }
  auto longer = bytes;
  longer.push_back(0);
  CHECK_THAT(wire::decode_host_call(longer.data(), longer.size()).error().reason,
             Catch::Contains("past its end"));
}
