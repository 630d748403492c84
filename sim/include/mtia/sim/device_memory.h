// Device memory: LPDDR, on-chip SRAM and the PE local stores at the addresses of
// isa/address_map.h, each backed lazily (DRAM by a sparse memfd, the others by anonymous private
// mappings) so that only the pages the program touches cost host memory (a 128 GiB DRAM costs
// nothing until written).
//
// Thread safety: translate() only reads immutable state, so any thread may call it; who may
// touch the bytes behind the pointer when is the caller's business (doorbells order it).
#pragma once

#include <cstdint>
#include <string>
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
  // map MAP_SHARED to see and write DRAM in place. Owned by this object.
  int dram_fd() const { return dram_.fd; }
  // Gives DRAM range [addr, addr + bytes) a memfd of its own (returned, owned by this object),
  // so that a process handed it sees that range and nothing else: a device server's client
  // gets its window this way. The range's bytes are kept. Both ends must be page aligned, the
  // range inside DRAM and not yet split off. Call it before the simulator touches the range:
  // its pages are replaced under the same host addresses. Fails with kInvalidArgument, or
  // kOutOfMemory when the host refuses the memory file.
  isa::Result<int> split_dram(uint64_t addr, uint64_t bytes);
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
};

}  // namespace mtia::sim
