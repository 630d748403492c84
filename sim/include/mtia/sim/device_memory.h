// Device memory: LPDDR, on-chip SRAM and the PE local stores at the addresses of
// isa/address_map.h, each backed lazily (DRAM by a sparse memfd, the others by anonymous private
// mappings) so that only the pages the program touches cost host memory (a 128 GiB DRAM costs
// nothing until written).
//
// Thread safety: translate() only reads immutable state, so any thread may call it; who may
// touch the bytes behind the pointer when is the caller's business (doorbells order it).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mtia/isa/result.h"
#include "mtia/sim/chip_config.h"

namespace mtia::sim {

// Which memory a device address belongs to (the DMA timing model's resources follow it).
enum class MemoryKind { kNone, kDram, kSram, kLocalStore };

class DeviceMemory {
 public:
  // Reserves address space for every memory of `config`. Throws std::runtime_error if the
  // host refuses the mapping (e.g. vm.overcommit_memory=2 with too little commit limit).
  explicit DeviceMemory(const ChipConfig& config);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // A host pointer for device range [addr, addr + bytes), or nullptr if the range does not lie
  // entirely inside one memory (DRAM, SRAM, or a single PE's local store). bytes == 0 is
  // treated as one byte. Overflow-safe for any addr and bytes.
  uint8_t* translate(uint64_t addr, uint64_t bytes) const;
  // The memory holding [addr, addr + bytes), kNone if translate() would fail.
  MemoryKind kind_of(uint64_t addr, uint64_t bytes) const;

  uint64_t dram_bytes() const { return dram_.bytes; }
  // A memfd holding DRAM (byte 0 is device address isa::kDramBase), which another process may
  // map MAP_SHARED to see and write DRAM in place. Owned by this object. Writes made through
  // it are not counted (below), so from the first call on writes_uncounted() is true.
  int dram_fd() const {
    uncounted_writers_.store(true, std::memory_order_relaxed);
    return dram_.fd;
  }
  // Gives DRAM range [addr, addr + bytes) a memfd of its own (returned, owned by this object),
  // so that a process handed it sees that range and nothing else: a device server's client
  // gets its window this way. The range's bytes are kept. Both ends must be page aligned, the
  // range inside DRAM and not yet split off. Call it before the simulator touches the range:
  // its pages are replaced under the same host addresses. Fails with kInvalidArgument, or
  // kOutOfMemory when the host refuses the memory file. As with dram_fd(), writes made through
  // the returned file are not counted.
  isa::Result<int> split_dram(uint64_t addr, uint64_t bytes);

  // Counted writes, for a reader that keeps something derived from DRAM bytes (the PE grid
  // keeps decoded kernel images) and must learn whether those bytes may have changed without
  // reading them again. Every writer of DRAM in this process (host copies, the command
  // processor, the host and PE DMA engines) reports each write once its bytes are in place
  // with note_written(). The reader watches its ranges with watch(); watched_writes() then
  // counts the reported writes that overlapped a watched range since this object was made. The
  // protocol, which needs no other ordering between the threads:
  //   reader: watch(range); n = watched_writes(); read the range; keep n with what it made.
  //   later:  watched_writes() == n: no counted write has touched the range since it was read.
  // A process holding the memory file (dram_fd, split_dram) writes uncounted:
  // writes_uncounted() tells the reader to compare the bytes instead.
  void watch(uint64_t addr, uint64_t bytes);
  void unwatch_all();  // the reader dropped everything it kept
  uint64_t watched_writes() const;
  void note_written(uint64_t addr, uint64_t bytes);
  bool writes_uncounted() const { return uncounted_writers_.load(std::memory_order_relaxed); }
  uint64_t sram_bytes() const { return sram_.bytes; }
  uint64_t local_store_bytes() const { return local_store_bytes_; }
  uint32_t num_pes() const { return num_pes_; }

 private:
  struct Mapping {
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
    int fd = -1;  // the memfd behind a shareable mapping
  };
  static Mapping map(uint64_t bytes, const std::string& what, bool shareable);
  static void unmap(Mapping& m);
  // Locates [addr, addr + bytes) in a memory: its kind and host pointer, or kNone.
  MemoryKind locate(uint64_t addr, uint64_t bytes, uint8_t** out) const;

  Mapping dram_;
  Mapping sram_;
  Mapping local_stores_;  // num_pes_ stores of local_store_bytes_, back to back
  struct Split {
    uint64_t offset = 0;  // into DRAM
    uint64_t bytes = 0;
    int fd = -1;
  };
  std::vector<Split> splits_;  // split_dram's ranges
  uint64_t local_store_bytes_ = 0;
  uint32_t num_pes_ = 0;
  // Counted writes: the watched ranges [lo, hi) and the count of writes that overlapped one,
  // under watch_mu_.
  mutable std::mutex watch_mu_;
  std::vector<std::pair<uint64_t, uint64_t>> watched_;
  uint64_t watched_writes_ = 0;
  mutable std::atomic<bool> uncounted_writers_{false};
};

}  // namespace mtia::sim
