// Host API tracing (host_trace.h) and the run summary of a trace (mtia/trace.h).
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "host_trace.h"
#include "mtia/error.h"
#include "mtia/isa/error_code.h"

namespace mtia {

// ---- host calls ------------------------------------------------------------------------------

namespace {
thread_local ApiCall* t_innermost = nullptr;  // innermost active ApiCall of this thread
}  // namespace

HostTrace::HostTrace(driver::Backend& backend, TraceLevel level)
    : backend_(backend), level_(level) {}

void HostTrace::set_level(TraceLevel level) {
  level_.store(level, std::memory_order_relaxed);
}

HostTrace::Clock HostTrace::clock() {
  std::lock_guard lock(mu_);
  auto [it, added] = threads_.try_emplace(std::this_thread::get_id());
  if (added) it->second.thread = static_cast<uint32_t>(threads_.size());
  return it->second;
}

void HostTrace::observed(uint64_t end_ps) {
  std::lock_guard lock(mu_);
  auto [it, added] = threads_.try_emplace(std::this_thread::get_id());
  if (added) it->second.thread = static_cast<uint32_t>(threads_.size());
  it->second.now_ps = std::max(it->second.now_ps, end_ps);
}

double HostTrace::wall_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - opened_)
      .count();
}

ApiCall::ApiCall(HostTrace& trace, const char* name) {
  if (!trace.on()) return;
  trace_ = &trace;
  parent_ = t_innermost;
  t_innermost = this;
  exceptions_ = std::uncaught_exceptions();
  wall_start_ = std::chrono::steady_clock::now();
  const HostTrace::Clock c = trace.clock();
  call_.thread = c.thread;
  call_.order = trace.next_order();
  call_.start_ps = c.now_ps;
  call_.name = name;
  call_.wall_start_us = trace.wall_us();
}

ApiCall::~ApiCall() {
  if (trace_ == nullptr) return;
  t_innermost = parent_;
  call_.end_ps = std::max(call_.start_ps, trace_->clock().now_ps);
  call_.wall_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wall_start_)
          .count();
  if (std::uncaught_exceptions() > exceptions_) call_.error = "the call threw";
  try {
    trace_->record(std::move(call_));
  } catch (...) {
    // Tracing never fails a call.
  }
}

void ApiCall::submitted(HostTrace& trace, uint32_t queue, uint64_t seq) {
  ApiCall* call = t_innermost;
  if (call == nullptr || call->trace_ != &trace) return;
  trace::HostPacket p;
  p.queue = queue;
  p.seq = seq;
  p.submit_ps = trace.clock().now_ps;
  p.label = call->label_.empty() ? call->call_.name : call->label_;
  call->call_.packets.push_back(std::move(p));
}

// ---- summary ---------------------------------------------------------------------------------

namespace {

using Json = nlohmann::json;

[[noreturn]] void bad_trace(const std::string& why) {
  throw Error(ErrorKind::kInvalidArgument, "not an mtia-emu trace: " + why);
}

const char* const kUnits[] = {"dpe", "se", "re", "mlu", "dma"};
const char* const kResources[] = {"dram", "sram", "pcie_h2d", "pcie_d2h"};

uint64_t ps_of(const Json& us) {
  // ts and dur are microseconds with 6 decimals: exact picoseconds.
  return static_cast<uint64_t>(std::llround(us.get<double>() * 1e6));
}

uint64_t u64(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return 0;
  return it->get<uint64_t>();
}

double config_value(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_object() || !it->contains("value") ||
      !(*it)["value"].is_number()) {
    bad_trace(
        fmt::format("otherData.config.{} is missing (the trace carries the effective "
                    "configuration of its run)",
                    key));
  }
  return (*it)["value"].get<double>();
}

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

TraceSummary summarize_trace(std::string_view text) {
  // Keep only what the summary reads: launches, DMA jobs and the metadata. Unit slices,
  // counters and host calls are dropped as they are parsed, so large traces stay cheap.
  std::string top_key;  // the member of the root object being parsed
  const Json::parser_callback_t keep = [&top_key](int depth, Json::parse_event_t event,
                                                  Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key) top_key = parsed.get<std::string>();
    if (depth == 2 && event == Json::parse_event_t::object_end && top_key == "traceEvents") {
      auto cat = parsed.find("cat");
      if (cat == parsed.end() || !cat->is_string()) return false;
      const std::string& c = cat->get_ref<const std::string&>();
      return c == "launch" || c == "dma";
    }
    return true;
  };
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end(), keep);
  } catch (const Json::exception& e) {
    bad_trace(std::string("invalid JSON: ") + e.what());
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    bad_trace("no traceEvents list");
  }
  if (!doc.contains("otherData") || !doc["otherData"].is_object() ||
      doc["otherData"].value("format", "") != "mtia-emu trace") {
    bad_trace("no otherData with format \"mtia-emu trace\" (written by Device::write_artifacts)");
  }
  const Json& meta = doc["otherData"];
  if (!meta.contains("config") || !meta["config"].is_object()) bad_trace("no otherData.config");
  const Json& config = meta["config"];

  TraceSummary s;
  s.preset = config.contains("name") ? config["name"].value("value", "") : "";
  s.trace_level = meta.value("trace_level", "");
  s.complete = meta.value("complete", true);
  s.dropped_events = u64(meta, "dropped_events");
  s.simulated_time_ps = u64(meta, "simulated_time_ps");

  TracePeaks& p = s.peaks;
  p.pes = static_cast<uint32_t>(config_value(config, "pe_rows") * config_value(config, "pe_cols"));
  p.clock_hz = config_value(config, "clock_hz");
  const double per_s = p.pes * p.clock_hz;
  p.dpe_int8_ops = 2 * config_value(config, "dpe_int8_macs_per_cycle") * per_s;
  p.dpe_16bit_flops = 2 * config_value(config, "dpe_fp16_macs_per_cycle") * per_s;
  p.dpe_fp32_flops = 2 * config_value(config, "dpe_fp32_macs_per_cycle") * per_s;
  p.se_fp32_flops = config_value(config, "se_vector_bytes") / 4 * per_s;
  p.memory_Bps["dram"] = config_value(config, "dram_bandwidth_GBps") * 1e9;
  p.memory_Bps["sram"] = config_value(config, "sram_bandwidth_GBps") * 1e9;
  p.memory_Bps["pcie_h2d"] = config_value(config, "pcie_h2d_bandwidth_GBps") * 1e9;
  p.memory_Bps["pcie_d2h"] = config_value(config, "pcie_d2h_bandwidth_GBps") * 1e9;
  const double dram_Bps = p.memory_Bps["dram"];

  // Launches, by kernel name in order of first launch.
  std::map<std::string, size_t> kernel_index;
  std::map<std::string, double> busy_all;
  double pe_time_all = 0;  // sum of duration x PEs
  std::vector<std::map<std::string, double>> kernel_busy;
  std::vector<double> kernel_pe_time;
  std::map<std::string, CopySummary> copies;
  for (const Json& e : doc["traceEvents"]) {
    const std::string cat = e.value("cat", "");
    if (!e.contains("args") || !e["args"].is_object() || !e.contains("dur")) continue;
    const Json& a = e["args"];
    if (cat == "dma") {
      if (a.value("error", "") != isa::error_code_name(isa::ErrorCode::kNone)) continue;
      const bool fill = e.value("name", "") == "fill";
      const bool from_host = a.value("src_memory", "") == "host";
      const bool to_host = a.value("dst_memory", "") == "host";
      const std::string kind = fill        ? "fill"
                               : from_host ? "host to device"
                               : to_host   ? "device to host"
                                           : "device to device";
      CopySummary& c = copies[kind];
      c.kind = kind;
      c.jobs += 1;
      c.bytes += u64(a, "bytes");
      c.time_ps += ps_of(e["dur"]);
      continue;
    }
    // A launch.
    const std::string name = a.value("kernel", e.value("name", "?"));
    auto [it, added] = kernel_index.try_emplace(name, s.kernels.size());
    if (added) {
      s.kernels.emplace_back();
      s.kernels.back().name = name;
      kernel_busy.emplace_back();
      kernel_pe_time.push_back(0);
    }
    KernelSummary& k = s.kernels[it->second];
    const uint64_t dur = a.contains("dur_ps") ? u64(a, "dur_ps") : ps_of(e["dur"]);
    const double pes = static_cast<double>(u64(a, "pes"));
    k.launches += 1;
    if (a.value("status", "ok") != "ok") k.failed += 1;
    k.time_ps += dur;
    k.flops += u64(a, "flops");
    k.bytes += u64(a, "dma_bytes");
    k.dram_bytes += u64(a, "dram_bytes");
    k.sram_bytes += u64(a, "sram_bytes");
    k.dpe_macs[0] += u64(a, "dpe_macs_int8");
    k.dpe_macs[1] += u64(a, "dpe_macs_16bit");
    k.dpe_macs[2] += u64(a, "dpe_macs_fp32");
    k.se_elements += u64(a, "se_elements");
    kernel_pe_time[it->second] += static_cast<double>(dur) * pes;
    pe_time_all += static_cast<double>(dur) * pes;
    if (a.contains("busy_ps") && a["busy_ps"].is_object()) {
      for (const char* u : kUnits) {
        const double b = static_cast<double>(u64(a["busy_ps"], u));
        kernel_busy[it->second][u] += b;
        busy_all[u] += b;
      }
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
    for (const char* u : kUnits) {
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
  for (const char* u : kUnits) s.utilization[u] = pe_time_all > 0 ? busy_all[u] / pe_time_all : 0;

  const Json mem = meta.value("memory", Json::object());
  for (const char* r : kResources) {
    TraceSummary::Memory m;
    if (mem.contains(r)) m.bytes = u64(mem[r], "payload_bytes");
    m.peak_Bps = p.memory_Bps[r];
    m.achieved_Bps =
        s.simulated_time_ps > 0
            ? static_cast<double>(m.bytes) / (static_cast<double>(s.simulated_time_ps) * 1e-12)
            : 0;
    s.memory[r] = m;
  }
  for (const char* kind : {"host to device", "device to host", "device to device", "fill"}) {
    if (copies.count(kind)) s.copies.push_back(copies[kind]);
  }
  return s;
}

TraceSummary summarize_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cannot open trace '{}': {}", path, std::strerror(errno)));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return summarize_trace(text);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", path, e.what()));
  }
}

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
  for (const char* u : kUnits) l["utilization"][u] = utilization.at(u);
  auto& m = j["memory"];
  m = nlohmann::ordered_json::object();
  for (const char* r : kResources) {
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
    for (const char* u : kUnits) o["utilization"][u] = k.utilization.at(u);
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
  for (const char* u : kUnits) util += fmt::format("  {} {}", u, pct(utilization.at(u)));
  line("  units     busy / (launch time x PEs):" + util);
  for (const char* r : kResources) {
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

}  // namespace mtia
