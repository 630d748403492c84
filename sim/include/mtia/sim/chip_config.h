// Run-time chip parameters, loaded from a preset file (presets/*.json) and overridable key by
// key. Units are in the field names: _bytes, _hz, _ns, _GBps (10^9 bytes per second).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  double local_store_bandwidth_GBps = 172.8;

  // PE units (cycles are PE clock cycles). Busy cycles of one operation:
  //   DPE  dpe_issue_cycles + ceil(m*n*k / MACs per cycle of the input dtype)
  //   SE   se_issue_cycles + ceil(count / lanes) * cycles per vector of the op class,
  //        lanes = se_vector_bytes / (bytes of the widest element read or written)
  //   RE   re_issue_cycles + ceil(rows*cols / re_elements_per_cycle)
  //   MLU  mlu_issue_cycles + ceil(rows*cols*elem_size / mlu_bytes_per_cycle)
  uint32_t dpe_int8_macs_per_cycle = 2048;
  uint32_t dpe_fp16_macs_per_cycle = 1024;  // fp16 and bf16
  uint32_t dpe_fp32_macs_per_cycle = 256;
  uint32_t dpe_issue_cycles = 16;
  uint32_t se_vector_bytes = 128;
  uint32_t se_simple_cycles = 1;          // arithmetic, compare, logic, select, clamp, cast
  uint32_t se_divide_cycles = 4;          // div, sqrt, rsqrt
  uint32_t se_transcendental_cycles = 8;  // exp, log, tanh, erf, sigmoid, silu
  uint32_t se_issue_cycles = 8;
  uint32_t re_elements_per_cycle = 32;
  uint32_t re_issue_cycles = 8;
  uint32_t mlu_bytes_per_cycle = 128;
  uint32_t mlu_issue_cycles = 8;

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

  // DMA engines and command processor.
  uint32_t dma_engines = 4;
  double dma_setup_ns = 100;  // descriptor fetch and start per DMA job
  uint32_t num_queues = 8;    // hardware queues served by the firmware
  double cp_packet_ns = 200;  // firmware time to fetch, decode and dispatch a packet

  // false: functional only; every duration is zero and simulated time never advances.
  bool timing = true;
};

// Loads a preset by name (looked up in the preset directory) or by path to a .json file.
// Throws std::runtime_error naming the file and the offending field.
ChipConfig load_preset(const std::string& name_or_path);
// A preset from its JSON text; `origin` names it in messages (a file path). Throws
// std::runtime_error naming the field that is wrong.
ChipConfig parse_preset(const std::string& text, const std::string& origin);
// The directory presets are looked up in: $MTIA_EMU_PRESET_DIR, else the presets/ of the
// installation the program belongs to (mtia/isa/install_dirs.h), else the one built in.
std::string preset_directory();
std::vector<std::string> preset_names();

// Applies "key=value" (keys as in the preset file, e.g. "dram_bandwidth_GBps=100").
// Throws std::invalid_argument naming the key or value that is wrong and the valid keys. A
// string value must be 1..128 bytes of well-formed UTF-8 without control characters.
void apply_override(ChipConfig& config, const std::string& assignment);
// Rejects inconsistent values (zero bandwidths, more than 8x8 PEs, a name that is not
// 1..128 bytes of UTF-8 without control characters, ...) with a message naming the field.
void validate(const ChipConfig& config);

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
