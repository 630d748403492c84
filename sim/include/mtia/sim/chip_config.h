// Run-time chip parameters, loaded from a preset file (presets/*.json) and overridable key by
// key. Units are in the field names: _bytes, _hz, _ns, _GBps (10^9 bytes per second).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtia/isa/result.h"
#include "mtia/sim/pe/unit_timing.h"

namespace mtia::sim {

struct ChipConfig {
  std::string name;         // preset name, e.g. "mtia-v2"
  uint32_t generation = 2;  // 1 or 2

  // Compute grid.
  uint32_t pe_rows = 8;
  uint32_t pe_cols = 8;
  uint64_t clock_hz = 1'350'000'000;       // PE and firmware clock
  uint64_t local_store_bytes = 384 << 10;  // per PE
  // A PE's own local-store port: what a DMA to or from it moves per second at most. Private
  // to the PE, so it is not shared with the others (unlike the SRAM and LPDDR).
  double local_store_bandwidth_GBps = 1000;

  // Throughput and latency of each PE's units (DPE, SE, RE, MLU), in PE clock cycles: the
  // preset keys dpe_*, se_*, re_* and mlu_* (mtia/sim/pe/unit_timing.h gives each operation's
  // busy cycles).
  pe::UnitTiming units;

  // On-chip SRAM shared by the PEs.
  uint64_t sram_bytes = 256ull << 20;
  double sram_bandwidth_GBps = 2700;
  double sram_latency_ns = 20;
  uint32_t sram_burst_bytes = 64;  // runs shorter than this still cost a whole burst

  // Off-chip LPDDR.
  uint64_t dram_bytes = 128ull << 30;
  double dram_bandwidth_GBps = 204.8;
  double dram_latency_ns = 100;
  uint32_t dram_burst_bytes = 64;

  // Host link (PCIe), per direction.
  double pcie_h2d_bandwidth_GBps = 31.5;
  double pcie_d2h_bandwidth_GBps = 31.5;
  double pcie_latency_ns = 500;
  uint32_t pcie_burst_bytes = 64;

  // Inter-chip links (link transfers, docs/architecture.md "Inter-chip links"): each link is
  // full duplex, each direction its own timeline; a transfer takes latency + bytes / bandwidth.
  // Optional in a preset file (older files load with these defaults).
  uint32_t link_count = 1;
  double link_bandwidth_GBps = 31.5;  // per link and direction
  double link_latency_ns = 1000;      // once per transfer

  // DMA engines and command processor.
  uint32_t dma_engines = 4;
  double dma_setup_ns = 100;  // descriptor fetch and start per DMA job
  uint32_t num_queues = 8;    // hardware queues served by the firmware
  double cp_packet_ns = 200;  // firmware time to fetch, decode and dispatch a packet
  // ... one from a command buffer (an ExecBuffer packet's, graph replay): no ring bookkeeping
  double cp_replay_packet_ns = 100;

  // The PE grid's scheduler: emulator settings, not chip figures, optional in a preset file
  // (docs/architecture.md, "Scheduling"). Each launch's cores run round-robin up to a common
  // horizon, then simulated time catches up one quantum at once.
  uint64_t pe_quantum_cycles = 10'000;  // PE cycles each core runs between SystemC waits
  // Inside a quantum the cores advance in lockstep slices of this many PE cycles, so their DMA
  // requests reach the shared memory timelines at most one slice out of time order.
  uint64_t pe_slice_cycles = 256;
  uint64_t pe_watchdog_cycles = 1'000'000'000;    // a launch's limit when its packet gives 0
  uint64_t kernel_image_max_bytes = 16ull << 20;  // a larger kernel image (ELF) is rejected

  // false: functional only; every duration is zero and simulated time never advances.
  bool timing = true;
};

// Loads a preset by name (looked up in the preset directory) or by path to a .json file.
// Fails (kInvalidArgument) naming the file and the offending field.
isa::Result<ChipConfig> load_preset(const std::string& name_or_path);
// A preset from its JSON text; `origin` names it in messages (a file path). Fails
// (kInvalidArgument) naming the field that is wrong.
isa::Result<ChipConfig> parse_preset(const std::string& text, const std::string& origin);
// The directory presets are looked up in: $MTIA_EMU_PRESET_DIR, else the presets/ of the
// installation the program belongs to (mtia/isa/install_dirs.h), else the one built in.
std::string preset_directory();
std::vector<std::string> preset_names();

// Applies "key=value" (keys as in the preset file, e.g. "dram_bandwidth_GBps=100").
// Fails (kInvalidArgument) naming the key or value that is wrong and the valid keys. A
// string value must be 1..128 bytes of well-formed UTF-8 without control characters.
isa::Status apply_override(ChipConfig& config, const std::string& assignment);
// Rejects inconsistent values (zero bandwidths, more than 8x8 PEs, a name that is not
// 1..128 bytes of UTF-8 without control characters, ...) with a message naming the field.
isa::Status validate(const ChipConfig& config);

// The effective configuration as JSON text, every field with its value.
std::string to_json(const ChipConfig& config);
// Every key apply_override accepts, with its unit and description.
struct ConfigKey {
  std::string key;
  std::string unit;
  std::string description;
};
const std::vector<ConfigKey>& config_keys();

}  // namespace mtia::sim
