// The device physical address map, shared by the firmware, the simulator and the driver.
//
//   [kDramBase, kDramBase + dram_bytes)                 LPDDR (up to 128 GiB)
//   [kSramBase, kSramBase + sram_bytes)                 on-chip SRAM
//   [kLocalStoreBase + pe * kLocalStoreStride, + local_store_bytes)
//                                                       PE local stores, pe = row * cols + col
#pragma once

#include <cstdint>

namespace mtia::isa {

inline constexpr uint64_t kDramBase = 0x0000'0000'0000;
inline constexpr uint64_t kDramMaxBytes = 128ull << 30;
inline constexpr uint64_t kSramBase = 0x0100'0000'0000;        // 1 TiB
inline constexpr uint64_t kLocalStoreBase = 0x0200'0000'0000;  // 2 TiB
inline constexpr uint64_t kLocalStoreStride = 1ull << 20;      // 1 MiB window per PE

}  // namespace mtia::isa
