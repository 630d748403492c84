// The event model of a device trace: what the simulator reports and what a recording keeps.
// Times are simulated picoseconds. docs/architecture.md, "Traces", says how each appears in
// trace.json.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace mtia::trace {

inline constexpr uint32_t kNoQueue = ~0u;  // a device event whose packet is not known

// The units of a PE (numbered as the PE model numbers them) and its local DMA.
enum class Unit : uint8_t { kDpe = 0, kSe = 1, kRe = 2, kMlu = 3, kDma = 4, kCount };
inline constexpr size_t kNumUnits = static_cast<size_t>(Unit::kCount);
const char* unit_name(Unit unit);  // "dpe", "se", "re", "mlu", "dma"

// DPE input classes, for the peak a launch is held against.
enum class DpeClass : uint8_t { kInt8 = 0, k16Bit = 1, kFp32 = 2, kCount };
inline constexpr size_t kNumDpeClasses = static_cast<size_t>(DpeClass::kCount);

// The shared memories and links whose bandwidth the trace counts (numbered as the simulator's
// memory system numbers its resources).
enum class Memory : uint8_t { kPcieH2D = 0, kPcieD2H = 1, kDram = 2, kSram = 3, kCount };
inline constexpr size_t kNumMemories = static_cast<size_t>(Memory::kCount);
const char* memory_name(Memory memory);  // "pcie_h2d", "pcie_d2h", "dram", "sram"

// A packet from dispatch to completion, as its completion record has it.
struct PacketEvent {
  uint32_t queue = 0;
  uint64_t start_ps = 0;
  uint64_t end_ps = 0;
  uint64_t seq = 0;
  uint64_t index = 0;
  uint8_t opcode = 0;   // isa::Opcode
  uint16_t status = 0;  // isa::CompletionStatus
  uint16_t error = 0;   // isa::ErrorCode
};

// A host DMA engine's copy or fill job.
struct DmaEvent {
  uint64_t start_ps = 0;  // when the engine took the job
  uint64_t end_ps = 0;    // when it reported completion
  bool fill = false;
  uint64_t bytes = 0;  // payload bytes
  uint64_t src = 0;    // source span start (copies)
  uint8_t src_space = 0;
  uint64_t dst = 0;  // destination span start
  uint8_t dst_space = 0;
  uint64_t effective_bytes = 0;  // bytes charged on the busiest resource, burst waste included
  uint16_t error = 0;            // isa::ErrorCode
  uint32_t queue = kNoQueue;     // the packet it runs: its queue and seq
  uint64_t seq = 0;
  // A transfer over an inter-chip link (a link transfer packet), not a PCIe copy.
  bool link = false;
  bool link_receive = false;  // receive (else send)
  uint32_t link_index = 0;    // which link
  uint32_t peer = 0;          // the chip at the other end
  // When the bytes cross the link: from link_start_ps (a receive's may lie before start_ps:
  // they left the peer then) to link_end_ps (latency after busy); a failed transfer that never
  // reached the link has both at start_ps.
  uint64_t link_start_ps = 0;
  uint64_t link_end_ps = 0;
  uint64_t link_busy_ps = 0;  // bytes / bandwidth
};

// A kernel launch as it is dispatched.
struct LaunchInfo {
  uint32_t queue = kNoQueue;
  uint64_t seq = 0;
  uint64_t image_addr = 0;
  uint64_t entry_offset = 0;
  uint16_t grid_rows = 0;
  uint16_t grid_cols = 0;
  uint64_t start_ps = 0;
};

// Statistics of one launch, counted at every level but off.
struct LaunchStats {
  std::array<uint64_t, kNumDpeClasses> macs{};
  std::array<uint64_t, kNumUnits> work{};  // MACs (DPE), elements (SE, RE), bytes (MLU, DMA)
  std::array<uint64_t, kNumUnits> ops{};
  // Busy time summed over the launch's PEs; for DMA the time with at least one in flight.
  std::array<uint64_t, kNumUnits> busy_ps{};
  uint64_t core_ps = 0;                               // kernel spans summed over PEs
  std::array<uint64_t, kNumMemories> memory_bytes{};  // local DMA payload per memory

  uint64_t flops() const {  // 2 per DPE MAC, 1 per SE element
    return 2 * work[static_cast<size_t>(Unit::kDpe)] + work[static_cast<size_t>(Unit::kSe)];
  }
};

// A DMA's payload spread over its reservation on one memory or link.
struct Reservation {
  Memory memory = Memory::kDram;
  uint64_t start_ps = 0;
  uint64_t busy_ps = 0;
  uint64_t payload_bytes = 0;  // counted once per side that uses the memory
};

}  // namespace mtia::trace
