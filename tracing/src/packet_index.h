// Joins the packets host calls submitted with the packets the device ran, on (queue, seq):
// the trace draws a flow along each packet known on both sides and names device work after
// the host's label (a launch after its kernel).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "mtia/trace/recording.h"

namespace mtia::trace::detail {

class PacketIndex {
 public:
  explicit PacketIndex(const Recording& rec);

  // The flow id of a packet: from its queue and the driver's sequence number.
  static uint64_t flow_key(uint32_t queue, uint64_t seq) {
    return (uint64_t{queue + 1} << 40) | (seq & ((uint64_t{1} << 40) - 1));
  }
  // Known to a host call and seen completing on the device.
  bool linked(uint32_t queue, uint64_t seq) const;
  // The host packet, if a host call submitted it; null otherwise.
  const HostPacket* host_packet(uint32_t queue, uint64_t seq) const;
  const std::string* label(uint32_t queue, uint64_t seq) const {
    const HostPacket* p = host_packet(queue, seq);
    return p == nullptr ? nullptr : &p->label;
  }
  // A launch's name: its host label, else kernel@0xIMAGE+0xENTRY.
  std::string launch_name(const LaunchInfo& launch) const;

 private:
  const Recording& rec_;
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> host_;  // key -> call, packet
  std::unordered_map<uint64_t, uint32_t> device_;                     // key -> packet event
};

}  // namespace mtia::trace::detail
