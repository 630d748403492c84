// The run summary's computation and its two forms (summary.json, text tables).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "summary_input.h"

namespace mtia::trace::detail {
namespace {

const char* const kUnitNames[] = {"dpe", "se", "re", "mlu", "dma"};
const char* const kMemoryNames[] = {"dram", "sram", "pcie_h2d", "pcie_d2h"};

}  // namespace

isa::Status read_config(const nlohmann::json& config, SummaryInput& in) {
  const char* missing = nullptr;  // the first key without a numeric value
  auto config_value = [&](const char* key) {
    auto it = config.find(key);
    if (it == config.end() || !it->is_object() || !it->contains("value") ||
        !(*it)["value"].is_number()) {
      if (missing == nullptr) missing = key;
      return 0.0;
    }
    return (*it)["value"].get<double>();
  };
  in.preset = config.contains("name") && config["name"].is_object()
                  ? config["name"].value("value", "")
                  : "";
  TracePeaks& p = in.peaks;
  p.pes = static_cast<uint32_t>(config_value("pe_rows") * config_value("pe_cols"));
  p.clock_hz = config_value("clock_hz");
  const double per_s = p.pes * p.clock_hz;
  p.dpe_int8_ops = 2 * config_value("dpe_int8_macs_per_cycle") * per_s;
  p.dpe_16bit_flops = 2 * config_value("dpe_fp16_macs_per_cycle") * per_s;
  p.dpe_fp32_flops = 2 * config_value("dpe_fp32_macs_per_cycle") * per_s;
  // Lanes of fp32: the vector width in fp32 elements, capped by the lane count (a trace of an
  // older build has no cap).
  double se_lanes = config_value("se_vector_bytes") / 4;
  if (config.contains("se_elements_per_cycle")) {
    const char* const before = missing;
    se_lanes = std::min(se_lanes, config_value("se_elements_per_cycle"));
    missing = before;
  }
  p.se_fp32_flops = se_lanes * per_s;
  p.memory_Bps["dram"] = config_value("dram_bandwidth_GBps") * 1e9;
  p.memory_Bps["sram"] = config_value("sram_bandwidth_GBps") * 1e9;
  p.memory_Bps["pcie_h2d"] = config_value("pcie_h2d_bandwidth_GBps") * 1e9;
  p.memory_Bps["pcie_d2h"] = config_value("pcie_d2h_bandwidth_GBps") * 1e9;
  if (missing != nullptr) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       fmt::format("not an mtia-emu trace: otherData.config.{} is missing (the "
                                   "trace carries the effective configuration of its run)",
                                   missing));
  }
  return {};
}

const char* copy_kind(bool fill, bool from_host, bool to_host) {
  return fill        ? "fill"
         : from_host ? "host to device"
         : to_host   ? "device to host"
                     : "device to device";
}

TraceSummary compute_summary(const SummaryInput& in) {
  TraceSummary s;
  s.preset = in.preset;
  s.trace_level = in.trace_level;
  s.complete = in.complete;
  s.dropped_events = in.dropped_events;
  s.simulated_time_ps = in.simulated_time_ps;
  s.peaks = in.peaks;
  const TracePeaks& p = s.peaks;
  const double dram_Bps = p.memory_Bps.at("dram");

  // Launches, by kernel name in order of first launch.
  std::map<std::string, size_t> kernel_index;
  std::map<std::string, double> busy_all;
  double pe_time_all = 0;  // sum of duration x PEs
  std::vector<std::map<std::string, double>> kernel_busy;
  std::vector<double> kernel_pe_time;
  for (const SummaryInput::Launch& l : in.launches) {
    auto [it, added] = kernel_index.try_emplace(l.name, s.kernels.size());
    if (added) {
      s.kernels.emplace_back();
      s.kernels.back().name = l.name;
      kernel_busy.emplace_back();
      kernel_pe_time.push_back(0);
    }
    KernelSummary& k = s.kernels[it->second];
    const double pes = static_cast<double>(l.pes);
    k.launches += 1;
    if (!l.ok) k.failed += 1;
    k.time_ps += l.dur_ps;
    k.flops += l.flops;
    k.bytes += l.dma_bytes;
    k.dram_bytes += l.dram_bytes;
    k.sram_bytes += l.sram_bytes;
    for (int d = 0; d < 3; ++d) k.dpe_macs[d] += l.dpe_macs[d];
    k.se_elements += l.se_elements;
    kernel_pe_time[it->second] += static_cast<double>(l.dur_ps) * pes;
    pe_time_all += static_cast<double>(l.dur_ps) * pes;
    for (size_t u = 0; u < kNumUnits; ++u) {
      const double b = static_cast<double>(l.busy_ps[u]);
      kernel_busy[it->second][kUnitNames[u]] += b;
      busy_all[kUnitNames[u]] += b;
    }
  }

  for (size_t i = 0; i < s.kernels.size(); ++i) {
    KernelSummary& k = s.kernels[i];
    s.launches += k.launches;
    s.failed_launches += k.failed;
    s.launch_time_ps += k.time_ps;
    s.flops += k.flops;
    s.launch_bytes += k.bytes;
    s.launch_dram_bytes += k.dram_bytes;
    for (const char* u : kUnitNames) {
      k.utilization[u] = kernel_pe_time[i] > 0 ? kernel_busy[i][u] / kernel_pe_time[i] : 0;
    }
    // The roof: the DPE's peak for its most frequent input type, else the SE's.
    const uint64_t* m = k.dpe_macs;
    if (m[0] + m[1] + m[2] == 0) {
      k.roof = "se fp32";
      k.peak_flops = p.se_fp32_flops;
    } else if (m[2] >= m[1] && m[2] >= m[0]) {
      k.roof = "dpe fp32";
      k.peak_flops = p.dpe_fp32_flops;
    } else if (m[1] >= m[0]) {
      k.roof = "dpe 16-bit";
      k.peak_flops = p.dpe_16bit_flops;
    } else {
      k.roof = "dpe int8";
      k.peak_flops = p.dpe_int8_ops;
    }
    k.intensity =
        k.dram_bytes > 0 ? static_cast<double>(k.flops) / static_cast<double>(k.dram_bytes) : 0;
    k.ridge = k.peak_flops / dram_Bps;
    k.bound = k.flops == 0 && k.dram_bytes == 0             ? "none"
              : k.dram_bytes == 0 || k.intensity >= k.ridge ? "compute"
                                                            : "memory";
    k.achieved_flops =
        k.time_ps > 0 ? static_cast<double>(k.flops) / (static_cast<double>(k.time_ps) * 1e-12) : 0;
    k.roof_flops =
        k.dram_bytes == 0 ? k.peak_flops : std::min(k.peak_flops, k.intensity * dram_Bps);
  }
  s.achieved_flops = s.launch_time_ps > 0 ? static_cast<double>(s.flops) /
                                                (static_cast<double>(s.launch_time_ps) * 1e-12)
                                          : 0;
  for (const char* u : kUnitNames)
    s.utilization[u] = pe_time_all > 0 ? busy_all[u] / pe_time_all : 0;

  for (const char* r : kMemoryNames) {
    TraceSummary::Memory m;
    if (auto it = in.memory_bytes.find(r); it != in.memory_bytes.end()) m.bytes = it->second;
    m.peak_Bps = p.memory_Bps.at(r);
    m.achieved_Bps =
        s.simulated_time_ps > 0
            ? static_cast<double>(m.bytes) / (static_cast<double>(s.simulated_time_ps) * 1e-12)
            : 0;
    s.memory[r] = m;
  }
  std::map<std::string, CopySummary> copies;
  for (const SummaryInput::Copy& c : in.copies) {
    CopySummary& cs = copies[c.kind];
    cs.kind = c.kind;
    cs.jobs += 1;
    cs.bytes += c.bytes;
    cs.time_ps += c.dur_ps;
  }
  for (const char* kind : {"host to device", "device to host", "device to device", "fill"}) {
    if (copies.count(kind)) s.copies.push_back(copies[kind]);
  }
  return s;
}

}  // namespace mtia::trace::detail

namespace mtia::trace {
namespace {

using detail::kMemoryNames;
using detail::kUnitNames;

std::string si(double v, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

std::string pct(double f) {
  return fmt::format("{:.3g}%", f * 100);
}

}  // namespace
std::string TraceSummary::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = "mtia-emu summary";
  j["version"] = 1;
  j["preset"] = preset;
  j["trace_level"] = trace_level;
  j["complete"] = complete;
  j["dropped_events"] = dropped_events;
  j["simulated_time_ps"] = simulated_time_ps;
  auto& pk = j["peaks"];
  pk["pes"] = peaks.pes;
  pk["clock_hz"] = peaks.clock_hz;
  pk["dpe_int8_ops_per_s"] = peaks.dpe_int8_ops;
  pk["dpe_16bit_flops_per_s"] = peaks.dpe_16bit_flops;
  pk["dpe_fp32_flops_per_s"] = peaks.dpe_fp32_flops;
  pk["se_fp32_flops_per_s"] = peaks.se_fp32_flops;
  for (const auto& [r, bps] : peaks.memory_Bps) pk[r + "_bytes_per_s"] = bps;
  auto& l = j["launches"];
  l["count"] = launches;
  l["failed"] = failed_launches;
  l["time_ps"] = launch_time_ps;
  l["flops"] = flops;
  l["dma_bytes"] = launch_bytes;
  l["dram_bytes"] = launch_dram_bytes;
  l["achieved_flops_per_s"] = achieved_flops;
  l["utilization"] = nlohmann::ordered_json::object();
  for (const char* u : kUnitNames) l["utilization"][u] = utilization.at(u);
  auto& m = j["memory"];
  m = nlohmann::ordered_json::object();
  for (const char* r : kMemoryNames) {
    const Memory& x = memory.at(r);
    m[r] = {{"bytes", x.bytes},
            {"achieved_bytes_per_s", x.achieved_Bps},
            {"peak_bytes_per_s", x.peak_Bps}};
  }
  j["copies"] = nlohmann::ordered_json::array();
  for (const CopySummary& c : copies) {
    j["copies"].push_back(
        {{"kind", c.kind}, {"jobs", c.jobs}, {"bytes", c.bytes}, {"time_ps", c.time_ps}});
  }
  j["kernels"] = nlohmann::ordered_json::array();
  for (const KernelSummary& k : kernels) {
    nlohmann::ordered_json o;
    o["name"] = k.name;
    o["launches"] = k.launches;
    o["failed"] = k.failed;
    o["time_ps"] = k.time_ps;
    o["flops"] = k.flops;
    o["bytes"] = k.bytes;
    o["dram_bytes"] = k.dram_bytes;
    o["sram_bytes"] = k.sram_bytes;
    o["dpe_macs"] = {{"int8", k.dpe_macs[0]}, {"16bit", k.dpe_macs[1]}, {"fp32", k.dpe_macs[2]}};
    o["se_elements"] = k.se_elements;
    o["intensity_flops_per_byte"] = k.intensity;
    o["roof"] = k.roof;
    o["peak_flops_per_s"] = k.peak_flops;
    o["ridge_flops_per_byte"] = k.ridge;
    o["bound"] = k.bound;
    o["achieved_flops_per_s"] = k.achieved_flops;
    o["roof_flops_per_s"] = k.roof_flops;
    o["utilization"] = nlohmann::ordered_json::object();
    for (const char* u : kUnitNames) o["utilization"][u] = k.utilization.at(u);
    j["kernels"].push_back(o);
  }
  return j.dump(2) + "\n";
}

std::string TraceSummary::to_text() const {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line(
      fmt::format("run summary: {} ({} PEs at {}), trace level {}, {} us simulated{}", preset,
                  peaks.pes, si(peaks.clock_hz, "Hz"), trace_level,
                  fmt::format("{:.3f}", static_cast<double>(simulated_time_ps) / 1e6),
                  complete ? "" : fmt::format(" - INCOMPLETE: {} events dropped", dropped_events)));
  line(fmt::format("  peaks     DPE {} fp32, {} fp16/bf16, {} int8; SE {} fp32",
                   si(peaks.dpe_fp32_flops, "FLOP/s"), si(peaks.dpe_16bit_flops, "FLOP/s"),
                   si(peaks.dpe_int8_ops, "OP/s"), si(peaks.se_fp32_flops, "FLOP/s")));
  line(fmt::format("            DRAM {}, SRAM {}, PCIe {} each way",
                   si(peaks.memory_Bps.at("dram"), "B/s"), si(peaks.memory_Bps.at("sram"), "B/s"),
                   si(peaks.memory_Bps.at("pcie_h2d"), "B/s")));
  line(
      fmt::format("  launches  {} ({} failed), {:.3f} us on the PE grid, {} -> {} achieved "
                  "({} of the fp32 DPE peak)",
                  launches, failed_launches, static_cast<double>(launch_time_ps) / 1e6,
                  si(static_cast<double>(flops), "FLOP"), si(achieved_flops, "FLOP/s"),
                  pct(peaks.dpe_fp32_flops > 0 ? achieved_flops / peaks.dpe_fp32_flops : 0)));
  std::string util;
  for (const char* u : kUnitNames) util += fmt::format("  {} {}", u, pct(utilization.at(u)));
  line("  units     busy / (launch time x PEs):" + util);
  for (const char* r : kMemoryNames) {
    const Memory& m = memory.at(r);
    if (m.bytes == 0) continue;
    line(fmt::format("  {:<9} {} moved, {} over the run ({} of peak)", r,
                     si(static_cast<double>(m.bytes), "B"), si(m.achieved_Bps, "B/s"),
                     pct(m.peak_Bps > 0 ? m.achieved_Bps / m.peak_Bps : 0)));
  }
  for (const CopySummary& c : copies) {
    line(fmt::format("  copies    {:<16} {} jobs, {}, {:.3f} us on DMA engines", c.kind, c.jobs,
                     si(static_cast<double>(c.bytes), "B"), static_cast<double>(c.time_ps) / 1e6));
  }
  if (!kernels.empty()) {
    line("");
    line(fmt::format("  {:<20} {:>8} {:>11} {:>9} {:>9} {:>9} {:>8} {:>10} {:>8} {:>9} {:>7}",
                     "kernel", "launches", "time us", "FLOPs", "DMA B", "DRAM B", "FLOP/B", "roof",
                     "bound", "FLOP/s", "of roof"));
    for (const KernelSummary& k : kernels) {
      line(fmt::format(
          "  {:<20} {:>8} {:>11.3f} {:>9.3g} {:>9.3g} {:>9.3g} {:>8.3g} {:>10} {:>8} "
          "{:>9.3g} {:>7}",
          k.name.substr(0, 20), k.launches, static_cast<double>(k.time_ps) / 1e6,
          static_cast<double>(k.flops), static_cast<double>(k.bytes),
          static_cast<double>(k.dram_bytes), k.intensity, k.roof, k.bound, k.achieved_flops,
          pct(k.roof_flops > 0 ? k.achieved_flops / k.roof_flops : 0)));
    }
  }
  return out;
}

}  // namespace mtia::trace
