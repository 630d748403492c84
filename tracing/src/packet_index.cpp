#include "packet_index.h"

#include <cinttypes>
#include <cstdio>

namespace mtia::trace::detail {

PacketIndex::PacketIndex(const Recording& rec) : rec_(rec) {
  for (uint32_t c = 0; c < rec.host_calls.size(); ++c) {
    for (uint32_t p = 0; p < rec.host_calls[c].packets.size(); ++p) {
      const HostPacket& hp = rec.host_calls[c].packets[p];
      host_[flow_key(hp.queue, hp.seq)] = {c, p};
    }
  }
  for (uint32_t i = 0; i < rec.packets.size(); ++i) {
    const PacketEvent& e = rec.packets[i].event;
    device_[flow_key(e.queue, e.seq)] = i;
  }
}

bool PacketIndex::linked(uint32_t queue, uint64_t seq) const {
  if (queue == kNoQueue) return false;
  const uint64_t key = flow_key(queue, seq);
  return host_.count(key) != 0 && device_.count(key) != 0;
}

const HostPacket* PacketIndex::host_packet(uint32_t queue, uint64_t seq) const {
  if (queue == kNoQueue) return nullptr;
  auto it = host_.find(flow_key(queue, seq));
  if (it == host_.end()) return nullptr;
  return &rec_.host_calls[it->second.first].packets[it->second.second];
}

std::string PacketIndex::launch_name(const LaunchInfo& launch) const {
  if (const std::string* l = label(launch.queue, launch.seq)) return *l;
  char name[64];
  std::snprintf(name, sizeof name, "kernel@0x%" PRIx64 "+0x%" PRIx64, launch.image_addr,
                launch.entry_offset);
  return name;
}

}  // namespace mtia::trace::detail
