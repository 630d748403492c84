// The memory system as the DMA engines see it: device memory, registered host memory across
// PCIe, and the timing model that turns an N-D job into picoseconds. No SystemC here: the DMA
// engine modules call it at simulated time `now`, and the tests call it directly.
//
// Timing model (every value an integer number of picoseconds, rounded up, so runs are
// deterministic; the bandwidths are used at 1 MB/s resolution):
//
//   resources   PCIe H2D, PCIe D2H, DRAM, SRAM, shared by every DMA engine and PE. Each has
//               a bandwidth BW (MB/s), a burst B (bytes), a latency L, and a reservation
//               timeline free_at (ps). A PE's local store is not shared: a side in a local
//               store takes no timeline, only its port rate (local_store_bandwidth_GBps).
//   runs        per side of a job, walking the descriptor as given (dimension ndims-1
//               innermost, size-1 dimensions ignored): run_bytes = elem_size times the sizes of
//               the innermost dimensions that are laid out contiguously on that side;
//               runs = total_bytes / run_bytes.
//   effective   eff(side, B) = runs * ceil(run_bytes / B) * B     (short runs waste bursts)
//   path        source side: its memory (eff with that memory's burst), or PCIe H2D if it is
//               host memory (eff with pcie_burst_bytes); destination side: its memory, or PCIe
//               D2H if host. A copy within one memory charges read + write bytes to it. A fill
//               has a destination side only.
//   busy_r      ceil(eff_r * 10^6 / BW_r)                          for each resource r on the path
//   ready       now + dma_setup
//   start_r     max(ready, free_at_r)   each resource on the path is its own FIFO
//   end         max(max_r (start_r + busy_r), start + local_store_bytes / BW_local_store)
//               + max_r L_r             where start = min_r start_r
//   free_at_r   start_r + busy_r        (so engines that share a memory share its bandwidth)
//   faults      a job whose region lies outside memory ends at `ready` with the fault, moves no
//               data and reserves nothing.
// With timing off every duration is zero: start = end = now.
//
// Inter-chip links (schedule_link): each direction of each link is one more timeline, apart from
// the resources above (the device memory side of a link transfer is not charged: the link is
// far slower than the memories). With busy = ceil(bytes * 10^6 / link BW) and L the link
// latency:
//   send      start = max(now + dma_setup, free_at_tx);  end = start + busy + L
//   receive   start = max(sent_ps + dma_setup, free_at_rx)  (the bytes leave the peer when its
//             send starts: the ranks' clocks are taken as one); arrival = start + busy + L;
//             end = max(now + dma_setup, arrival)
//   free_at   start + busy, per link and direction (transfers on one direction serialise)
// A link index at or above the chip's link_count fails with kBadLink (arg0 = link,
// arg1 = link_count); the staging side must be registered host memory.
//
// Example (mtia-v2, 1 MiB contiguous host -> DRAM, idle resources, now = 0):
//   ready = 100'000; busy_H2D = ceil(1048576e6 / 31500) = 33'288'127; busy_DRAM = 5'120'000;
//   end = 100'000 + 33'288'127 + max(500'000, 100'000) = 33'888'127 ps.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mtia/isa/access_scope.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/packets.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/device_memory.h"
#include "mtia/sim/host_memory.h"

namespace mtia::sim {

// ---- functional N-D data movement ---------------------------------------------------------
// `dst` / `src` point at the element with index (0, ..., 0); strides are in bytes. Elements are
// moved in an order chosen for host speed; the result equals a nested loop over the dimensions
// whenever no two destination elements overlap and the regions do not overlap each other
// (otherwise it is deterministic but unspecified).
void nd_copy(uint8_t* dst, const uint64_t* dst_strides, const uint8_t* src,
             const uint64_t* src_strides, const uint64_t* sizes, int ndims, uint32_t elem_size);
// Writes the low elem_size bytes of `pattern` (little-endian) to every element.
void nd_fill(uint8_t* dst, const uint64_t* dst_strides, const uint64_t* sizes, int ndims,
             uint32_t elem_size, uint64_t pattern);

// ---- timing helpers (see the formulas above) ----------------------------------------------
struct Runs {
  uint64_t run_bytes = 0;  // bytes in one contiguous run
  uint64_t runs = 0;       // number of runs
};
Runs contiguous_runs(const uint64_t* sizes, int ndims, uint32_t elem_size, const uint64_t* strides);
// runs * ceil(run_bytes / burst) * burst
uint64_t effective_bytes(const Runs& runs, uint32_t burst_bytes);
// ceil(bytes * 10^6 / bandwidth_MBps) picoseconds.
uint64_t transfer_ps(uint64_t bytes, uint64_t bandwidth_MBps);
// ns (from a config) to whole picoseconds, rounded to nearest.
uint64_t ns_to_ps(double ns);
// GB/s (from a config) to whole MB/s, rounded to nearest.
uint64_t gbps_to_mbps(double gbps);

enum class Resource : int { kPcieH2D = 0, kPcieD2H, kDram, kSram, kCount };
inline constexpr int kNumResources = static_cast<int>(Resource::kCount);
const char* resource_name(Resource r);  // "pcie_h2d", "pcie_d2h", "dram", "sram"

struct ResourceParams {
  uint64_t bandwidth_MBps = 0;
  uint64_t latency_ps = 0;
  uint32_t burst_bytes = 1;
};

struct ResourceStats {
  uint64_t jobs = 0;             // DMA jobs that used the resource
  uint64_t bytes = 0;            // payload bytes moved through it
  uint64_t effective_bytes = 0;  // bytes charged, including burst waste
  uint64_t busy_ps = 0;          // reserved time
};

// One side of a validated job.
struct SideInfo {
  bool host = false;                      // host memory (across PCIe) or device memory
  MemoryKind memory = MemoryKind::kNone;  // device memory kind when !host
  isa::ByteSpan span;                     // bytes the region touches
  Runs runs;
};

// What a DMA job may reach: its queue's scope (isa/access_scope.h). A PE's own DMA also
// reaches the launch's scratch memories, the PE local stores and the on-chip SRAM: the grid
// runs one launch at a time, and they belong to it while it runs.
struct DmaReach {
  isa::AccessScope scope{};
  bool launch_scratch = false;
};

// A job after validation and scheduling.
struct DmaPlan {
  bool is_fill = false;
  isa::DmaCopyPacket copy{};
  isa::FillPacket fill{};
  // Whether the job can run: a region's span overflows, lies outside device memory or
  // registered host memory (arg0/arg1: its address and length), or names no address space.
  isa::Status status;
  uint64_t payload_bytes = 0;  // elements * element size
  SideInfo src;                // unused for fills
  SideInfo dst;
  uint64_t ready_ps = 0;
  uint64_t start_ps = 0;
  uint64_t end_ps = 0;
  std::array<uint64_t, kNumResources> effective_bytes{};  // 0 for resources off the path
  std::array<uint64_t, kNumResources> busy_ps{};
  std::array<uint64_t, kNumResources> resource_start_ps{};  // start_r: its turn on each resource
  uint64_t local_store_bytes = 0;  // bytes through PE local-store ports (private, not shared)
  uint32_t context = 0;            // the host context its host side is translated in
  // A link transfer (schedule_link): `copy` is its 1-D copy, `link` the packet; its timeline span.
  bool is_link = false;
  isa::LinkTransferPacket link{};
  uint64_t link_start_ps = 0;  // the bytes start to cross
  uint64_t link_busy_ps = 0;   // bytes / bandwidth
  uint64_t link_end_ps = 0;    // the last byte has arrived: start + busy + latency
};

// What one direction of one link has carried.
struct LinkStats {
  uint64_t transfers = 0;
  uint64_t bytes = 0;
  uint64_t busy_ps = 0;  // reserved time on the direction's timeline
};

// A planned job's data movement with its regions translated to host pointers: perform() in
// two halves, so that the copy loop can run later or on another thread (the PE grid does).
struct BoundDma {
  bool is_fill = false;
  isa::DmaCopyPacket copy{};
  isa::FillPacket fill{};
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  // A destination in DRAM: where run() reports the write (DeviceMemory::note_written).
  DeviceMemory* dram = nullptr;
  isa::ByteSpan dst_span{};
  void run() const;  // moves the bytes
};

class MemorySystem {
 public:
  // Throws like DeviceMemory if the memories cannot be reserved.
  MemorySystem(const ChipConfig& config, HostMemory& host);

  DeviceMemory& device() { return device_; }
  const DeviceMemory& device() const { return device_; }
  HostMemory& host() { return host_; }

  // Validates both regions against the memory map and what `reach` allows (kDeviceAddressFault
  // / kHostAddressFault with arg0 = span start, arg1 = span bytes) and reserves bandwidth for
  // the job at now_ps.
  DmaPlan schedule_copy(const isa::DmaCopyPacket& packet, uint64_t now_ps,
                        const DmaReach& reach = {});
  // schedule_copy in two halves, for a caller that must validate a job before its turn on the
  // timelines comes (a PE's DMA, which the sanitizer's checks may still stop): check_copy
  // validates and sizes the job and reserves nothing; reserve() then charges a valid plan to
  // the timelines as schedule_copy would have at now_ps.
  DmaPlan check_copy(const isa::DmaCopyPacket& packet, uint64_t now_ps,
                     const DmaReach& reach = {}) const;
  void reserve(DmaPlan& plan, uint64_t now_ps);
  DmaPlan schedule_fill(const isa::FillPacket& packet, uint64_t now_ps, const DmaReach& reach = {});
  // Validates a link transfer (the link exists; the device side is device memory and the host
  // side registered host memory, both within `reach`) and reserves its link direction at
  // now_ps (formulas above).
  DmaPlan schedule_link(const isa::LinkTransferPacket& packet, uint64_t now_ps,
                        const DmaReach& reach = {});
  // Moves the data of a plan without error. The regions are translated again, so host memory
  // unregistered since planning ends in kHostAddressFault instead of a stray write.
  isa::Status perform(const DmaPlan& plan);

  // Called on the simulator thread before device memory is read or written other than by a
  // PE's own DMA (by perform(), and by the command processor through notify_device_access):
  // the PE grid first settles what it has not copied yet (PeGrid::before_device_access).
  using DeviceAccessObserver = std::function<void(isa::ByteSpan span, bool write)>;
  void set_device_access_observer(DeviceAccessObserver observer) {
    observer_ = std::move(observer);
  }
  void notify_device_access(isa::ByteSpan span, bool write) {
    if (observer_) observer_(span, write);
  }
  // The first half of perform(): translates the regions (with perform()'s faults) into `out`.
  isa::Status bind(const DmaPlan& plan, BoundDma& out);

  const ResourceParams& params(Resource r) const { return params_[static_cast<int>(r)]; }
  const ResourceStats& stats(Resource r) const { return stats_[static_cast<int>(r)]; }
  uint64_t free_at_ps(Resource r) const { return free_at_[static_cast<int>(r)]; }
  uint64_t setup_ps() const { return setup_ps_; }
  uint32_t link_count() const { return static_cast<uint32_t>(link_free_at_.size()); }
  // Statistics and timeline of link `link` (< link_count()) in `direction`.
  const LinkStats& link_stats(uint32_t link, isa::LinkDirection direction) const {
    return link_stats_.at(link)[static_cast<int>(direction)];
  }
  uint64_t link_free_at_ps(uint32_t link, isa::LinkDirection direction) const {
    return link_free_at_.at(link)[static_cast<int>(direction)];
  }

 private:
  DeviceAccessObserver observer_;
  // Checks a region; fills `side` or returns the fault in `plan`.
  bool check_side(const uint64_t* sizes, int ndims, uint32_t elem, const isa::NdRegion& region,
                  const DmaReach& reach, SideInfo& side, DmaPlan& plan) const;
  // A plan for `reach` that is ready after the DMA setup from `now_ps` (no timeline charged).
  DmaPlan begin_plan(uint64_t now_ps, const DmaReach& reach) const;
  void charge(DmaPlan& plan, const SideInfo& side, bool is_source);
  void schedule(DmaPlan& plan, uint64_t now_ps);
  uint8_t* translate(const SideInfo& side, uint32_t context) const;

  DeviceMemory device_;
  HostMemory& host_;
  bool timing_;
  uint64_t setup_ps_;
  uint64_t local_store_MBps_;
  std::array<ResourceParams, kNumResources> params_{};
  std::array<uint64_t, kNumResources> free_at_{};
  std::array<ResourceStats, kNumResources> stats_{};
  uint64_t link_MBps_;
  uint64_t link_latency_ps_;
  std::vector<std::array<uint64_t, 2>> link_free_at_;  // per link: send, receive
  std::vector<std::array<LinkStats, 2>> link_stats_;
};

}  // namespace mtia::sim
