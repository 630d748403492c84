// Stream and Event handles: small value types naming objects owned by a Device.
//
// Ids are never reused within a Device, so using a handle after destroying it is detected
// and reported (mtia::Error, kInvalidHandle: "stream 3 was destroyed ...").
#pragma once

#include <compare>
#include <cstdint>

namespace mtia {

// An in-order sequence of device work. Stream{} (id 0) is the device's default stream; it
// always exists and cannot be destroyed. Other streams come from Device::create_stream().
struct Stream {
  uint32_t id = 0;
  bool is_default() const { return id == 0; }
  auto operator<=>(const Stream&) const = default;
};

// A marker recorded into a stream: it completes when the work before it has completed.
// Event{} (id 0) is not an event; real ones come from Device::create_event().
struct Event {
  uint32_t id = 0;
  auto operator<=>(const Event&) const = default;
};

// Work captured from a stream, replayed with one submission (Device::begin_capture).
struct Graph {
  uint32_t id = 0;
  auto operator<=>(const Graph&) const = default;
};

}  // namespace mtia
