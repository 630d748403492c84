// Link transfers: moving bytes over one of the chip's inter-chip links (docs/architecture.md,
// "Inter-chip links"). The bytes go between device memory and a pinned staging buffer in host
// memory, from where the caller's transport carries them to the peer's host; the device times
// each transfer on its link (latency + bytes / bandwidth), not on PCIe.
#include <spdlog/fmt/fmt.h>

#include <atomic>
#include <memory>

#include "device_impl.h"

namespace mtia {
namespace {

const char* direction_name(isa::LinkDirection d) {
  return d == isa::LinkDirection::kSend ? "link send" : "link receive";
}

}  // namespace

// Checks the arguments and queues one link transfer packet on `stream`. Returns its seq;
// `started_ps`, if given, receives the packet's start time once it completes.
static uint64_t queue_link_transfer(Device::Impl& d, isa::LinkDirection dir, DevicePtr device,
                                    const void* staging, uint64_t bytes, uint32_t link,
                                    uint32_t peer, uint64_t sent_ps, Stream stream,
                                    std::shared_ptr<std::atomic<uint64_t>> started_ps,
                                    std::shared_ptr<StreamState>& s) {
  const char* what = direction_name(dir);
  if (bytes == 0 || bytes > isa::kMaxLinkTransferBytes) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} bytes is not within 1..{}; a link transfer moves at least one "
                            "byte and at most 1 TiB",
                            what, bytes, isa::kMaxLinkTransferBytes));
  }
  if (link >= isa::kMaxLinks) {
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format("{}: link {} is not within 0..{} (the preset's link_count says how many "
                    "links the chip has)",
                    what, link, isa::kMaxLinks - 1));
  }
  if (sent_ps > isa::kMaxLinkSentPs) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: sent_ps {} is past the latest simulated time the device takes, "
                            "{} ps; pass the peer's link_send result",
                            what, sent_ps, isa::kMaxLinkSentPs));
  }
  if (staging == nullptr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: the staging buffer is null; pass pinned host memory", what));
  }
  s = d.stream_state(stream);
  d.refuse_in_capture(*s, std::string("a ") + what, "it reads or writes host memory");
  const ByteRange span{0, bytes};
  d.memory->check_span(device, span, 1, dir == isa::LinkDirection::kSend ? "src" : "dst");
  const auto* p = static_cast<const uint8_t*>(staging);
  std::shared_ptr<HostRegion> region = d.host.acquire(p, span, "staging", 1);
  if (!region) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: the staging buffer {} + {} bytes is not pinned host memory the "
                            "device can reach; allocate it with host_alloc (or host_register "
                            "it on a backend that maps host memory)",
                            what, staging, bytes));
  }
  isa::LinkTransferPacket pk{};
  pk.direction = static_cast<uint8_t>(dir);
  pk.link = static_cast<uint8_t>(link);
  pk.peer = peer;
  pk.device_addr = device.address();
  pk.host_addr = region->bus + static_cast<uint64_t>(p - region->ptr);
  pk.bytes = bytes;
  pk.sent_ps = sent_ps;
  try {
    return d.submit(s, pk, [&d, region, started_ps](const driver::Completion& c) {
      if (started_ps) started_ps->store(c.start_ps);
      if (d.host.release(region, 1)) d.return_staging(region);
    });
  } catch (...) {
    if (d.host.release(region, 1)) d.return_staging(region);
    throw;
  }
}

uint64_t Device::link_send(void* staging, DevicePtr src, uint64_t bytes, uint32_t link,
                           uint32_t peer, Stream stream) {
  ApiCall call(*impl_->trace, "link_send");
  call.set_label("link send");
  call.set_detail(
      fmt::format("{} bytes from 0x{:x} on link {} to peer {}", bytes, src.address(), link, peer));
  auto started = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<StreamState> s;
  const uint64_t seq = queue_link_transfer(*impl_, isa::LinkDirection::kSend, src, staging, bytes,
                                           link, peer, 0, stream, started, s);
  impl_->wait_seq(*s, seq);
  impl_->throw_pending(*s);
  return started->load();
}

void Device::link_receive_async(DevicePtr dst, const void* staging, uint64_t bytes, uint32_t link,
                                uint32_t peer, uint64_t sent_ps, Stream stream) {
  ApiCall call(*impl_->trace, "link_receive_async");
  call.set_label("link receive");
  call.set_detail(fmt::format("{} bytes to 0x{:x} on link {} from peer {}, sent at {} ps", bytes,
                              dst.address(), link, peer, sent_ps));
  std::shared_ptr<StreamState> s;
  queue_link_transfer(*impl_, isa::LinkDirection::kReceive, dst, staging, bytes, link, peer,
                      sent_ps, stream, nullptr, s);
}

}  // namespace mtia
