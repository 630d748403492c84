// A fake Platform for the firmware unit tests: plain byte vectors for device and host memory,
// a clock the test sets, DMA jobs and launches that wait for the test to finish them, and a log of
// interrupts. Nothing here models timing.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mtia/firmware/platform.h"
#include "mtia/isa/decode.h"

namespace mtia::firmware::test {

class FakePlatform : public Platform {
 public:
  static constexpr uint64_t kDeviceBytes = 1u << 20;       // device memory at address 0
  static constexpr uint64_t kHostBase = 0x7f00'0000'0000;  // the one registered host buffer
  static constexpr uint64_t kHostBytes = 64u << 10;

  struct StartedJob {
    unsigned engine = 0;
    DmaJob job;
  };

  explicit FakePlatform(unsigned engines = 2) : engines_(engines) {}

  std::vector<uint8_t> device = std::vector<uint8_t>(kDeviceBytes, 0);
  std::vector<uint8_t> host = std::vector<uint8_t>(kHostBytes, 0);
  // Device ranges [lo, hi) that are not backed, to model holes in the address map.
  std::vector<std::pair<uint64_t, uint64_t>> holes;
  uint64_t time_ps = 0;
  std::vector<StartedJob> started;              // every dma_start, in order
  std::vector<uint64_t> interrupts;             // every raise_interrupt mask, in order
  std::vector<isa::LaunchPacket> launches;      // every launch_start, in order
  std::vector<isa::AccessScope> launch_scopes;  // the scope of each launch_start
  std::vector<uint32_t> host_write_contexts;    // the context of every write_host, in order
  std::vector<uint64_t> device_writes;          // the address of every write_device, in order
  // Log messages at or above log_level, in order; nothing is logged when log_level is nullopt.
  std::optional<LogLevel> log_level = LogLevel::kDebug;
  std::vector<std::pair<LogLevel, std::string>> logs;
  uint64_t log_queries = 0;  // log_enabled calls
  struct Dispatched {
    uint32_t queue = 0;
    isa::PacketHeader header{};
  };
  struct Completed {
    uint32_t queue = 0;
    isa::CompletionRecord record{};
  };
  std::vector<Dispatched> dispatched;  // every packet_dispatched, in order
  std::vector<Completed> completed;    // every packet_completed, in order
  // For each dma_start: how many packets had been reported dispatched by then.
  std::vector<size_t> dispatched_before_start;

  bool device_backed(uint64_t addr, uint64_t bytes) const {
    if (addr > kDeviceBytes || bytes > kDeviceBytes - addr) return false;
    for (const auto& [lo, hi] : holes) {
      if (addr < hi && lo < addr + bytes) return false;
    }
    return true;
  }
  bool host_backed(uint64_t addr, uint64_t bytes) const {
    return addr >= kHostBase && addr - kHostBase <= kHostBytes &&
           bytes <= kHostBytes - (addr - kHostBase);
  }

  bool device_range_valid(uint64_t addr, uint64_t bytes) const override {
    return device_backed(addr, bytes);
  }
  isa::Status read_device(uint64_t addr, void* dst, size_t bytes) override {
    if (!device_backed(addr, bytes)) return device_fault(addr, bytes);
    std::memcpy(dst, device.data() + addr, bytes);
    return {};
  }
  isa::Status write_device(uint64_t addr, const void* src, size_t bytes) override {
    device_writes.push_back(addr);
    if (!device_backed(addr, bytes)) return device_fault(addr, bytes);
    std::memcpy(device.data() + addr, src, bytes);
    return {};
  }
  isa::Status write_host(uint64_t addr, const void* src, size_t bytes, uint32_t context) override {
    host_write_contexts.push_back(context);
    if (!host_backed(addr, bytes)) {
      return isa::reject(isa::ErrorCode::kHostAddressFault, "not host memory", addr, bytes);
    }
    std::memcpy(host.data() + (addr - kHostBase), src, bytes);
    return {};
  }
  static isa::Failure device_fault(uint64_t addr, uint64_t bytes) {
    return isa::reject(isa::ErrorCode::kDeviceAddressFault, "not device memory", addr, bytes);
  }
  unsigned dma_engine_count() const override { return engines_; }
  void dma_start(unsigned engine, const DmaJob& job) override {
    started.push_back({engine, job});
    dispatched_before_start.push_back(dispatched.size());
  }
  // Like DMA jobs, launches wait for the test to report them done (on_launch_done).
  void launch_start(const isa::LaunchPacket& launch, const isa::AccessScope& scope) override {
    launches.push_back(launch);
    launch_scopes.push_back(scope);
  }
  uint64_t now_ps() const override { return time_ps; }
  void raise_interrupt(uint64_t queue_mask) override { interrupts.push_back(queue_mask); }
  bool log_enabled(LogLevel level) const override {
    ++const_cast<FakePlatform*>(this)->log_queries;
    return log_level.has_value() && level >= *log_level;
  }
  void log(LogLevel level, std::string_view message) override {
    logs.emplace_back(level, std::string(message));
  }
  void packet_dispatched(uint32_t queue, const isa::PacketHeader& header) override {
    dispatched.push_back({queue, header});
  }
  void packet_completed(uint32_t queue, const isa::CompletionRecord& record) override {
    completed.push_back({queue, record});
  }

  uint64_t read_u64(uint64_t device_addr) const {
    uint64_t v = 0;
    std::memcpy(&v, device.data() + device_addr, sizeof v);
    return v;
  }
  void write_u64(uint64_t device_addr, uint64_t v) {
    std::memcpy(device.data() + device_addr, &v, sizeof v);
  }

  // Carries out a job functionally, element by element, as a DMA engine would, and returns
  // the status to hand to CommandProcessor::on_dma_done. A region outside memory is a fault
  // with its address and byte span, and nothing is written.
  isa::Status perform(const DmaJob& job) {
    const bool copy = job.kind == DmaJob::Kind::kCopy;
    const int ndims = copy ? job.copy.ndims : job.fill.ndims;
    const uint64_t* sizes = copy ? job.copy.sizes : job.fill.sizes;
    const uint64_t elem = copy ? job.copy.elem_size : job.fill.pattern_size;
    const isa::NdRegion& dst = copy ? job.copy.dst : job.fill.dst;
    for (const isa::NdRegion* r : {copy ? &job.copy.src : nullptr, &dst}) {
      if (r == nullptr) continue;
      auto span = isa::region_span(sizes, ndims, elem, *r);
      const bool host = r->space == static_cast<uint8_t>(isa::AddressSpace::kHost);
      if (!span.ok() || !(host ? host_backed(span.value().lo, span.value().size())
                               : device_backed(span.value().lo, span.value().size()))) {
        return isa::reject(
            host ? isa::ErrorCode::kHostAddressFault : isa::ErrorCode::kDeviceAddressFault, {},
            r->addr, span.ok() ? span.value().size() : 0);
      }
    }
    uint64_t index[isa::kMaxDims] = {};
    for (;;) {
      uint64_t d_off = 0, s_off = 0;
      for (int d = 0; d < ndims; ++d) {
        d_off += index[d] * dst.strides[d];
        if (copy) s_off += index[d] * job.copy.src.strides[d];
      }
      uint8_t bytes[8];
      if (copy) {
        std::memcpy(bytes, pointer(job.copy.src, s_off), elem);
      } else {
        std::memcpy(bytes, &job.fill.pattern, elem);
      }
      std::memcpy(pointer(dst, d_off), bytes, elem);
      int d = ndims - 1;  // odometer: innermost dimension fastest
      while (d >= 0 && ++index[d] == sizes[d]) index[d--] = 0;
      if (d < 0) break;
    }
    return {};
  }

 private:
  uint8_t* pointer(const isa::NdRegion& r, uint64_t offset) {
    if (r.space == static_cast<uint8_t>(isa::AddressSpace::kHost)) {
      return host.data() + (r.addr - kHostBase) + offset;
    }
    return device.data() + r.addr + offset;
  }

  unsigned engines_;
};

}  // namespace mtia::firmware::test
